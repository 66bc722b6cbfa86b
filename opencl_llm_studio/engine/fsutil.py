"""Crash-safe file helpers: temp names that say who wrote them, directory fsync, stale-temp cleanup.

A file that must never be seen half written is written under a temp name in the same folder,
fsynced, then renamed over the target with os.replace (atomic on POSIX and on NTFS), and the
folder is fsynced so the rename itself survives a power cut (POSIX; Windows has no directory
fsync and NTFS journals the rename). The temp name holds the writer's pid, so a later writer can
remove the leftovers of one that was killed (SIGKILL, power cut) without touching the temp file
of one still writing: `.<target name>.<pid>.<random>.tmp`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import Callable


def temp_path(target: Path) -> Path:
    """A fresh temp name beside `target`, owned by this process."""
    return target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def atomic_write(target: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp) on a fresh temp file beside `target`, fsync it, os.replace it onto
    `target`, fsync the folder; then remove temps of `target` left by killed writers. The temp
    is opened with mode "xb" (not mkstemp's 0600), so the file gets the umask's usual
    permissions. Raises OSError; `target` is then untouched and the temp removed."""
    target = Path(target)
    tmp = temp_path(target)
    try:
        open(tmp, "xb").close()
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(target.parent)
    remove_stale_temps(target)


def atomic_write_text(target: Path, text: str) -> None:
    """atomic_write of a UTF-8 text (newlines as given). Raises OSError."""
    atomic_write(target, lambda tmp: tmp.write_text(text, encoding="utf-8", newline="\n"))


def temps_of(target: Path) -> list[Path]:
    """Temp files of interrupted writes of `target` (any process), newest first."""
    found = []
    for p in target.parent.glob(f".{target.name}.*.tmp"):
        try:
            found.append((p.stat().st_mtime_ns, p))
        except OSError:  # renamed or removed meanwhile
            continue
    return [p for _, p in sorted(found, reverse=True)]


def writer_pid(temp: Path) -> int | None:
    """The pid in a temp name made by temp_path, or None."""
    parts = temp.name.rsplit(".", 3)  # ['.<target>', pid, random, 'tmp']
    try:
        return int(parts[1]) if len(parts) == 4 else None
    except ValueError:
        return None


def remove_stale_temps(target: Path, keep: tuple[Path, ...] = ()) -> None:
    """Delete temp files of `target` whose writer is dead (or is this process and has finished
    with them: a write that failed mid-way). Files in `keep` and files of live writers stay."""
    for p in temps_of(target):
        pid = writer_pid(p)
        if p in keep or pid is None or (pid != os.getpid() and pid_alive(pid)):
            continue
        try:
            p.unlink()
        except OSError:
            pass


def fsync_dir(folder: Path) -> None:
    """Make renames in `folder` durable (POSIX). A no-op where folders cannot be opened."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems (e.g. certain network mounts) refuse: best effort
        pass
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (a conservative yes on error)."""
    if pid <= 0:
        return False
    if sys.platform == "win32":
        return _win_pid_alive(pid)
    try:
        os.kill(pid, 0)  # signal 0: existence and permission check only
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, owned by someone else
        return True
    return True


def _win_pid_alive(pid: int) -> bool:
    # os.kill(pid, 0) would send CTRL_C_EVENT on Windows: ask the kernel instead.
    import ctypes
    kernel32 = ctypes.windll.kernel32
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return kernel32.GetLastError() == 5  # ERROR_ACCESS_DENIED: it exists
    try:
        code = ctypes.c_ulong()
        kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        return code.value == 259  # STILL_ACTIVE
    finally:
        kernel32.CloseHandle(handle)


class FolderSnapshot:
    """What exists at `folder` now, so that a command that is refused leaves the disk as it was.

    undo() removes what appeared since: when `folder` did not exist, the folders made since (from
    the topmost one that was missing, parents included); when it existed, the entries made in it
    since (a lock file, metrics.jsonl, ...). Entries that were there are never touched. Call it
    only while no other process may write there (e.g. under the run folder's lock, or for a folder
    this command made). Best effort: an entry that cannot be removed stays.
    """

    def __init__(self, folder: str | os.PathLike, only: tuple[str, ...] | None = None):
        """only: the entry names undo() may remove from an existing folder (default: any), so
        that files another process adds meanwhile are left alone."""
        self.folder = Path(folder)
        self.only = only
        self.top: Path | None = None       # the topmost missing folder of the path
        p = self.folder
        while not os.path.lexists(p) and p != p.parent:
            self.top, p = p, p.parent
        self.entries = set(os.listdir(self.folder)) \
            if self.top is None and self.folder.is_dir() else None

    def undo(self) -> None:
        if self.top is not None:
            _remove(self.top)
        elif self.entries is not None and self.folder.is_dir():
            for name in set(os.listdir(self.folder)) - self.entries:
                if self.only is None or name in self.only:
                    _remove(self.folder / name)


def _remove(p: Path) -> None:
    """Delete a file, link or folder tree; errors ignored (best effort)."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        try:
            p.unlink()
        except OSError:
            pass
