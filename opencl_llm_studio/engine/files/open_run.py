"""A new run folder from an imported pretrained model: checkpoint.npz with its weights, fresh AdamW
moments and step 0, so `train --continue --tune FILE`, `chat`, `sample`, `tokenize`, `export` and
`runs` take it like a run trained here.

The checkpoint's header is the one TrainingSession.save writes, plus `source` (the model card)
and chat_format MODEL_TEMPLATE: the run chats and tunes in its tokenizer's own chat template
(engine.data.chat_template.ChatFormat), not the app's User:/Assistant: formats. Its tokenizer bytes are
an OpenTokenizer's (engine.data.open_tokenizer.tokenizer_from_bytes reads both kinds).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from opencl_llm_studio.engine.files import checkpoint
from opencl_llm_studio.engine.config import ModelConfig, TrainConfig, pretrained_train_config
from opencl_llm_studio.engine.data.dialogue import MODEL_FORMAT as MODEL_TEMPLATE   # header chat_format: its own template
from opencl_llm_studio.engine.files.gguf_export import is_open
from opencl_llm_studio.engine.files.model_card import model_card
from opencl_llm_studio.engine.model.params import ParamTable
from opencl_llm_studio.engine.data.textio import sha256_text

TUNE_CONTEXT = 1024   # the training window of an imported model: its own context (2k-128k)
#                       would make every activation of a tuning step that many tokens long


def tuning_config(cfg: ModelConfig) -> ModelConfig:
    """An imported model's ModelConfig as a run trains and chats with it: context_length at
    most TUNE_CONTEXT (RoPE positions are the same up to there; the export says that context)."""
    return cfg.replace(context_length=min(cfg.context_length, TUNE_CONTEXT))


def run_form(bundle, chat_format: int) -> tuple[ModelConfig, int, dict | None]:
    """(ModelConfig, chat format, source) of a run of `bundle` (an engine.files.gguf_export.
    ModelBundle): a pretrained open model trains and chats in its tuning window (tuning_config)
    and its own template (MODEL_TEMPLATE), its model card the run's source; a model this app
    made keeps its config and `chat_format`, with no source."""
    if is_open(bundle):
        return tuning_config(bundle.config), MODEL_TEMPLATE, model_card(bundle)
    return bundle.config, chat_format, None


def write_open_run(bundle, out, pretrain_text: str, tune_text: str | None = None,
                   train_config: TrainConfig | None = None) -> Path:
    """Write `bundle` (engine.files.gguf_export.ModelBundle) as checkpoint.npz in folder `out`; returns
    the file. pretrain_text: the general text kept for replay and the held-out general loss;
    tune_text: the dialogue text (or None); train_config: default pretrained_train_config(). Raises CheckpointError (engine.files.checkpoint.save)."""
    tc = train_config or pretrained_train_config()
    flat = ParamTable(bundle.config).flatten(bundle.weights)
    header = {
        "model_config": tuning_config(bundle.config).__dict__, "train_config": tc.__dict__,
        "step": 0, "adam_t": 0, "last_loss": None,
        "rng_state": np.random.default_rng(tc.seed).bit_generator.state, "history": [],
        "tokenizer_kind": bundle.tokenizer.kind, "chat_format": MODEL_TEMPLATE,
        "data": {"pretrain_chars": len(pretrain_text),
                 "pretrain_sha256": sha256_text(pretrain_text),
                 "tune_chars": len(tune_text or ""), "tune_sha256": sha256_text(tune_text)},
        "source": model_card(bundle), "device": "",
    }
    table = (bundle.metadata.get("source") or {}).get("tensor_table")
    if table and header["source"]["path"]:   # a GGUF's tensors, for a LoRA run on it as its base
        header["source"]["tensor_table"] = table
    return checkpoint.save(Path(out) / checkpoint.FILENAME, header, flat, None, None,
                           bundle.tokenizer.to_bytes(), pretrain_text, tune_text)
