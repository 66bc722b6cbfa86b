"""`llm-studio` without a command checks, before Qt starts, that the window can open: every missing
library of Qt's xcb plugin is named with the install command, a DISPLAY that does not answer is
reported, and both end with exit status 2 and the headless alternative (not Qt's abort, 134)."""

import socket
import struct
import threading

import pytest

from opencl_llm_studio.studio import preflight
from opencl_llm_studio.studio.cli import main

LDD_THREE_MISSING = """\
\tlinux-vdso.so.1 (0x00007efe50dd0000)
\tlibGL.so.1 => /lib/x86_64-linux-gnu/libGL.so.1 (0x00007efe50c72000)
\tlibxcb-cursor.so.0 => not found
\tlibxcb-icccm.so.4 => not found
\tlibxcb-util.so.1 => /lib/x86_64-linux-gnu/libxcb-util.so.1 (0x00007efe50c10000)
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-icccm.so.4 => not found
\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x00007efe50b85000)
"""


@pytest.fixture
def x11_desktop(monkeypatch):
    """An X11 session as Qt sees it: DISPLAY set, no Wayland, no QT_QPA_PLATFORM; the window
    itself is never opened (run_app would be reached only if the checks let it through)."""
    monkeypatch.setattr(preflight.sys, "platform", "linux")
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    opened = []
    from opencl_llm_studio.studio.ui import app as ui_app
    monkeypatch.setattr(ui_app, "run_app", lambda **kw: opened.append(kw) or 0)
    return opened


def test_every_missing_xcb_library_is_named_with_the_install_command(x11_desktop, monkeypatch,
                                                                     capsys):
    monkeypatch.setattr(preflight, "_ldd", lambda path: LDD_THREE_MISSING)
    monkeypatch.setattr(preflight.shutil, "which", lambda name: "/usr/bin/" + name)
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "libxcb-cursor.so.0, libxcb-icccm.so.4, libxcb-keysyms.so.1" in err
    assert "sudo apt install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1" in err
    assert "llm-studio train --out" in err and "Traceback" not in err
    assert x11_desktop == []  # Qt was never started


def test_without_ldd_a_known_list_is_tried_with_the_loader(x11_desktop, monkeypatch, capsys):
    monkeypatch.setattr(preflight, "_ldd", lambda path: None)
    gone = {"libxcb-icccm.so.4", "libxkbcommon-x11.so.0"}
    monkeypatch.setattr(preflight, "_loadable", lambda name: name not in gone)
    assert preflight.missing_libraries() == sorted(gone)
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "libxcb-icccm4" in err and "libxkbcommon-x11-0" in err
    assert x11_desktop == []


@pytest.mark.parametrize("display", [":97", "127.0.0.1:1", "no-such-host.invalid:0", "nonsense"])
def test_a_display_that_does_not_answer_is_reported(x11_desktop, monkeypatch, capsys, display):
    monkeypatch.setenv("DISPLAY", display)
    monkeypatch.setattr(preflight, "missing_libraries", lambda plugin=None: [])
    assert main([]) == 2
    err = capsys.readouterr().err
    assert f"X display '{display}'" in err and "does not answer" in err
    assert "llm-studio train --out" in err
    assert x11_desktop == []


def _fake_x_server(accept: bool) -> int:
    """A TCP X server on 127.0.0.1 that answers one connection setup (X11 protocol, section
    "Connection Setup"): success with no screens, or failure with a reason. Returns the port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)

    def serve():
        conn, _ = sock.accept()
        conn.recv(12)
        if accept:  # release, id base/mask, motion buffer, vendor 0, max request, 0 screens...
            extra = struct.pack("<IIIIHHBBBBBBBBI", 1, 0x200000, 0x1FFFFF, 0, 0, 65535, 0, 0,
                                0, 0, 32, 32, 8, 255, 0)
            conn.sendall(struct.pack("<BBHHH", 1, 0, 11, 0, len(extra) // 4) + extra)
        else:
            reason = b"Authorization required\0\0"
            conn.sendall(struct.pack("<BBHHH", 0, 22, 11, 0, len(reason) // 4) + reason)
        conn.recv(1)  # until the client hangs up
        conn.close()
        sock.close()
    threading.Thread(target=serve, daemon=True).start()
    return sock.getsockname()[1]


@pytest.mark.skipif(not preflight._loadable("libxcb.so.1"), reason="needs libxcb")
def test_display_check_uses_the_x11_handshake():
    for accept in (True, False):
        port = _fake_x_server(accept)
        if port < 6000:
            pytest.skip("no TCP port above 6000 (X displays are ports 6000 + n)")
        assert preflight.display_connects(f"127.0.0.1:{port - 6000}") == accept


def test_a_working_display_starts_the_window(x11_desktop, monkeypatch):
    monkeypatch.setattr(preflight, "missing_libraries", lambda plugin=None: [])
    monkeypatch.setattr(preflight, "display_connects", lambda display: True)
    assert main([]) == 0 and len(x11_desktop) == 1


def test_no_display_at_all(x11_desktop, monkeypatch, capsys):
    monkeypatch.delenv("DISPLAY")
    assert main([]) == 2
    assert "No display found" in capsys.readouterr().err


@pytest.mark.parametrize("env,platform,xcb", [
    ({"QT_QPA_PLATFORM": "offscreen", "DISPLAY": ":0"}, "linux", False),
    ({"QT_QPA_PLATFORM": "wayland"}, "linux", False),
    ({"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0"}, "linux", True),
    ({"QT_QPA_PLATFORM": "xcb:nograb", "DISPLAY": ":0"}, "linux", True),
    ({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}, "linux", False),
    ({"DISPLAY": ":0"}, "linux", True),
    ({"DISPLAY": ":0"}, "freebsd14", True),
    ({}, "darwin", False),
    ({}, "win32", False),
])
def test_the_checks_run_only_where_qt_uses_xcb(env, platform, xcb, monkeypatch):
    assert preflight.uses_xcb(env, platform) == xcb
    monkeypatch.setattr(preflight, "missing_libraries", lambda plugin=None: ["libxcb.so.1"])
    if xcb:
        with pytest.raises(preflight.StudioError, match="libxcb.so.1"):
            preflight.check_display(env, platform)
    else:
        preflight.check_display(env, platform)  # nothing checked, nothing raised


@pytest.mark.parametrize("soname,package", [
    ("libxcb-cursor.so.0", "libxcb-cursor0"), ("libxcb-icccm.so.4", "libxcb-icccm4"),
    ("libxcb-keysyms.so.1", "libxcb-keysyms1"), ("libxcb-render-util.so.0", "libxcb-render-util0"),
    ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0"), ("libX11-xcb.so.1", "libx11-xcb1"),
    ("libGL.so.1", "libgl1"), ("libEGL.so.1", "libegl1"), ("libdbus-1.so.3", "libdbus-1-3"),
    ("libglib-2.0.so.0", "libglib2.0-0"), ("libfontconfig.so.1", "libfontconfig1"),
])
def test_debian_package_names(soname, package):
    assert preflight.debian_package(soname) == package


def test_the_real_plugin_is_found_and_read():
    """On this machine: PySide6's libqxcb.so exists and the check runs to an answer."""
    plugin = preflight.xcb_plugin()
    assert plugin is not None and plugin.name == "libqxcb.so"
    missing = preflight.missing_libraries(plugin)
    assert all(".so" in name for name in missing)
