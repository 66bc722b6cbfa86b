"""Shared fixtures. Qt runs offscreen in tests; one OpenCL runtime per session (compiles once);
the studio's fixtures (`settings`, `window`) import Qt only when a test asks for them. Plain
helpers live in tests/helpers.py and its siblings; no test file imports another test file."""

import os
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# the kernel tuner's cache (engine/opencl/tune_cache.py): never the user's, so a plan measured on this
# machine cannot change what a test runs
os.environ["LLM_STUDIO_CACHE_DIR"] = tempfile.mkdtemp(prefix="llm-studio-test-cache-")
os.environ.pop("LLM_STUDIO_AUTOTUNE", None)  # tuning before training: only where a test asks

import pytest  # noqa: E402
from hypothesis import settings as hypothesis_settings  # noqa: E402

# Property tests draw the same examples on every run (a CI run never fails on a draw a local run
# did not make); HYPOTHESIS_PROFILE=explore draws new ones to hunt for failures.
hypothesis_settings.register_profile("repeatable", derandomize=True)
hypothesis_settings.register_profile("explore", derandomize=False)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session")
def rt():
    """The test device: LLM_STUDIO_TEST_DEVICE, else the default device (PoCL CPU here)."""
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    from tests.helpers import TEST_DEVICE
    return Runtime(TEST_DEVICE)


@pytest.fixture(scope="session")
def rt_lanes(rt):
    """A second runtime on the test device whose row kernels share each row among 64 lanes
    (the GPU layout, whatever the device), so CI on a CPU checks that path too."""
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    return Runtime(rt.info, row_lanes=(64, 4))


@pytest.fixture(scope="session")
def rt_one_lane(rt):
    """The test runtime with one work-item per row of the row kernels and unsplit reductions
    (the CPU layout, whatever the device): rt itself on a CPU."""
    from opencl_llm_studio.engine.opencl.runtime import Runtime
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
    from opencl_llm_studio.engine.data.tokenizer import Tokenizer
    return Tokenizer.train(texts, 512, "bpe")


@pytest.fixture
def settings(tmp_path):
    """The studio's QSettings in an ini file of the test's own; run folders under tmp_path/runs."""
    from PySide6.QtCore import QSettings
    s = QSettings(str(tmp_path / "studio.ini"), QSettings.IniFormat)
    s.setValue("autosave/runs_dir", str(tmp_path / "runs"))  # run folders stay in the test's
    return s


@pytest.fixture
def window(qtbot, settings):
    """The main window on the test device, shown at its usual size; closed at teardown
    (closeEvent stops any run and joins the worker thread)."""
    from opencl_llm_studio.studio.ui.window.main_window import MainWindow
    from tests.helpers import TEST_DEVICE
    win = MainWindow(device=TEST_DEVICE, settings=settings)
    qtbot.addWidget(win)
    win.resize(1400, 880)
    win.show()
    qtbot.waitExposed(win)
    return win


@pytest.fixture(scope="session")
def open_folders(tmp_path_factory):
    """{family: transformers folder} of every open family and the qwen2 tokenizer's
    (tests/open_models.py; built once per test session)."""
    pytest.importorskip("transformers")
    from tests.open_models import TOKENIZER_FAMILIES, build
    root = tmp_path_factory.mktemp("open_models")
    return {f: build(f, root / f) for f in TOKENIZER_FAMILIES}


@pytest.fixture(scope="session")
def open_ggufs(open_folders, tmp_path_factory):
    """{family: F32 GGUF} exported from each folder's import (engine.files.gguf_export)."""
    from opencl_llm_studio.engine.files.gguf_export import export_gguf
    from opencl_llm_studio.engine.files.hf.load import import_hf
    root = tmp_path_factory.mktemp("open_ggufs")
    return {f: export_gguf(import_hf(p)[0], root / f"{f}.gguf").path
            for f, p in open_folders.items()}


@pytest.fixture(scope="session")
def lora_base_gguf(open_folders, tmp_path_factory):
    """A Q8_0 GGUF of the small smollm2-family model (open_folders): the quantized base LoRA
    tunes (tests/test_lora_run.py, tests/test_studio_lora.py)."""
    from opencl_llm_studio.engine.files.gguf_export import export_gguf
    from opencl_llm_studio.engine.files.hf.load import import_hf
    root = tmp_path_factory.mktemp("lora_base")
    return export_gguf(import_hf(open_folders["smollm2"])[0], root / "base-q8.gguf",
                       dtype="q8_0").path


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct Q4_1 GGUF (tests/real_model.py)."""
    from tests.real_model import smollm2_path
    return smollm2_path()


@pytest.fixture(scope="session")
def f32_copy(smollm2, tmp_path_factory):
    """The Q4_1 file dequantized by llama.cpp to F32: the weights the engine runs, for
    llama.cpp to run them too."""
    from tests.real_model import llama_cpp_module, quantize
    return quantize(smollm2, tmp_path_factory.mktemp("f32") / "smollm2-f32.gguf",
                    llama_cpp_module().LLAMA_FTYPE_ALL_F32)
