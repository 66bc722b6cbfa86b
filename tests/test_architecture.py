"""The architecture contracts of pyproject.toml ([tool.importlinter]) hold, and the headless
commands run without loading Qt (the engine and the CLI must work on a machine with no display)."""

import ast
import json
import os
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


@pytest.mark.parametrize("module,line", [
    ("opencl_llm_studio/engine/errors.py", "import PySide6"),
    ("opencl_llm_studio/studio/run_folder.py", "from opencl_llm_studio.studio.ui import widgets"),
    ("opencl_llm_studio/studio/runs.py", "import pyqtgraph"),
    ("opencl_llm_studio/studio/cli/runs.py", "from PySide6 import QtGui"),
    ("opencl_llm_studio/studio/cli/train.py", "import opencl_llm_studio.studio.ui.app"),
])
def test_a_qt_import_breaks_the_contracts(tmp_path, module, line):
    """The contracts can fail: a copy of the tree where the engine, the run folders, the run
    history or the command line imports Qt (or the window) is refused."""
    r = _lint_with(tmp_path, module, line)
    assert r.returncode != 0, r.stdout
    assert "BROKEN" in r.stdout


def _lint_with(tmp_path: Path, module: str, text: str) -> subprocess.CompletedProcess:
    """lint-imports on a copy of the tree with `text` appended to `module` (made if absent)."""
    for name in ("opencl_llm_studio", "pyproject.toml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    bad = tmp_path / module
    bad.write_text((bad.read_text() if bad.exists() else "") + f"\n{text}  # noqa\n")
    return subprocess.run([_lint_imports(), "--no-cache"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})


TYPE_ONLY = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    "


@pytest.mark.parametrize("module,line,contract", [
    # the imports that tied the engine into one knot before the layers (issue 35), put back
    ("opencl_llm_studio/engine/opencl/ops.py", "from opencl_llm_studio.engine.model import activations",
     "layers"),
    ("opencl_llm_studio/engine/opencl/tune_cache.py", "from opencl_llm_studio.engine.model import gemm_tune",
     "layers"),
    ("opencl_llm_studio/engine/config.py", "from opencl_llm_studio.engine.training.schedule import StageSchedule",
     "layers"),
    ("opencl_llm_studio/engine/config.py", "from opencl_llm_studio.engine.model.params import ParamTable",
     "layers"),
    ("opencl_llm_studio/engine/data/corpus.py", "from opencl_llm_studio.engine.training import evaluate",
     "layers"),
    ("opencl_llm_studio/engine/files/hf/load.py",
     "def f():\n    from opencl_llm_studio.engine.training.session import TrainingSession", "layers"),
    # an import for annotations only is still an import
    ("opencl_llm_studio/engine/errors.py", TYPE_ONLY + "from opencl_llm_studio.engine.config import ModelConfig",
     "layers"),
    # leaves on one line are independent; a new module must take its place in the list
    ("opencl_llm_studio/engine/progress.py", "from opencl_llm_studio.engine import fsutil", "layers"),
    ("opencl_llm_studio/engine/newthing.py", "X = 1", "layers"),
    ("opencl_llm_studio/engine/model/transformer.py", "from opencl_llm_studio.engine.model import gemm_tune",
     "tuner"),
])
def test_an_import_against_the_layers_breaks_them(tmp_path, module, line, contract):
    """The layers contract can fail: each import a layer may not make, put into a copy of the
    tree, is refused by name."""
    r = _lint_with(tmp_path, module, line)
    assert r.returncode != 0, r.stdout
    name = {"layers": "The engine's layers: each imports only the layers below it",
            "tuner": "The tuner that times a model's products sits above the model: no model "
                     "module imports it"}[contract]
    assert f"{name} BROKEN" in " ".join(r.stdout.split()), r.stdout   # lint-imports wraps lines


QT_PACKAGES = ("PySide6", "pyqtgraph", "shiboken6")
NO_QT = """
import json, sys
from opencl_llm_studio.studio.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:   # --help, a bad argument
    code = e.code
print("modules:", json.dumps([code, sorted(m for m in sys.modules
                                          if m.split(".")[0] in %r)]))
""" % (QT_PACKAGES,)
TINY = ["--d-model", "32", "--n-layer", "1", "--n-head", "2", "--context-length", "16",
        "--vocab-size", "320", "--batch-size", "2", "--quiet", "--no-tune"]


def _without_qt(argv: list[str], home: Path) -> int:
    """Run `llm-studio ARGV` in a fresh interpreter; its exit status. Fails when any Qt module
    (PySide6, pyqtgraph, shiboken6) was loaded by then."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_CONFIG_HOME=str(home / "config"),
               XDG_DATA_HOME=str(home / "data"))
    r = subprocess.run([sys.executable, "-c", NO_QT, *argv], cwd=ROOT, capture_output=True,
                       text=True, timeout=600, env=env)
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    assert last.startswith("modules: "), r.stdout + r.stderr
    code, qt = json.loads(last.removeprefix("modules: "))
    assert qt == [], f"`llm-studio {' '.join(argv)}` loaded {len(qt)} Qt modules: {qt[:4]}"
    return code


def test_runs_plot_and_devices_never_load_qt(tmp_path):
    """`llm-studio runs` loaded PySide6.QtWidgets to print a text table (the runs folder came
    from QSettings, the wall time's format from the Runs panel) and `plot` drew with Qt
    offscreen; neither loads Qt now, nor do `devices`, `--help` or a refused command."""
    from tests.runs_helpers import make_run
    run = make_run(tmp_path / "runs", "a")
    assert _without_qt(["runs", str(tmp_path / "runs")], tmp_path) == 0
    assert _without_qt(["runs"], tmp_path) == 0   # the default runs folder, none made yet: empty
    assert _without_qt(["plot", str(run), "-o", str(tmp_path / "c.png")], tmp_path) == 0
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _without_qt(["devices"], tmp_path) in (0, 1)   # 1: no OpenCL device
    assert _without_qt(["--help"], tmp_path) == 0
    assert _without_qt(["chat", str(tmp_path / "nowhere")], tmp_path) == 2


def test_train_continue_and_sample_never_load_qt(tmp_path):
    """A short run on the bundled corpus, then --continue, then sample: no Qt module loaded."""
    out = str(tmp_path / "run")
    assert _without_qt(["train", "--out", out, "--steps", "2", *TINY], tmp_path) == 0
    assert _without_qt(["train", "--out", out, "--continue", "--steps", "3", "--quiet"],
                       tmp_path) == 0
    assert _without_qt(["sample", out, "--max-tokens", "2"], tmp_path) == 0


# ------------------------------------------------------------------ import circles
def _project_modules(root: Path) -> dict[str, Path]:
    """"opencl_llm_studio.engine.config" -> its file, for every module of the package."""
    mods = {}
    for pkg in ("opencl_llm_studio",):
        for f in sorted((root / pkg).rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return mods


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the project modules it imports, at module level, inside a function or under
    `if TYPE_CHECKING:` (an import for annotations only is still a dependency a reader follows)."""
    mods = _project_modules(root)

    def owner(name: str) -> str | None:   # "engine.config.ModelConfig" -> "engine.config"
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(owner(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                deps.update(owner(f"{base}.{a.name}") if f"{base}.{a.name}" in mods
                            else owner(base) for a in node.names)
        graph[name] = deps - {None, name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan): each is an import
    circle (a imports b imports ... imports a)."""
    index, low, stack, found = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    """No two project modules import each other, directly or around a ring, at module level,
    inside a function or for annotations only (a deferred or type-only import hides a circle
    from Python, not from a reader)."""
    graph = import_graph(ROOT)
    assert {"opencl_llm_studio.engine.config", "opencl_llm_studio.studio.run_folder"} <= set(graph)
    found = circles(graph)
    assert found == [], "\n".join(
        " <-> ".join(group) + ": " + "; ".join(f"{a} imports {sorted(graph[a] & set(group))}"
                                             for a in group) for group in found)


def test_the_circle_finder_sees_deferred_and_relative_imports(tmp_path):
    """The finder can fail: a function-level import back, a relative one and one under
    `if TYPE_CHECKING:` are circles."""
    top = tmp_path / "opencl_llm_studio"
    for pkg in ("engine", "studio"):
        (top / pkg).mkdir(parents=True)
        (top / pkg / "__init__.py").write_text("")
    (top / "engine" / "a.py").write_text("from opencl_llm_studio.engine.b import x\n")
    (top / "engine" / "b.py").write_text("def x():\n    from opencl_llm_studio.engine import a\n")
    (top / "engine" / "c.py").write_text("from .d import y\n")
    (top / "engine" / "d.py").write_text("from . import c\n")
    (top / "studio" / "e.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from opencl_llm_studio.studio import f\n")
    (top / "studio" / "f.py").write_text("import opencl_llm_studio.studio.e\n")
    assert circles(import_graph(tmp_path)) == [["opencl_llm_studio.engine.a", "opencl_llm_studio.engine.b"],
                                               ["opencl_llm_studio.engine.c", "opencl_llm_studio.engine.d"],
                                               ["opencl_llm_studio.studio.e", "opencl_llm_studio.studio.f"]]


# ------------------------------------------------------------------ size and complexity
MAX_CLASS_LINES = 350   # a class longer than this holds more than one job (issue 35)
MAX_COMPLEXITY = 20     # radon's rank C ends at 20; D (21-30) is a function a reader cannot hold


def _package_trees():
    for path in sorted((ROOT / "opencl_llm_studio").rglob("*.py")):
        yield path.relative_to(ROOT), path.read_text(encoding="utf-8")


def long_classes(trees) -> list[str]:
    """'path: Class N lines' for each class over MAX_CLASS_LINES lines."""
    found = []
    for rel, source in trees:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    found.append(f"{rel}: {node.name} {lines} lines")
    return found


def complex_functions(trees) -> list[str]:
    """'path: function N' for each function or method whose cyclomatic complexity (radon) is
    over MAX_COMPLEXITY."""
    radon = pytest.importorskip("radon.complexity")
    return [f"{rel}: {b.fullname} {b.complexity}" for rel, source in trees
            for b in radon.cc_visit(source) if b.complexity > MAX_COMPLEXITY]


def test_no_class_is_over_350_lines():
    assert long_classes(_package_trees()) == []


def test_no_function_is_at_radon_d_or_worse():
    assert complex_functions(_package_trees()) == []


def test_the_size_checks_can_fail():
    """A class of 351 lines and a function of 21 branches are found."""
    big = "class Big:\n" + "    x = 1\n" * 350
    branchy = "def f(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n"
                                      for i in range(20))
    trees = [(Path("big.py"), big), (Path("branchy.py"), branchy)]
    assert long_classes(trees) == ["big.py: Big 351 lines"]
    assert complex_functions(trees) == ["branchy.py: f 21"]
