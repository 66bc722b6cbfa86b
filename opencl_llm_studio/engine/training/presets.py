"""Training presets for small texts (issue 12): one table that the CLI (`--preset NAME`) and the
studio (the preset box in the settings) both read. A preset fills ModelConfig and TrainConfig
fields; options a person sets explicitly win over it.

Each was chosen from measurements on character-level tinyshakespeare (1.1 M characters,
benchmarks/quality_nanogpt.py; results in benchmarks/RESULTS.md) and says in its description the loss and
time to expect on its reference machine; figures not yet measured say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.errors import ConfigError


@dataclass(frozen=True)
class Preset:
    """A named set of ModelConfig (`model`) and TrainConfig (`train`) field values."""

    name: str                 # what --preset takes
    title: str                # what the studio's box shows
    description: str          # the machine it was tuned on, expected loss and time
    model: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)

    def configs(self, model_cfg: ModelConfig | None = None,
                train_cfg: TrainConfig | None = None) -> tuple[ModelConfig, TrainConfig]:
        """(model_cfg, train_cfg) with this preset's values put over the given (or default)
        configurations."""
        mc = (model_cfg or ModelConfig()).replace(**self.model)
        tc = (train_cfg or TrainConfig()).replace(**self.train)
        return mc, tc


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset(
        "cpu", "Small text, CPU (2 cores)",
        "Tuned on character-level tinyshakespeare (character tokenizer, last 10% held out) on "
        "a shared 2-core Intel Xeon (AVX-512) through PoCL: validation 1.88 nats/char after "
        "about 700 of its 750 steps, 1.87 at the end, in 97 s of training on 2 threads (127 s "
        "on one); nanoGPT's CPU recipe on the same threads: 1.89 after 2000 iterations in 331 s "
        "(267 s on one). About 2 minutes for the whole run, evaluations included.",
        model=dict(d_model=128, n_layer=4, n_head=4, context_length=64),
        train=dict(batch_size=12, learning_rate=3e-3, warmup_steps=50, dropout=0.0,
                   pretrain_steps=750, min_lr_ratio=0.1, beta2=0.99)),
    Preset(
        "gpu-integrated", "Small text, integrated GPU",
        "For an integrated GPU (a few hundred GFLOP/s): a model 2x the CPU preset's width. "
        "Not yet measured on an integrated GPU: expected validation about 1.65 nats/char on "
        "tinyshakespeare in about 5 minutes (unmeasured estimate).",
        model=dict(d_model=256, n_layer=4, n_head=8, context_length=128),
        train=dict(batch_size=32, learning_rate=2e-3, warmup_steps=100, dropout=0.1,
                   pretrain_steps=2500, min_lr_ratio=0.1, beta2=0.99)),
    Preset(
        "gpu-discrete", "Small text, discrete GPU",
        "nanoGPT's GPU recipe size (6 layers, d 384, context 256, batch 64) with more dropout "
        "(0.3) and a shorter schedule. Measured on an NVIDIA H200 (2026-12-01, "
        "benchmarks/quality_nanogpt.py): validation 1.48 nats/char on tinyshakespeare after 43 s of "
        "training (best 1.4795 at step 1125 of 1200); nanoGPT with torch.compile: best 1.4785 "
        "after 34 s on the same windows. Every validation scores up to 131,072 held-out tokens "
        "(all of tinyshakespeare's: 0.09 s on an H100, where 16,384 sat 0.05-0.07 bits per byte "
        "off the whole).",
        model=dict(d_model=384, n_layer=6, n_head=6, context_length=256),
        train=dict(batch_size=64, learning_rate=1.5e-3, warmup_steps=100, dropout=0.3,
                   pretrain_steps=1200, min_lr_ratio=0.1, beta2=0.99, eval_tokens=131072)),
)}


def get_preset(name: str) -> Preset:
    """The preset called `name`; ConfigError listing the names when there is none."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"There is no preset {name!r}.",
                          f"Use one of: {', '.join(PRESETS)}.") from None
