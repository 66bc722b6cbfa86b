"""Import a pretrained open model's GGUF (llama architecture: SmolLM2, TinyLlama, Llama 3.x) into a
ModelBundle the engine trains, chats with and exports.

Keys (gguf-py constants.Keys, as llama.cpp's converter writes them) -> ModelConfig: embedding
length, block count, head count and head_count_kv (grouped-query attention), feed-forward
length, layer_norm_rms_epsilon, rope.freq_base, context length; llama3 RoPE scaling from the
`rope_freqs.weight` tensor (engine.model.rope_scaling); tied embeddings when there is no
`output.weight`. Tensors keep their GGUF names, which are the engine's ParamTable names, and their
rows: GGUF q/k rows are llama.cpp's RoPE pair order, which is the engine's. Every tensor type
gguf-py reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_x, K-quants, ...) is dequantized to float32
with gguf.quants.dequantize. Models the engine cannot run are refused with the reason.
"""

from __future__ import annotations

from typing import Any

import gguf
import numpy as np

from opencl_llm_studio.engine.config import ModelConfig, swiglu_hidden_dim
from opencl_llm_studio.engine.errors import ModelImportError, StudioError
from opencl_llm_studio.engine.files.gguf_export import ModelBundle
from opencl_llm_studio.engine.model.params import ParamTable

_RUNS = ("The engine runs the llama architecture (SmolLM2, TinyLlama, Llama 3.x): "
         "RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases.")
# what other architectures have that the engine lacks
_WHY = {"qwen2": "bias vectors on the q/k/v projections", "qwen3": "q/k norms",
        "gemma": "GeGLU and embedding scaling", "gemma2": "logit soft-capping and sliding window",
        "gemma3": "sliding-window attention", "phi3": "fused projections with partial RoPE",
        "mistral": "sliding-window attention", "gpt2": "LayerNorm, GELU and learned positions"}


def fields_getter(fields):
    """get(key, default=None) over a GGUFReader's fields (their Python values)."""
    def get(key: str, default: Any = None) -> Any:
        f = fields.get(key)
        return default if f is None else f.contents()
    return get


def refuse_architecture(arch: str, fname: str) -> None:
    """ModelImportError unless `arch` is llama."""
    if arch != "llama":
        why = _WHY.get(arch)
        raise ModelImportError(f"{fname} is a {arch!r} model" + (f", which has {why}" if why else "")
                               + "; the engine cannot run it.", _RUNS)


def open_config(get, tensors: dict, fname: str) -> ModelConfig:
    """ModelConfig of a llama GGUF's keys and tensors (a dict name -> ReaderTensor).
    Raises ModelImportError naming what the engine cannot run."""
    from opencl_llm_studio.engine.model.rope_scaling import llama3_from_factors
    a = "llama."
    need = lambda key: _need(get, a + key, fname)    # noqa: E731
    d, n_head = int(need("embedding_length")), int(need("attention.head_count"))
    n_kv = int(get(a + "attention.head_count_kv", n_head))
    head_dim = d // n_head if n_head else 0
    refuse = []
    if int(get(a + "expert_count", 0) or 0):
        refuse.append("mixture-of-experts layers")
    for key in ("attention.key_length", "attention.value_length", "rope.dimension_count"):
        if int(get(a + key, head_dim)) != head_dim:
            refuse.append(f"{key} {get(a + key)} != embedding_length / head_count ({head_dim})")
    if n_kv < 1 or n_head % n_kv:
        refuse.append(f"{n_kv} key/value heads for {n_head} heads (must divide it)")
    scaling = get(a + "rope.scaling.type", "none")
    if scaling not in ("none", "llama3"):
        refuse.append(f"{scaling} RoPE scaling (the engine has llama3 scaling only)")
    bias = sorted(n for n in tensors if n.endswith(".bias"))
    if bias:
        refuse.append(f"bias vectors ({bias[0]})")
    if refuse:
        raise ModelImportError(f"{fname}: the engine cannot run this model: "
                               + "; ".join(refuse) + ".", _RUNS)
    ffn = int(need("feed_forward_length"))
    tokens = get("tokenizer.ggml.tokens") or []
    rope = {}
    if "rope_freqs.weight" in tensors:
        t = tensors["rope_freqs.weight"]
        try:
            rope = llama3_from_factors(_small_floats(t), head_dim,
                                       float(get(a + "rope.freq_base", 10000.0)),
                                       get(a + "rope.scaling.original_context_length")) or {}
        except ValueError as e:
            raise ModelImportError(f"{fname}: {e}.", _RUNS) from None
    config = ModelConfig(
        vocab_size=int(get(a + "vocab_size", len(tokens))), d_model=d,
        n_layer=int(need("block_count")), n_head=n_head, n_kv_head=0 if n_kv == n_head else n_kv,
        context_length=int(need("context_length")),
        ffn_dim=0 if ffn == swiglu_hidden_dim(d) else ffn,
        tie_embeddings="output.weight" not in tensors,
        rms_eps=f32_decimal(need("attention.layer_norm_rms_epsilon")),
        rope_base=f32_decimal(get(a + "rope.freq_base", 10000.0)), **rope)
    try:
        return config.validate()
    except StudioError as e:
        raise ModelImportError(f"{fname} has settings the engine cannot use: {e}", e.hint) from None


