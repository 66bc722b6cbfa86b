"""A pretrained open model (a GGUF or a transformers folder from elsewhere) imported into a run
folder: what `llm-studio import` and the studio's File › Open model… both do (no Qt here; the
studio calls it on its worker thread, studio.worker_tasks).

The folder gets checkpoint.npz (engine.open_run.write_open_run: the weights, fresh AdamW
moments, step 0, the model card as header "source") and an empty metrics.jsonl, so it is a run
like one trained here. A failed import leaves no half run folder (engine.fsutil.FolderSnapshot).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path


def import_open_model(bundle, out, pretrain_text: str, tune_text: str | None = None) -> Path:
    """Write `bundle` (engine.gguf_export.ModelBundle of an open model, engine.open_run.
    read_model) as a run in folder `out` (made if missing; it must not hold a run) with
    pretrain_text as its general text (replay, held-out loss) and tune_text as its dialogues
    (or None). Returns the run folder. Raises StudioError when `out` holds a run or cannot be
    written, CheckpointError when the checkpoint cannot be written."""
    from engine import checkpoint
    from engine.errors import StudioError
    from engine.fsutil import atomic_write_text
    from engine.open_run import write_open_run
    from studio.run_folder import METRICS
    out = Path(out)
    if checkpoint.checkpoint_path(out).exists():
        raise StudioError(f"{out} already holds a training run.", "Give a new run folder.")
    with writing_run(out):
        _make_folder(out)
        write_open_run(bundle, out, pretrain_text, tune_text)
        atomic_write_text(out / METRICS, "")
    return out


@contextmanager
def writing_run(out: Path):
    """Write a new run folder `out` in the with-block: on any failure what the block made there
    is removed (a failed import leaves no half run folder), and an OSError becomes a
    StudioError naming the folder."""
    from engine.errors import StudioError
    from engine.fsutil import FolderSnapshot
    before = FolderSnapshot(out)
    try:
        yield
    except BaseException as e:
        before.undo()
        if isinstance(e, OSError):
            raise StudioError(f"Writing the run folder {out} failed: {e.strerror or e}.",
                              "Check free disk space and that you can write there.") from None
        raise


def _make_folder(out: Path) -> None:
    from engine.errors import StudioError
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StudioError(f"Cannot write the run folder {out}: {e.strerror or e}.",
                          "Give a folder you can write to.") from None
