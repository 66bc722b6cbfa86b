"""The test suite's own layout (issue 23): no test file imports another test file (shared
fixtures live in tests/conftest.py, plain helpers in tests/helpers.py and its siblings), and
fixtures are defined only in conftest.py or the test file that uses them. A test file that
imports another one runs that file's module-level code, re-registers its fixtures under the
importing file, and breaks when the other file's tests are renamed or moved."""

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _is_test_module(name: str) -> bool:
    return name.rpartition(".")[2].startswith("test_")


def cross_imports(path: Path) -> list[str]:
    """The test modules (test_*.py, by module name) that the Python file at `path` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            if node.module and _is_test_module(node.module):
                found.append(node.module)
            elif node.module in (None, "tests"):   # from tests import test_x / from . import
                found += [a.name for a in node.names if _is_test_module(a.name)]
    return found


def fixtures_defined(path: Path) -> list[str]:
    """Names of the functions decorated with pytest.fixture (called or not) in `path`."""
    def is_fixture(d):
        d = d.func if isinstance(d, ast.Call) else d
        return isinstance(d, ast.Attribute) and d.attr == "fixture"
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
            and any(is_fixture(d) for d in n.decorator_list)]


def test_no_test_file_imports_another_test_file():
    bad = {p.name: cross_imports(p) for p in sorted(TESTS.glob("*.py"))}
    bad = {name: mods for name, mods in bad.items() if mods}
    assert not bad, ("move what they share into tests/conftest.py (fixtures) or "
                     f"tests/helpers.py (plain helpers): {bad}")


def test_helper_modules_define_no_fixtures():
    """A fixture reaches a test only through conftest.py or its own file: one in a helper
    module works only where it is imported by name (an unused-looking import)."""
    helpers = [p for p in TESTS.glob("*.py")
               if not p.name.startswith("test_") and p.name != "conftest.py"]
    bad = {p.name: fixtures_defined(p) for p in helpers}
    assert not {name: f for name, f in bad.items() if f}, bad


def test_the_checks_see_every_form_of_the_faults(tmp_path):
    """The checks can fail: each form of a test-file import, and a helper's fixture, is seen."""
    bad = tmp_path / "test_x.py"
    bad.write_text("import test_kernels\nimport tests.test_model as m\n"
                   "from test_studio import window\nfrom tests.test_cli import TINY\n"
                   "from tests import test_gguf_export\nfrom tests import helpers\n"
                   "from . import test_runs\nimport pytest\n")
    assert cross_imports(bad) == ["test_kernels", "tests.test_model", "test_studio",
                                  "tests.test_cli", "test_gguf_export", "test_runs"]
    helper = tmp_path / "things.py"
    helper.write_text("import pytest\n\n@pytest.fixture(scope='session')\ndef a():\n    pass\n\n"
                      "@pytest.fixture\ndef b():\n    pass\n\ndef c():\n    pass\n")
    assert fixtures_defined(helper) == ["a", "b"]


# A whole run writes about 9 GB under pytest's temporary folder (tuned 135M runs, quantized
# copies of SmolLM2); CI's disk ran out on 2026-12-07. A passing test's tmp_path must go at its
# teardown (pyproject's tmp_path_retention_policy), which the pair below checks as it happens.
_KEPT: list[Path] = []


def test_a_passing_tests_folder_is_written(tmp_path):
    (tmp_path / "weights.bin").write_bytes(bytes(1 << 16))
    _KEPT.append(tmp_path)
    assert (tmp_path / "weights.bin").stat().st_size == 1 << 16


def test_a_passing_tests_folder_is_gone_after_it(pytestconfig):
    assert pytestconfig.getini("tmp_path_retention_policy") == "failed"
    if not _KEPT:   # run alone (-k): the test above did not run before this one
        pytest.skip("test_a_passing_tests_folder_is_written did not run first")
    assert not _KEPT[0].exists(), f"{_KEPT[0]} stayed after its test passed"
