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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

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


CHUNK = 1 << 22   # float32 elements per piece of a streamed member (16 MiB)


@dataclass(frozen=True)
class Stream:
    """A float32 vector of `size` elements written to a checkpoint piece by piece:
    read(offset, n) returns elements [offset, offset + n) (a model's weights or moments read
    from the device CHUNK elements at a time), so the whole vector is never on the host: a
    135M model's save held 0.5 GiB of weights beside the model."""
    size: int
    read: Callable[[int, int], np.ndarray]

    def pieces(self) -> Iterator[np.ndarray]:
        for lo in range(0, self.size, CHUNK):
            yield np.asarray(self.read(lo, min(CHUNK, self.size - lo)), np.float32)


_NO_MOMENTS = np.zeros(0, np.float32)   # AdamW moments of a model not yet trained (save)
PREVIOUS = previous_path(Path(FILENAME)).name   # "checkpoint.prev.npz" in a run folder


def save(path, header: dict, params, m, v,
         tokenizer_model: bytes, pretrain_text: str, tune_text: str | None) -> Path:
    """Write the checkpoint so that a complete one is on disk at every instant. m, v: the AdamW
    moments, or None before the first step (an imported model): stored empty, so a 135M
    model's run folder holds its weights alone (0.5 GB, not 1.6 GB of zeros); load() gives
    zeros back. params, m and v may be float32 arrays or Streams (written piece by piece, so no
    whole array is on the host: a 135M model's save held 1.5 GiB beside the model before
    2026-12).

    Order (engine.fsutil): the new file is written under a temp name and fsynced; the current
    file is hard-linked to a second temp name that replaces checkpoint.prev.npz; then the new
    file replaces checkpoint.npz; then the folder is fsynced. The current file is never renamed
    away, so a kill or power cut at any point leaves checkpoint.npz complete (old or new) once
    the first save has finished; leftover temp files of killed writers are removed afterwards.
    Raises CheckpointError when the folder cannot be written, the disk is full, or the weights
    are not finite (the previous checkpoint is then left as it was)."""
    target = checkpoint_path(path)
    if not isinstance(params, Stream) and not np.all(np.isfinite(params)):
        raise _not_finite()   # a Stream is checked piece by piece while it is written
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


def _not_finite() -> CheckpointError:
    return CheckpointError("The weights contain NaN or Inf; the checkpoint was not written.",
                           "Lower the learning rate and continue from the last checkpoint.")


def _write_npz(f, arrays: dict) -> None:
    """np.savez's archive (uncompressed members NAME.npy), each written in turn; a Stream piece
    by piece (its "params" checked finite on the way: raises CheckpointError)."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in arrays.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as out:
                if isinstance(value, Stream):
                    _write_stream(out, value, check_finite=name == "params")
                else:
                    np.lib.format.write_array(out, np.asanyarray(value), allow_pickle=False)


def _write_stream(out, stream: Stream, check_finite: bool) -> None:
    """The .npy format (version 1.0 header, then the raw little-endian float32 data) written
    from the stream's pieces; numpy.lib.format reads it as any np.save file."""
    np.lib.format.write_array_header_1_0(
        out, {"descr": np.lib.format.dtype_to_descr(np.dtype("<f4")), "fortran_order": False,
              "shape": (stream.size,)})
    for piece in stream.pieces():
        if check_finite and not np.all(np.isfinite(piece)):
            raise _not_finite()
        out.write(piece.astype("<f4", copy=False).tobytes())


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


def load(path, arrays: bool = True) -> dict:
    """Read the newest complete checkpoint: dict with header (dict), params, adam_m, adam_v
    (float32 arrays), tokenizer (bytes), pretrain_text, tune_text (str), and from_previous
    (bool: checkpoint.npz was missing or damaged and an older file was read).
    arrays=False: no params, adam_m, adam_v but "members", a Members open on the file read, to
    read them piece by piece (close it, or use it in a with-block).

    Candidates, in order: checkpoint.npz; complete temp files of an interrupted save (newest
    first; they are only read, never moved: another process may be saving); checkpoint.prev.npz.
    Raises CheckpointError for a missing, truncated, corrupted or foreign file when no candidate
    is readable (the message is the newest file's problem)."""
    return _first_readable(checkpoint_path(path),
                           _load_file if arrays else _open_members)


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


def _small_members(z) -> dict:
    """The tokenizer bytes and both texts of an open archive."""
    return {"tokenizer": bytes(z["tokenizer"]),
            "pretrain_text": bytes(z["pretrain_text"]).decode(),
            "tune_text": bytes(z["tune_text"]).decode() or None}


def _load_file(target: Path) -> dict:
    def read(z):
        out = _small_members(z)
        for k in ("params", "adam_m", "adam_v"):
            out[k] = np.asarray(z[k], np.float32)
        for k in ("adam_m", "adam_v"):   # saved before the first step: zeros
            if out[k].size == 0:   # np.zeros: untouched pages, no memory until written
                out[k] = np.zeros(out["params"].size, np.float32)
        return out
    return _read_archive(target, read)


def _open_members(target: Path) -> dict:
    out = _read_archive(target, _small_members, keep_open=True)
    members = Members(out.pop("file"), target)
    try:   # every member's CRC first, a piece at a time: a damaged file is found here, while
        bad = members.damaged()   # an older candidate can still be read instead
    except BaseException:
        members.close()
        raise
    if bad:
        members.close()
        raise CheckpointError(f"{target} is not a readable checkpoint (member {bad} is damaged).",
                              "The file is corrupted; use another checkpoint.")
    out["members"] = members
    return out


