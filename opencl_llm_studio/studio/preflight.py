"""Checks made before Qt starts, so that a missing system library or an unreachable X display is
a clear message and exit status 2 instead of Qt's abort (exit 134).

Qt's xcb platform plugin (Linux and BSD desktops running X11) needs a dozen system libraries that
a fresh Debian/Ubuntu desktop may lack (libxcb-cursor0, libxcb-icccm4, libxcb-keysyms1, ...); when
one is missing Qt aborts and its hint names only the first. Here every missing one is found (ldd
on PySide6's libqxcb.so, which lists the whole dependency tree; without ldd, a known list tried
with ctypes), and the X display is opened once with libxcb's xcb_connect, as Qt would. Nothing
here imports Qt. Skipped where Qt would not use xcb: QT_QPA_PLATFORM set to another plugin
(offscreen, wayland, vnc...), a Wayland session, macOS, Windows.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from opencl_llm_studio.engine.errors import StudioError

HEADLESS = ("Without a window, the same engine runs headless: `llm-studio train --out "
            "runs/first`, then `llm-studio chat runs/first` (see `llm-studio --help`).")
# What Qt 6's xcb plugin links (PySide6 6.x wheels), for systems without ldd.
XCB_LIBRARIES = ("libxcb.so.1", "libX11-xcb.so.1", "libX11.so.6", "libxkbcommon.so.0",
                 "libxkbcommon-x11.so.0", "libxcb-cursor.so.0", "libxcb-icccm.so.4",
                 "libxcb-image.so.0", "libxcb-keysyms.so.1", "libxcb-randr.so.0",
                 "libxcb-render-util.so.0", "libxcb-render.so.0", "libxcb-shape.so.0",
                 "libxcb-shm.so.0", "libxcb-sync.so.1", "libxcb-util.so.1",
                 "libxcb-xfixes.so.0", "libxcb-xkb.so.1", "libfontconfig.so.1",
                 "libfreetype.so.6", "libGL.so.1", "libEGL.so.1")
# Debian/Ubuntu package of a library whose name does not follow the usual pattern (below).
DEBIAN_EXCEPTIONS = {"libglib-2.0.so.0": "libglib2.0-0", "libgthread-2.0.so.0": "libglib2.0-0",
                     "libxcb-util.so.1": "libxcb-util1", "libxcb-util.so.0": "libxcb-util0"}
CONNECT_TIMEOUT_S = 5.0  # a remote DISPLAY that never answers


def debian_package(soname: str) -> str:
    """Debian's package for a shared library: the name before ".so", lower case, then the
    major version, with a "-" between when the name ends in a digit (Debian Policy 8.1:
    libxcb-icccm.so.4 -> libxcb-icccm4, libxkbcommon-x11.so.0 -> libxkbcommon-x11-0)."""
    if soname in DEBIAN_EXCEPTIONS:
        return DEBIAN_EXCEPTIONS[soname]
    m = re.fullmatch(r"(.+?)\.so\.(\d+).*", soname)
    if not m:
        return soname
    name, major = m.group(1).lower(), m.group(2)
    return f"{name}{'-' if name[-1].isdigit() else ''}{major}"


def uses_xcb(env=os.environ, platform: str = sys.platform) -> bool:
    """Whether Qt would start its xcb plugin here."""
    if platform.startswith(("win", "cygwin", "darwin")):
        return False
    chosen = env.get("QT_QPA_PLATFORM", "")
    if chosen:
        return chosen.split(";")[0].split(":")[0] == "xcb"
    return not env.get("WAYLAND_DISPLAY")  # Qt 6 prefers Wayland in a Wayland session


def xcb_plugin() -> Path | None:
    """PySide6's libqxcb.so (found without importing Qt), or None."""
    import importlib.util
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        for rel in ("Qt/plugins/platforms/libqxcb.so", "plugins/platforms/libqxcb.so"):
            if (Path(base) / rel).is_file():
                return Path(base) / rel
    return None


