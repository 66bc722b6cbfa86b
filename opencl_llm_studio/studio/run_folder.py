"""Run folders: the one place that writes and reads them, and that tells what a path holds.

A run folder holds `checkpoint.npz` (TrainingSession.save, atomic; `checkpoint.prev.npz`, the one
before), `metrics.jsonl` (one StepMetrics.to_dict() per line, written only through MetricsLog)
and, once named, `run.json` ({"name": ...}). `llm-studio train/import`, the studio's autosave
(RunRecorder), the Runs table (studio.runs), `--continue`, File › Open and every command that
takes a model path read and write through this module; the checkpoint's header is read with
engine.files.checkpoint.read_header, which takes the same file engine.files.checkpoint.load would.
While a run records into a folder it is locked (engine.training.run_lock): a CLI `train --out` there is
refused, and vice versa. The worker thread owns one RunRecorder per run and calls it only between
two steps. Nothing here imports Qt (import-linter contract, tests/test_architecture.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from pathlib import Path

from opencl_llm_studio.engine.files import checkpoint
from opencl_llm_studio.engine import fsutil
from opencl_llm_studio.engine.config import CHECKPOINT_EVERY
from opencl_llm_studio.engine.errors import CheckpointError, StudioError
from opencl_llm_studio.engine.files.model_path import ModelPathKind, model_path_kind
from opencl_llm_studio.engine.metrics import StepMetrics
from opencl_llm_studio.engine.training.run_lock import RunLock

log = logging.getLogger(__name__)
DEFAULT_EVERY = CHECKPOINT_EVERY  # the studio also saves on stop, pause, end and close
METRICS = "metrics.jsonl"
RUN_JSON = "run.json"


ModelKind = ModelPathKind   # what a model path holds (engine.files.model_path), by this name here


HF_KINDS = (ModelKind.HF_FOLDER, ModelKind.APP_HF_FOLDER)

PATH_HINT = ("Give a run folder (it holds checkpoint.npz), a checkpoint .npz, a .gguf file or a "
             "transformers model folder (config.json).")
# what each command takes (a path that is none of ModelKind gets its command's own hint)
RUN_OR_GGUF_HINT = ("Give a run folder (it holds checkpoint.npz), a checkpoint .npz or a .gguf "
                    "file; a transformers model folder is imported first (`llm-studio import "
                    "FOLDER RUN`).")
RUN_HINT = "Give a run folder (it holds checkpoint.npz) or a checkpoint .npz."
IMPORT_HINT = "Give a .gguf file or a transformers model folder (config.json)."


def path_kind(path, hint: str = PATH_HINT) -> ModelKind:
    """What `path` holds, from its names alone (no file is read: engine.files.model_path). Raises
    StudioError naming the path when it does not exist or is none of ModelKind (a folder
    without a run: no checkpoint, metrics.jsonl or config.json), with `hint` (what the command
    takes: PATH_HINT, RUN_OR_GGUF_HINT, RUN_HINT, IMPORT_HINT)."""
    p = Path(path)
    kind = model_path_kind(p)
    if kind is ModelKind.RUN_FOLDER and not is_run_folder(p):
        raise StudioError(f"{p} is a folder without a model: no checkpoint.npz, metrics.jsonl "
                          "or config.json in it.", hint)
    if kind is None and p.is_file():
        raise StudioError(f"{p} is neither a checkpoint (.npz) nor a GGUF (.gguf) file.",
                          hint)
    if kind is None:
        raise StudioError(f"{p} does not exist.", hint)
    return kind


def is_run_folder(path) -> bool:
    """A folder holding a checkpoint (or the one before it) or metrics.jsonl."""
    p = Path(path)
    return p.is_dir() and any((p / n).is_file()
                              for n in (checkpoint.FILENAME, checkpoint.PREVIOUS, METRICS))


def holds_run(folder) -> bool:
    """Whether `folder` holds a saved run (its checkpoint.npz): a new run or an import must
    not go there."""
    return checkpoint.checkpoint_path(folder).exists()


def make_run_folder(out) -> None:
    """Create the run folder before any work, so an unwritable place fails at once.
    Raises StudioError naming the folder."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise StudioError(f"Cannot write the run folder {out}: {e.strerror or e}.",
                          "Give a folder you can write to with --out.") from None