class Members:
    """The float32 members of an open checkpoint (params, adam_m, adam_v) read CHUNK elements
    at a time, so that loading a run needs no whole array on the host (a 135M model's m and v
    read whole took 1 GiB beside the model). The file stays open until close(): a save that
    replaces it meanwhile does not mix two checkpoints."""

    def __init__(self, f, target: Path):
        self._f, self.target = f, target
        try:
            self._zf = zipfile.ZipFile(f)
        except BaseException:
            f.close()
            raise

    def __enter__(self) -> "Members":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._zf.close()
        self._f.close()

    def moment_crcs(self) -> tuple[int, int]:
        """The CRC-32s of adam_m and adam_v as the archive's directory records them."""
        return (self._zf.getinfo("adam_m.npy").CRC, self._zf.getinfo("adam_v.npy").CRC)

    def moment_source(self) -> MomentSource:
        """This file's moments, to read when the run trains (MomentSource)."""
        return MomentSource(self.target, self.moment_crcs())

    def damaged(self) -> str | None:
        """The first member whose data fails its CRC, or None (zipfile.testzip: read in
        pieces, nothing kept)."""
        try:
            return self._zf.testzip()
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            return f"? ({type(e).__name__}: {e})"

    def size(self, name: str) -> int:
        """Elements of member `name` (from its .npy header). Raises CheckpointError."""
        with self._member(name) as fp:
            return int(np.prod(self._shape(fp)))

    def chunks(self, name: str) -> Iterator[tuple[int, np.ndarray]]:
        """(offset, float32 piece) of member `name` in order; a member stored empty (the moments
        of a model never trained) yields nothing. Raises CheckpointError for a truncated or
        damaged member (the zip CRC is checked at its end)."""
        try:
            with self._member(name) as fp:
                n, dtype = int(np.prod(self._shape(fp))), self._dtype
                for lo in range(0, n, CHUNK):
                    k = min(CHUNK, n - lo)
                    raw = fp.read(k * dtype.itemsize)
                    if len(raw) != k * dtype.itemsize:
                        raise EOFError(f"{name} ends after {lo + len(raw) // 4} of {n} values")
                    yield lo, np.frombuffer(raw, dtype).astype(np.float32)
                fp.read()   # to the member's end: zipfile checks its CRC there
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise CheckpointError(f"{self.target} is not a readable checkpoint "
                                  f"({type(e).__name__}: {e}).",
                                  "The file is truncated or corrupted; use another "
                                  "checkpoint.") from e

    def _member(self, name: str):
        return self._zf.open(name + ".npy")

    def _shape(self, fp) -> tuple:
        version = np.lib.format.read_magic(fp)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        shape, fortran_order, dtype = read(fp)
        if dtype.kind != "f" or len(shape) != 1:
            raise ValueError(f"a {dtype} array of shape {shape}, not a float vector")
        self._dtype = dtype
        return shape


@dataclass(frozen=True)
class MomentSource:
    """Where a loaded run's AdamW moments wait until it trains (Members.moment_source): the
    file and its members' CRC-32s, so that reading them later from a file another save has
    replaced meanwhile is refused instead of mixing two checkpoints."""
    path: Path
    crcs: tuple[int, int]   # adam_m, adam_v

    def pieces(self, name: str) -> Iterator[tuple[int, np.ndarray]]:
        """Members.chunks of "adam_m" or "adam_v" of the file as it was (the recorded CRC-32s
        name it; the member's own CRC is checked at its end). Raises CheckpointError when the
        file is gone, damaged or another checkpoint now."""
        try:
            members = Members(open(self.path, "rb"), self.path)
        except (OSError, zipfile.BadZipFile) as e:
            raise self._changed() from e
        with members:
            try:
                same = members.moment_crcs() == self.crcs
            except KeyError as e:
                raise self._changed() from e
            if not same:
                raise self._changed()
            yield from members.chunks(name)

    def _changed(self) -> CheckpointError:
        return CheckpointError(f"The run's checkpoint {self.path} changed since the run was "
                               "opened, and its optimizer state was to be read from it.",
                               "Open the run again, then continue training.")


def _header_file(target: Path) -> dict:
    return _read_archive(target, lambda z: {})


def _read_archive(target: Path, read, keep_open: bool = False) -> dict:
    """{"header": the checked JSON header, **read(the open archive)}; keep_open: and "file", the
    file object, left open for the caller. Raises CheckpointError."""
    if not target.exists():
        raise CheckpointError(f"No checkpoint at {target}.",
                              "Give the folder a training run wrote (it holds checkpoint.npz).")
    if not zipfile.is_zipfile(target):
        raise CheckpointError(f"{target} is not a readable checkpoint (not an .npz archive; "
                              "truncated, damaged, or another kind of file).",
                              "Give a run folder or its checkpoint.npz; a GGUF works with "
                              "chat, sample, tokenize and the studio.")
    f = None
    try:
        f = open(target, "rb")
        with np.load(f, allow_pickle=False) as z:   # a file object: np.load leaves it open
            missing = [k for k in MEMBERS if k not in z.files]
            if missing:
                raise KeyError(f"no {', '.join(missing)}")
            header = json.loads(bytes(z["header"]).decode())
            out = {"header": header, **read(z)}
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            found = header.get("format") if isinstance(header, dict) else None
            raise CheckpointError(f"{target} is not an OpenCL LLM Studio checkpoint.",
                                  f"Expected format {FORMAT}, found {found!r}.")
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError, UnicodeDecodeError,
            json.JSONDecodeError) as e:
        if f is not None:
            f.close()
        raise CheckpointError(f"{target} is not a readable checkpoint ({type(e).__name__}: {e}).",
                              "The file is truncated or corrupted; use another checkpoint.") from e
    except BaseException:
        if f is not None:
            f.close()
        raise
    if keep_open:
        out["file"] = f
    else:
        f.close()
    return out
