"""The per-step metrics record the training generator yields (one line of metrics.jsonl), and
the validation score it carries (loss in nats per token and in bits per byte)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np


def bits_per_byte(total_nats: float, n_bytes: int) -> float:
    """Cross-entropy of a text in bits per UTF-8 byte: total_nats / ln 2 / n_bytes.

    total_nats: the summed -ln p of every scored token; n_bytes: the UTF-8 bytes of the text
    those tokens stand for (engine.data.corpus.token_bytes). Tokenizer-independent, so BPE and char
    models compare (the BPB of Gao et al. 2020, "The Pile"; for nanoGPT's one-byte characters it
    is its loss / ln 2). Raises ValueError when n_bytes < 1."""
    if n_bytes < 1:
        raise ValueError(f"bits_per_byte needs at least one byte, got {n_bytes}")
    return total_nats / math.log(2) / n_bytes


@dataclass
class ValScore:
    """One pass over the validation windows: loss (nats per token), bpb, and how much text;
    bpb_stderr: the standard error of bpb as an estimate of the whole held-out text (0 when
    all of it was scored, or when only batch means were known)."""
    loss: float
    bpb: float
    tokens: int     # targets scored
    n_bytes: int    # UTF-8 bytes they stand for
    bpb_stderr: float = 0.0


def score_validation(batches, loss_fn, token_bytes, population: int = 0) -> ValScore:
    """Score (inputs, targets) batches (B, T) with loss_fn(inputs, targets) -> the mean nats
    over targets >= 0, or (B,) nats summed per row; token_bytes: int (V,) bytes per id. Sums
    nats over tokens, not batch means, so a padded last batch weighs by its real targets.

    With per-row nats and `population` (the windows the scored rows were drawn from, each
    equally likely: engine.data.corpus.PretrainData.val_batches) larger than the rows scored,
    bpb_stderr is the ratio estimator's standard error with the finite-population correction
    (Cochran, "Sampling Techniques", 3rd ed., 6.4: bytes per window vary, so the ratio of sums,
    not a mean of ratios)."""
    nats_rows, byte_rows, tokens = [], [], 0
    for x, y in batches:
        y = np.asarray(y)
        counted = (y >= 0).sum(axis=1)
        out = np.asarray(loss_fn(x, y), np.float64)
        if out.ndim == 0:   # a mean: no spread between windows to measure
            out, population = out * counted, 0
        keep = counted > 0   # padding rows hold no targets
        nats_rows.append(out[keep])
        byte_rows.append(np.where(y >= 0, token_bytes[np.maximum(y, 0)], 0).sum(axis=1)[keep])
        tokens += int(counted.sum())
    nats = np.concatenate(nats_rows) if nats_rows else np.zeros(0)
    sizes = np.concatenate(byte_rows) if byte_rows else np.zeros(0, np.int64)
    total, n_bytes = float(nats.sum()), int(sizes.sum())
    return ValScore(total / max(tokens, 1), bits_per_byte(total, max(n_bytes, 1)), tokens,
                    n_bytes, _ratio_stderr(nats, sizes, population))


def _ratio_stderr(nats: np.ndarray, sizes: np.ndarray, population: int) -> float:
    """Standard error in bits per byte of sum(nats) / sum(sizes) from n of `population`
    equally likely windows (0 when n >= population or n < 2)."""
    n = len(nats)
    if n < 2 or population <= n or sizes.sum() <= 0:
        return 0.0
    ratio = nats.sum() / sizes.sum()
    spread = ((nats - ratio * sizes) ** 2).sum() / (n - 1)
    variance = (1 - n / population) * spread / n / sizes.mean() ** 2
    return float(math.sqrt(variance) / math.log(2))


@dataclass
class StepMetrics:
    """One optimizer step. Losses are mean cross-entropy in nats per token; lr per step;
    tokens_per_s counts every input position of the batch; elapsed_s is wall seconds of
    training since the run began (train() calls add up when a run is continued; evaluations, samples and
    recall included), taken when this step's record is complete."""

    step: int                 # 1-based count of optimizer steps done, over both stages
    total_steps: int
    stage: str                # "pretrain" | "tune"
    loss: float
    grad_norm: float          # global L2 norm before clipping
    lr: float
    tokens_per_s: float
    elapsed_s: float
    val_loss: float | None = None           # pretrain: validation text; tune: the dialogues
    pretrain_val_loss: float | None = None  # during tuning: forgetting monitor
    val_bpb: float | None = None            # the pretraining validation text in bits per byte
    #                                         (with val_loss in pretraining, pretrain_val_loss
    #                                         while tuning): bits_per_byte()
    val_bpb_stderr: float | None = None     # its standard error as an estimate of the whole
    #                                         held-out text (ValScore.bpb_stderr; 0: all of it)
    val_tokens: int | None = None           # targets that validation scored (the run's last
    #                                         record: the whole held-out text, up to
    #                                         engine.data.corpus.FINAL_VAL_TOKENS)
    val_source: str | None = None           # where that text comes from: "held-out" (never
    #                                         trained on) or "training text" (nothing could be
    #                                         held out: engine.data.corpus)
    samples: list | None = None             # [(prompt, continuation)] when generated
    skipped: bool = False                   # NaN/Inf gradient: no update this step
    recall: dict | None = None              # fact recall at the end of a stage
    health: dict | None = None              # engine.training.health: per-group norms every N steps
    warnings: list | None = None            # engine.training.health: divergence / lr far too high
    pretrain_steps: int | None = None       # runs with dialogues: the planned (or, once
    #                                         tuning began, the actual) pretraining steps, the
    #                                         stage boundary the plots mark
    time_left_s: float | None = None        # with a time budget: seconds of it left
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if v is not None and v != {} and v is not False}
        for k, v in list(d.items()):
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = str(v)  # JSON has no NaN
        return d
