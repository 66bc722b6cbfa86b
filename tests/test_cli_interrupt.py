"""Ctrl-C at the very start of `llm-studio`: while the command modules load (numpy, the engine),
the interrupt is a stop with exit 130, as at every later phase, not a KeyboardInterrupt
traceback."""

from __future__ import annotations

import importlib.abc
import subprocess
import sys

from opencl_llm_studio.studio import cli as studio_cli


class _InterruptOnImport(importlib.abc.MetaPathFinder):
    """Raises KeyboardInterrupt when `name` is imported, as a Ctrl-C landing during its load."""

    def __init__(self, name: str):
        self.name = name

    def find_spec(self, fullname, path, target=None):
        if fullname == self.name:
            raise KeyboardInterrupt
        return None


def test_ctrl_c_while_the_commands_load_is_a_stop(monkeypatch):
    monkeypatch.delitem(sys.modules, "opencl_llm_studio.studio.cli.parser", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_InterruptOnImport("opencl_llm_studio.studio.cli.parser"), *sys.meta_path])
    assert studio_cli.main(["runs"]) == 130


def test_the_entry_package_loads_nothing_heavy():
    """What runs before main() can catch an interrupt is the package's own import: it must not
    pull in numpy or the engine (the window for a traceback stays a few milliseconds)."""
    code = ("import sys, opencl_llm_studio.studio.cli; "
            "print(sorted(m for m in sys.modules if m == 'numpy' or m.startswith('opencl_llm_studio.engine')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
