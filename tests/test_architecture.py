"""The architecture contracts of pyproject.toml ([tool.importlinter]) hold, and the headless
commands run without loading Qt (the engine and the CLI must work on a machine with no display)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports() -> str:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (it is in the [test] extra)")
    return exe


def test_import_contracts_are_kept():
    r = subprocess.run([_lint_imports(), "--no-cache"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "broken" in r.stdout and " 0 broken" in r.stdout, r.stdout


def test_a_qt_import_in_the_engine_breaks_the_contract(tmp_path):
    """The contract can fail: a copy of the tree whose engine imports PySide6 is refused."""
    for name in ("engine", "studio", "pyproject.toml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    bad = tmp_path / "engine" / "errors.py"
    bad.write_text(bad.read_text() + "\nimport PySide6  # noqa\n")
    env_path = f"{tmp_path}"
    r = subprocess.run([_lint_imports(), "--no-cache"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    assert r.returncode != 0, r.stdout
    assert "BROKEN" in r.stdout


HEADLESS = """
import sys
from studio import cli
for argv in (["devices"], ["--help"]):
    try:
        cli.main(argv)
    except SystemExit:
        pass
import studio.run_folder
print(__import__("json").dumps(sorted(m for m in sys.modules
                                      if m.split(".")[0] in ("PySide6", "pyqtgraph", "shiboken6"))))
"""


def test_headless_commands_never_load_qt():
    r = subprocess.run([sys.executable, "-c", HEADLESS], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []
