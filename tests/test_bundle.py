"""The Linux desktop bundle (packaging/build_linux.sh) runs on a machine without Python: started
with an empty environment (`env -i`: no virtual environment, no PATH, no PYTHONPATH), it prints
its version, lists PoCL's CPU device, trains a few steps, exports a GGUF, answers a chat and
saves a screenshot of its window offscreen.

The bundle takes minutes to build, so the test uses one already built: .ci/run builds it and
names it in LLM_STUDIO_BUNDLE (CI fails without it); elsewhere the test is skipped unless you
build one (`bash packaging/build_linux.sh /tmp/bundle`, then LLM_STUDIO_BUNDLE=/tmp/bundle).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from opencl_llm_studio import __version__
from tests.helpers import TINY

BUNDLE = os.environ.get("LLM_STUDIO_BUNDLE")


@pytest.fixture(scope="module")
def bundle() -> Path:
    if not BUNDLE:
        if os.environ.get("CI"):
            pytest.fail("CI builds the desktop bundle (.ci/run) and names it in LLM_STUDIO_BUNDLE")
        pytest.skip("no desktop bundle built (bash packaging/build_linux.sh OUT; "
                    "LLM_STUDIO_BUNDLE=OUT pytest tests/test_bundle.py)")
    if not sys.platform.startswith("linux"):
        pytest.skip("the bundle built here is the Linux one")
    return Path(BUNDLE)


def _run(bundle: Path, tmp_path: Path, *args, env=()) -> subprocess.CompletedProcess:
    """`env -i HOME=... [env] OUT/llm-studio ARGS` from a folder of its own."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    r = subprocess.run(["env", "-i", f"HOME={home}", *env, str(bundle / "llm-studio"), *args],
                       cwd=tmp_path, capture_output=True, text=True, timeout=900)
    return r


def test_the_bundle_is_whole(bundle):
    assert os.access(bundle / "llm-studio", os.X_OK)
    desktop = (bundle / "opencl-llm-studio.desktop").read_text()
    assert f"Exec={bundle / 'llm-studio'}" in desktop and "Icon=" in desktop
    assert (bundle / "opencl-llm-studio.png").stat().st_size > 0
    internal = bundle / "opencl-llm-studio" / "_internal"
    assert not any(internal.glob("torch")), "PyTorch does not belong in the bundle"
    assert "size:" in (bundle / "BUILD-INFO.txt").read_text()


def test_the_bundle_runs_from_an_empty_environment(bundle, tmp_path):
    r = _run(bundle, tmp_path, "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"llm-studio {__version__}", r
    r = _run(bundle, tmp_path, "devices")
    assert r.returncode == 0 and "Portable Computing Language" in r.stdout, r.stdout + r.stderr
    run, gguf = tmp_path / "run", tmp_path / "model.gguf"
    r = _run(bundle, tmp_path, "train", "--out", str(run), "--steps", "4", "--tune-steps", "2",
             *TINY)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (run / "checkpoint.npz").exists()
    r = _run(bundle, tmp_path, "export", str(run), str(gguf))
    assert r.returncode == 0 and gguf.stat().st_size > 0, r.stderr[-3000:]
    r = _run(bundle, tmp_path, "chat", str(run), "-m", "What is the capital of France?",
             "--max-tokens", "4")
    assert r.returncode == 0, r.stderr[-3000:]
    # a run by name lands in the runs folder under the (empty environment's) home
    r = _run(bundle, tmp_path, "train", "--out", "named", "--steps", "2", "--no-tune", *TINY)
    assert r.returncode == 0, r.stderr[-3000:]
    r = _run(bundle, tmp_path, "runs")
    assert r.returncode == 0 and "named" in r.stdout, r.stdout + r.stderr


def test_the_bundle_window_opens_offscreen(bundle, tmp_path):
    shot = tmp_path / "window.png"
    r = _run(bundle, tmp_path, "--screenshot", str(shot), env=["QT_QPA_PLATFORM=offscreen"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000   # a drawn window, not an empty picture
