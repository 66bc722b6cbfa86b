"""Training health beyond one grad norm: per-layer-group gradient norms, update-to-weight ratios,
counts of clipped and skipped steps, and warnings when a run diverges or its learning rate is far
too high.

Groups (by GGUF tensor name, engine.model.params.ParamTable): attention (attn_q/k/v/output), feed_forward
(ffn_gate/up/down), embedding (token_embd, an untied output), norms (every RMSNorm weight).
Every `interval` steps (default the eval_interval) the monitor reads the flat weights before the
step and the gradients and weights after it back to the host (numpy): three copies of the
parameters, a few ms for the default model, nothing in the steps between.

The update-to-weight ratio of a group is ||w_after - w_before|| / ||w_before|| over the group's
elements (Karpathy's "update/data ratio", CS231n: about 1e-3 is healthy). The thresholds below were
measured on the default model and corpus (README, "Training health").
"""

from __future__ import annotations

import math
import numpy as np

from opencl_llm_studio.engine.model.params import ParamTable
from opencl_llm_studio.engine.config import TrainConfig

GROUPS = ("attention", "feed_forward", "embedding", "norms")

# "Learning rate far too high": the update-to-weight ratio of the RMSNorm gains above this at two
# health measurements in a row. The gains start at 1 and stay near it, so their ratio is AdamW's
# per-element step itself; matrices hide it (a too-high lr grows them: RMS 0.02 -> 0.25 in 60
# steps at lr 0.1, and their ratio stays ~0.03 as in a good run). Measured on the default model
# and corpus, ratio of the norms at steps 10-60: lr 3e-3 0.0007-0.0015, 1e-2 0.002-0.004,
# 3e-2 0.004-0.006 (all train well), 0.1 0.013-0.020 and 0.5 0.02-0.06 (stuck near 4.4 nats).
NORM_RATIO_TOO_HIGH = 0.01
# "Stuck": while pretraining, the smoothed loss still above the unigram entropy of the training
# tokens (what a model that only learned token frequencies scores; ln(vocab) when the tokens are
# not given) once the stage is PLATEAU_AFTER of the way through and at least PLATEAU_MIN_STEPS
# steps in. Default corpus: unigram entropy 4.91 nats; at step 100 lr 3e-3 is near 0.15 and
# lr 3e-2 near 2.6. A tiny model (d_model 32, batch 4) at lr 3e-3 was 0.1 nats above it at step
# 60, below it by step 100: a higher share or an earlier test warned about healthy runs.
PLATEAU_SHARE = 1.0
PLATEAU_AFTER = 0.2
PLATEAU_MIN_STEPS = 100
# Divergence: the smoothed loss climbs this many nats above its lowest value.
DIVERGE_NATS = 1.0
EMA = 0.1  # smoothing of the loss for the plateau and divergence tests (~10 steps)


def group_of(name: str) -> str:
    """The health group of a GGUF tensor name ("blk.0.attn_q.weight" -> "attention")."""
    if name.endswith("norm.weight"):
        return "norms"
    if ".attn_" in name:
        return "attention"
    if ".ffn_" in name:
        return "feed_forward"
    return "embedding"  # token_embd.weight, output.weight


Ranges = dict[str, list[tuple[int, int]]]
CHUNK = 1 << 22   # elements summed at a time (32 MiB in float64)


def group_index(table: ParamTable) -> Ranges:
    """{group: [(offset, size), ...] of its tensors in the flat buffer} (padding excluded).
    Ranges, not element indices: an index array of a 135M model was 1 GiB held all run."""
    parts: Ranges = {g: [] for g in GROUPS}
    for name, e in table.entries.items():
        parts[group_of(name)].append((e.offset, e.size))
    return parts


def _sum_squares(get, ranges) -> float:
    """Sum of squares in float64 over `ranges`, get(offset, size) giving float32 chunks."""
    total = 0.0
    for offset, size in ranges:
        for start in range(offset, offset + size, CHUNK):
            x = np.asarray(get(start, min(CHUNK, offset + size - start)), np.float64)
            total += float(np.dot(x, x))
    return total


def _getter(flat):
    """get(offset, size) of a (table.size,) array, or `flat` itself when it is already one."""
    if callable(flat):
        return flat
    return lambda offset, size: flat[offset:offset + size]


def group_norms(index: Ranges, flat) -> dict[str, float]:
    """{group: L2 norm of its elements}, summed in float64. flat: the (table.size,) buffer of
    weights, gradients or a weight difference, or get(offset, size) reading it a chunk at a
    time (a device buffer: engine.training.health.HealthMonitor reads no whole copy)."""
    get = _getter(flat)
    return {g: math.sqrt(_sum_squares(get, r)) if r else 0.0 for g, r in index.items()}


def update_ratios(index: Ranges, before: np.ndarray, after) -> dict[str, float]:
    """{group: ||after - before|| / ||before||} (0 for a group of zero weights); after: an
    array or a chunk getter, as group_norms."""
    get = _getter(after)
    dw = group_norms(index, lambda o, n: get(o, n) - before[o:o + n])
    w = group_norms(index, before)
    return {g: dw[g] / w[g] if w[g] > 0 else 0.0 for g in index}


def unigram_entropy(tokens: np.ndarray) -> float:
    """Entropy (nats) of the token frequencies: the loss of a model that ignores context."""
    counts = np.bincount(np.asarray(tokens).ravel())
    p = counts[counts > 0] / max(counts.sum(), 1)
    return float(-(p * np.log(p)).sum())