def read_header(folder) -> dict | None:
    """The JSON header (no weights) of the checkpoint that `--continue` and File › Open would
    load (engine.files.checkpoint.read_header: checkpoint.npz, a complete temp file of an interrupted
    save, checkpoint.prev.npz); None when none is readable."""
    try:
        return checkpoint.read_header(folder)[0]
    except CheckpointError:
        return None


def read_metrics(folder) -> list[dict]:
    """metrics.jsonl as dicts; a torn last line (a crash mid-write) and NaN strings tolerated."""
    path = Path(folder) / METRICS
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for line in lines:
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(d, dict) and "step" in d:
            out.append(d)
    return out


def read_sidecar(folder) -> dict:
    """run.json ({"name": ..., "created": ...}), or {} when missing or unreadable."""
    try:
        d = json.loads((Path(folder) / RUN_JSON).read_text(encoding="utf-8"))
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def new_run_dir(root, now: float | None = None) -> Path:
    """root/<YYYYmmdd-HHMMSS>, with -2, -3, ... when a run already started in that second.
    The folder is claimed here (created; mkdir fails for the second of two studios starting a
    run in the same second, which then takes the next name), so two runs never share one.
    Where root cannot be written the path is returned unclaimed: the run's own start reports
    that (RunRecorder raises CheckpointError with what to do)."""
    root = Path(root)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return root / stamp
    n = 1
    while True:
        path = root / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            n += 1
        except OSError:
            return path


def remove_if_empty(folder) -> None:
    """Give back a claimed run folder that no run wrote into (new_run_dir)."""
    try:
        Path(folder).rmdir()   # only an empty folder goes
    except OSError:
        pass


class MetricsLog:
    """The one writer of a run folder's metrics.jsonl (one StepMetrics.to_dict() per line):
    `llm-studio train` and the studio's RunRecorder both write through it."""

    def __init__(self, folder, history=(), keep_until: int | None = None):
        """Start metrics.jsonl afresh with the `history` records after, when keep_until is given,
        the lines already there of steps <= keep_until (what the checkpoint covers). Rewritten
        atomically: a kill keeps the old file. Raises OSError."""
        self.path = Path(folder) / METRICS
        lines = _kept_lines(self.path, keep_until) if keep_until is not None else []
        lines += [json.dumps(record) for record in history]
        fsutil.atomic_write_text(self.path, "".join(line + "\n" for line in lines))
        self._file = self.path.open("a", encoding="utf-8")

    def write(self, m: StepMetrics) -> None:
        """Append one step's line (buffered until flush). Raises OSError, ValueError (closed)."""
        self._file.write(json.dumps(m.to_dict()) + "\n")

    def flush(self) -> None:
        self._file.flush()

    def truncate(self, keep_until: int) -> None:
        """Keep the lines of steps <= keep_until (after the engine restored an earlier state),
        so metrics.jsonl and the checkpoint describe the same run. Raises OSError."""
        self.close()
        kept = _kept_lines(self.path, keep_until)
        fsutil.atomic_write_text(self.path, "".join(line + "\n" for line in kept))
        self._file = self.path.open("a", encoding="utf-8")

    def close(self) -> None:
        self._file.close()


def write_metrics(folder, history=()) -> None:
    """metrics.jsonl of a new run folder holding `history` (a session's records; none for an
    imported model), written atomically. Raises OSError."""
    MetricsLog(folder, history).close()


def _kept_lines(path: Path, keep_until: int) -> list[str]:
    """The lines of metrics.jsonl at `path` of steps <= keep_until (none when it is missing;
    an unreadable line counts as after every step)."""
    if not path.exists():
        return []
    return [line for line in path.read_text(encoding="utf-8").splitlines()
            if _step_of(line) <= keep_until]


