"""GGUF export: the trained model as one file that llama.cpp, Ollama and LM Studio run.

The file uses architecture "llama" (docs/DESIGN.md, "Export") and is written with the `gguf` package's
GGUFWriter (gguf-py, maintained in the llama.cpp repository), never by hand. Every llama key is
written explicitly; the SentencePiece vocabulary goes in as pieces, scores and token types
(`tokenizer.ggml.model = "llama"`), and the serialized SentencePiece ModelProto is kept too
(base64, key `opencl_llm_studio.tokenizer.sentencepiece_model`) so `import_gguf` rebuilds the
exact tokenizer.

Tensors keep their engine names and numpy shapes: gguf-py writes numpy shape (rows, cols) as ggml
ne {cols, rows}, which is what llama.cpp expects for an (out_features, in_features) weight. Q and K
are written unchanged: the engine's RoPE already is llama.cpp's "NORM" pair convention. Norm
weights are always F32; matrices are F32, F16 or Q8_0 (blocks of 32 values with one f16 scale).
With tied embeddings `output.weight` is omitted and llama.cpp falls back to `token_embd.weight`.

An imported pretrained model (engine.data.open_tokenizer.OpenTokenizer) is written with its own
vocabulary, pre-tokenizer, merges or scores, special ids and chat template (engine.files.gguf_vocab),
head_count_kv and, for llama3 RoPE scaling, the rope_freqs.weight tensor llama.cpp reads.

Beside the GGUF an Ollama Modelfile is written (`write_modelfile`; its text in the words of
Ollama's parser: engine.files.modelfile). A pretrained model's carries its own template in
Ollama's terms with its default system prompt and stops (engine.files.ollama_template); none is
written for a template of no known family (Ollama reads that one from the GGUF). Both writes are
atomic: a temporary file in the target folder, fsync, os.replace; an existing file is replaced
only with force=True. Reading a GGUF back is `engine.files.gguf_import.import_gguf`.
"""

from __future__ import annotations

import base64
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import gguf
import numpy as np

from opencl_llm_studio.engine import fsutil
from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.errors import ExportError
from opencl_llm_studio.engine.files.export_types import DEFAULT_DTYPE, DTYPE_NAMES, QK8_0
from opencl_llm_studio.engine.files.modelfile import OLLAMA_TEMPLATE, OLLAMA_TEMPLATES, modelfile_text  # noqa: F401
from opencl_llm_studio.engine.model.params import ParamTable

if TYPE_CHECKING:
    from opencl_llm_studio.engine.data.tokenizer import Tokenizer

ARCH = "llama"
PREFIX = "opencl_llm_studio"                       # our metadata keys live under "<PREFIX>."
TOKENIZER_KEY = f"{PREFIX}.tokenizer.sentencepiece_model"   # base64 of the ModelProto bytes
FORMAT_KEY = f"{PREFIX}.format_version"
FORMAT_VERSION = 1

# export type (engine.files.export_types) -> (ggml type of 2-D tensors, general.file_type)
DTYPES = {
    "f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
}


@dataclass
class ModelBundle:
    """Everything a GGUF file holds: config, tokenizer, float32 weights by GGUF name, metadata.

    `metadata` holds training parameters and the data summary (learning rate, steps, final loss,
    corpus sizes and sha256, ...): str, bool, int, float, lists of those, and nested dicts, which
    are written as dotted keys under "opencl_llm_studio." (None values are skipped).
    """

    config: ModelConfig
    tokenizer: "Tokenizer"
    weights: dict[str, np.ndarray]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExportResult:
    """path and size_bytes of the GGUF written, the Modelfile beside it (or None), the dtype."""

    path: Path
    size_bytes: int
    modelfile_path: Path | None
    dtype: str

    @property
    def modelfile(self) -> Path | None:  # the name docs/ENGINE_API.md uses
        return self.modelfile_path

    def no_modelfile_note(self) -> str | None:
        """Why no Modelfile was written beside the GGUF (an open model whose chat template is
        of no family engine.files.ollama_template knows: Ollama reads it from the GGUF) and the
        one line Ollama needs; None when one was written."""
        if self.modelfile_path is not None:
            return None
        return (f"No Modelfile: this model's chat template is of no family the Modelfile writer "
                f"knows, so Ollama reads it and the stop tokens from the GGUF; for `ollama "
                f"create NAME -f FILE`, a FILE of one line: FROM ./{self.path.name}")


