"""The frozen, still-quantized base of a LoRA run, read from its GGUF file
(engine.model.quant_base.QuantBase), and the reference a LoRA run's checkpoint keeps to it."""

from __future__ import annotations

from pathlib import Path

import gguf

from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.errors import ModelImportError
from opencl_llm_studio.engine.files.open_gguf import check_tensors
from opencl_llm_studio.engine.model.quant_base import QuantBase
from opencl_llm_studio.engine.opencl.runtime import Runtime


def base_reference(path) -> dict:
    """What a LoRA run's checkpoint header records of its base GGUF: the absolute path (the
    run folder is this machine's) and the size, to notice a different file there later."""
    path = Path(path).resolve()
    return {"kind": "gguf", "path": str(path), "size": path.stat().st_size, "name": path.name}


def open_quant_base(rt: Runtime, cfg: ModelConfig, ref: dict) -> QuantBase:
    """The QuantBase of the GGUF a base reference names, for cfg (the run's config: the
    context length may be shorter than the file's). Raises ModelImportError when the file is
    missing, has changed size, or its tensors do not match cfg."""
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
    reader = gguf.GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    check_tensors(tensors, cfg, path.name)
    return QuantBase(rt, cfg, tensors)
