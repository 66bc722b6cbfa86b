"""A pretrained open model (a GGUF or a transformers folder from elsewhere) imported into a run
folder: what `llm-studio import` and the studio's File › Open model… both do (no Qt here; the
studio calls it on its worker thread, studio.ui.run.worker_tasks).

The folder gets checkpoint.npz (engine.files.open_run.write_open_run: the weights, fresh AdamW
moments, step 0, the model card as header "source") and an empty metrics.jsonl
(studio.run_folder.write_metrics), so it is a run like one trained here. A failed import leaves
no half run folder (engine.fsutil.FolderSnapshot).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from opencl_llm_studio.engine.errors import ModelImportError, StudioError
from opencl_llm_studio.studio.run_folder import HF_KINDS, ModelKind, holds_run, make_run_folder, path_kind, write_metrics


def read_model(path, weights: bool = True, kind: ModelKind | None = None):
    """The ModelBundle of a model file or folder, by its kind (studio.run_folder.path_kind, or
    `kind` when the caller already told it): a GGUF (engine.files.gguf_import.import_gguf) or a
    transformers folder (engine.files.hf.load.import_hf). A pretrained open model's bundle holds
    an OpenTokenizer (engine.files.gguf_export.is_open); one this app wrote, its own Tokenizer.
    weights=False: the same checks and everything but the weights (bundle.weights is {}) from
    the metadata alone (GGUF fields and tensor infos; config.json, the tokenizer files and the
    safetensors headers), no tensor read or dequantized: a model card. Raises StudioError for a
    path that holds no model, ModelImportError for a run folder or checkpoint (not a model
    file) and for a model the engine cannot run."""
    path = Path(path)
    kind = kind or path_kind(path)
    if kind is ModelKind.GGUF:
        from opencl_llm_studio.engine.files.gguf_import import import_gguf
        return import_gguf(path, weights)
    if kind in HF_KINDS:
        from opencl_llm_studio.engine.files.hf.load import import_hf
        return import_hf(path, weights)[0]
    raise ModelImportError(f"{path} is a {kind.value}, not a model file.",
                           "Give a .gguf file or a transformers model folder (config.json, "
                           "*.safetensors, tokenizer.json); open a run with File › Open checkpoint.")


def import_open_model(bundle, out, pretrain_text: str, tune_text: str | None = None) -> Path:
    """Write `bundle` (engine.files.gguf_export.ModelBundle of an open model, read_model) as a
    run in folder `out` (made if missing; it must not hold a run) with pretrain_text as its
    general text (replay, held-out loss) and tune_text as its dialogues (or None). Returns the
    run folder. Raises StudioError when `out` holds a run or cannot be written,
    CheckpointError when the checkpoint cannot be written."""
    from opencl_llm_studio.engine.files.open_run import write_open_run
    out = Path(out)
    if holds_run(out):
        raise StudioError(f"{out} already holds a training run.", "Give a new run folder.")
    with writing_run(out):
        make_run_folder(out)
        write_open_run(bundle, out, pretrain_text, tune_text)
        write_metrics(out)
    return out


@contextmanager
def writing_run(out: Path):
    """Write a new run folder `out` in the with-block: on any failure what the block made there
    is removed (a failed import leaves no half run folder), and an OSError becomes a
    StudioError naming the folder."""
    from opencl_llm_studio.engine.fsutil import FolderSnapshot
    before = FolderSnapshot(out)
    try:
        yield
    except BaseException as e:
        before.undo()
        if isinstance(e, OSError):
            raise StudioError(f"Writing the run folder {out} failed: {e.strerror or e}.",
                              "Check free disk space and that you can write there.") from None
        raise
