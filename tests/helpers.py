"""Helpers several test files share: the bundled texts, a tiny model config, a trained session
(fixtures built on them live in tests/conftest.py; run folders in tests/runs_helpers.py)."""

from engine.config import ModelConfig, TrainConfig
from engine.data.textio import bundled_corpus, read_text

RESOURCES = bundled_corpus("pretrain").parent  # the bundled texts (engine.data.textio)


def bundled_texts() -> tuple[str, str]:
    """(pretraining text, tune dialogues) as bundled in resources/."""
    return (read_text(RESOURCES / "pretrain.txt"),
            read_text(RESOURCES / "tune.txt", "tune dialogues"))


def tiny_config(**kw) -> ModelConfig:
    """A model small enough for float64 reference checks; odd head count and hidden size."""
    base = dict(vocab_size=300, d_model=24, n_layer=2, n_head=3, context_length=16, ffn_dim=40)
    return ModelConfig(**{**base, **kw})


def trained_session(rt, model_cfg: ModelConfig, train_cfg: TrainConfig):
    """A TrainingSession on the bundled texts, trained to its last step on runtime rt."""
    from engine.training.session import TrainingSession
    s = TrainingSession.create(model_cfg, train_cfg, *bundled_texts(), runtime=rt)
    for _ in s.train():
        pass
    return s
