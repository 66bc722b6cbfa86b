"""Auto: the model, batch, learning rate and tokenizer of a "train for N minutes" run, from the
text's size, the device's measured speed and memory, and the minutes (issue 36).

The choice (choose) scores every shape of a ladder by the loss a data-constrained scaling law
predicts for it, and takes the lowest:

    L(N, D) = E + A / N'^alpha + B / D'^beta         Hoffmann et al. 2022 (Chinchilla), eq. 2,
                                                     Approach 3: E 1.69, A 406.4, B 410.7,
                                                     alpha 0.34, beta 0.28
    D' = U + U * R*_D * (1 - exp(-R_D / R*_D)),      Muennighoff et al. 2023 ("Scaling
    R_D = D / U - 1 (epochs past the first)          Data-Constrained Language Models"), eq. 5
    N' = U_N + U_N * R*_N * (1 - exp(-R_N / R*_N)),  and eq. 6: U_N the compute-optimal
    R_N = N / U_N - 1 (past what U supports)         parameters for U tokens; R*_D 15.4, R*_N 5.3

where N is the shape's parameters, U the text's training tokens and D the tokens the shape
trains on in the time: the seconds of training over the step time the device's speed gives
(DeviceSpeed, measured by measure_speed on two probe shapes). A tenth of a second saved per step
thus buys a larger or longer-trained model, and a small text stops the tokens from growing past
what repeating it is worth, and the parameters past what it supports are worth less too. The
law never says a model gets worse, which one trained for many epochs does: the lowest loss is
taken among the shapes that see at most MAX_EPOCHS epochs of the text in at least MIN_STEPS
steps, and at most MAX_LOAD parameter-epochs per character (a large model memorizes its text in
fewer epochs than a small one). Since a shape's epochs fall as its parameters grow, that load
is about the same for every shape in the same seconds: a text that cannot use the time is given
the time it can use (the lowest predicted loss over the asked seconds and a ladder of shorter
ones; the run ends there and says why). A text too small for any time (a few KB) gets
MIN_SECONDS and the smallest shape whose predicted loss is within FLAT of the lowest: there the
law is flat in both size and tokens, and a larger model only memorizes the text sooner. Only
shapes that fit the device's memory (engine.model.memory.fits) are scored.

The rest follows the chosen shape (each rule says its source):
- the tokenizer: BPE of 512 pieces from 250,000 characters, characters below (the 2026-12-01
  quality table: BPE 512 won on 352 KB of code and 1.1 MB of verse, characters on 100 KB of
  prose, for the engine and the PyTorch script alike);
- context: 64 tokens under 0.3 M parameters, 128 under 3 M, 256 above (nanoGPT's CPU and GPU
  Shakespeare recipes use 64 and 256);
- batch: about a thousand steps in the time, 512 to 16,384 tokens a step;
- learning rate: 3e-3 at d_model 128 (the cpu preset, tuned), scaled by sqrt(128 / d_model)
  (1.7e-3 at 384, the gpu-discrete preset's 1.5e-3), and AdamW's beta2 0.99 of both presets;
- dropout by epochs: none under 3, 0.1 under 10, 0.2 past (nanoGPT's Shakespeare recipes: 0.2
  at many epochs, 0 on large data).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field

import numpy as np

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.model.params import param_count as _param_count

AUTO = "auto"                 # the preset name that asks for this choice (CLI, studio)
# Chinchilla's Approach 3 fit (Hoffmann et al. 2022) and Muennighoff et al.'s R*_D
E_LOSS, A_PARAM, B_DATA, ALPHA, BETA = 1.69, 406.4, 410.7, 0.34, 0.28
R_STAR_D, R_STAR_N = 15.4, 5.3
# Chinchilla's compute-optimal split: N_opt = G (C/6)^a, D_opt = (C/6)^b / G (Hoffmann et al. 2022)
G_OPT = (ALPHA * A_PARAM / (BETA * B_DATA)) ** (1.0 / (ALPHA + BETA))
A_OPT, B_OPT = BETA / (ALPHA + BETA), ALPHA / (ALPHA + BETA)
BPE_FROM_CHARS = 250_000      # characters from which the tokenizer is BPE 512
CHARS_PER_BPE_TOKEN = 1.6     # BPE 512's characters per token (tinyshakespeare: 1.50; about)
STEPS_AIM = 1000              # steps the batch aims at in the time
TOKENS_PER_STEP = (512, 16384)
WIDTHS = (64, 96, 128, 192, 256, 384, 512, 768, 1024)
ASPECT = (16, 96)             # d_model / n_layer kept within (nanoGPT: 64 at 384/6, 32 at 128/4)
# measure_speed's probes, (d_model, n_layer, batch) at context 64: the first, then the first of
# the rest whose step takes COMPUTE_BOUND times the first's (a GPU runs the small ones in the
# time of their launches, which says nothing of its FLOP rate)
PROBES = ((64, 1, 8), (192, 3, 16), (384, 4, 32), (768, 6, 32), (1024, 8, 64))
COMPUTE_BOUND = 3.0
MIN_SECONDS = 20.0            # a budget below this trains nothing worth choosing for
# Epochs of the text past which a shape is not chosen while one within them is: the law only
# flattens there (D' saturates), but a model trained on on held-out loss rises (an H100, 52 s
# on tinyshakespeare: d_model 256 x 4 at 97 epochs scored 2.72 bits per byte where the
# gpu-discrete preset at 18 scored 2.13; nanoGPT's recipe is best at about 28 and rises after)
MAX_EPOCHS = 24.0
MIN_STEPS = 200               # fewer steps than this is not a training run (a giant model)
# Parameter-epochs per character of text (epochs x parameters / characters) past which the
# held-out loss turns upward, as measured: on the 100 KB tuning text (pydoc topics, dropout 0.2,
# 100 s each, 2-core Zen 5) d_model 128 x 5 lowest at 397 and 192 x 4 at 347, 96 x 3 flat from
# 156; on 91 KB of prose d_model 128 x 7 lowest at 190 (Zen 4); the gpu-discrete preset on
# tinyshakespeare's BPE tokens at 130 (H100); nanoGPT's character recipe at about 300. The load
# does not depend on the shape (epochs fall as parameters grow, for the same seconds), so past
# it no shape can use the time: the run is planned for the seconds that reach it and ends then.
# 256 sits inside the measured turns; a run past its turn keeps its best weights
# (engine.training.best_weights). 128 cut prose to 28 s and 2.64 bits per byte where a minute
# at load 233 scored 2.53.
MAX_LOAD = 256.0
TIME_STEP = 2 ** 0.25         # shorter times tried: MIN_SECONDS x this^k, a fixed ladder
FLAT = 0.01                   # "within" the lowest loss: 1% of its distance from E_LOSS


@functools.lru_cache(maxsize=4096)
def param_count(cfg: ModelConfig) -> int:
    """engine.model.params.param_count, kept per shape: a choice scores the ladder at several
    times, and counting builds the model's parameter table (about 1 ms a shape)."""
    return _param_count(cfg)