def tensor_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """GGUF tensor name -> numpy shape, in file order: engine.model.params.ParamTable.shapes()
    (docs/ENGINE_API.md, "Weights"); runtimes look tensors up by name, not position."""
    return ParamTable(config).shapes()


def export_gguf(bundle: ModelBundle, path: str | os.PathLike, dtype: str = DEFAULT_DTYPE,
                force: bool = False, modelfile: str | None = "") -> ExportResult:
    """Write `bundle` to `path` as a llama GGUF, and an Ollama Modelfile `modelfile` beside it.

    dtype: "f32" (exact), "f16" or "q8_0" for the 2-D weights; norm weights stay F32.
    modelfile: file name in the GGUF's folder; "" (default) = "<gguf stem>.Modelfile", so
    several exports can share a folder (`ollama create NAME -f model.Modelfile`); None = none.
    Missing folders of `path` are made. Raises ExportError: unknown dtype; a target file exists
    and force is False; the folder cannot be made or written; a file name the Modelfile cannot
    hold (engine.files.modelfile); weights missing, misshapen or not finite; Q8_0 with a row length
    that is not a multiple of 32 (names the tensor and a fix). On error the disk is as it was
    (folders made and a new Modelfile removed; earlier files intact)."""
    name = str(dtype).lower()
    if name not in DTYPES:
        raise ExportError(f"Unknown export type {dtype!r}.",
                          f"Use one of {', '.join(DTYPE_NAMES)}.")
    qtype, file_type = DTYPES[name]
    path = Path(path)
    if modelfile == "":
        modelfile = Path(path).stem + ".Modelfile"
    chat = None
    if is_open(bundle):   # its own template in Ollama's terms, with its default system prompt
        from opencl_llm_studio.engine.files.ollama_template import ollama_chat
        chat = ollama_chat(bundle.tokenizer)
        if chat is None:   # no family known: Ollama matches the GGUF's template itself
            modelfile = None
    targets = [path] + ([path.parent / modelfile] if modelfile else [])
    for target in targets:
        _check_target(target, force)
    if modelfile:   # Ollama can read every value back
        fmt = 2 if chat is not None else bundle_chat_format(bundle)   # the model's own: chat
        modelfile_text(path.name, bundle.config, fmt, chat)
    tensors = _encode_tensors(bundle, qtype)          # all checks before anything is written

    def write(tmp: Path) -> None:
        writer = gguf.GGUFWriter(tmp, ARCH)
        try:
            title = gguf_text(bundle.metadata.get("name")
                              or (bundle.metadata.get("source") or {}).get("name") or path.stem)
            _add_metadata(writer, bundle, file_type, name=title)
            for tname, (arr, raw) in tensors.items():
                writer.add_tensor(tname, arr, raw_dtype=raw)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()

    before = fsutil.FolderSnapshot(path.parent, only=(modelfile,) if modelfile else ())
    modelfile_path = None
    try:
        _make_folder(path.parent)   # missing folders are made, as other tools do
        if modelfile:   # first: a failed GGUF write then takes a new Modelfile away again
            modelfile_path = write_modelfile(path, bundle.config, path.parent / modelfile,
                                             force=True, chat_format=fmt, chat=chat)
        atomic_write(path, write)
    except BaseException:
        before.undo()   # refused means nothing changed: no new folder, no new Modelfile
        raise
    return ExportResult(path, path.stat().st_size, modelfile_path, name)


