"""A TrainingSession from a Hugging Face transformers folder (engine.files.hf.load reads the
folder; this module builds the run on top of it, so the files layer never needs the training one).
"""
from __future__ import annotations

from pathlib import Path

from opencl_llm_studio.engine.config import TrainConfig, pretrained_train_config
from opencl_llm_studio.engine.data.dialogue import CHAT_FORMAT
from opencl_llm_studio.engine.errors import ModelImportError
from opencl_llm_studio.engine.files.gguf_export import is_open
from opencl_llm_studio.engine.files.hf.export import DATA
from opencl_llm_studio.engine.files.hf.load import has_texts, import_hf, read_moments
from opencl_llm_studio.engine.files.open_run import run_form
from opencl_llm_studio.engine.model.params import ParamTable
from opencl_llm_studio.engine.opencl.runtime import Runtime
from opencl_llm_studio.engine.training.session import TrainingSession


def session_from_hf(folder, pretrain_text: str | None = None, tune_text: str | None = None,
                    device=None, runtime=None):
    """A TrainingSession from a transformers folder: weights, tokenizer, and (when the folder
    came from this app: studio.json, optimizer.safetensors, data/) the run's configs, step,
    history, AdamW state and training texts, so training continues where it stopped.
    Texts given here replace the folder's; with neither, the caller must pass them.
    Raises ModelImportError (folder), DataError (texts), DeviceError."""
    folder = Path(folder)
    bundle, studio = import_hf(folder)
    if pretrain_text is None and has_texts(folder):
        pretrain_text = (folder / DATA["pretrain_text"]).read_text(encoding="utf-8")
    if tune_text is None and (folder / DATA["tune_text"]).is_file():
        tune_text = (folder / DATA["tune_text"]).read_text(encoding="utf-8")
    if pretrain_text is None:
        raise ModelImportError(f"{folder} holds no training text ({DATA['pretrain_text']}).",
                               "Give a pretraining text to continue training on.")
    tc = pretrained_train_config() if is_open(bundle) else TrainConfig()
    if "train_config" in studio:
        known = {k: v for k, v in studio["train_config"].items()
                 if k in TrainConfig.__dataclass_fields__}
        tc = TrainConfig(**known)
    rt = runtime or Runtime(device)
    # a pretrained open model: a training window, its own template, its card as the source
    cfg, fmt, source = run_form(bundle, studio.get("chat_format", CHAT_FORMAT))
    s = TrainingSession(rt, cfg, tc, bundle.tokenizer, pretrain_text, tune_text,
                        flat_weights=ParamTable(cfg).flatten(bundle.weights), chat_format=fmt,
                        short_text_ok=True, opened=True)   # made elsewhere: its window, not
    #                                                            the text's; training checks
    #                                                            its batch when it starts
    s.source = source
    s.adopt_progress(studio.get("step", bundle.metadata.get("steps_done", 0)))
    s.history = list(studio.get("history", []))
    s.last_loss = bundle.metadata.get("final_loss")
    moments = read_moments(folder, bundle.config)
    if moments is not None:
        s.model.write_flat("m", moments[0])
        s.model.write_flat("v", moments[1])
        s.model.adam_t = moments[2]
    return s
