"""The NaN guard's copy of the last good state: weights and both AdamW moments.

engine.training.trainer.Trainer takes one after each clean validation and restores it when the
loss or the gradient stays NaN/Inf (MAX_BAD_STEPS). For a small model the copy lives in host
memory. For a large one it would cost three times the weights in RAM on top of the model
itself (1.5 GiB for SmolLM2-135M, whose whole tuning should fit in 3 GB): above
RAM_LIMIT_BYTES it goes to an unnamed temporary file in the user cache folder instead, written
and read in CHUNK_FLOATS pieces, so at most one chunk is in memory (a file's pages sit in the
page cache, which the system gives back; a memory map would count them as resident).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from opencl_llm_studio.engine.opencl.tune_cache import cache_dir

RAM_LIMIT_BYTES = 256 * 2 ** 20   # copies up to this size stay in memory
CHUNK_FLOATS = 16 * 2 ** 20       # 64 MiB per read or write
WHICH = ("params", "m", "v")


def snapshot_dir() -> Path:
    """Where a file snapshot goes: the app's cache folder (engine.opencl.tune_cache.cache_dir;
    not /tmp, which is memory on many systems), made if missing."""
    path = cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


class Snapshot:
    """A copy of a Model's params, m and v (each table.size float32), with its adam_t and
    whatever the caller keeps beside it (`extra`). take() returns False, keeping the previous
    copy, when the weights are not all finite; restore() writes the copy back (nothing when
    none was taken). in_memory: where it lives (RAM_LIMIT_BYTES). which: the buffers copied
    (all three for the NaN guard; the weights alone for engine.training.best_weights)."""

    def __init__(self, model, ram_limit: int = RAM_LIMIT_BYTES, which: tuple = WHICH):
        self.n = model.table.size
        self.which = tuple(which)
        self.in_memory = len(self.which) * 4 * self.n <= ram_limit
        self._ram: np.ndarray | None = None
        self._file = None
        self.adam_t = 0
        self.extra = None
        self.taken = False

    def _chunks(self):
        """(start, length) of each CHUNK_FLOATS piece of a (n,) buffer."""
        for start in range(0, self.n, CHUNK_FLOATS):
            yield start, min(CHUNK_FLOATS, self.n - start)

    def _finite(self, model) -> bool:
        """Whether every weight is finite, read a chunk at a time."""
        return all(np.all(np.isfinite(model.rt.read(model.params, k, offset_elems=start)))
                   for start, k in self._chunks())

    def take(self, model, extra=None) -> bool:
        """Copy the model's state (and keep `extra`); False, with the last copy kept, when the
        weights hold a NaN or Inf. Raises OSError when a file copy cannot be written."""
        if not self._finite(model):
            return False
        # through the model's own reads: moments kept as bfloat16 come back as float32
        if self.in_memory:
            if self._ram is None:
                self._ram = np.empty((len(self.which), self.n), np.float32)
            for i, which in enumerate(self.which):
                self._ram[i] = model.read_piece(which, 0, self.n)
        else:
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix="guard-", dir=snapshot_dir())
            self._file.seek(0)
            for which in self.which:
                for start, k in self._chunks():
                    self._file.write(model.read_piece(which, start, k).tobytes())
            self._file.flush()
        self.adam_t, self.extra, self.taken = model.adam_t, extra, True
        return True

    def restore(self, model) -> bool:
        """Write the copy back into the model (its buffers; adam_t with the moments); False
        when none exists."""
        if not self.taken:
            return False
        if self.in_memory:
            for i, which in enumerate(self.which):
                model.write_pieces(which, [(0, self._ram[i])])
        else:
            self._file.seek(0)
            for which in self.which:
                model.write_pieces(which, ((start, np.frombuffer(self._file.read(4 * k),
                                                                 np.float32))
                                           for start, k in self._chunks()))
        if "m" in self.which:
            model.adam_t = self.adam_t
        return True

    def close(self) -> None:
        """Drop the copy (the file is deleted on close: it never had a name)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._ram, self.taken = None, False
