"""A LoRA run's adapters written alone, beside the base model they were tuned on: a GGUF LoRA
adapter (llama.cpp's --lora, with an Ollama Modelfile that is FROM the base GGUF and ADAPTER
it) or a PEFT folder (transformers + peft). The one writer of both front ends: `llm-studio
export RUN OUT.gguf --adapter` / `--format peft` (studio.cli.adapter_export) and the studio's
export dialog (studio.ui.run.worker_tasks). Qt-free; the files themselves are
engine.files.lora_export's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.engine.files.lora_export import (LoraAdapters, export_adapter_gguf,
                                                        export_peft, write_adapter_modelfile)

ADAPTER_FORMS = ("adapter", "peft")   # a GGUF LoRA adapter, a PEFT folder


@dataclass(frozen=True)
class AdapterExport:
    """What was written: `path` (the adapter GGUF or the PEFT folder), its size in bytes, the
    Ollama Modelfile beside an adapter GGUF (None: none written), `dtype` (the form:
    "adapter" or "peft", as studio.protocol.ExportRequest names it) and `usage`, one line on
    how to load it."""
    path: Path
    size_bytes: int
    modelfile: Path | None
    dtype: str
    usage: str

    def no_modelfile_note(self) -> str | None:
        """Why an adapter GGUF has no Modelfile beside it (None for a PEFT folder or when one
        was written), as engine.files.gguf_export.ExportResult says it for a model."""
        if self.modelfile is not None or self.dtype != "adapter":
            return None
        return ("No Modelfile: Ollama reads the chat template from the base GGUF; for `ollama "
                "create`, write FROM (the base GGUF) and ADAPTER ./" + self.path.name + ".")


def export_adapters(session, output, form: str = "adapter", force: bool = False
                    ) -> AdapterExport:
    """Write the adapters of the LoRA run `session` (an engine TrainingSession) to `output`:
    form "adapter" a GGUF LoRA adapter (and its Modelfile), "peft" a PEFT folder. force:
    replace what is there. Raises StudioError for a run that is not a LoRA run or an unknown
    form, ExportError when the files cannot be written."""
    if session.lora is None:
        raise StudioError("This run tunes the whole model, so it has no adapters to export.",
                          "Export the model itself (format GGUF or Hugging Face); adapters "
                          "come from runs continued with Tuning method LoRA.",
                          cli_hint="Export the model itself (leave out --adapter and --format "
                                   "peft); adapters come from `train --continue ... "
                                   "--lora-rank R` runs.")
    if form not in ADAPTER_FORMS:
        raise StudioError(f"Adapters are written as {' or '.join(ADAPTER_FORMS)}, not {form}.")
    lora = session.lora
    adapters = LoraAdapters.from_named(lora, session.model.adapters())
    base = session.base_ref or {}
    base_name = base.get("name", "base.gguf")
    if form == "peft":
        folder = export_peft(adapters, session.export_config(), output,
                             (session.source or {}).get("name") or Path(base_name).stem,
                             force=force, lora_dropout=lora.dropout)
        size = sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
        return AdapterExport(Path(folder), size, None, "peft",
                             "PEFT LoRA adapter: adapter_config.json, adapter_model.safetensors; "
                             "load with PeftModel.from_pretrained over the base")
    path = Path(export_adapter_gguf(adapters, session.model_config, output, base_name,
                                    force=force))
    modelfile = _modelfile(session, path, base, base_name, force)
    return AdapterExport(path, path.stat().st_size, modelfile, "adapter",
                         f"LoRA adapter of rank {lora.rank} for {base_name}: "
                         f"`llama-cli -m {base.get('path', base_name)} --lora {path}`")


def _modelfile(session, path: Path, base: dict, base_name: str, force: bool) -> Path | None:
    """The Ollama Modelfile beside the adapter GGUF `path` (FROM the base, ADAPTER it), or None
    where Ollama must read the chat template from the base (an imported model whose template
    is of no family engine.files.ollama_template knows)."""
    modelfile = path.with_suffix(".Modelfile")
    # Ollama reads FROM and ADAPTER relative to the Modelfile's folder
    from_base = (os.path.relpath(base["path"], modelfile.resolve().parent) if base.get("path")
                 else base_name)
    chat, fmt = None, session.chat_format
    if session.source is not None:   # an imported model: its own template in Ollama's terms
        from opencl_llm_studio.engine.files.ollama_template import ollama_chat
        chat, fmt = ollama_chat(session.tokenizer), 2
        if chat is None:
            return None
    return Path(write_adapter_modelfile(modelfile, from_base, path.name, session.model_config,
                                        fmt, chat, force=force))
