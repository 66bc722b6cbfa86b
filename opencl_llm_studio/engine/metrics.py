"""The per-step metrics record the training generator yields (one line of metrics.jsonl), and
the validation score it carries (loss in nats per token and in bits per byte)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


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
    """One pass over the validation windows: loss (nats per token), bpb, and how much text."""
    loss: float
    bpb: float
    tokens: int     # targets scored
    n_bytes: int    # UTF-8 bytes they stand for


def score_validation(batches, loss_fn, token_bytes) -> ValScore:
    """Score (inputs, targets) batches (B, T) with loss_fn(inputs, targets) -> mean nats over
    targets >= 0; token_bytes: int (V,) bytes per id. Sums nats over tokens, not batch means,
    so a padded last batch weighs by its real targets."""
    nats, tokens, n_bytes = 0.0, 0, 0
    for x, y in batches:
        scored = y[y >= 0]
        if scored.size:
            nats += float(loss_fn(x, y)) * scored.size
            tokens += int(scored.size)
            n_bytes += int(token_bytes[scored].sum())
    return ValScore(nats / max(tokens, 1), bits_per_byte(nats, max(n_bytes, 1)), tokens, n_bytes)


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