def _json_safe(d: dict) -> dict:
    """NaN/Inf as strings, as StepMetrics.to_dict writes them (JSON has no NaN)."""
    return {k: v if math.isfinite(v) else str(v) for k, v in d.items()}


class HealthMonitor:
    """Watches one train() call. Call before_step(step) before each optimizer step (1-based
    number of the step about to run) and after_step(m) with its StepMetrics: every `interval`
    steps m.health gets the measurements; m.warnings gets a sentence (once per kind and run)
    when the loss diverges, stays near the token-frequency baseline, or the updates are far
    too large."""

    def __init__(self, model, train_config, train_tokens: np.ndarray | None = None,
                 interval: int | None = None, steps=None):
        """steps: the run's stage totals (engine.training.schedule.StageSteps; None: the
        settings' own)."""
        self.model, self.tc = model, train_config
        self.interval = max(int(interval or train_config.eval_interval or 50), 1)
        self.index = group_index(model.table)
        self.ln_vocab = math.log(max(model.cfg.vocab_size, 2))
        self.baseline = self.ln_vocab if train_tokens is None else unigram_entropy(train_tokens)
        pre, tune = ((steps.pretrain, steps.tune) if steps is not None
                     else (train_config.pretrain_steps, train_config.tune_steps))
        # {stage: (first step, steps)} for the plateau test
        self.stage_bounds = {"pretrain": (0, pre), "tune": (pre, tune)}
        self._before: np.ndarray | None = None
        self._clipped = self._skipped = 0  # in the current interval
        self._ema: float | None = None
        self._ema_min = math.inf
        self._stage: str | None = None  # the EMA restarts with each stage (another text)
        self._high_ratio = 0            # consecutive measurements above NORM_RATIO_TOO_HIGH
        self.warned: set[str] = set()

    def due(self, step: int) -> bool:
        return step % self.interval == 0

    def before_step(self, step: int) -> None:
        self._before = self.model.read_flat("params") if self.due(step) else None

    def after_step(self, m) -> None:
        clip = self.tc.grad_clip
        self._clipped += bool(clip > 0 and math.isfinite(m.grad_norm) and m.grad_norm > clip
                              and not m.skipped)
        self._skipped += bool(m.skipped)
        if self._before is not None:
            m.health = self.measure(m)
            self._before = None
        found = self._check(m)
        if found:
            m.warnings = found

    def measure(self, m) -> dict:
        """The health record of this step (see the README's metrics.jsonl table)."""
        m = self.model   # read from the device a chunk at a time: no whole host copy
        grads = lambda o, n: m.rt.read(m.grads, n, offset_elems=o)   # noqa: E731
        after = lambda o, n: m.rt.read(m.params, n, offset_elems=o)  # noqa: E731
        rec = {"grad_norm": _json_safe(group_norms(self.index, grads)),
               "weight_rms": _json_safe(self.weight_rms(after)),
               "update_ratio": _json_safe(update_ratios(self.index, self._before, after)),
               "clipped": self._clipped, "skipped": self._skipped,
               "window": self.interval}
        self._clipped = self._skipped = 0
        return rec

    def weight_rms(self, flat) -> dict[str, float]:
        """{group: root mean square of its weights} (matrices start near 0.02, norms at 1)."""
        norms = group_norms(self.index, flat)
        return {g: norms[g] / math.sqrt(max(sum(n for _, n in self.index[g]), 1))
                for g in norms}

    # -- warnings ---------------------------------------------------------------------------
    def _check(self, m) -> list[str]:
        found = []
        for kind, text in (("diverged", self._diverged(m)), ("plateau", self._plateau(m)),
                           ("ratio", self._ratio(m))):
            if text and kind not in self.warned:
                self.warned.add(kind)
                found.append(text)
        return found

    def _diverged(self, m) -> str | None:
        if m.skipped or not math.isfinite(m.loss):
            return None  # the engine's NaN guard handles these (TrainingDiverged)
        if m.stage != self._stage:
            self._stage, self._ema, self._ema_min = m.stage, None, math.inf
        self._ema = m.loss if self._ema is None else (1 - EMA) * self._ema + EMA * m.loss
        self._ema_min = min(self._ema_min, self._ema)
        if self._ema > self._ema_min + DIVERGE_NATS:
            return (f"The loss is diverging: {self._ema:.2f} at step {m.step}, up from "
                    f"{self._ema_min:.2f}. Lower the learning rate (now {m.lr:.2e}) by 3-10x.")
        return None

    def _plateau(self, m) -> str | None:
        first, steps = self.stage_bounds["pretrain"]
        done = m.step - first
        if (m.stage != "pretrain" or self._ema is None
                or done < max(PLATEAU_MIN_STEPS, PLATEAU_AFTER * steps)):
            return None
        if self._ema > PLATEAU_SHARE * self.baseline:
            return (f"The loss is stuck at {self._ema:.2f} nats after {done} steps: the model "
                    "has learned little more than how often each token occurs (that alone "
                    f"scores {self.baseline:.2f}). The learning rate ({m.lr:.2e}) is probably "
                    "far too high (or far too low); 3e-3 suits small models.")
        return None

    def _ratio(self, m) -> str | None:
        h = m.health
        if not h:
            return None
        ratio = float(h["update_ratio"]["norms"])
        self._high_ratio = self._high_ratio + 1 if ratio > NORM_RATIO_TOO_HIGH else 0
        if self._high_ratio >= 2:
            return (f"Each step changes the norm weights by {ratio:.1%} of their size (healthy: "
                    f"below 0.5%): the learning rate {m.lr:.2e} is far too high. Lower it "
                    f"(the default {TrainConfig.learning_rate:g} suits small models).")
        return None
