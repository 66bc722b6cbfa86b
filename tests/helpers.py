"""Helpers several test files share: the bundled texts, the test device, a tiny model config,
the command line's tiny-model flags, a run's metrics.jsonl, a trained session (fixtures built on
them live in tests/conftest.py; run folders in tests/runs_helpers.py; kernel checks in
tests/kernel_helpers.py; GGUF bundles in tests/gguf_helpers.py; the studio in
tests/studio_helpers.py). No test file imports another test file (tests/test_architecture.py)."""

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from opencl_llm_studio.engine.config import ModelConfig, SamplingParams, TrainConfig
from opencl_llm_studio.engine.data.dialogue import encode_prompt
from opencl_llm_studio.engine.data.textio import bundled_corpus, read_text

RESOURCES = bundled_corpus("pretrain").parent  # the bundled texts (engine.data.textio)
TEST_DEVICE = os.environ.get("LLM_STUDIO_TEST_DEVICE") or None  # None: the default device

# `llm-studio train` flags for a model that trains in seconds on a CPU (tests/test_cli.py)
TINY = ["--d-model", "32", "--n-layer", "1", "--n-head", "2", "--context-length", "32",
        "--vocab-size", "320", "--batch-size", "4", "--checkpoint-every", "10", "--quiet"]


def bundled_texts() -> tuple[str, str]:
    """(pretraining text, tune dialogues) as bundled in resources/."""
    return (read_text(RESOURCES / "pretrain.txt"),
            read_text(RESOURCES / "tune.txt", "tune dialogues"))


def tiny_config(**kw) -> ModelConfig:
    """A model small enough for float64 reference checks; odd head count and hidden size."""
    base = dict(vocab_size=300, d_model=24, n_layer=2, n_head=3, context_length=16, ffn_dim=40)
    return ModelConfig(**{**base, **kw})


@contextmanager
def module_scratch(tmp_path_factory, name: str):
    """A folder from pytest's tmp_path_factory, removed when the with-block ends: for module
    fixtures that write gigabytes (a tuned 135M run's checkpoints are 2 GB), which pytest keeps
    to the session's end, so CI's disk holds only the running module's."""
    root = tmp_path_factory.mktemp(name)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def metrics(run: Path) -> list[dict]:
    """The records of a run folder's metrics.jsonl, one dict per line."""
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def metrics_steps(run: Path) -> list[int]:
    """The step of each record in a run folder's metrics.jsonl."""
    return [r["step"] for r in metrics(run)]


def trained_session(rt, model_cfg: ModelConfig, train_cfg: TrainConfig):
    """A TrainingSession on the bundled texts, trained to its last step on runtime rt."""
    from opencl_llm_studio.engine.training.opening import create_session
    s = create_session(model_cfg, train_cfg, *bundled_texts(), runtime=rt)
    for _ in s.train():
        pass
    return s


NEAR_TIE = 0.01   # logits closer than this: F32 runtimes (llama.cpp, the engine, its runs) differ


def first_near_tie(s, msgs, max_new_tokens: int = 40) -> str | None:
    """The greedy answer's text before its first step whose top two logits are within
    NEAR_TIE (where an argmax may go either way), or None when there is no such step
    (session s; msgs: engine.data.dialogue.Message list)."""
    prompt = encode_prompt(s.tokenizer, msgs, s.chat_format)
    ids = s.generate_ids(prompt, max_new_tokens, SamplingParams(greedy=True))
    seq = (prompt + ids + [s.tokenizer.eos_id])[:s.model_config.context_length]
    logits = s.model.logits(np.array([seq], np.int32))[0]
    for i in range(len(prompt) - 1, len(seq) - 1):
        top = np.sort(logits[i])[-2:]
        if top[1] - top[0] < NEAR_TIE:
            return s.tokenizer.decode(seq[len(prompt):i])
    return None


# ---------------------------------------------------------------- LoRA on a quantized base

def quant_tensors(cfg, types, seed=0):
    """{name: tensor-like} of random weights quantized per `types` (name part -> type; norms
    F32), and the float weights they dequantize to."""
    from types import SimpleNamespace

    import gguf

    import tests.reference as ref
    T = gguf.GGMLQuantizationType
    w = ref.init_weights(cfg, seed=seed, std=0.05)
    tensors, exact = {}, {}
    for name, v in w.items():
        kind = T.F32 if v.ndim == 1 else next((t for k, t in types.items() if k in name),
                                              types["*"])
        data = gguf.quants.quantize(np.asarray(v, np.float32), kind)
        tensors[name] = SimpleNamespace(name=name, tensor_type=kind, data=data)
        exact[name] = gguf.quants.dequantize(data, kind).reshape(v.shape).astype(np.float32)
    return tensors, exact


def quant_lora_pair(rt, cfg, types, lora, seed=0):
    """(LoraModel over a QuantBase of `types`, the same over its dequantized float weights,
    those float weights), with the same random adapters (tests of LoRA on a quantized base)."""
    from opencl_llm_studio.engine.model.lora import LoraModel
    from opencl_llm_studio.engine.model.lora_base import FlatBase
    from opencl_llm_studio.engine.model.params import ParamTable
    from opencl_llm_studio.engine.model.quant_base import QuantBase
    tensors, exact = quant_tensors(cfg, types, seed)
    q = LoraModel(rt, cfg, QuantBase(rt, cfg, tensors), lora, seed=seed)
    f = LoraModel(rt, cfg, FlatBase(rt, cfg, ParamTable(cfg).flatten(exact)), lora, seed=seed)
    rng = np.random.default_rng(seed)
    ad = {n: (v if n.endswith("lora_a") else rng.normal(0, 0.05, v.shape))
          for n, v in q.adapters().items()}
    for m in (q, f):
        m.write_flat("params", m.table.flatten(ad))
    return q, f, exact
