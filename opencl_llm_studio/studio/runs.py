"""Run history without Qt: find run folders, read what they hold, compare them.

A run folder (studio.run_folder, which reads and writes its files) holds checkpoint.npz,
metrics.jsonl and, once the person names it, run.json ({"name": ...}, written atomically).
Reading a run never loads its weights: the checkpoint's JSON header is one small member of the
.npz archive, read from the file `--continue` would load (engine.files.checkpoint.read_header).
Used by the Runs panel (studio.ui.panels.runs_panel) and `llm-studio runs|plot`.

Status of a run (from the checkpoint header and metrics.jsonl):
  running   a process holds the folder's training lock (engine.training.run_lock; a run removes
            the file when it ends, so a folder without one is not training); where the lock
            file cannot be read: metrics.jsonl was written in the last RUNNING_S seconds and
            the run is not finished;
  finished  the checkpoint's step reached the run's total (pretraining + tuning steps);
  stopped   a checkpoint exists and metrics.jsonl has no step after it (Stop, Pause then quit,
            Ctrl-C, a divergence the engine stopped: the work up to the stop is saved);
  crashed   metrics.jsonl has steps after the checkpoint's step, or there is no readable
            checkpoint (the process ended without its final save: a crash, a kill, power loss).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from opencl_llm_studio.engine.files.checkpoint import FILENAME
from opencl_llm_studio.engine.config import ModelConfig, run_steps
from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.engine.training.run_lock import in_use
from opencl_llm_studio.studio.run_folder import (METRICS, RUN_JSON, is_run_folder, read_header,
                               read_metrics, read_sidecar)
from opencl_llm_studio.engine.files.model_card import tokenizer_name
from opencl_llm_studio.engine.model.params import param_count
RUNNING_S = 60.0  # without a lock file: metrics.jsonl written this recently, still going
_STAMP = re.compile(r"^(\d{8}-\d{6})")
HEALTH_GROUPS = ("attention", "feed_forward", "embedding", "norms")
# How the comparison plots draw runs (studio.ui.panels.compare_plot in the window, studio.cli.plot in
# a PNG): Tableau 10 (matplotlib's default cycle), distinct on white and readable by most
# colour-blind eyes; one line style per parameter group (matplotlib's names).
RUN_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf")
GROUP_LINES = {"attention": "solid", "feed_forward": "dashed", "embedding": "dotted",
               "norms": "dashdot"}
GROUP_NAMES = {"attention": "attention ━", "feed_forward": "feed-forward ╍",
               "embedding": "embedding ┈", "norms": "norms ─·"}


@dataclass
class RunInfo:
    """What the Runs table shows of one run folder. Losses in nats; wall_s in seconds."""
    path: Path
    name: str
    date: float | None = None           # start, seconds since the epoch
    device: str = ""
    params: int | None = None
    tokenizer: str = ""                 # "SentencePiece BPE · 512" (engine.files.model_card)
    step: int = 0                       # last step recorded (metrics or checkpoint)
    total_steps: int = 0
    loss: float | None = None           # last finite train loss
    val_loss: float | None = None       # last held-out pretraining-text loss
    val_bpb: float | None = None        # bits per byte of the held-out text, when recorded
    wall_s: float = 0.0
    status: str = "crashed"
    clipped: int = 0                    # steps whose grad norm was clipped
    skipped: int = 0                    # steps skipped for a NaN/Inf gradient
    warnings: list = field(default_factory=list)
    header: dict | None = None          # the checkpoint's JSON header (no weights)
    records: list = field(default_factory=list)  # metrics.jsonl, one dict per step

    def config(self) -> dict:
        """Flat {"model.d_model": 128, "train.learning_rate": 0.003, ...} for the diff."""
        h = self.header or {}
        out = {f"model.{k}": v for k, v in (h.get("model_config") or {}).items()}
        out.update({f"train.{k}": v for k, v in (h.get("train_config") or {}).items()})
        out["tokenizer"] = self.tokenizer
        out["device"] = self.device
        data = h.get("data") or {}
        for k in ("pretrain_sha256", "tune_sha256"):
            if data.get(k):
                out[f"data.{k}"] = data[k][:12]
        return out


def _num(v) -> float:
    try:
        return float(v)  # NaN/Inf were written as strings
    except (TypeError, ValueError):
        return math.nan


def _last(records, key, stage=None) -> float | None:
    for r in reversed(records):
        if (stage is None or r.get("stage") == stage) and key in r:
            v = _num(r[key])
            if math.isfinite(v):
                return v
    return None


def held_out(r: dict) -> float | None:
    """The held-out pretraining-text loss of a record: val_loss while pretraining,
    pretrain_val_loss while tuning (val_loss is then the tune dialogues' loss)."""
    v = r.get("val_loss") if r.get("stage", "pretrain") == "pretrain" else r.get("pretrain_val_loss")
    return None if v is None else _num(v)


def run_colour(i: int) -> str:
    """The colour of the i-th run shown (RUN_COLOURS, repeating)."""
    return RUN_COLOURS[i % len(RUN_COLOURS)]


_DEVICE_NOISE = re.compile(r"^(pthread|cpu|basic)-|\((R|TM|r|tm)\)|\bProcessor\b|\bCPU\b|"
                           r"@\s*[\d.]+\s*GHz|\b\d+-Core\b")
_TOKENIZER_SHORT = {"SentencePiece BPE": "BPE", "SentencePiece characters": "chars",
                    "SentencePiece unigram": "unigram", "SentencePiece words": "words",
                    "SentencePiece BPE (Llama-2 layout)": "Llama-2 BPE"}


def short_device(name: str) -> str:
    """A device name for a narrow column: PoCL's "pthread-" prefix, (R), (TM), "Processor",
    "CPU", clock speed and core count dropped ("pthread-AMD EPYC 7763 64-Core Processor" ->
    "AMD EPYC 7763"); the whole name when nothing is left."""
    short = " ".join(_DEVICE_NOISE.sub(" ", name).split())
    return short or name


def short_tokenizer(text: str) -> str:
    """RunInfo.tokenizer for a narrow column: "SentencePiece BPE · 512" -> "BPE 512",
    "byte-level BPE, pre-tokenizer smollm · 49152" -> "byte-level BPE 49152"."""
    name, _, size = text.rpartition(" · ")
    if not name:
        return text
    name = name.split(", pre-tokenizer")[0]
    return f"{_TOKENIZER_SHORT.get(name, name)} {size}"


def fmt_duration(s: float) -> str:
    """Seconds as m:ss, or h:mm:ss from an hour (the Runs table's and `llm-studio runs`' wall)."""
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def wall_times(records) -> np.ndarray:
    """Cumulative wall time (s) per record. elapsed_s keeps counting across a continued run,
    but runs written before it did restarted it at each continuation: a drop starts a new
    segment, chained to the previous one's end."""
    out, offset, prev = np.zeros(len(records)), 0.0, 0.0
    for i, r in enumerate(records):
        e = _num(r.get("elapsed_s"))
        e = prev if not math.isfinite(e) else e
        if e < prev:  # a new train() call began
            offset += prev
        out[i], prev = offset + e, e
    return out


def _date(folder: Path, side: dict) -> float | None:
    if isinstance(side.get("created"), (int, float)):
        return float(side["created"])
    m = _STAMP.match(folder.name)
    if m:
        try:
            return time.mktime(time.strptime(m.group(1), "%Y%m%d-%H%M%S"))
        except ValueError:
            pass
    times = [p.stat().st_mtime for p in (folder / METRICS, folder / FILENAME) if p.exists()]
    return min(times) if times else None


def _status(header, records, folder: Path, step_ck: int | None, total: int) -> str:
    last = int(records[-1]["step"]) if records else 0
    training = in_use(folder)  # the lock says it for sure; the clock only guesses
    if training:
        return "running"
    if step_ck is not None and total and step_ck >= total:
        return "finished"
    if training is None and records and _written_lately(folder):
        return "running"
    if header is None or last > (step_ck or 0):
        return "crashed"
    return "stopped"


def _written_lately(folder: Path) -> bool:
    try:
        return time.time() - (folder / METRICS).stat().st_mtime < RUNNING_S
    except OSError:
        return False


def _from_header(info: RunInfo, header: dict, side: dict) -> tuple[int, int]:
    """Fill what the checkpoint header says (size, tokenizer, device); return (the checkpoint's
    step, the run's total steps: engine.config.run_steps)."""
    mc, tc = header.get("model_config") or {}, header.get("train_config") or {}
    try:
        info.params = param_count(ModelConfig(**mc))
    except TypeError:
        info.params = None
    pre = (header.get("source") or {}).get("tokenizer_pre", "")   # an imported model's card
    info.tokenizer = f"{tokenizer_name(header.get('tokenizer_kind', ''), pre)} · " \
                     f"{mc.get('vocab_size', '?')}"
    info.device = str(header.get("device") or side.get("device") or "")
    tune = (header.get("data") or {}).get("tune_chars", 0) > 0
    total = run_steps(int(tc.get("pretrain_steps", 0)), int(tc.get("tune_steps", 0)), tune)
    return int(header.get("step", 0)), total


def _from_records(info: RunInfo, records: list[dict], header: dict | None) -> None:
    """Fill the losses, wall time and step counts metrics.jsonl gives; a run without records
    keeps the header's last loss."""
    info.loss = _last(records, "loss") if records else (header or {}).get("last_loss")
    vals = [v for v in map(held_out, records) if v is not None and math.isfinite(v)]
    info.val_loss = vals[-1] if vals else None
    info.val_bpb = _last(records, "val_bpb")
    info.wall_s = float(wall_times(records)[-1]) if records else 0.0
    _count_flags(info, records, header)


def _count_flags(info: RunInfo, records: list[dict], header: dict | None) -> None:
    """Steps skipped (NaN/Inf gradient), steps clipped (grad norm above grad_clip), warnings."""
    clip = float(((header or {}).get("train_config") or {}).get("grad_clip", 0) or 0)
    info.skipped = sum(1 for r in records if r.get("skipped"))
    info.clipped = sum(1 for r in records if clip > 0 and not r.get("skipped")
                       and _num(r.get("grad_norm")) > clip)
    info.warnings = [w for r in records for w in (r.get("warnings") or [])]


def load_run(folder) -> RunInfo:
    """Everything the Runs table shows of one folder (weights never read)."""
    folder = Path(folder)
    side, header, records = read_sidecar(folder), read_header(folder), read_metrics(folder)
    info = RunInfo(folder, str(side.get("name") or folder.name), _date(folder, side),
                   header=header, records=records)
    step_ck, total = _from_header(info, header, side) if header else (None, 0)
    if records:
        total = total or int(records[-1].get("total_steps", 0))
    info.step = max(int(records[-1]["step"]) if records else 0, step_ck or 0)
    info.total_steps = total
    _from_records(info, records, header)
    info.status = _status(header, records, folder, step_ck, total)
    return info


# ------------------------------------------------------------------ many folders
def scan(roots=(), extra=()) -> list[RunInfo]:
    """Every run folder directly under each of `roots`, plus each folder of `extra` (itself a
    run folder, or a folder of runs); newest first, each folder once."""
    seen: dict[Path, RunInfo] = {}
    candidates: list[Path] = []
    for root in list(roots) + list(extra):
        root = Path(root).expanduser()
        if is_run_folder(root):
            candidates.append(root)
        elif root.is_dir():
            try:
                candidates += sorted(p for p in root.iterdir() if is_run_folder(p))
            except OSError:
                continue
    for p in candidates:
        key = p.resolve()
        if key not in seen:
            seen[key] = load_run(p)
    return sorted(seen.values(), key=lambda r: -(r.date or 0))


def rename(folder, name: str) -> None:
    """Store the run's display name in run.json (temp file + rename: never half written).
    Raises StudioError when the folder cannot be written."""
    folder = Path(folder)
    name = name.strip()
    if not name:
        raise StudioError("A run's name cannot be empty.", "Type a name, or Escape to keep it.")
    side = read_sidecar(folder)
    side.setdefault("created", _date(folder, side))
    side["name"] = name
    try:
        fd, tmp = tempfile.mkstemp(prefix=".run-", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(side, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, folder / RUN_JSON)
    except OSError as e:
        raise StudioError(f"Cannot rename the run in {folder}: {e.strerror or e}.",
                          "The folder must be writable (run.json holds the name).") from e


def config_diff(runs: list[RunInfo]) -> list[tuple[str, list]]:
    """[(setting, [value per run])] for the settings whose values differ between runs."""
    configs = [r.config() for r in runs]
    keys = sorted(set().union(*configs)) if configs else []
    rows = []
    for k in keys:
        vals = [c.get(k) for c in configs]
        if len({json.dumps(v, sort_keys=True) for v in vals}) > 1:
            rows.append((k, vals))
    return rows


X_AXES = {"step": "step", "tokens": "tokens seen", "wall": "wall time (s)"}


def x_values(run: RunInfo, axis: str = "step") -> np.ndarray:
    """The x of each metrics record: step, tokens seen (step x batch_size x context_length,
    every input position as tokens_per_s counts them) or cumulative wall time (s)."""
    steps = np.array([_num(r["step"]) for r in run.records])
    if axis == "wall":
        return wall_times(run.records)
    if axis == "tokens":
        h = run.header or {}
        B = (h.get("train_config") or {}).get("batch_size")
        T = (h.get("model_config") or {}).get("context_length")
        return steps * (B * T) if B and T else np.full_like(steps, math.nan)
    return steps


def curves(run: RunInfo, axis: str = "step") -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"loss"|"val"|"grad"|"lr"|"health.<grad_norm|update_ratio>.<group>": (x, y)} of one
    run against `axis` (X_AXES); held-out ("val") and health points only where measured."""
    xs = x_values(run, axis)
    recs = run.records
    out = {k: (xs, np.array([_num(r.get(src)) for r in recs]))
           for k, src in (("loss", "loss"), ("grad", "grad_norm"), ("lr", "lr"))}
    idx = [i for i, r in enumerate(recs) if held_out(r) is not None]
    out["val"] = (xs[idx], np.array([held_out(recs[i]) for i in idx], dtype=float))
    hidx = [i for i, r in enumerate(recs) if isinstance(r.get("health"), dict)]
    for measure in ("grad_norm", "update_ratio"):
        for g in HEALTH_GROUPS:
            ys = [_num((recs[i]["health"].get(measure) or {}).get(g)) for i in hidx]
            out[f"health.{measure}.{g}"] = (xs[hidx], np.array(ys, dtype=float))
    return out
