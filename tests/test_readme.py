"""Every command in README.md's examples runs as written: each `llm-studio` line of its bash
blocks runs here in order, in a temporary folder, with small model settings added to new
`train` runs; the lines that need what a test machine lacks (network, 8 GPUs, a display) are
each run by a named test; the Python example runs too. A README line that is neither fails."""

import re
import shlex
import shutil
from pathlib import Path

import pytest

from studio.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
SMALL = ["--d-model", "32", "--n-layer", "1", "--n-head", "2", "--context-length", "32",
         "--vocab-size", "320", "--batch-size", "4", "--steps", "20", "--tune-steps", "4",
         "--quiet"]
TEST_COMMAND = 'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[test]" && pytest'
# README lines run by another test (it names the test; the test must exist)
ELSEWHERE = {
    'python3 -m venv .venv && . .venv/bin/activate && pip install -e . && llm-studio':
        "tests/test_preflight.py::test_a_working_display_starts_the_window",
    TEST_COMMAND: ".ci/run",
    "cd big-run && torchrun --standalone --nproc_per_node=8 train_ddp.py --out continued "
    "--tune-steps 2000": "tests/test_hf.py::test_scale_out_continues_under_torchrun_and_comes_back",
    "llm-studio import big-run/continued runs/back":
        "tests/test_hf.py::test_scale_out_continues_under_torchrun_and_comes_back",
}


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


def command_lines() -> list[str]:
    """The commands of the bash blocks, comments removed."""
    lines = []
    for block in blocks("bash"):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line:
                lines.append(line)
    return lines


def test_every_command_is_run_somewhere():
    for line in command_lines():
        assert line.startswith("llm-studio ") or line in ELSEWHERE, \
            f"README command not run by any test: {line!r}"
    for where in set(ELSEWHERE.values()):
        path, _, name = where.partition("::")
        text = (ROOT / path).read_text(encoding="utf-8")
        assert not name or f"def {name}(" in text, where


def test_the_test_command_is_what_ci_runs():
    assert TEST_COMMAND in command_lines()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").replace("install -q ", "install ")
    venv, activate, rest = TEST_COMMAND.split(" && ", 2)   # -q above only quiets pip
    assert f"\n{venv}\n{activate}\n" in ci and f"\n{rest}\n" in ci


def test_the_headless_commands_run_as_written(tmp_path, monkeypatch, capsys):
    pytest.importorskip("safetensors")
    pytest.importorskip("tensorboardX")
    import studio.cli_runs
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(studio.cli_runs, "default_root", lambda: tmp_path / "runs")
    for line in command_lines():
        if line in ELSEWHERE:
            continue
        argv = shlex.split(line)[1:]
        if argv[0] == "train" and "--continue" not in argv:
            argv += SMALL
        if argv[0] == "plot":     # the README's runs/a and runs/b: two runs to compare
            for name in ("a", "b"):
                if not (tmp_path / "runs" / name).exists():
                    shutil.copytree(tmp_path / "runs" / "first", tmp_path / "runs" / name)
        assert main(argv) == 0, (line, capsys.readouterr().err)
    for made in ("runs/first/checkpoint.npz", "model.gguf", "model.Modelfile",
                 "hf-model/config.json", "big-run/train_ddp.py", "curves.png",
                 "runs/c/tensorboard"):
        assert (tmp_path / made).exists(), made


def test_the_q8_0_example_runs(tok, tmp_path, monkeypatch):
    """The README's llama-cpp-python recipe for repacking off loads and runs a Q8_0 export."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from engine.gguf_export import export_gguf
    from test_gguf_export import make_bundle
    (code,) = blocks("python")
    export_gguf(make_bundle(tok), tmp_path / "model.gguf", "q8_0")
    monkeypatch.chdir(tmp_path)
    # the example replaces llama-cpp-python's defaults; monkeypatch puts them back afterwards
    monkeypatch.setattr(llama_cpp.llama_cpp, "llama_model_default_params",
                        llama_cpp.llama_cpp.llama_model_default_params)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts is False
    out = scope["llm"]("Paris is", max_tokens=3, temperature=0)
    assert out["choices"][0]["text"] is not None
