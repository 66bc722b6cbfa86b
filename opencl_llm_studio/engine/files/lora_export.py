"""Export LoRA adapters (issue 34): a GGUF adapter for llama.cpp and Ollama, and a PEFT folder.

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", eq. 3): a target
linear weight W (out, in) of block l is used as W + (alpha / r) * B @ A with A (r, in) and
B (out, r). Targets are GGUF short names (attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up,
ffn_down; transformers: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj).

GGUF adapter (llama.cpp's convert_lora_to_gguf.py writes it; src/llama-adapter.cpp,
llama_adapter_lora_init_impl, reads it beside its base model):
  general.architecture "llama" (must equal the base's), general.type "adapter",
  adapter.type "lora", adapter.lora.alpha (float32; llama.cpp scales by alpha / r with
  r = lora_b's ne[0], and by 1 when alpha is 0, hence alpha > 0 here);
  tensors "blk.N.<target>.weight.lora_a" numpy (r, in) = ggml ne {in, r} and ".lora_b" numpy
  (out, r) = ggml ne {r, out}; the loader requires base ne[0] == a.ne[0], base ne[1] == b.ne[1],
  a.ne[1] == b.ne[0], both halves of each pair, and a base tensor of that name. The engine's q/k
  rows already are GGUF's order, so nothing is permuted.
PEFT folder (peft's LoraConfig and save_pretrained layout): adapter_config.json and
adapter_model.safetensors with "base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight"
(r, in) and ".lora_B.weight" (out, r). The HF export puts q and k rows in rotate-half order
(engine.files.hf.names.to_hf_tensor), so lora_B of q and k gets the same row permutation;
lora_A acts on the input side and is not permuted.

Every file is written atomically (temp + rename; the PEFT folder as a temp folder renamed into
place). Bad adapters raise AdapterError, an ExportError that is also a ValueError.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from opencl_llm_studio.engine.config import LORA_TARGETS, LoraConfig, ModelConfig
from opencl_llm_studio.engine.errors import ExportError
from opencl_llm_studio.engine.fsutil import FolderSnapshot
from opencl_llm_studio.engine.files.export_types import DEFAULT_DTYPE
from opencl_llm_studio.engine.files.gguf_export import ARCH, atomic_write, gguf_text
from opencl_llm_studio.engine.files.hf.names import hf_name, to_hf_tensor
from opencl_llm_studio.engine.files.modelfile import from_value, modelfile_text
from opencl_llm_studio.engine.model.params import ParamTable

# GGUF short name -> transformers' module name (engine.files.hf.names' table, short form)
HF_TARGETS = {"attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj",
              "attn_output": "o_proj", "ffn_gate": "gate_proj", "ffn_up": "up_proj",
              "ffn_down": "down_proj"}
TARGETS = LORA_TARGETS   # engine.config: the targets the engine tunes, in this order
DTYPES = {"f32": (np.float32, gguf.LlamaFileType.ALL_F32),
          "f16": (np.float16, gguf.LlamaFileType.MOSTLY_F16)}
PEFT_CONFIG, PEFT_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
_KEY = re.compile(r"blk\.(\d+)\.(\w+)$")


class AdapterError(ExportError):
    """LoRA adapters that do not fit their model or cannot be written (message and hint as
    every ExportError)."""


@dataclass
class LoraAdapters:
    """Rank-`rank` adapters: tensors["blk.{l}.{target}"] = (A float32 (rank, in), B float32
    (out, rank)) for every target in `targets` (GGUF short names, TARGETS). The structure is
    checked on creation (AdapterError: rank < 1, alpha not finite and > 0, an unknown or
    repeated target, a key of no target, A or B not 2-D, of another rank, or not finite);
    `check(cfg)` checks the shapes against a model."""

    rank: int
    alpha: float
    targets: tuple[str, ...]
    tensors: dict[str, tuple[np.ndarray, np.ndarray]]

    def __post_init__(self):
        self._check_numbers()
        self.rank, self.targets = int(self.rank), tuple(self.targets)   # JSON-ready
        unknown = [t for t in self.targets if t not in TARGETS]
        if unknown or not self.targets or len(set(self.targets)) != len(self.targets):
            raise AdapterError(f"LoRA targets {self.targets!r}: "
                               + (f"unknown target {unknown[0]!r}." if unknown
                                  else "none or repeated."),
                               f"Give each of {', '.join(TARGETS)} at most once.")
        if not isinstance(self.tensors, dict):
            raise AdapterError("LoRA tensors are not a dict of \"blk.<layer>.<target>\" -> (A, B).",
                               "Give A (rank, in) and B (out, rank) per block and target.")
        for key, pair in self.tensors.items():
            self._check_pair(key, pair)

    def _check_numbers(self) -> None:
        """AdapterError unless rank is an int >= 1 and alpha a finite number > 0."""
        if isinstance(self.rank, bool) or not isinstance(self.rank, (int, np.integer)) \
                or self.rank < 1:
            raise AdapterError(f"LoRA rank {self.rank!r} is not a whole number of at least 1.",
                               "Use a rank such as 4, 8 or 16.")
        if not isinstance(self.alpha, (int, float, np.number)) or isinstance(self.alpha, bool) \
                or not math.isfinite(self.alpha) or self.alpha <= 0:
            # llama.cpp reads alpha 0 as "no scaling" (scale 1): it must stay positive
            raise AdapterError(f"LoRA alpha {self.alpha!r} is not a positive number.",
                               "Use alpha > 0 (often 2 x rank).")

    def _check_pair(self, key: str, pair) -> None:
        m = _KEY.match(str(key))
        if not m or m.group(2) not in self.targets:
            raise AdapterError(f"LoRA tensor {key!r} names no block of targets {self.targets}.",
                               'Keys are "blk.<layer>.<target>", e.g. "blk.0.attn_q".')
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise AdapterError(f"LoRA tensor {key!r} is not a pair (A, B).",
                               "Give A (rank, in) and B (out, rank).")
        a, b = (np.asarray(x) for x in pair)
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != self.rank or b.shape[1] != self.rank:
            raise AdapterError(f"LoRA tensor {key!r}: A {a.shape} and B {b.shape} are not "
                               f"(rank, in) and (out, rank) for rank {self.rank}.",
                               "Give A (rank, in) and B (out, rank).")
        if not (np.isfinite(a).all() and np.isfinite(b).all()):
            raise AdapterError(f"LoRA tensor {key!r} contains NaN or infinite values.",
                               "Export an earlier checkpoint of the adapters.")

    @classmethod
    def from_named(cls, lora: LoraConfig, named: dict[str, np.ndarray]) -> "LoraAdapters":
        """Adapters from the engine's names (engine.model.lora.LoraModel.adapters():
        "blk.{l}.{target}.weight.lora_a" -> A, ".lora_b" -> B, as llama.cpp names them) and
        the tuning's LoraConfig. AdapterError for a name of neither half or a half alone."""
        pairs: dict[str, list] = {}
        for name, arr in named.items():
            base, _, half = str(name).rpartition(".weight.")
            if half not in ("lora_a", "lora_b"):
                raise AdapterError(f"{name!r} is not a LoRA tensor name.",
                                   'Names end in ".weight.lora_a" or ".weight.lora_b".')
            pairs.setdefault(base, [None, None])[half == "lora_b"] = arr
        alone = next((k for k, (a, b) in pairs.items() if a is None or b is None), None)
        if alone is not None:
            raise AdapterError(f"LoRA tensor {alone} has only one of lora_a and lora_b.",
                               "Export both halves of every adapter.")
        return cls(lora.rank, lora.alpha, tuple(lora.targets),
                   {k: (a, b) for k, (a, b) in pairs.items()})

    @property
    def scale(self) -> float:
        """alpha / rank: the factor on B @ A (Hu et al. 2021, section 4.1)."""
        return float(self.alpha) / self.rank

    def check(self, cfg: ModelConfig) -> "LoraAdapters":
        """self, when every target of every block of `cfg` has a pair of the model's shapes
        (A (rank, in), B (out, rank) of the weight (out, in)); AdapterError naming the first
        missing, extra or misshapen tensor otherwise."""
        shapes = ParamTable(cfg).shapes()
        want = [f"blk.{l}.{t}" for l in range(cfg.n_layer) for t in self.targets]
        extra = sorted(set(self.tensors) - set(want))
        missing = [k for k in want if k not in self.tensors]
        if extra or missing:
            raise AdapterError(f"LoRA tensor {(extra or missing)[0]} is "
                               + ("not in" if extra else "missing for")
                               + f" a model of {cfg.n_layer} blocks.",
                               "Export the adapters with the model they were tuned on.")
        for key in want:
            out, inp = shapes[key + ".weight"]
            a, b = self.tensors[key]
            if np.shape(a) != (self.rank, inp) or np.shape(b) != (out, self.rank):
                raise AdapterError(
                    f"LoRA tensor {key}: A {np.shape(a)}, B {np.shape(b)}; the model's weight "
                    f"({out}, {inp}) needs A ({self.rank}, {inp}) and B ({out}, {self.rank}).",
                    "Export the adapters with the model they were tuned on.")
        return self

    def delta(self, key: str) -> np.ndarray:
        """scale * B @ A of "blk.{l}.{target}", float64 (out, in)."""
        a, b = self.tensors[key]
        return self.scale * (np.asarray(b, np.float64) @ np.asarray(a, np.float64))

    def merged(self, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A new dict of `weights` (GGUF names, float32 (out, in)) with scale * B @ A added to
        each target ("blk.0.attn_q.weight" += ...), summed in float64 and stored as float32; the
        other tensors are the same arrays, the inputs are untouched. AdapterError when a target
        weight is missing or of another shape."""
        out = dict(weights)
        for key in self.tensors:
            name = key + ".weight"
            if name not in weights:
                raise AdapterError(f"The weights have no {name} for its LoRA adapter.",
                                   "Merge into the model the adapters were tuned on.")
            d = self.delta(key)
            if np.shape(weights[name]) != d.shape:
                raise AdapterError(f"{name} has shape {np.shape(weights[name])}, its LoRA "
                                   f"adapter {d.shape}.",
                                   "Merge into the model the adapters were tuned on.")
            out[name] = (np.asarray(weights[name], np.float64) + d).astype(np.float32)
        return out


def export_adapter_gguf(adapters: LoraAdapters, cfg: ModelConfig, path: str | os.PathLike,
                        base_name: str, dtype: str = DEFAULT_DTYPE, force: bool = False) -> Path:
    """Write `adapters` as a llama.cpp LoRA adapter GGUF (module docstring: keys, names,
    shapes) for the base model `cfg` named `base_name` (general.base_model.0.name; a path is
    reduced to its final name). dtype "f32" or "f16" for A and B. Missing folders are made.
    Returns the path. Raises AdapterError (adapters that do not fit cfg, unknown dtype, f16
    overflow) or ExportError: `path` is a folder, exists and force is False, exists and is not
    a LoRA adapter GGUF (never replaced, even with force), or cannot be written."""
    adapters.check(cfg)
    if str(dtype).lower() not in DTYPES:
        raise AdapterError(f"Unknown adapter type {dtype!r}.", "Use f32 or f16.")
    np_type, file_type = DTYPES[str(dtype).lower()]
    base = gguf_text(_final_name(base_name))
    path = Path(path)
    _check_file_target(path, force)
    tensors = {}
    for key in sorted(adapters.tensors, key=_order):
        for half, arr in zip(("lora_a", "lora_b"), adapters.tensors[key]):
            arr = np.ascontiguousarray(arr, np.float32)
            if np_type is np.float16 and np.abs(arr).max() > np.finfo(np.float16).max:
                raise AdapterError(f"{key}.{half} has values beyond f16's range (65504).",
                                   "Export as f32.")
            tensors[f"{key}.weight.{half}"] = arr.astype(np_type)

    def write(tmp: Path) -> None:
        w = gguf.GGUFWriter(tmp, ARCH)   # general.architecture: llama.cpp compares it to the base's
        try:
            w.add_type(gguf.GGUFType.ADAPTER)
            w.add_string(gguf.Keys.Adapter.TYPE, "lora")
            w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(adapters.alpha))
            w.add_name(gguf_text(path.stem))
            w.add_base_model_count(1)
            w.add_base_model_name(0, base)
            w.add_file_type(int(file_type))
            w.add_quantization_version(gguf.GGML_QUANT_VERSION)
            for name, arr in tensors.items():
                w.add_tensor(name, arr)
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
        finally:
            w.close()

    _write_file(path, write)
    return path


def _order(key: str) -> tuple[int, int]:
    """Sort key of "blk.{l}.{target}": by block, then in the order of TARGETS."""
    m = _KEY.match(key)
    return int(m.group(1)), TARGETS.index(m.group(2))


def _check_file_target(path: Path, force: bool) -> None:
    """ExportError unless `path` is new, or (with force) a LoRA adapter GGUF to replace."""
    if path.is_dir():
        raise ExportError(f"{path} is a folder, not a file name.",
                          "Give a file name ending in .gguf.")
    if not os.path.lexists(path):
        return
    if not is_adapter_gguf(path):
        raise ExportError(f"{path} exists and is not a LoRA adapter GGUF, so it is not "
                          "replaced, even when overwriting is allowed.",
                          "Give a new file name for the adapter.")
    if not force:
        raise ExportError(f"{path} already exists.",
                          "Choose another file name, or allow overwriting.",
                          "Give another file name, or add --force to overwrite it.")


def is_adapter_gguf(path: str | os.PathLike) -> bool:
    """Whether `path` is a GGUF file with general.type "adapter" (False for anything else,
    unreadable files included)."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                return False
        field = gguf.GGUFReader(path).fields.get("general.type")
        return field is not None and field.contents() == gguf.GGUFType.ADAPTER
    except Exception:   # noqa: BLE001 - any damage means "not an adapter": it stays untouched
        return False


def _write_file(path: Path, write) -> None:
    """Make path's missing folders, then engine.files.gguf_export.atomic_write(path, write);
    on any error the folders made are removed again (refused means nothing changed)."""
    made = FolderSnapshot(path.parent, only=())
    try:
        _make_folder(path.parent)
        atomic_write(path, write)
    except BaseException:
        made.undo()
        raise


def _make_folder(folder: Path) -> None:
    """mkdir -p folder; ExportError naming the folder when that fails."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(f"Cannot create the folder {folder}: {e.strerror or e}.",
                          "Write into a folder you can write to.") from None


def _final_name(name: str) -> str:
    """A model name as written into shared files: a path (absolute, ~, ./, ../, backslashes,
    or one that exists here) reduced to its final part, so no machine's folders leak out;
    a hub id "org/model" stays as it is. AdapterError for an empty name."""
    s = str(name).strip()
    if not s:
        raise AdapterError("The base model's name is empty.",
                           "Give the base model's name or its hub id (org/model).")
    looks_like_path = (os.path.isabs(s) or s.startswith(("~", ".")) or "\\" in s
                       or s.count("/") > 1 or os.path.exists(s))
    if looks_like_path:
        s = Path(s.replace("\\", "/").rstrip("/")).name
    if not s or s in (".", ".."):
        raise AdapterError(f"The base model's name {name!r} has no final name.",
                           "Give the base model's name or its hub id (org/model).")
    return s


def write_adapter_modelfile(path: str | os.PathLike, base_gguf_name: str, adapter_gguf_name: str,
                            config: ModelConfig, chat_format: int = 2, chat=None,
                            force: bool = False) -> Path:
    """Write an Ollama Modelfile at `path` that runs the adapter on its base: FROM
    ./<base_gguf_name>, ADAPTER ./<adapter_gguf_name> (both relative to the Modelfile's folder,
    as Ollama resolves them), then the template, stops and num_ctx of engine.files.modelfile's
    modelfile_text (chat_format, or an imported model's `chat`). Returns the path. Raises
    ExportError: a name that is absolute or that Ollama's parser cannot read back, `path` is a
    folder, or exists and force is False, or cannot be written."""
    for name in (base_gguf_name, adapter_gguf_name):
        if os.path.isabs(name) or not str(name).strip():
            raise ExportError(f"{name!r} is not a file name relative to the Modelfile.",
                              "Give the GGUF files' names in the Modelfile's folder.")
    path = Path(path)
    text = modelfile_text(base_gguf_name, config, chat_format, chat)
    line = f"FROM {from_value(base_gguf_name)}\n"
    text = text.replace(line, f"{line}ADAPTER {from_value(adapter_gguf_name)}\n", 1)
    if path.is_dir():
        raise ExportError(f"{path} is a folder, not a file name.", "Give a file name.")
    if os.path.lexists(path) and not force:
        raise ExportError(f"{path} already exists.",
                          "Choose another file name, or allow overwriting.",
                          "Give another file name, or add --force to overwrite it.")
    _write_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8", newline="\n"))
    return path


def peft_config(adapters: LoraAdapters, base_model: str, lora_dropout: float = 0.0) -> dict:
    """adapter_config.json of peft's LoraConfig (peft/tuners/lora/config.py field names):
    base_model_name_or_path is a name (_final_name), never a machine's path; lora_dropout is
    the training setting (inference ignores it)."""
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "auto_mapping": None,
            "base_model_name_or_path": _final_name(base_model), "revision": None,
            "inference_mode": True, "r": adapters.rank, "lora_alpha": float(adapters.alpha),
            "lora_dropout": float(lora_dropout), "bias": "none", "fan_in_fan_out": False,
            "target_modules": sorted(HF_TARGETS[t] for t in adapters.targets),
            "use_rslora": False, "use_dora": False, "init_lora_weights": True,
            "modules_to_save": None, "layers_to_transform": None, "layers_pattern": None,
            "rank_pattern": {}, "alpha_pattern": {}}


def peft_tensors(adapters: LoraAdapters, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """PEFT key -> contiguous float32 array; lora_B rows of q and k in rotate-half order."""
    out = {}
    for key, (a, b) in adapters.check(cfg).tensors.items():
        module = "base_model.model." + hf_name(key + ".weight").removesuffix(".weight")
        out[f"{module}.lora_A.weight"] = np.ascontiguousarray(a, np.float32)
        out[f"{module}.lora_B.weight"] = np.ascontiguousarray(
            to_hf_tensor(key + ".weight", np.asarray(b, np.float32), cfg))
    return out


def export_peft(adapters: LoraAdapters, cfg: ModelConfig, folder: str | os.PathLike,
                base_model: str, force: bool = False, lora_dropout: float = 0.0) -> Path:
    """Write `adapters` as a PEFT LoRA folder (adapter_config.json, adapter_model.safetensors)
    that peft.PeftModel.from_pretrained(<the HF export of the base>, folder) loads; base_model
    is the base's name or hub id (a path is reduced to its final name); lora_dropout the
    tuning's adapter dropout, for adapter_config.json. The folder is written
    under a temporary name beside it and renamed into place. Returns the folder. Raises
    AdapterError (adapters that do not fit cfg, empty base name) or ExportError: the folder is
    a file, or exists and is not empty (unless force, and only when it holds adapter_config.json:
    other folders are never replaced), cannot be written, or safetensors is missing."""
    from opencl_llm_studio.engine.files.hf.export import replace_folder   # one folder swap
    try:
        from safetensors.numpy import save_file
    except ImportError:
        raise ExportError("PEFT export needs the optional package safetensors.",
                          'Install it with: pip install "opencl-llm-studio[hf]"') from None
    tensors = peft_tensors(adapters, cfg)
    config = json.dumps(peft_config(adapters, base_model, lora_dropout), indent=2)
    folder = Path(folder)
    _check_folder_target(folder, force)
    tmp = folder.parent / f".{folder.name}.{secrets.token_hex(4)}.tmp"
    try:
        tmp.mkdir(parents=True)
        save_file(tensors, str(tmp / PEFT_WEIGHTS), metadata={"format": "pt"})
        (tmp / PEFT_CONFIG).write_text(config, encoding="utf-8")
        replace_folder(tmp, folder)
    except OSError as e:
        raise ExportError(f"Writing {folder} failed: {e.strerror or e}.",
                          "Write into a folder you can write to and check free disk space.") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _check_folder_target(folder: Path, force: bool) -> None:
    """ExportError unless `folder` is new, empty, or (with force) a PEFT adapter folder."""
    if os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir()):
        raise ExportError(f"{folder} is a file, not a folder.",
                          "Give a new folder name for the adapter.")
    if not folder.exists() or not any(folder.iterdir()):
        return
    if not (folder / PEFT_CONFIG).is_file():
        raise ExportError(f"{folder} holds other files, not a PEFT adapter folder (no "
                          f"{PEFT_CONFIG}), so it is not replaced, even when overwriting is "
                          "allowed.", "Give a new folder name for the adapter.")
    if not force:
        raise ExportError(f"{folder} already exists.",
                          "Choose a new folder, or allow overwriting.",
                          "Give a new folder, or add --force to replace it.")