def _make_folder(folder: Path) -> None:
    """mkdir -p folder; ExportError naming the folder when that fails."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(f"Cannot create the folder {folder}: {e.strerror or e}.",
                          "Choose a folder you can write to.",
                          "Give a path in a folder you can write to.") from None


def _check_target(target: Path, force: bool) -> None:
    """ExportError when `target` cannot be written: a folder, or an existing file without force."""
    if target.is_dir():
        raise ExportError(f"{target} is a folder, not a file name.",
                          "Choose a file name ending in .gguf.",
                          "Give a file name ending in .gguf.")
    folder = next((p for p in target.parents if os.path.lexists(p)), None)
    if folder is not None and not folder.is_dir():
        raise ExportError(f"{folder} is a file, so {target} cannot be written.",
                          "Choose a file name in a folder.", "Give a path in a folder.")
    if target.exists() and not force:
        raise ExportError(f"{target} already exists.",
                          "Choose another file name, or allow overwriting.",
                          "Give another file name, or add --force to overwrite it.")


def _encode_tensors(bundle: ModelBundle, qtype) -> dict[str, tuple[np.ndarray, Any]]:
    """name -> (array to write, raw ggml type or None) in file order; raises ExportError."""
    cfg, weights = bundle.config, bundle.weights
    shapes = tensor_shapes(cfg)
    missing = [n for n in shapes if n not in weights]
    if missing:
        raise ExportError(f"The model has no tensor {missing[0]} ({len(missing)} missing).",
                          "The weights do not match the model settings; export from the session.")
    if cfg.tie_embeddings and "output.weight" in weights and not np.array_equal(
            weights["output.weight"], weights["token_embd.weight"]):
        raise ExportError("tie_embeddings is set but output.weight differs from token_embd.weight.",
                          "Export with tie_embeddings=False to keep a separate output projection.")
    if bundle.tokenizer.vocab_size != cfg.vocab_size:
        raise ExportError(f"The tokenizer has {bundle.tokenizer.vocab_size} tokens but the model "
                          f"vocab_size is {cfg.vocab_size}.",
                          "Export the tokenizer the model was trained with.")
    out = {}
    for tname, shape in shapes.items():
        w = np.ascontiguousarray(weights[tname], dtype=np.float32)
        if w.shape != shape:
            raise ExportError(f"{tname} has shape {w.shape}, expected {shape} for these settings.",
                              "The weights do not match the model settings.")
        if not np.isfinite(w).all():
            raise ExportError(f"{tname} contains NaN or infinite values: training diverged.",
                              "Retrain with a lower learning rate, or export an earlier "
                              "checkpoint.")
        if w.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
            out[tname] = (w, None)
        elif qtype == gguf.GGMLQuantizationType.F16:
            if np.abs(w).max() > np.finfo(np.float16).max:
                raise ExportError(f"{tname} has values beyond f16's range (65504).",
                                  "Export as f32.")
            out[tname] = (w.astype(np.float16), None)
        else:
            _check_q8_0_rows(tname, w.shape[-1], cfg)
            out[tname] = (gguf.quants.quantize(w, qtype), qtype)
    if cfg.rope_scaling == "llama3":   # llama.cpp reads the scaling from this tensor
        from opencl_llm_studio.engine.model.rope_scaling import llama3_factors
        out["rope_freqs.weight"] = (llama3_factors(cfg), None)
    return out


def _check_q8_0_rows(tname: str, n: int, cfg: ModelConfig) -> None:
    """Q8_0 stores rows in blocks of 32: raise ExportError naming the tensor and a size to use."""
    if n % QK8_0 == 0:
        return
    if n == cfg.d_model:
        # suggest sizes that are multiples of 32 and of 2 * n_head (n_head | d, even head_dim)
        step = QK8_0 * (2 * cfg.n_head) // math.gcd(QK8_0, 2 * cfg.n_head)
        lo, hi = (n // step) * step, (n // step + 1) * step
        sizes = f"{lo} or {hi}" if lo else f"{hi}"
        raise ExportError(
            f"{tname}: d_model {n} is not a multiple of 32, so it cannot be stored as Q8_0.",
            f"Use d_model {sizes} (with n_head {cfg.n_head}), or export as f16 or f32.")
    lo, hi = (n // QK8_0) * QK8_0, (n // QK8_0 + 1) * QK8_0
    sizes = f"{lo} or {hi}" if lo else f"{hi}"
    raise ExportError(
        f"{tname}: ffn_dim {n} is not a multiple of 32, so it cannot be stored as Q8_0.",
        f"Use ffn_dim {sizes}, or 0 (automatic), or export as f16 or f32.")


def _add_metadata(w: gguf.GGUFWriter, bundle: ModelBundle, file_type: int, name: str) -> None:
    """All key/values: general.*, llama.* (every hyperparameter explicit), tokenizer.*, ours."""
    cfg, tok = bundle.config, bundle.tokenizer
    w.add_name(name)
    w.add_type("model")
    w.add_context_length(cfg.context_length)
    w.add_embedding_length(cfg.d_model)
    w.add_block_count(cfg.n_layer)
    w.add_feed_forward_length(cfg.hidden_dim)
    w.add_head_count(cfg.n_head)
    w.add_head_count_kv(cfg.kv_heads)
    w.add_layer_norm_rms_eps(cfg.rms_eps)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_base)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(int(file_type))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if is_open(bundle):   # a pretrained model's own vocabulary and chat template
        from opencl_llm_studio.engine.files.gguf_vocab import add_tokenizer
        add_tokenizer(w, tok)
        for key, value in _flatten(bundle.metadata):
            _add_value(w, f"{PREFIX}.{key}", value)
        return
    w.add_tokenizer_model("llama")
    w.add_token_list([str(p) for p in tok.pieces()])
    w.add_token_scores([float(s) for s in tok.scores()])
    w.add_token_types([int(t) for t in tok.token_types()])
    w.add_bos_token_id(int(tok.bos_id))
    w.add_eos_token_id(int(tok.eos_id))
    w.add_unk_token_id(int(tok.unk_id))
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(bool(tok.add_space_prefix))
    w.add_remove_extra_whitespaces(False)
    w.add_chat_template(chat_template(bundle))
    w.add_uint32(FORMAT_KEY, FORMAT_VERSION)
    w.add_string(f"{PREFIX}.tokenizer.kind", tok.kind)
    w.add_string(TOKENIZER_KEY, base64.b64encode(tok.to_bytes()).decode("ascii"))
    for key, value in _flatten(bundle.metadata):
        _add_value(w, f"{PREFIX}.{key}", value)


def is_open(bundle: ModelBundle) -> bool:
    """Whether the bundle is an imported pretrained model (engine.data.open_tokenizer.OpenTokenizer):
    its GGUF keeps the source's tokenizer (model, pre, merges, special ids, chat template)."""
    from opencl_llm_studio.engine.data.open_tokenizer import OpenTokenizer
    return isinstance(bundle.tokenizer, OpenTokenizer)