class RunRecorder:
    """metrics.jsonl and checkpoints of one run, under the folder's lock. metrics.jsonl starts
    with the lines of steps <= keep_until already there (a run continued in place; None: none)
    and then `history` (a continued session's records), so the folder is complete on its own.
    lock: the folder's RunLock when the caller already holds it (`llm-studio train` takes it
    before it makes the folder); None: taken here (RunFolderBusy when a CLI run trains there),
    and given back by close(). live: each line is flushed as it is written (a `runs` or `plot`
    of another process reads the run as it trains)."""

    def __init__(self, folder, every: int = DEFAULT_EVERY, history=(),
                 keep_until: int | None = None, lock: RunLock | None = None, live: bool = False):
        self.folder = Path(folder)
        self.every = max(int(every), 0)
        self.live = live
        self.saved_step: int | None = None  # step of the checkpoint on disk, None before one
        self.warned = False                 # an autosave problem is reported once per run
        self._log: MetricsLog | None = None
        self._own_lock = lock is None
        self._lock = lock or RunLock(self.folder).acquire()
        try:
            self._log = MetricsLog(self.folder, history, keep_until)
        except OSError as e:
            if self._own_lock:
                self._lock.release()
            raise CheckpointError(
                f"Cannot write the run folder {self.folder}: {e.strerror or e}.",
                "Choose another folder under Autosave › Runs folder, or free disk space.") from e

    def record(self, m: StepMetrics) -> None:
        """One line per step; a write error (full disk) is left to the next checkpoint's save
        to report, the training goes on."""
        self._do(lambda log_: log_.write(m), "writing")
        if self.live:
            self.flush()

    def _do(self, action, what: str) -> None:
        """action(the MetricsLog); on an OSError/ValueError log it and stop writing."""
        if self._log is None:
            return
        try:
            action(self._log)
        except (OSError, ValueError):
            log.exception("%s %s", what, self.folder / METRICS)
            self._log = None

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def dirty(self, session) -> bool:
        return session is not None and self.saved_step != session.step

    def save(self, session) -> Path:
        """Checkpoint now (flushes metrics.jsonl first). Raises CheckpointError."""
        self.flush()
        path = session.save(self.folder)
        self.saved_step = session.step
        return path

    def flush(self) -> None:
        self._do(MetricsLog.flush, "flushing")

    def truncate(self, keep_until: int) -> None:
        """Keep the lines of steps <= keep_until (after the engine restored an earlier state),
        so metrics.jsonl and the checkpoint describe the same run."""
        self._do(lambda log_: log_.truncate(keep_until), "truncating")

    def close(self) -> None:
        """Close metrics.jsonl and give the folder's lock back (when it was taken here)."""
        self._do(MetricsLog.close, "closing")
        self._log = None
        if self._own_lock:
            self._lock.release()

    def discard(self) -> None:
        """The run never started (the session could not be built): remove what was written."""
        self.close()
        try:
            (self.folder / METRICS).unlink(missing_ok=True)
            self._lock.path.unlink(missing_ok=True)
            self.folder.rmdir()
        except OSError:
            pass


def _step_of(line: str) -> float:
    try:
        return json.loads(line).get("step", 0)
    except (json.JSONDecodeError, AttributeError):
        return math.inf


_FIELDS = {f.name for f in dataclasses.fields(StepMetrics)}
_FLOATS = ("loss", "grad_norm", "lr", "tokens_per_s", "elapsed_s", "val_loss",
           "pretrain_val_loss", "val_bpb")


def metrics_from_dict(d: dict) -> StepMetrics:
    """A history record (StepMetrics.to_dict() without samples) back to a StepMetrics, for the
    plots after a reload. to_dict() wrote NaN/Inf as strings."""
    kw = {k: v for k, v in d.items() if k in _FIELDS}
    for k in _FLOATS:
        if isinstance(kw.get(k), str):
            try:
                kw[k] = float(kw[k])
            except ValueError:
                kw[k] = math.nan
    kw.setdefault("total_steps", kw.get("step", 0))
    kw.setdefault("stage", "pretrain")
    for k in ("loss", "grad_norm", "lr", "tokens_per_s", "elapsed_s"):
        kw.setdefault(k, math.nan)
    return StepMetrics(**kw)


def _score(d: dict | None, unit: str = "") -> str:
    d = d or {}
    correct, total = d.get("correct", 0), d.get("total", 0)
    unit = f" {unit}" if unit else ""
    return f"{correct}/{total}{unit} ({correct / total:.0%})" if total else "none to test"


def recall_text(recall: dict) -> str:
    """'Text recall after pretraining: 31/32 documents (97%)' or, after tuning,
    'Recall after tuning: text 32/32 documents (100%), answers 24/24 (100%)'.

    What engine.training.evaluate.fact_recall measures, named as such: how many training documents the
    model continues word for word from their first words. On a text of facts that is fact
    recall; on prose (Shakespeare) it is verbatim memory, so the line never says "facts"."""
    if recall.get("stage") == "tune":
        text = f"Recall after tuning: text {_score(recall.get('facts'), 'documents')}"
        if "answers" in recall:
            text += f", answers {_score(recall.get('answers'))}"
        return text
    return f"Text recall after pretraining: {_score(recall.get('facts'), 'documents')}"