@dataclass(frozen=True)
class DeviceSpeed:
    """Seconds of one training step of a shape on a device, as a straight line in its work:

        step_s = per_layer_s * (n_layer + 1) + flops / flops_per_s

    per_layer_s: the launches' fixed cost per block (the +1: embedding, head and AdamW);
    flops: training FLOPs of the step, 6 N + 12 n_layer d_model T per token (Kaplan et al. 2020,
    PaLM appendix B) times B * T. Fitted to two probe shapes by measure_speed."""

    flops_per_s: float
    per_layer_s: float
    probe_s: float = 0.0          # seconds the measurement took

    def step_s(self, cfg: ModelConfig, batch_size: int) -> float:
        """Predicted seconds of one training step of `cfg` at `batch_size` windows."""
        tokens = batch_size * cfg.context_length
        return self.per_layer_s * (cfg.n_layer + 1) + tokens * step_flops(cfg) / self.flops_per_s


def step_flops(cfg: ModelConfig) -> float:
    """Training FLOPs per token of `cfg`: 6 N + 12 n_layer d_model T (forward and backward,
    attention's scores and mixing included; PaLM, Chowdhery et al. 2022, appendix B)."""
    return 6.0 * param_count(cfg) + 12.0 * cfg.n_layer * cfg.d_model * cfg.context_length


