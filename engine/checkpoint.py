"""Checkpoints: one `checkpoint.npz` per run folder, written atomically, no pickle.

Content (numpy .npz, read with allow_pickle=False so loading never executes code): the flat
parameters and both AdamW moments (layout from engine.params.ParamTable of the stored config),
the tokenizer's SentencePiece model bytes, the corpora (so a resume is exact even if the files
moved), and a JSON header with the configs, step, AdamW step, RNG state and data summary.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from engine.errors import CheckpointError

FILENAME = "checkpoint.npz"
PREVIOUS = "checkpoint.prev.npz"  # the one before, kept in case the newest is damaged
FORMAT = "opencl-llm-studio-checkpoint/1"


def checkpoint_path(path: str | os.PathLike) -> Path:
    """A run folder or a checkpoint file -> the checkpoint file."""
    p = Path(path)
    return p / FILENAME if p.is_dir() or not p.suffix else p


def _bytes_array(b: bytes) -> np.ndarray:
    return np.frombuffer(b, np.uint8)


def save(path, header: dict, params: np.ndarray, m: np.ndarray, v: np.ndarray,
         tokenizer_model: bytes, pretrain_text: str, tune_text: str | None) -> Path:
    """Write atomically (temp file in the same folder, fsync, rename). Raises CheckpointError
    when the folder cannot be written, the disk is full, or the weights are not finite (the
    previous checkpoint is then left as it was)."""
    target = checkpoint_path(path)
    if not np.all(np.isfinite(params)):
        raise CheckpointError("The weights contain NaN or Inf; the checkpoint was not written.",
                              "Lower the learning rate and resume from the last checkpoint.")
    header = dict(header, format=FORMAT)
    arrays = {
        "params": params, "adam_m": m, "adam_v": v,
        "header": _bytes_array(json.dumps(header).encode()),
        "tokenizer": _bytes_array(tokenizer_model),
        "pretrain_text": _bytes_array(pretrain_text.encode()),
        "tune_text": _bytes_array((tune_text or "").encode()),
    }
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
                f.flush()
                os.fsync(f.fileno())
            if target.exists():  # each rename is atomic; between them load() finds PREVIOUS
                os.replace(target, target.with_name(PREVIOUS))
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as e:
        raise CheckpointError(f"Could not write the checkpoint {target}: {e.strerror or e}.",
                              "Choose a folder you can write to, or free disk space. The "
                              "previous checkpoint, if any, is unchanged.") from e
    return target


def load(path) -> dict:
    """Read a checkpoint: dict with header (dict), params, adam_m, adam_v (float32 arrays),
    tokenizer (bytes), pretrain_text, tune_text (str), and from_previous (bool: the newest file
    was missing or damaged and the one before it was read). Raises CheckpointError for a
    missing, truncated, corrupted or foreign file when no readable previous one exists."""
    target = checkpoint_path(path)
    previous = target.with_name(PREVIOUS)
    try:
        return dict(_load_file(target), from_previous=False)
    except CheckpointError:
        if target.name == FILENAME and previous.exists():
            try:
                return dict(_load_file(previous), from_previous=True)
            except CheckpointError:
                pass
        raise


def _load_file(target: Path) -> dict:
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
            header = json.loads(bytes(z["header"]).decode())
            out = {"header": header, "tokenizer": bytes(z["tokenizer"]),
                   "pretrain_text": bytes(z["pretrain_text"]).decode(),
                   "tune_text": bytes(z["tune_text"]).decode() or None}
            for k in ("params", "adam_m", "adam_v"):
                out[k] = np.asarray(z[k], np.float32)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError, UnicodeDecodeError,
            json.JSONDecodeError) as e:
        raise CheckpointError(f"{target} is not a readable checkpoint ({type(e).__name__}: {e}).",
                              "The file is truncated or corrupted; use another checkpoint.") from e
    if header.get("format") != FORMAT:
        raise CheckpointError(f"{target} is not an OpenCL LLM Studio checkpoint.",
                              f"Expected format {FORMAT}, found {header.get('format')!r}.")
    return out
