"""Read a Hugging Face transformers Llama folder into a ModelBundle (issue 14, the way back;
issue 21, pretrained open models).

Accepted: `LlamaForCausalLM` folders whose model the engine can run: multi-head or grouped-query
attention (num_key_value_heads dividing num_attention_heads), no biases, SiLU (SwiGLU)
feed-forward, RoPE plain or with llama3 scaling, head_dim = hidden_size / num_attention_heads.
The tokenizer: the app's SentencePiece `tokenizer.model` (<unk>, <s>, </s>, 256 byte tokens) for
folders `export_hf` and `train_ddp.py` write; a pretrained model's tokenizer.json otherwise
(engine.data.open_tokenizer). Anything else is refused with ModelImportError naming the setting.
q/k rows go back from rotate-half to adjacent-pair order (engine.files.hf.names).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from opencl_llm_studio.engine.config import ModelConfig, swiglu_hidden_dim
from opencl_llm_studio.engine.errors import DataError, ModelImportError
from opencl_llm_studio.engine.files.hf.export import DATA, STUDIO_FILE
from opencl_llm_studio.engine.files.hf.names import from_hf_tensor, gguf_name, hf_name
from opencl_llm_studio.engine.data.tokenizer import Tokenizer

_IGNORED = ("rotary_emb.inv_freq",)   # buffers some older transformers versions saved


def is_model_folder(path) -> bool:
    """Whether `path` is a transformers model folder (it holds config.json)."""
    p = Path(path)
    return p.is_dir() and (p / "config.json").is_file()


def has_texts(folder) -> bool:
    """Whether the folder carries its training texts (data/pretrain.txt: scale-out, DDP)."""
    return (Path(folder) / DATA["pretrain_text"]).is_file()


def read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise ModelImportError(f"{folder} has no config.json, so it is not a transformers model "
                               "folder.", "Give the folder that holds config.json and "
                               "model.safetensors (e.g. from `llm-studio export --format hf`).")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelImportError(f"{path} cannot be read: {e}.", "The folder is damaged.") from e


def _refusals(hf: dict, heads: int, kv: int, d: int, rope_type: str) -> list[str]:
    """What in a LlamaConfig dict the engine cannot run, in words (empty: all of it runs)."""
    refuse = []
    if kv < 1 or heads % kv:
        refuse.append(f"{kv} key/value heads for {heads} heads (must divide it)")
    if hf.get("attention_bias") or hf.get("mlp_bias"):
        refuse.append("bias vectors in attention or feed-forward layers")
    if hf.get("hidden_act", "silu") != "silu":
        refuse.append(f"the {hf['hidden_act']} activation (the engine has SwiGLU with SiLU)")
    if rope_type not in ("default", "llama3"):
        refuse.append(f"{rope_type} RoPE scaling (the engine has llama3 scaling only)")
    if int(hf.get("head_dim") or d // heads) * heads != d:
        refuse.append(f"head_dim {hf['head_dim']} != hidden_size / num_attention_heads")
    return refuse


def _rope_scaling(rope: dict, rope_type: str) -> dict:
    """ModelConfig's rope_scaling fields of a config's rope_scaling / rope_parameters dict."""
    if rope_type != "llama3":
        return {}
    return {"rope_scaling": "llama3", "rope_scaling_factor": float(rope["factor"]),
            "rope_low_freq_factor": float(rope.get("low_freq_factor", 1.0)),
            "rope_high_freq_factor": float(rope.get("high_freq_factor", 4.0)),
            "rope_original_context": int(rope.get("original_max_position_embeddings", 8192))}


def model_config(hf: dict) -> ModelConfig:
    """ModelConfig for a LlamaConfig dict. Raises ModelImportError for what the engine lacks."""
    arch = hf.get("architectures") or []
    if hf.get("model_type") != "llama" and "LlamaForCausalLM" not in arch:
        raise ModelImportError(f"The model is {arch or hf.get('model_type')!r}, not a Llama.",
                               "Only LlamaForCausalLM folders can be imported.")
    heads = int(hf["num_attention_heads"])
    d = int(hf["hidden_size"])
    kv = int(hf.get("num_key_value_heads") or heads)
    rope = {**(hf.get("rope_parameters") or {}), **(hf.get("rope_scaling") or {})}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    refuse = _refusals(hf, heads, kv, d, rope_type)
    if refuse:
        raise ModelImportError("The engine cannot run this model: " + "; ".join(refuse) + ".",
                               "Import a Llama-architecture model (RMSNorm, SwiGLU, RoPE, "
                               "grouped-query attention, no biases): SmolLM2, TinyLlama, "
                               "Llama 3.x, or one exported by this app.")
    ffn = int(hf["intermediate_size"])
    return ModelConfig(
        vocab_size=int(hf["vocab_size"]), d_model=d, n_layer=int(hf["num_hidden_layers"]),
        n_head=heads, n_kv_head=0 if kv == heads else kv,
        context_length=int(hf.get("max_position_embeddings", 2048)),
        ffn_dim=0 if ffn == swiglu_hidden_dim(d) else ffn,   # 0 = the default
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        rms_eps=float(hf.get("rms_norm_eps", 1e-6)),
        rope_base=float(hf.get("rope_theta") or rope.get("rope_theta", 10000.0)),
        **_rope_scaling(rope, rope_type)).validate()


def _weight_files(folder: Path) -> list[Path]:
    files = sorted(folder.glob("model*.safetensors"))   # not optimizer.safetensors
    if not files:
        raise ModelImportError(f"{folder} has no .safetensors weights.",
                               "Save the model with save_pretrained(safe_serialization=True).")
    return files


def _header_shapes(folder: Path) -> dict[str, tuple]:
    """HF name -> shape from the safetensors headers alone (no tensor data is read)."""
    from safetensors import safe_open
    out = {}
    for f in _weight_files(folder):
        with safe_open(str(f), framework="numpy") as st:
            for k in st.keys():
                out[k] = tuple(st.get_slice(k).get_shape())
    return {k: v for k, v in out.items() if not k.endswith(_IGNORED)}


def _read_tensors(folder: Path) -> dict[str, np.ndarray]:
    files = _weight_files(folder)
    from safetensors import safe_open
    out = {}
    for f in files:
        try:
            with safe_open(str(f), framework="numpy") as st:
                for k in st.keys():
                    out[k] = st.get_tensor(k)
        except (TypeError, ValueError):         # bfloat16 has no numpy type: read through torch
            try:
                import torch  # noqa: F401
            except ImportError:
                raise ModelImportError(f"{f.name} holds bfloat16 tensors, which need torch to "
                                       "read.", "pip install torch, or save as float32.") from None
            with safe_open(str(f), framework="pt") as st:
                for k in st.keys():
                    out[k] = st.get_tensor(k).float().numpy()
    return {k: v for k, v in out.items() if not k.endswith(_IGNORED)}


def read_tokenizer(folder: Path):
    """The folder's tokenizer: the app's own SentencePiece Tokenizer for a folder this app
    exported (studio.json) or one with only tokenizer.model; an OpenTokenizer
    (engine.data.open_tokenizer: tokenizer.json, the chat template, stop tokens) for a pretrained
    open model's folder. Raises ModelImportError."""
    from opencl_llm_studio.engine.data.open_folder_tokenizer import read_folder
    from opencl_llm_studio.engine.data.open_tokenizer import KINDS
    studio = folder / STUDIO_FILE
    kind = json.loads(studio.read_text(encoding="utf-8")).get("tokenizer_kind") \
        if studio.is_file() else None
    if (folder / "tokenizer.json").is_file() and (kind is None or kind in KINDS):
        return read_folder(folder)
    path = folder / "tokenizer.model"
    if not path.is_file():
        raise ModelImportError(f"{folder} has no tokenizer.model (a SentencePiece model).",
                               "The engine tokenizes with SentencePiece; folders exported by "
                               "this app (or Llama-style ones) ship tokenizer.model.")
    try:
        return Tokenizer.from_bytes(path.read_bytes())
    except DataError as e:
        raise ModelImportError(f"{path.name}: {e}", e.hint, e.cli_hint) from None


