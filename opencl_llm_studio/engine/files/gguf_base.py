"""The frozen, still-quantized base of a LoRA run, read from its GGUF file
(engine.model.quant_base.QuantBase), and the reference a LoRA run's checkpoint keeps to it."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from gguf.gguf_reader import ReaderTensor

from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.errors import ModelImportError
from opencl_llm_studio.engine.files.open_gguf import check_tensors
from opencl_llm_studio.engine.model.quant_base import QuantBase
from opencl_llm_studio.engine.opencl.runtime import Runtime


def base_reference(path, known: dict | None = None) -> dict:
    """What a LoRA run's checkpoint header records of its base GGUF: the absolute path (the
    run folder is this machine's) and the size, to notice a different file there later; and
    the file's tensor table (tensor_table) where `known` (the import's record of the same
    file) has one."""
    path = Path(path).resolve()
    ref = {"kind": "gguf", "path": str(path), "size": path.stat().st_size, "name": path.name}
    if known and known.get("path") == str(path) and known.get("tensor_table"):
        ref["tensor_table"] = known["tensor_table"]
    return ref


def tensor_table(reader: gguf.GGUFReader, path) -> dict:
    """The file's tensors as gguf.GGUFReader found them, to map them again without it: the
    reader parses every metadata key first, 5 of the 6 s a LoRA run of SmolLM2-135M took to
    open (its 49,152-token vocabulary and merges). The file's size and mtime_ns tell whether
    the table still holds; per tensor: name, ggml type, ggml shape, elements, bytes, data
    offset in the file, and the dtype and shape of the array the reader gave."""
    st = Path(path).stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "tensors": [[t.name, int(t.tensor_type), [int(d) for d in t.shape],
                         int(t.n_elements), int(t.n_bytes), int(t.data_offset),
                         t.data.dtype.str, list(t.data.shape)] for t in reader.tensors]}


def _mapped_tensors(path: Path, table: dict | None) -> dict | None:
    """{name: ReaderTensor} mapped from the file by a tensor_table, as the reader would
    give them (field None); None when there is no table or the file changed since."""
    st = path.stat()
    if not table or table.get("size") != st.st_size or table.get("mtime_ns") != st.st_mtime_ns:
        return None
    whole = np.memmap(path, np.uint8, "r")
    out = {}
    for name, kind, shape, n_elements, n_bytes, offset, dtype, dshape in table["tensors"]:
        data = whole[offset:offset + n_bytes].view(np.dtype(dtype)).reshape(dshape)
        out[name] = ReaderTensor(name, gguf.GGMLQuantizationType(kind),
                                 np.array(shape, np.uint64), n_elements, n_bytes, offset, data,
                                 None)
    return out


def open_quant_base(rt: Runtime, cfg: ModelConfig, ref: dict) -> QuantBase:
    """The QuantBase of the GGUF a base reference names, for cfg (the run's config: the
    context length may be shorter than the file's). Its tensors are mapped by the ref's
    tensor_table while the file is unchanged, else read by gguf.GGUFReader (and the table put
    in `ref`, which the run's next checkpoint keeps). Raises ModelImportError when the file
    is missing, has changed size, or its tensors do not match cfg."""
    path = Path(ref["path"])
    if not path.is_file():
        raise ModelImportError(
            f"This LoRA run tunes {ref.get('name', path.name)}, which is no longer at {path}.",
            "Put the GGUF back there: the run holds only its adapters, not the base.")
    if "size" in ref and path.stat().st_size != int(ref["size"]):
        raise ModelImportError(
            f"{path} is not the file this LoRA run was tuned on ({ref['size']} bytes then, "
            f"{path.stat().st_size} now).",
            "Put the original GGUF back there: adapters belong to the base they were tuned on.")
    tensors = _mapped_tensors(path, ref.get("tensor_table"))
    if tensors is None:
        reader = gguf.GGUFReader(path)
        tensors = {t.name: t for t in reader.tensors}
        ref["tensor_table"] = tensor_table(reader, path)
    check_tensors(tensors, cfg, path.name)
    return QuantBase(rt, cfg, tensors)
