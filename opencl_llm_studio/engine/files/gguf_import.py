"""GGUF import: read a file written by `engine.files.gguf_export` back into a ModelBundle.

Reading goes through gguf-py's GGUFReader, after a bounded walk over the header (`_check_layout`)
that checks every length against the file size. That walk turns a truncated, corrupted or
foreign file into a ModelImportError with a plain message (GGUFReader alone may raise IndexError,
loop over a bogus array length, or fail deep inside numpy). Nothing in the file is executed:
metadata are plain values and the tokenizer is a SentencePiece ModelProto (protobuf data).

Tensors of type F32, F16 and Q8_0 are dequantized to float32 (gguf.quants.dequantize). The
tokenizer is rebuilt exactly from the ModelProto stored under
`opencl_llm_studio.tokenizer.sentencepiece_model`. GGUFs written by other programs (which lack
it: pretrained open models) are read by engine.files.open_gguf, which refuses what the engine cannot
run with the reason.
"""

from __future__ import annotations

import base64
import binascii
import mmap
import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from opencl_llm_studio.engine.config import ModelConfig, swiglu_hidden_dim
from opencl_llm_studio.engine.errors import ModelImportError, StudioError
from opencl_llm_studio.engine.files.gguf_base import tensor_table
from opencl_llm_studio.engine.files.open_gguf import f32_decimal, read_open_bundle
from opencl_llm_studio.engine.model.params import tensors_per_layer
from opencl_llm_studio.engine.files.export_types import DTYPE_NAMES
from opencl_llm_studio.engine.files.gguf_export import (ARCH, DTYPES, FORMAT_KEY, PREFIX, TOKENIZER_KEY, ModelBundle,
                                tensor_shapes)

# GGUFValueType -> bytes, for the scalar types (8 is STRING, 9 is ARRAY)
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4
_READABLE = tuple(qtype for qtype, _ in DTYPES.values())  # what export_gguf writes
_HINT_FOREIGN = ("This app opens llama-architecture GGUFs: ones it exported, and pretrained open "
                 "models such as SmolLM2, TinyLlama or Llama 3.x.")
_HINT_BROKEN = ("The file is incomplete or damaged (an interrupted export, copy or download); "
                "export it again.")


class _Broken(Exception):
    """Internal: the header walk found a problem; the message completes 'NAME is ...'."""


