"""The app installs like real software (issue 32): one import package of its own, so a package
named `kernels` (PyPI's, which transformers 5 installs), `engine`, `studio` or `resources` beside
it changes nothing; the wheel that `python -m build` makes installs and runs from any folder;
a missing optional extra is a message with the pip command, not a traceback."""

import importlib.util
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.helpers import TINY

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "opencl_llm_studio"
GENERIC = ("kernels", "engine", "studio", "resources")   # names any package may own
RUN = ["--steps", "3", "--tune-steps", "2", *TINY]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_project_installs_one_top_level_import_name():
    """pyproject's package list finds opencl_llm_studio and its subpackages, nothing else (the
    tree at 5c921bd installed engine, studio, kernels and resources as top-level names)."""
    from setuptools import find_packages
    include = _pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    found = find_packages(where=str(ROOT), include=include)
    assert {name.split(".")[0] for name in found} == {PACKAGE}
    for part in ("engine", "studio", "kernels", "resources"):
        assert f"{PACKAGE}.{part}" in found


def _foreign_packages(folder: Path) -> None:
    """Packages with our old generic names, each saying it is a stranger's."""
    for name in GENERIC:
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(f"OWNER = 'someone else ({name})'\n")


def _cli(args, env, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", PACKAGE, *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def _train_export_chat(tmp_path: Path, env: dict) -> None:
    run, gguf = tmp_path / "run", tmp_path / "out" / "model.gguf"
    for args in (["train", "--out", str(run), *RUN], ["export", str(run), str(gguf)],
                 ["chat", str(run), "-m", "What is the capital of France?", "--max-tokens", "4"]):
        r = _cli(args, env, tmp_path)
        assert r.returncode == 0, (args, r.stderr[-2000:])
    assert gguf.stat().st_size > 0


def test_packages_named_kernels_engine_studio_resources_do_not_shadow_ours(tmp_path):
    """Strangers' `kernels`, `engine`, `studio` and `resources` first on sys.path: train,
    export and chat still run, and `import kernels` gives theirs (on the old tree every command
    failed: FileNotFoundError .../kernels/common.h)."""
    foreign = tmp_path / "foreign"
    _foreign_packages(foreign)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(foreign), str(ROOT)]))
    _train_export_chat(tmp_path, env)
    probe = subprocess.run([sys.executable, "-c", "import kernels, opencl_llm_studio.kernels; "
                            "print(kernels.OWNER)"], env=env, capture_output=True, text=True)
    assert probe.stdout.strip() == "someone else (kernels)", probe.stderr


def test_beside_transformers_and_pypi_kernels_the_app_runs(tmp_path):
    """The environment a user gets today: transformers 5 with PyPI's `kernels` installed (the
    [test] extra has both). Their `import kernels` is theirs, and ours still trains, exports and
    chats."""
    pytest.importorskip("transformers")
    spec = importlib.util.find_spec("kernels")
    if spec is None:
        pytest.skip("PyPI's kernels is not installed (the [test] extra installs it)")
    origin = Path(spec.origin).resolve()
    assert not origin.is_relative_to(ROOT / PACKAGE), origin
    assert "site-packages" in origin.parts, origin
    _train_export_chat(tmp_path, dict(os.environ))


def _build(tmp_path: Path) -> tuple[Path, Path]:
    pytest.importorskip("build")
    dist = tmp_path / "dist"
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist),
                        str(ROOT)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (wheel,), (sdist,) = dist.glob("*.whl"), dist.glob("*.tar.gz")
    return wheel, sdist


def test_the_wheel_installs_and_runs_from_any_folder(tmp_path):
    """`python -m build` makes a wheel and an sdist; the wheel holds one top-level package with
    the kernels and corpora as package data, and installed on its own (not the checkout) it
    lists devices, trains, exports and chats from a folder far from the checkout."""
    wheel, sdist = _build(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {PACKAGE}, tops
    for data in ("kernels/common.h", "kernels/matmul.cl", "resources/pretrain.txt",
                 "resources/tune.txt", "resources/icon.svg"):
        assert f"{PACKAGE}/{data}" in names, data
    assert sdist.stat().st_size > 0
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                        "--target", str(target), str(wheel)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, PYTHONPATH=str(target))   # the checkout is not on the path
    where = subprocess.run([sys.executable, "-c", f"import {PACKAGE}; print({PACKAGE}.__file__)"],
                           env=env, cwd=elsewhere, capture_output=True, text=True)
    assert Path(where.stdout.strip()).is_relative_to(target), where
    for args in (["--version"], ["devices"]):
        r = _cli(args, env, elsewhere)
        assert r.returncode == 0, (args, r.stderr)
    _train_export_chat(elsewhere, env)


BLOCK = """
import sys
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {module!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Missing())
from opencl_llm_studio.studio.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    from opencl_llm_studio.studio.cli import main
    out = tmp_path_factory.mktemp("extras") / "run"
    assert main(["train", "--out", str(out), *RUN]) == 0
    return out


@pytest.mark.parametrize("module,extra,command", [
    ("safetensors", "hf", ["scale-out", "{run}", "{tmp}/big-run"]),
    ("safetensors", "hf", ["export", "{run}", "{tmp}/hf", "--format", "hf"]),
    ("tokenizers", "hf", ["export", "{run}", "{tmp}/hf2", "--format", "hf"]),
    ("tensorboardX", "tensorboard", ["train", "--out", "{tmp}/tb", "--tensorboard", *RUN]),
])
def test_a_missing_extra_is_named_with_its_pip_command(small_run, tmp_path, module, extra,
                                                         command):
    """Without an optional extra's package, a command that needs it ends with exit 2, the
    package's name and `pip install "opencl-llm-studio[EXTRA]"`, never a traceback (scale-out
    without safetensors once ended in ModuleNotFoundError)."""
    argv = [a.format(run=small_run, tmp=tmp_path) for a in command]
    r = subprocess.run([sys.executable, "-c", BLOCK.format(module=module), *argv],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert f'pip install "opencl-llm-studio[{extra}]"' in r.stderr, r.stderr
    assert module in r.stderr


def test_every_optional_dependency_has_its_extra_named():
    """Each package of pyproject's [hf], [torch] and [tensorboard] extras is in
    engine.extras.EXTRAS with the extra it comes with, so its absence is always explained."""
    from opencl_llm_studio.engine.extras import EXTRAS, missing_extra
    extras = _pyproject()["project"]["optional-dependencies"]
    for extra in ("hf", "torch", "tensorboard"):
        for requirement in extras[extra]:
            dist = requirement.split(">")[0].split("=")[0].split("<")[0].strip()
            assert EXTRAS.get(dist, (None,))[0] == extra, (extra, dist)
            err = missing_extra(ModuleNotFoundError("x", name=f"{dist}.sub"))
            assert f"[{extra}]" in err.cli_hint
    assert missing_extra(ModuleNotFoundError("x", name="numpy")) is None   # a broken install
    assert missing_extra(ValueError("x")) is None
