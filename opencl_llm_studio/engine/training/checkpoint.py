"""Checkpoints: one `checkpoint.npz` per run folder (and the one before it,
`checkpoint.prev.npz`), written so that a complete checkpoint exists at every instant, no pickle.

Content (numpy .npz, read with allow_pickle=False so loading never executes code): the flat
parameters and both AdamW moments (layout from engine.model.params.ParamTable of the stored config),
the tokenizer's SentencePiece model bytes, the corpora (so continuing is exact even if the
files moved), and a JSON header with the configs, step, AdamW step, RNG state and data summary.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np

from opencl_llm_studio.engine import fsutil
from opencl_llm_studio.engine.errors import CheckpointError

FILENAME = "checkpoint.npz"
LEGACY_TEMPS = ".checkpoint-*.tmp"  # temp names of versions before 2026-12 (tempfile.mkstemp)
FORMAT = "opencl-llm-studio-checkpoint/1"


def checkpoint_path(path: str | os.PathLike) -> Path:
    """A run folder or a checkpoint file -> the checkpoint file."""
    p = Path(path)
    return p / FILENAME if p.is_dir() or not p.suffix else p


def _bytes_array(b: bytes) -> np.ndarray:
    return np.frombuffer(b, np.uint8)


def previous_path(target: Path) -> Path:
    """checkpoint.npz -> checkpoint.prev.npz: the one before, kept in case the newest is damaged."""
    return target.with_name(f"{target.stem}.prev{target.suffix}")


_NO_MOMENTS = np.zeros(0, np.float32)   # AdamW moments of a model not yet trained (save)
PREVIOUS = previous_path(Path(FILENAME)).name   # "checkpoint.prev.npz" in a run folder


def save(path, header: dict, params: np.ndarray, m: np.ndarray | None, v: np.ndarray | None,
         tokenizer_model: bytes, pretrain_text: str, tune_text: str | None) -> Path:
    """Write the checkpoint so that a complete one is on disk at every instant. m, v: the AdamW
    moments, or None before the first step (an imported model): stored empty, so a 135M
    model's run folder holds its weights alone (0.5 GB, not 1.6 GB of zeros); load() gives
    zeros back. m and v may also be callables that return the array when it is written, so
    that only one of the three large arrays is on the host at a time (a 135M model's save
    held 1.5 GiB beside the model).

    Order (engine.fsutil): the new file is written under a temp name and fsynced; the current
    file is hard-linked to a second temp name that replaces checkpoint.prev.npz; then the new
    file replaces checkpoint.npz; then the folder is fsynced. The current file is never renamed
    away, so a kill or power cut at any point leaves checkpoint.npz complete (old or new) once
    the first save has finished; leftover temp files of killed writers are removed afterwards.
    Raises CheckpointError when the folder cannot be written, the disk is full, or the weights
    are not finite (the previous checkpoint is then left as it was)."""
    target = checkpoint_path(path)
    if not np.all(np.isfinite(params)):
        raise CheckpointError("The weights contain NaN or Inf; the checkpoint was not written.",
                              "Lower the learning rate and continue from the last checkpoint.")
    header = dict(header, format=FORMAT)
    arrays = {
        "params": params, "adam_m": _NO_MOMENTS if m is None else m,
        "adam_v": _NO_MOMENTS if v is None else v,
        "header": _bytes_array(json.dumps(header).encode()),
        "tokenizer": _bytes_array(tokenizer_model),
        "pretrain_text": _bytes_array(pretrain_text.encode()),
        "tune_text": _bytes_array((tune_text or "").encode()),
    }
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = fsutil.temp_path(target)
        try:
            with open(tmp, "xb") as f:  # umask permissions, unlike mkstemp's 0600
                _write_npz(f, arrays)
                f.flush()
                os.fsync(f.fileno())
            if target.exists():
                _keep_as_previous(target)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsutil.fsync_dir(target.parent)
    except OSError as e:
        raise CheckpointError(f"Could not write the checkpoint {target}: {e.strerror or e}.",
                              "Use a folder you can write to, or free disk space. The "
                              "previous checkpoint, if any, is unchanged.") from e
    _remove_leftovers(target)
    return target


def _write_npz(f, arrays: dict) -> None:
    """np.savez's archive (uncompressed members NAME.npy), each array made and written in turn:
    a callable value is called just before its member is written."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in arrays.items():
            arr = np.asanyarray(value() if callable(value) else value)
            with zf.open(name + ".npy", "w", force_zip64=True) as out:
                np.lib.format.write_array(out, arr, allow_pickle=False)
            del arr


