"""One training process per run folder: an exclusive lock that dies with its process.

The lock is an OS lock on `<run folder>/.training.lock` held through an open file: fcntl.flock on
Linux and macOS, msvcrt.locking on Windows. The kernel drops it when the process ends in any way
(exit, crash, SIGKILL, power cut), so a killed run never leaves its folder stuck. The file holds
"<pid> <host>" of the holder, so the refusal can name it. Where the filesystem has no locks
(some network mounts answer ENOLCK / EOPNOTSUPP) the pid in the file is checked instead: a
holder whose process is gone does not count.

Readers (sample, chat, export, File › Open checkpoint) take no lock: checkpoints are complete at
every instant (engine.files.checkpoint).
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from pathlib import Path

from opencl_llm_studio.engine.errors import CheckpointError
from opencl_llm_studio.engine.fsutil import pid_alive

LOCK_NAME = ".training.lock"
_BUSY = {errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, errno.EDEADLK}
_WIN_LOCK_OFFSET = 1 << 20  # Windows locks are mandatory: lock a byte past the "<pid> <host>" text


ELSEWHERE = "train into another run folder"  # the way out a refusal offers (RunLock)


class RunFolderBusy(CheckpointError):
    """Another process is training in this run folder."""


class RunLock:
    """`with RunLock(folder):` train in folder. Raises RunFolderBusy (naming the folder and the
    holder's pid) when another process holds it, CheckpointError when the folder cannot be
    created or written. Not re-entrant: a second RunLock on the same folder in the same process
    is refused too (two runs of one studio must not share a folder either)."""

    def __init__(self, folder: str | os.PathLike, elsewhere: str = ELSEWHERE):
        """elsewhere: the way out the refusal offers (the CLI names its --out option)."""
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.elsewhere = elsewhere
        self._file = None

    def acquire(self) -> "RunLock":
        while True:
            f = self._open()
            try:
                _lock(f, self.path, self.elsewhere)
            except BaseException:
                f.close()
                raise
            if _same_file(f, self.path):
                break
            f.close()   # the holder before us removed the file as we opened it: lock the new one
        try:
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()} {socket.gethostname()}\n")
            f.flush()
        except BaseException:
            f.close()
            raise
        self._file = f
        return self

    def _open(self):
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            return open(self.path, "a+", encoding="utf-8")
        except OSError as e:
            raise CheckpointError(f"Cannot write the run folder {self.folder}: {e.strerror or e}.",
                                  "Choose a folder you can write to.",
                                  f"Use a folder you can write to: {self.elsewhere}.") from e

    def release(self) -> None:
        """Give the folder back and remove the lock file (a finished run leaves no trace of the
        lock); the OS drops the lock by itself when the process ends any other way. On POSIX the
        file is removed while still locked, and acquire() re-checks that the file it locked is
        still the one at the path, so a waiting process never holds a removed file's lock."""
        f, self._file = self._file, None
        if f is None:
            return
        try:
            f.seek(0)
            f.truncate()  # no pid of a finished run is ever shown
            f.flush()
            if os.name != "nt":
                self.path.unlink(missing_ok=True)
            _unlock(f)
        except OSError:
            pass
        finally:
            f.close()
        if os.name == "nt":   # Windows cannot remove an open file: after closing it
            try:
                self.path.unlink(missing_ok=True)
            except OSError:
                pass   # another process opened it meanwhile: it is theirs now

    @property
    def held(self) -> bool:
        return self._file is not None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _same_file(f, path: Path) -> bool:
    """True when the open file f is still the file at path (not removed or replaced)."""
    if os.name == "nt":
        return True   # an open file cannot be removed there
    try:
        return os.stat(path).st_ino == os.fstat(f.fileno()).st_ino
    except OSError:
        return False


def ensure_free(folder: str | os.PathLike) -> None:
    """Raise RunFolderBusy if another process trains in `folder` (e.g. before saving a
    checkpoint there by hand). Leaves no lock file where there was none."""
    path = Path(folder) / LOCK_NAME
    if path.exists():
        RunLock(folder).acquire().release()


def in_use(folder: str | os.PathLike) -> bool | None:
    """Whether a process (this one included) trains in `folder` now: True when its lock is held;
    False when the lock file is free (a killed run's) or gone (every run holds it while training
    and removes it when it ends); None when the file is there but cannot be read. Probes
    without writing: the file and its "<pid> <host>" stay as they are."""
    path = Path(folder) / LOCK_NAME
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return False
    except OSError:
        return None
    with f:
        try:
            _lock(f, path)
        except RunFolderBusy:
            return True
        try:
            _unlock(f)
        except OSError:  # locked by pid only (a filesystem without locks): nothing to undo
            pass
    return False


def holder(path: Path) -> tuple[int | None, str]:
    """(pid, host) written in a lock file by its holder; (None, "") if unreadable or empty."""
    try:
        pid, _, host = path.read_text(encoding="utf-8").strip().partition(" ")
        return int(pid), host
    except (OSError, ValueError):
        return None, ""


def _busy(path: Path, elsewhere: str = ELSEWHERE) -> RunFolderBusy:
    pid, host = holder(path)
    who = f"process {pid}" if pid else "another process"
    if host and host != socket.gethostname():
        who += f" on {host}"
    return RunFolderBusy(
        f"The run folder {path.parent} is in use: {who} is training in it.",
        "Wait for that run to end or stop it (Ctrl-C in its terminal, Stop in the studio), or "
        f"{elsewhere}. A second run would mix its metrics and checkpoints in.")


def _lock(f, path: Path, elsewhere: str = ELSEWHERE) -> None:
    try:
        if sys.platform == "win32":
            import msvcrt
            f.seek(_WIN_LOCK_OFFSET)
            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
        else:
            import fcntl
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in _BUSY:
            raise _busy(path, elsewhere) from None
        _lock_by_pid(path, elsewhere)  # no OS locks on this filesystem


def _lock_by_pid(path: Path, elsewhere: str = ELSEWHERE) -> None:
    pid, host = holder(path)
    if pid and pid != os.getpid() and host == socket.gethostname() and pid_alive(pid):
        raise _busy(path, elsewhere)


def _unlock(f) -> None:
    if sys.platform == "win32":
        import msvcrt
        f.seek(_WIN_LOCK_OFFSET)
        msvcrt.locking(f.fileno(), msvcrt.LK_UNLCK, 1)
    else:
        import fcntl
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