def shape(d_model: int, n_layer: int, context_length: int, vocab_size: int) -> ModelConfig:
    """The ladder's ModelConfig at d_model and n_layer: heads of 32 up to d_model 256, of 64
    above (nanoGPT's 384 / 6)."""
    head_dim = 32 if d_model <= 256 else 64
    return ModelConfig(vocab_size=vocab_size, d_model=d_model, n_layer=n_layer,
                       n_head=d_model // head_dim, context_length=context_length)


def _probe(rt, d: int, n_layer: int, B: int, repeats: int) -> tuple[int, float, float]:
    """(n_layer + 1, FLOPs, median seconds) of `repeats` training steps of the probe shape
    on random tokens, after one untimed step (which builds the kernels)."""
    from opencl_llm_studio.engine.model.transformer import Model
    cfg = shape(d, n_layer, 64, 512)
    model, rng, tc, times = Model(rt, cfg, seed=0), np.random.default_rng(0), TrainConfig(), []
    for k in range(repeats + 1):
        ids = rng.integers(0, cfg.vocab_size, size=(B, 65), dtype=np.int32)
        s = time.perf_counter()
        model.train_step(ids[:, :-1], ids[:, 1:], 1e-3, tc)
        rt.finish()
        if k:
            times.append(time.perf_counter() - s)
    return n_layer + 1, B * 64 * step_flops(cfg), float(np.median(times))


def measure_speed(rt, repeats: int = 3) -> DeviceSpeed:
    """DeviceSpeed of `rt`'s device: the line through the first PROBES shape and the first
    later one that is compute-bound there (or the last that fits the device's memory)."""
    from opencl_llm_studio.engine.model.memory import fits
    t0 = time.perf_counter()
    l1, f1, s1 = _probe(rt, *PROBES[0], repeats)
    for d, n_layer, B in PROBES[1:]:
        if not fits(shape(d, n_layer, 64, 512), B, rt.info) and d != PROBES[1][0]:
            break
        l2, f2, s2 = _probe(rt, d, n_layer, B, repeats)
        if s2 >= COMPUTE_BOUND * s1:
            break
    # s = a * layers + f / R: two equations; a launch cost below zero (noise) is taken as none
    inv_rate = (s2 * l1 - s1 * l2) / (f2 * l1 - f1 * l2)
    if inv_rate <= 0:
        inv_rate = s2 / f2
    per_layer = max((s1 - f1 * inv_rate) / l1, 0.0)
    return DeviceSpeed(1.0 / inv_rate, per_layer, time.perf_counter() - t0)


def _decayed(amount: float, unique: float, r_star: float) -> float:
    """Muennighoff et al.'s effective amount: `unique` in full, what is past it decaying."""
    past = max(amount / unique - 1.0, 0.0)
    return min(amount, unique) + unique * r_star * (1.0 - math.exp(-past / r_star))


def predicted_loss(n_params: float, tokens: float, unique_tokens: float) -> float:
    """Chinchilla's loss of n_params trained on `tokens`, of which `unique_tokens` are new:
    repeated tokens and the parameters past the compute-optimal ones for the unique tokens
    count as Muennighoff et al.'s effective D' and N'."""
    unique_tokens = max(unique_tokens, 1.0)
    supported = G_OPT * (unique_tokens * G_OPT) ** (A_OPT / B_OPT)   # N_opt where D_opt = U
    n_eff = _decayed(n_params, supported, R_STAR_N)
    d_eff = _decayed(tokens, unique_tokens, R_STAR_D)
    return E_LOSS + A_PARAM / n_eff ** ALPHA + B_DATA / d_eff ** BETA


@dataclass(frozen=True)
class AutoChoice:
    """What Auto chose: `model` and `train` (ModelConfig / TrainConfig field values, as a
    preset's), `tokenizer` ("char" or "bpe"), and the figures behind it: parameters, tokens
    trained on, epochs of the text, step seconds predicted, the loss predicted (nats per token
    of the scaling law, for ranking only), and `lines` saying why, one per decision."""

    model: dict
    train: dict
    tokenizer: str
    n_params: int
    tokens: float
    epochs: float
    step_s: float
    loss: float
    lines: list = field(default_factory=list)

    def summary(self) -> str:
        """One line: the chosen shape and training, as the CLI prints it."""
        m, t = self.model, self.train
        return (f"d_model {m['d_model']}, n_layer {m['n_layer']}, n_head {m['n_head']}, "
                f"context {m['context_length']}, {self.tokenizer} tokenizer of "
                f"{m['vocab_size']}, batch {t['batch_size']}, lr {t['learning_rate']:.2g}, "
                f"dropout {t['dropout']:g}: {self.n_params / 1e6:.2f} M parameters, "
                f"about {self.tokens / 1e6:.1f} M tokens ({self.epochs:.1f} epochs of the text)")


def _context(n_params: int) -> int:
    return 64 if n_params < 300_000 else 128 if n_params < 3_000_000 else 256


def _batch(tokens_per_s: float, seconds: float, T: int) -> int:
    per_step = tokens_per_s * seconds / STEPS_AIM
    per_step = min(max(per_step, TOKENS_PER_STEP[0]), TOKENS_PER_STEP[1])
    return max(4, 2 ** round(math.log2(per_step / T)))


def _dropout(epochs: float) -> float:
    return 0.0 if epochs < 3 else 0.1 if epochs < 10 else 0.2


def _candidates(vocab_size: int, speed: DeviceSpeed, seconds: float, device):
    """(cfg, batch, step seconds) of every ladder shape that fits `device` (None: any) at a
    batch of at least 4, halved from the rule's where the rule's does not fit."""
    from opencl_llm_studio.engine.model.memory import fits
    for d in WIDTHS:
        for n_layer in range(1, 25):
            if not ASPECT[0] <= d / n_layer <= ASPECT[1]:
                continue
            n = param_count(shape(d, n_layer, 64, vocab_size))
            cfg = shape(d, n_layer, _context(n), vocab_size)
            # the batch from a first guess of the step's speed at a mid-sized batch
            guess = speed.step_s(cfg, 16)
            B = _batch(16 * cfg.context_length / guess, seconds, cfg.context_length)
            while device is not None and B >= 4 and not fits(cfg, B, device):
                B //= 2   # a smaller batch before a smaller model
            if B >= 4:
                yield cfg, B, speed.step_s(cfg, B)


def _rows(vocab: int, speed: DeviceSpeed, train_s: float, device, unique: float) -> list:
    """Every ladder shape that fits the device as (loss, parameters, cfg, batch, step
    seconds, tokens) for `train_s` seconds of training on `unique` tokens of text. Raises
    ConfigError when no shape fits."""
    rows = []
    for cfg, B, step_s in _candidates(vocab, speed, train_s, device):
        tokens = train_s / step_s * B * cfg.context_length
        n = param_count(cfg)
        rows.append((predicted_loss(n, tokens, unique), n, cfg, B, step_s, tokens))
    if not rows:
        raise ConfigError("No model of Auto's sizes fits this device's free memory.",
                          "Close other programs, or set the model's size yourself.")
    return rows


def _pick(rows: list, train_s: float, unique: float, text_chars: int) -> tuple | None:
    """The lowest predicted loss among `rows` within MAX_EPOCHS, MIN_STEPS and MAX_LOAD
    (parameter-epochs per character); None when no row is."""
    within = [r for r in rows if r[5] <= MAX_EPOCHS * unique and train_s / r[4] >= MIN_STEPS
              and r[5] / unique * r[1] / text_chars <= MAX_LOAD]
    return min(within, key=lambda r: r[0]) if within else None


def _plan(vocab: int, speed: DeviceSpeed, seconds: float, device, unique: float,
          text_chars: int, train_share: float) -> tuple[float, tuple]:
    """(seconds the run is planned for, its chosen row): the lowest predicted loss among the
    shapes within the limits at the asked seconds or at any shorter time of the ladder
    MIN_SECONDS x TIME_STEP^k (a text that cannot use the time gets the time it can use: past MAX_LOAD
    only a larger model at fewer epochs is within, which the law scores worse); the longer time
    where two tie. None within at any: MIN_SECONDS and the smallest shape of the law's flat
    minimum there (a text too small for any time)."""
    found = None   # (loss, seconds, row)
    times = [seconds] + [t for t in (MIN_SECONDS * TIME_STEP ** k for k in range(64))
                         if t < seconds]   # one ladder for every budget: more never differs
    for t in times:
        rows = _rows(vocab, speed, t * train_share, device, unique)
        row = _pick(rows, t * train_share, unique, text_chars)
        if row is not None and (found is None or row[0] < found[0] - 1e-9):
            found = (row[0], t, row)
        if t == MIN_SECONDS:
            floor_rows = rows   # the fallback's, scored once
    if found is not None:
        return found[1], found[2]
    low = min(r[0] for r in floor_rows) - E_LOSS
    return MIN_SECONDS, min((r for r in floor_rows if r[0] - E_LOSS <= (1 + FLAT) * low),
                            key=lambda r: r[1])


def choose(text_chars: int, seconds: float, speed: DeviceSpeed, device=None,
           train_share: float = 0.9) -> AutoChoice:
    """The AutoChoice for a text of `text_chars` characters (its training part) and `seconds` of
    training on a device of `speed` (`device`: its DeviceInfo, whose memory bounds the shapes;
    None: unbounded). train_share: the part of the seconds that trains (evaluations, samples
    and the stage ends take the rest). Raises ConfigError for a budget under MIN_SECONDS or a
    text of no characters, and when no shape fits the device."""
    if seconds < MIN_SECONDS:
        raise ConfigError(f"Auto needs a time budget of at least {MIN_SECONDS:.0f} s, "
                          f"not {seconds:g} s.", "Give --time-budget 60 or more.")
    if text_chars <= 0:
        raise ConfigError("Auto sizes the model for the text, and the text is empty.",
                          "Give a pretraining text with some characters.")
    bpe = text_chars >= BPE_FROM_CHARS
    vocab = 512 if bpe else 320   # characters: the tokenizer keeps what the text holds
    unique = text_chars / CHARS_PER_BPE_TOKEN if bpe else float(text_chars)
    used, best = _plan(vocab, speed, float(seconds), device, unique, text_chars, train_share)
    train_s = used * train_share
    loss, n, cfg, B, step_s, tokens = best
    epochs = tokens / unique
    lr = min(max(3e-3 * math.sqrt(128 / cfg.d_model), 6e-4), 6e-3)
    steps = train_s / step_s
    model = dict(d_model=cfg.d_model, n_layer=cfg.n_layer, n_head=cfg.n_head,
                 context_length=cfg.context_length, vocab_size=vocab)
    train = dict(batch_size=B, learning_rate=round(lr, 5), dropout=_dropout(epochs),
                 warmup_steps=int(min(max(steps / 20, 20), 200)), beta2=0.99,
                 min_lr_ratio=0.1, time_budget_s=round(used, 1))
    lines = [
        f"text: {text_chars:,} characters, so a {'BPE 512' if bpe else 'character'} "
        f"tokenizer (about {unique:,.0f} tokens)",
        f"device: {speed.flops_per_s / 1e9:.1f} GFLOP/s and {speed.per_layer_s * 1e3:.1f} ms "
        f"per block a step, measured in {speed.probe_s:.1f} s",
        f"time: {used:.0f} s, about {steps:,.0f} steps of {step_s * 1e3:.0f} ms at batch {B}",
    ]
    if used < seconds:
        lines.append(f"the text supports about {used:.0f} of the {seconds:g} s: past "
                     f"{MAX_LOAD:g} parameter-epochs per character the held-out loss rises (the "
                     "model memorizes its text), for any size, so training ends then; a larger "
                     "text would use the time")
    return AutoChoice(model, train, "bpe" if bpe else "char", n, tokens, epochs, step_s, loss,
                      lines)