def _keep_as_previous(target: Path) -> None:
    """checkpoint.prev.npz := the current checkpoint.npz, which stays where it is (a hard link
    under a temp name, then one atomic replace; a copy where the filesystem has no hard links)."""
    link = fsutil.temp_path(previous_path(target))
    try:
        try:
            os.link(target, link)
        except OSError:  # FAT, some network shares: no hard links
            shutil.copyfile(target, link)
            with open(link, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(link, previous_path(target))
    except BaseException:
        link.unlink(missing_ok=True)
        raise


def _remove_leftovers(target: Path) -> None:
    for name in (target, previous_path(target)):
        fsutil.remove_stale_temps(name)
    if target.name == FILENAME:  # written by versions before fsutil, never by a live writer
        for legacy in target.parent.glob(LEGACY_TEMPS):
            legacy.unlink(missing_ok=True)


def load(path) -> dict:
    """Read the newest complete checkpoint: dict with header (dict), params, adam_m, adam_v
    (float32 arrays), tokenizer (bytes), pretrain_text, tune_text (str), and from_previous
    (bool: checkpoint.npz was missing or damaged and an older file was read).

    Candidates, in order: checkpoint.npz; complete temp files of an interrupted save (newest
    first; they are only read, never moved: another process may be saving); checkpoint.prev.npz.
    Raises CheckpointError for a missing, truncated, corrupted or foreign file when no candidate
    is readable (the message is the newest file's problem)."""
    return _first_readable(checkpoint_path(path), _load_file)


def read_header(path) -> tuple[dict, bool]:
    """(header, from_previous) of the checkpoint `load` reads, without its weights: the same
    candidates in the same order and the same checks (an .npz archive with every member, a
    JSON header of this FORMAT), so a table of runs and a continued run agree on one folder.
    Reads one small member (np.load is lazy). Raises CheckpointError as `load` does."""
    found = _first_readable(checkpoint_path(path), _header_file)
    return found["header"], found["from_previous"]


def _first_readable(target: Path, read) -> dict:
    """read(file) of the first readable candidate (see load), with from_previous."""
    try:
        return dict(read(target), from_previous=False)
    except CheckpointError:
        for other in _fallbacks(target):
            try:
                return dict(read(other), from_previous=True)
            except CheckpointError:
                continue
        raise


def _fallbacks(target: Path) -> list[Path]:
    if not target.parent.is_dir():
        return []
    legacy = (sorted(target.parent.glob(LEGACY_TEMPS), key=_mtime, reverse=True)
              if target.name == FILENAME else [])
    previous = previous_path(target)
    return [*fsutil.temps_of(target), *legacy, *([previous] if previous.exists() else [])]


def _mtime(p: Path) -> int:
    try:
        return p.stat().st_mtime_ns
    except OSError:
        return 0


MEMBERS = ("params", "adam_m", "adam_v", "header", "tokenizer", "pretrain_text", "tune_text")


def _load_file(target: Path) -> dict:
    def read(z):
        out = {"tokenizer": bytes(z["tokenizer"]),
               "pretrain_text": bytes(z["pretrain_text"]).decode(),
               "tune_text": bytes(z["tune_text"]).decode() or None}
        for k in ("params", "adam_m", "adam_v"):
            out[k] = np.asarray(z[k], np.float32)
        for k in ("adam_m", "adam_v"):   # saved before the first step: zeros
            if out[k].size == 0:   # np.zeros: untouched pages, no memory until written
                out[k] = np.zeros(out["params"].size, np.float32)
        return out
    return _read_archive(target, read)


def _header_file(target: Path) -> dict:
    return _read_archive(target, lambda z: {})


def _read_archive(target: Path, read) -> dict:
    """{"header": the checked JSON header, **read(the open archive)}. Raises CheckpointError."""
    if not target.exists():
        raise CheckpointError(f"No checkpoint at {target}.",
                              "Give the folder a training run wrote (it holds checkpoint.npz).")
    if not zipfile.is_zipfile(target):
        raise CheckpointError(f"{target} is not a readable checkpoint (not an .npz archive; "
                              "truncated, damaged, or another kind of file).",
                              "Give a run folder or its checkpoint.npz; a GGUF works with "
                              "chat, sample, tokenize and the studio.")
    try:
        with np.load(target, allow_pickle=False) as z:
            missing = [k for k in MEMBERS if k not in z.files]
            if missing:
                raise KeyError(f"no {', '.join(missing)}")
            header = json.loads(bytes(z["header"]).decode())
            out = {"header": header, **read(z)}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError, UnicodeDecodeError,
            json.JSONDecodeError) as e:
        raise CheckpointError(f"{target} is not a readable checkpoint ({type(e).__name__}: {e}).",
                              "The file is truncated or corrupted; use another checkpoint.") from e
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        found = header.get("format") if isinstance(header, dict) else None
        raise CheckpointError(f"{target} is not an OpenCL LLM Studio checkpoint.",
                              f"Expected format {FORMAT}, found {found!r}.")
    return out