def import_gguf(path, weights: bool = True) -> ModelBundle:
    """Read a GGUF: config, tokenizer, float32 weights, metadata. One written by export_gguf
    comes back with its SentencePiece Tokenizer and training metadata; any other llama GGUF (a
    pretrained open model) with an OpenTokenizer and metadata["source"] (engine.files.open_gguf).
    weights=False: everything but the weights, checked the same from the tensor infos, no
    tensor read or dequantized; bundle.weights is {} (a model card: a 4-bit 1B model's tensors
    take seconds to dequantize).

    Raises ModelImportError (never another exception for a bad file): missing or empty file,
    not a GGUF, truncated or corrupted, not architecture llama, hyperparameters the engine does not
    support (partial RoPE, biases, other RoPE scalings, ...), tensors missing, misshapen or of
    a type gguf-py cannot read, or a vocabulary the engine cannot run.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelImportError(f"{path} does not exist or is not a file.",
                               "Choose a .gguf model file.",
                               cli_hint="Give the path of a .gguf model file.")
    size = path.stat().st_size
    if size == 0:
        raise ModelImportError(f"{path.name} is empty (0 bytes).", _HINT_BROKEN)
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                raise ModelImportError(f"{path.name} is not a GGUF file (it does not start with "
                                       "'GGUF').", _HINT_FOREIGN)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                _check_layout(buf, size)
        reader = gguf.GGUFReader(path)
        bundle = _read_bundle(reader, path.name, weights)
        if "source" in bundle.metadata:   # an open model: where it is, for a LoRA run's base
            bundle.metadata["source"]["path"] = str(path.resolve())
            bundle.metadata["source"]["tensor_table"] = tensor_table(reader, path)
        del reader                                     # drops the memmap; weights are copies
        return bundle
    except _Broken as e:
        raise ModelImportError(f"{path.name} is {e}.", _HINT_BROKEN) from None
    except OSError as e:
        raise ModelImportError(f"Cannot read {path}: {e.strerror or e}.",
                               "Check the file's permissions.") from None
    except (ValueError, KeyError, IndexError, TypeError, OverflowError, UnicodeDecodeError,
            MemoryError, struct.error, binascii.Error) as e:
        raise ModelImportError(f"{path.name} is corrupted ({type(e).__name__}: {e}).",
                               _HINT_BROKEN) from None


def _check_layout(buf, size: int) -> None:
    """Walk header, key/values and tensor infos with bounds checks; raise _Broken on any problem."""
    pos = 4

    def take(n: int, what: str) -> int:
        nonlocal pos
        if pos + n > size:
            raise _Broken(f"truncated: {what} needs {pos + n} bytes but the file has {size}")
        start, pos = pos, pos + n
        return start

    u32 = lambda what: struct.unpack_from("<I", buf, take(4, what))[0]  # noqa: E731
    u64 = lambda what: struct.unpack_from("<Q", buf, take(8, what))[0]  # noqa: E731

    def string(what: str) -> str:
        n = u64(what)
        start = take(n, what)
        return bytes(buf[start:start + n]).decode("utf-8", "replace")

    def value(vtype: int, what: str, nested: bool = False) -> None:
        if vtype in _SCALAR_SIZES:
            take(_SCALAR_SIZES[vtype], what)
        elif vtype == _STRING:
            take(u64(what), what)
        elif vtype == _ARRAY and not nested:
            itype, n = u32(what), u64(what)
            if itype in _SCALAR_SIZES:
                take(n * _SCALAR_SIZES[itype], what)
            elif itype == _STRING:
                for _ in range(n):                    # each string eats >= 8 bytes: bounded
                    take(u64(what), what)
            else:
                raise _Broken(f"corrupted: {what} has array element type {itype}")
        else:
            raise _Broken(f"corrupted: {what} has unknown value type {vtype}")

    version = u32("the version")
    if version not in (2, 3):
        raise _Broken(f"a GGUF of version {version}, which this app cannot read (it reads 2 and 3)")
    n_tensors, n_kv = u64("the tensor count"), u64("the key count")
    alignment = gguf.GGUF_DEFAULT_ALIGNMENT
    for i in range(n_kv):                               # each key/value eats >= 13 bytes: bounded
        key = string(f"key {i}")
        vtype = u32(f"the type of {key!r}")
        value(vtype, f"the value of {key!r}")
        if key == "general.alignment" and vtype == _UINT32:
            alignment = struct.unpack_from("<I", buf, pos - 4)[0]
    if alignment == 0 or alignment & (alignment - 1):
        raise _Broken(f"corrupted: alignment {alignment} is not a power of two")
    infos = []
    for i in range(n_tensors):
        name = string(f"tensor name {i}")
        n_dims = u32(f"tensor {name}")
        if not 1 <= n_dims <= 4:
            raise _Broken(f"corrupted: tensor {name} has {n_dims} dimensions")
        dims = [u64(f"tensor {name}") for _ in range(n_dims)]
        ttype, offset = u32(f"tensor {name}"), u64(f"tensor {name}")
        try:
            block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
        except (ValueError, KeyError):
            raise _Broken(f"corrupted: tensor {name} has unknown type {ttype}") from None
        infos.append((name, offset, int(np.prod(dims, dtype=object)) * type_size // block))
    data_start = -(-pos // alignment) * alignment
    for name, offset, nbytes in infos:
        if data_start + offset + nbytes > size:
            raise _Broken(f"truncated: tensor {name} ends at byte {data_start + offset + nbytes} "
                          f"but the file has {size} bytes")


def _read_bundle(reader: gguf.GGUFReader, fname: str, weights: bool = True) -> ModelBundle:
    """Fields and tensors of an opened reader -> ModelBundle (weights: as import_gguf's);
    raises ModelImportError. A GGUF without the app's stored tokenizer is an open model's
    (engine.files.open_gguf)."""
    fields = reader.fields
    if TOKENIZER_KEY not in fields:
        return read_open_bundle(reader, fname, weights)

    def get(key: str, default: Any = None) -> Any:
        f = fields.get(key)
        if f is None:
            if default is None:
                raise ModelImportError(f"{fname} has no {key} value.", _HINT_FOREIGN)
            return default
        return f.contents()

    arch = get("general.architecture")
    if arch != ARCH:
        raise ModelImportError(f"{fname} is a {arch!r} model; this app reads only 'llama' models.",
                               _HINT_FOREIGN)
    tokens = get("tokenizer.ggml.tokens")
    a = f"{ARCH}."
    d, n_head = int(get(a + "embedding_length")), int(get(a + "attention.head_count"))
    n_kv = int(get(a + "attention.head_count_kv", n_head))   # export writes cfg.kv_heads
    ffn, n_layer = int(get(a + "feed_forward_length")), int(get(a + "block_count"))
    # before tables of n_layer blocks are built
    if tensors_per_layer(ModelConfig()) * n_layer > len(reader.tensors):
        raise ModelImportError(f"{fname} says it has {n_layer} blocks but holds only "
                               f"{len(reader.tensors)} tensors.", _HINT_BROKEN)
    config = ModelConfig(
        vocab_size=int(get(a + "vocab_size", len(tokens))), d_model=d,
        n_layer=n_layer, n_head=n_head, n_kv_head=0 if n_kv == n_head else n_kv,
        context_length=int(get(a + "context_length")),
        ffn_dim=0 if ffn == swiglu_hidden_dim(d) else ffn,
        tie_embeddings=all(t.name != "output.weight" for t in reader.tensors),
        rms_eps=f32_decimal(get(a + "attention.layer_norm_rms_epsilon")),
        rope_base=f32_decimal(get(a + "rope.freq_base", 10000.0)))
    try:
        config.validate()
    except StudioError as e:
        raise ModelImportError(f"{fname} has settings this app cannot use: {e}", e.hint, e.cli_hint) from None
    if int(get(a + "rope.dimension_count", config.head_dim)) != config.head_dim:
        raise ModelImportError(f"{fname} rotates only part of each head (partial RoPE), which "
                               "this app does not train.", _HINT_FOREIGN)
    arrays = _read_tensors(reader, config, fname, weights)
    tokenizer = _read_tokenizer(fields, tokens, config, fname)
    return ModelBundle(config, tokenizer, arrays, _read_metadata(fields))


def _read_tensors(reader: gguf.GGUFReader, config: ModelConfig, fname: str,
                  weights: bool = True) -> dict[str, np.ndarray]:
    """name -> float32 array (a copy, not a view of the memmap) with the engine's numpy shape;
    weights=False: {} after the same checks of names, shapes and types."""
    shapes = tensor_shapes(config)
    found = {t.name: t for t in reader.tensors}
    for name in shapes:
        if name not in found:
            raise ModelImportError(f"{fname} lacks the tensor {name}.", _HINT_BROKEN)
    extra = sorted(set(found) - set(shapes))
    if extra:
        raise ModelImportError(f"{fname} has a tensor this app does not know: {extra[0]}.",
                               _HINT_FOREIGN)
    arrays = {}
    for name, shape in shapes.items():
        t = found[name]
        got = tuple(int(x) for x in reversed(t.shape.tolist()))   # ggml ne is numpy shape reversed
        if got != shape:
            raise ModelImportError(f"{fname}: tensor {name} has shape {got}, expected {shape}.",
                                   _HINT_BROKEN)
        if t.tensor_type not in _READABLE:
            raise ModelImportError(f"{fname}: tensor {name} is stored as {t.tensor_type.name}, "
                                   "which this app cannot read.",
                                   f"Export as {', '.join(DTYPE_NAMES[:-1])} or {DTYPE_NAMES[-1]}.")
        if weights:
            w = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
            arrays[name] = np.array(w, dtype=np.float32).reshape(shape)
    return arrays


def _read_tokenizer(fields, tokens: list[str], config: ModelConfig, fname: str):
    """Rebuild the Tokenizer from the stored ModelProto and check it against the GGUF vocabulary."""
    from opencl_llm_studio.engine.data.tokenizer import Tokenizer
    f = fields.get(TOKENIZER_KEY)
    if f is None:
        raise ModelImportError(f"{fname} was not exported by this app: it has no stored tokenizer.",
                               _HINT_FOREIGN)
    try:
        tokenizer = Tokenizer.from_bytes(base64.b64decode(f.contents(), validate=True))
    except (StudioError, ValueError, RuntimeError) as e:
        raise ModelImportError(f"{fname}: the stored tokenizer is damaged ({e}).",
                               _HINT_BROKEN) from None
    if tokenizer.vocab_size != config.vocab_size or list(tokenizer.pieces()) != list(tokens):
        raise ModelImportError(f"{fname}: the stored tokenizer does not match "
                               "tokenizer.ggml.tokens.", _HINT_BROKEN)
    return tokenizer


def _read_metadata(fields) -> dict[str, Any]:
    """Our "<PREFIX>.a.b" keys -> nested dict {"a": {"b": value}} (internal keys left out)."""
    meta: dict[str, Any] = {}
    internal = {TOKENIZER_KEY, FORMAT_KEY, f"{PREFIX}.tokenizer.kind"}
    for key, f in fields.items():
        if not key.startswith(PREFIX + ".") or key in internal:
            continue
        value = f.contents()
        node = meta
        *parents, leaf = key[len(PREFIX) + 1:].split(".")
        for p in parents:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        node[leaf] = value
    return meta