def _ldd(path: Path) -> str | None:
    """ldd's listing of `path`'s whole dependency tree, or None without a working ldd."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return None
    try:
        return subprocess.run([ldd, str(path)], capture_output=True, text=True,
                              timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _loadable(soname: str) -> bool:
    try:
        ctypes.CDLL(soname)
        return True
    except OSError:
        return False


def missing_libraries(plugin: Path | None = None) -> list[str]:
    """The shared libraries (sonames) the xcb plugin needs that the system lacks, sorted."""
    plugin = plugin or xcb_plugin()
    listing = _ldd(plugin) if plugin is not None else None
    if listing:
        return sorted({m.group(1) for m in re.finditer(r"^\s*(\S+)\s+=>\s+not found",
                                                       listing, re.M)})
    return sorted(name for name in XCB_LIBRARIES if not _loadable(name))


def _xcb_connect(display: str) -> bool:
    """Open and close the X display with libxcb, as Qt's xcb plugin does first."""
    xcb = ctypes.CDLL("libxcb.so.1")
    xcb.xcb_connect.restype = ctypes.c_void_p
    xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
    xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
    xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
    conn = xcb.xcb_connect(display.encode(), None)
    try:
        return bool(conn) and xcb.xcb_connection_has_error(conn) == 0
    finally:
        if conn:
            xcb.xcb_disconnect(conn)  # also frees the error object of a failed connection


def display_connects(display: str) -> bool:
    """Whether the X server at `display` accepts a connection (False after CONNECT_TIMEOUT_S)."""
    answer: list[bool] = []
    worker = threading.Thread(target=lambda: answer.append(_xcb_connect(display)), daemon=True)
    worker.start()
    worker.join(CONNECT_TIMEOUT_S)
    return bool(answer and answer[0])


def install_command(missing: list[str]) -> str:
    packages = sorted({debian_package(name) for name in missing})
    if shutil.which("apt-get") or shutil.which("apt"):
        return "sudo apt install " + " ".join(packages)
    return ("install the packages of your system that provide them (Debian/Ubuntu: "
            + " ".join(packages) + "; Fedora: xcb-util-cursor xcb-util-wm xcb-util-keysyms "
            "xcb-util-image xcb-util-renderutil libxkbcommon-x11)")


def check_display(env=os.environ, platform: str = sys.platform) -> None:
    """Raise StudioError (exit status 2 in the CLI) when the studio window cannot open here:
    no display at all, missing libraries of Qt's xcb plugin, or an X display that does not
    answer. Returns quietly where the window can open (or Qt does not use xcb)."""
    if platform.startswith(("linux", "freebsd", "openbsd", "netbsd")) and not (
            env.get("DISPLAY") or env.get("WAYLAND_DISPLAY") or env.get("QT_QPA_PLATFORM")):
        raise StudioError("No display found, so the studio window cannot open.",
                          "Run it in a desktop session. " + HEADLESS)
    if not uses_xcb(env, platform):
        return
    missing = missing_libraries()
    if missing:
        raise StudioError(
            "The studio window cannot open: Qt's X11 (xcb) platform plugin needs "
            f"{len(missing)} system "
            f"librar{'y' if len(missing) == 1 else 'ies'} that "
            f"{'is' if len(missing) == 1 else 'are'} not installed: {', '.join(missing)}.",
            f"Install {'it' if len(missing) == 1 else 'them'}: {install_command(missing)}\n"
            + HEADLESS)
    display = env.get("DISPLAY", "")
    if not display_connects(display):
        raise StudioError(
            f"The X display {display!r} (the DISPLAY variable) does not answer, so the studio "
            "window cannot open.",
            "Check DISPLAY (`echo $DISPLAY`; a local desktop is usually :0 or :1) and, over "
            "ssh, use `ssh -X`. " + HEADLESS)