def bundle_chat_format(bundle: ModelBundle) -> int:
    """The chat format the bundle's model was tuned with (metadata "chat_format", written by
    TrainingSession.bundle); the current one when absent. ExportError for an unknown one."""
    from opencl_llm_studio.engine.data.dialogue import CHAT_FORMAT, CHAT_FORMATS  # here: dialogue imports the tokenizer
    fmt = bundle.metadata.get("chat_format", CHAT_FORMAT)
    if fmt not in CHAT_FORMATS:
        raise ExportError(f"Unknown chat format {fmt!r} in the model's metadata.",
                          f"Use one of {CHAT_FORMATS}.")
    return int(fmt)


def chat_template(bundle: ModelBundle) -> str:
    """The Jinja2 chat template (engine.data.dialogue.CHAT_TEMPLATES) of the bundle's chat format."""
    from opencl_llm_studio.engine.data.dialogue import CHAT_TEMPLATES
    return CHAT_TEMPLATES[bundle_chat_format(bundle)]


def _flatten(meta: dict, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested dicts -> [("a.b", v)]; key characters outside [A-Za-z0-9_.-] become "_"."""
    items = []
    for k, v in meta.items():
        key = prefix + "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else "_"
                               for c in str(k))
        if isinstance(v, dict):
            items += _flatten(v, key + ".")
        elif v is not None and key not in ("format_version", "tokenizer.kind",
                                            "tokenizer.sentencepiece_model"):
            items.append((key, v))
    return items


def _add_value(w: gguf.GGUFWriter, key: str, v: Any) -> None:
    """One metadata value: bool, int64, float64, string, or a non-empty list of one of those."""
    T = gguf.GGUFValueType
    if isinstance(v, (bool, np.bool_)):
        w.add_bool(key, bool(v))
    elif isinstance(v, (int, np.integer)) and -2**63 <= int(v) < 2**63:
        w.add_int64(key, int(v))
    elif isinstance(v, (float, np.floating)):
        w.add_float64(key, float(v))
    elif isinstance(v, (list, tuple, np.ndarray)):
        v = list(np.asarray(v).tolist()) if isinstance(v, np.ndarray) else list(v)
        if not v:
            return
        if all(isinstance(x, bool) for x in v):
            w.add_key_value(key, v, T.ARRAY, sub_type=T.BOOL)
        elif all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            w.add_key_value(key, v, T.ARRAY, sub_type=T.INT64)
        elif all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            w.add_key_value(key, [float(x) for x in v], T.ARRAY, sub_type=T.FLOAT64)
        else:
            w.add_key_value(key, [gguf_text(x) for x in v], T.ARRAY, sub_type=T.STRING)
    else:
        w.add_string(key, gguf_text(v))


def gguf_text(v: Any) -> str:
    """str(v) as a GGUF string every reader gets back whole: valid UTF-8 (a file name's
    undecodable bytes, Python's lone surrogates, become U+FFFD) without NUL (llama.cpp's
    llama_model_meta_val_str hands strings to C, which ends them at the first NUL: U+FFFD)."""
    return "".join("\ufffd" if c == "\0" or "\ud800" <= c <= "\udfff" else c for c in str(v))


def atomic_write(target: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp) on a fresh file in target's folder, fsync it, then os.replace it onto target.

    The temporary file is opened with mode "xb" (not mkstemp's 0600) so the result gets the
    umask's usual permissions, readable by an Ollama service user. Raises ExportError when the
    folder is not writable, the disk is full or the target is locked; target is then untouched.
    """
    target = Path(target)
    tmp = fsutil.temp_path(target)  # names its writer: a killed export's is removed later
    try:
        open(tmp, "xb").close()
    except OSError as e:
        raise ExportError(f"Cannot write to the folder {target.parent}: {e.strerror or e}.",
                          "Choose a folder you can write to.",
                          "Give a path in a folder you can write to.") from e
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:
        raise ExportError(f"Writing {target} failed: {e.strerror or e}.",
                          "Check free disk space; close programs that have the file open.") from e
    finally:
        tmp.unlink(missing_ok=True)
    fsutil.fsync_dir(target.parent)                  # make the rename itself durable (POSIX)
    fsutil.remove_stale_temps(target)


def write_modelfile(gguf_path: str | os.PathLike, config: ModelConfig,
                    path: str | os.PathLike | None = None, force: bool = False,
                    chat_format: int = 2, chat=None) -> Path:
    """Write the Modelfile for `gguf_path` (default: "Modelfile" in its folder), atomically;
    chat: an imported model's template (modelfile_text).

    Raises ExportError when the file exists and force is False, or the folder is not writable.
    """
    gguf_path = Path(gguf_path)
    path = Path(path) if path is not None else gguf_path.parent / "Modelfile"
    _check_target(path, force)
    text = modelfile_text(gguf_path.name, config, chat_format, chat)   # ExportError first
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8", newline="\n"))
    return path

