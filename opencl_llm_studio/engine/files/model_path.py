"""What a model path holds, told from its names alone: a run folder, a checkpoint file, a GGUF,
a transformers folder (this app's export or another's). engine.training.opening opens each kind;
studio.run_folder.path_kind adds the command's hint and the studio's refusals."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from opencl_llm_studio.engine.files.hf.export import STUDIO_FILE


class ModelPathKind(str, Enum):
    """What a model path holds (model_path_kind)."""
    RUN_FOLDER = "run folder"          # checkpoint.npz / checkpoint.prev.npz: any other folder
    CHECKPOINT = "checkpoint file"     # a checkpoint .npz on its own
    GGUF = "GGUF file"                 # this app's export or a pretrained open model's
    HF_FOLDER = "transformers folder"  # config.json + weights, from elsewhere
    APP_HF_FOLDER = "transformers folder exported by this app"   # with studio.json


def model_path_kind(path) -> ModelPathKind | None:
    """What `path` holds, from its names alone (no file is read); None for a path that does not
    exist or a file that is neither a .gguf nor a .npz."""
    p = Path(path)
    if p.is_dir():
        if (p / "config.json").is_file():
            return (ModelPathKind.APP_HF_FOLDER if (p / STUDIO_FILE).is_file()
                    else ModelPathKind.HF_FOLDER)
        return ModelPathKind.RUN_FOLDER   # load_session says what a folder without a run lacks
    suffix = p.suffix.lower() if p.is_file() else ""
    return {".gguf": ModelPathKind.GGUF, ".npz": ModelPathKind.CHECKPOINT}.get(suffix)