def import_hf(folder, weights: bool = True) -> tuple:
    """(ModelBundle, studio) for a transformers Llama folder; `studio` is the dict of
    studio.json (training metadata, configs, step) or {} for a folder from elsewhere.
    weights=False: the same checks from config.json, the tokenizer files and the safetensors
    headers, no tensor data read; bundle.weights is {} (a model card).
    Raises ModelImportError for a folder the engine cannot read or run."""
    from opencl_llm_studio.engine.files.gguf_export import ModelBundle, tensor_shapes
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelImportError(f"{folder} is not a folder.",
                               "Give the transformers model folder (with config.json).")
    cfg = model_config(read_config(folder))
    tok = read_tokenizer(folder)
    if tok.vocab_size != cfg.vocab_size:
        raise ModelImportError(f"The tokenizer has {tok.vocab_size} tokens but the model "
                               f"{cfg.vocab_size}.", "The folder mixes two models.")
    tensors = _read_tensors(folder) if weights else None
    shapes = ({k: v.shape for k, v in tensors.items()} if weights
              else _header_shapes(folder))   # (from_hf_tensor keeps shapes)
    if cfg.tie_embeddings:
        shapes.pop("lm_head.weight", None)
    names, unknown = {}, []   # HF name -> GGUF name
    for name in shapes:
        try:
            names[name] = gguf_name(name)
        except KeyError:
            unknown.append(name)
    if unknown:
        raise ModelImportError(f"The engine's model has no tensor {unknown[0]} "
                               f"({len(unknown)} unknown).", "Only plain Llama weights import.")
    found = {g: tuple(shapes[h]) for h, g in names.items()}
    for name, shape in tensor_shapes(cfg).items():
        if found.get(name) != shape:
            raise ModelImportError(f"Tensor {name}: expected shape {shape}, found "
                                   f"{found.get(name, 'missing')}.",
                                   "The weights do not match config.json.")
    weights = {g: from_hf_tensor(g, np.asarray(tensors[h], np.float32), cfg)
               for h, g in names.items()} if weights else {}
    studio = {}
    if (folder / STUDIO_FILE).is_file():
        studio = json.loads((folder / STUDIO_FILE).read_text(encoding="utf-8"))
    metadata = dict(studio.get("metadata", {}))
    if not studio:   # a pretrained model from elsewhere
        hf = read_config(folder)
        name = hf.get("_name_or_path") or folder.name
        metadata["source"] = {"name": str(name), "format": "hf", "file": folder.name,
                              "dtype": str(hf.get("dtype") or hf.get("torch_dtype") or "")}
    return ModelBundle(cfg, tok, weights, metadata), studio


def read_moments(folder: Path, cfg) -> tuple | None:
    """(m, v, adam_step) as flat ParamTable buffers from optimizer.safetensors, or None."""
    path = folder / "optimizer.safetensors"
    if not path.is_file():
        return None
    from safetensors import safe_open
    from opencl_llm_studio.engine.model.params import ParamTable
    table = ParamTable(cfg)
    with safe_open(str(path), framework="numpy") as st:
        step = int(float(st.metadata().get("adam_step", 0)))
        flats = []
        for kind in ("exp_avg", "exp_avg_sq"):
            named = {}
            for name in table.entries:
                key = f"{kind}.{hf_name(name)}"
                if key not in st.keys():
                    return None   # a partial state is no state: AdamW starts fresh
                w = st.get_tensor(key).astype(np.float32)
                named[name] = from_hf_tensor(name, w, cfg)
            flats.append(table.flatten(named))
    return flats[0], flats[1], step
