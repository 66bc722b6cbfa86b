"""Shared fixtures. Qt runs offscreen in tests; one OpenCL runtime per session (compiles once)."""

import os
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# the kernel tuner's cache (engine/opencl/tune_cache.py): never the user's, so a plan measured on this
# machine cannot change what a test runs
os.environ["LLM_STUDIO_CACHE_DIR"] = tempfile.mkdtemp(prefix="llm-studio-test-cache-")
os.environ.pop("LLM_STUDIO_AUTOTUNE", None)  # tuning before training: only where a test asks

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def rt():
    """The test device: LLM_STUDIO_TEST_DEVICE, else the default device (PoCL CPU here)."""
    from engine.opencl.runtime import Runtime
    return Runtime(os.environ.get("LLM_STUDIO_TEST_DEVICE") or None)


@pytest.fixture(scope="session")
def rt_lanes(rt):
    """A second runtime on the test device whose row kernels share each row among 64 lanes
    (the GPU layout, whatever the device), so CI on a CPU checks that path too."""
    from engine.opencl.runtime import Runtime
    return Runtime(rt.info, row_lanes=(64, 4))


@pytest.fixture(scope="session")
def rt_one_lane(rt):
    """The test runtime with one work-item per row of the row kernels and unsplit reductions
    (the CPU layout, whatever the device): rt itself on a CPU."""
    from engine.opencl.runtime import Runtime
    return rt if rt.row_lanes == 1 else Runtime(rt.info, row_lanes=(1, 16))


@pytest.fixture(scope="session")
def texts():
    """[pretraining text, tune dialogues], bundled (tests/helpers.bundled_texts)."""
    from tests.helpers import bundled_texts
    return list(bundled_texts())


@pytest.fixture(scope="session")
def tok(texts):
    """The SentencePiece BPE tokenizer (vocab 512) of the bundled texts; files that test
    another tokenizer define their own `tok`."""
    from engine.data.tokenizer import Tokenizer
    return Tokenizer.train(texts, 512, "bpe")
