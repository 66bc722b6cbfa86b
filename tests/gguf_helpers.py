"""GGUF test helpers: a ModelBundle of random weights for a small model (make_bundle, with the
metadata META a round trip must keep) and llama.cpp (llama-cpp-python) loading a file the way
the checks need its logits (load)."""

import os

import numpy as np

import tests.reference as reference
from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.files.gguf_export import ModelBundle

META = {"learning_rate": 3e-3, "pretrain_steps": 600, "final_loss": 2.125, "seed": 1337,
        "tie_embeddings": True, "loss_curve": [4.5, 3.25, 2.125],
        "data": {"pretrain": {"bytes": 2713, "sha256": "9f" * 32}, "tune": {"dialogues": 13}}}


def make_bundle(tok, seed=0, std=0.08, **cfg):
    """Random float32 weights (std large enough for non-trivial logits) for a small model."""
    args = dict(vocab_size=tok.vocab_size, d_model=64, n_layer=2, n_head=4, context_length=64)
    config = ModelConfig(**{**args, **cfg}).validate()
    w = reference.init_weights(config, seed=seed, std=std)
    return ModelBundle(config, tok, {k: v.astype(np.float32) for k, v in w.items()}, dict(META))


def load(llama_cpp, path, n_ctx=64, repack=True, lora=None):
    """llama.cpp on the file: all positions' logits kept, F32 KV cache (GGML_TYPE_F32 = 0).
    llama.cpp pads n_ctx up to 256 (it warns "n_ctx_seq (256) > n_ctx_train (64)"), but
    llama-cpp-python sizes its logits buffer with n_ctx: keep prompt + answer <= n_ctx.
    repack=False loads with llama.cpp's CPU weight repacking off (llama-cli's --no-repack):
    llama.cpp 0.3.36's repacked Q8_0 path segfaults on some AVX-512 Intel CPUs, for a file
    llama.cpp quantized itself as much as for ours (seen 2026-12-01, README "Known platform
    notes"). lora: a LoRA adapter GGUF applied over the file (llama.cpp's --lora)."""
    kw = dict(n_ctx=n_ctx, logits_all=True, verbose=False, seed=0,
              type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32,
              n_threads=min(4, os.cpu_count() or 1))
    if lora is not None:
        kw["lora_path"] = str(lora)
    if repack:
        return llama_cpp.Llama(str(path), **kw)
    import llama_cpp.llama as module
    defaults = module.llama_cpp.llama_model_default_params

    def no_repack():
        params = defaults()
        params.use_extra_bufts = False
        return params
    module.llama_cpp.llama_model_default_params = no_repack
    try:
        return llama_cpp.Llama(str(path), **kw)
    finally:
        module.llama_cpp.llama_model_default_params = defaults