def _need(get, key: str, fname: str):
    value = get(key)
    if value is None:
        raise ModelImportError(f"{fname} has no {key} value.", "The file is incomplete.")
    return value


def _small_floats(t) -> np.ndarray:
    """A small tensor's values (rope_freqs.weight) as float32: F32 read as it is stored (no
    dequantize call: a model card reads no tensor data through it), others dequantized."""
    if t.tensor_type == gguf.GGMLQuantizationType.F32:
        return np.asarray(t.data, np.float32).reshape(-1)
    return gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)


def check_tensors(tensors: dict, config: ModelConfig, fname: str) -> dict[str, tuple]:
    """ParamTable's {name: numpy shape} after checking the file's tensors against it from
    their infos alone (names, shapes; no data read). Raises ModelImportError for a missing,
    misshapen or unknown tensor. Whether gguf-py dequantizes a tensor's type is its own
    dequantize's answer, at open (open_weights): gguf-py keeps its table of types private, and
    the types it reads but cannot dequantize (Q8_1, Q8_K, integers, F64) are not llama weights'
    storage types in practice."""
    shapes = ParamTable(config).shapes()
    extra = sorted(set(tensors) - set(shapes) - {"rope_freqs.weight"})
    if extra:
        raise ModelImportError(f"{fname} has a tensor the engine's model lacks: {extra[0]} "
                               f"({len(extra)} in all).", _RUNS)
    for name, shape in shapes.items():
        t = tensors.get(name)
        if t is None:
            raise ModelImportError(f"{fname} lacks the tensor {name}.", "The file is incomplete.")
        got = tuple(int(x) for x in reversed(t.shape.tolist()))  # ggml ne is numpy's reversed
        if got != shape:
            raise ModelImportError(f"{fname}: tensor {name} has shape {got}, expected {shape}.",
                                   "The file's keys and tensors disagree.")
    return shapes


def open_weights(tensors: dict, config: ModelConfig, fname: str) -> dict[str, np.ndarray]:
    """name -> float32 array of ParamTable's shape, each tensor dequantized once with
    gguf.quants.dequantize. Raises ModelImportError as check_tensors does."""
    weights = {}
    for name, shape in check_tensors(tensors, config, fname).items():
        t = tensors[name]
        try:
            w = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        except NotImplementedError:   # gguf-py reads the type but cannot dequantize it
            raise ModelImportError(f"{fname}: tensor {name} is stored as {t.tensor_type.name}, "
                                   "which gguf-py cannot dequantize.",
                                   "Use a GGUF in F32, F16, BF16, Q8_0, Q4_0/Q4_1 or a K-quant."
                                   ) from None
        weights[name] = np.array(w, dtype=np.float32).reshape(shape)
    return weights


def stored_type(file_type, tensors) -> str:
    """The GGUF's file type name (gguf.LlamaFileType: "ALL_F32", "MOSTLY_Q4_K_M", ...) from
    general.file_type, or, where that key is missing or unknown, the type most of its 2-D
    tensors are stored in ("Q8_0", ...)."""
    try:
        return gguf.LlamaFileType(int(file_type)).name
    except (TypeError, ValueError):
        kinds = [t.tensor_type.name for t in tensors if len(t.shape) == 2]
        return max(set(kinds), key=kinds.count) if kinds else ""


def read_open_bundle(reader: gguf.GGUFReader, fname: str, weights: bool = True):
    """ModelBundle (config, OpenTokenizer, float32 weights, metadata["source"]) of an open
    llama GGUF; weights=False: the same checks from the tensor infos, no tensor dequantized,
    and bundle.weights is {} (a model card). Raises ModelImportError."""
    from opencl_llm_studio.engine.files.gguf_vocab import tokenizer_from_gguf
    get = fields_getter(reader.fields)
    refuse_architecture(get("general.architecture", "?"), fname)
    tensors = {t.name: t for t in reader.tensors}
    config = open_config(get, tensors, fname)
    tokenizer = tokenizer_from_gguf(get, fname)
    if tokenizer.vocab_size != config.vocab_size:
        raise ModelImportError(f"{fname}: the vocabulary has {tokenizer.vocab_size} tokens but "
                               f"the model {config.vocab_size}.", "The file is damaged.")
    if weights:
        arrays = open_weights(tensors, config, fname)
    else:
        check_tensors(tensors, config, fname)
        arrays = {}
    source = {"name": get("general.name", fname), "format": "gguf", "file": fname,
              "file_type": stored_type(get("general.file_type", None), reader.tensors)}
    return ModelBundle(config, tokenizer, arrays, {"source": source})


def f32_decimal(x: float) -> float:
    """The shortest decimal that rounds to the same float32 (1e-5 stored as f32 reads back 1e-5)."""
    return float(str(np.float32(x)))
