"""`llm-studio export RUN OUT.gguf --adapter` and `export RUN OUT --format peft`: a LoRA run's
adapters alone (engine.files.lora_export), beside the base model they were tuned on."""

from __future__ import annotations

import os
from pathlib import Path

from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.engine.files.lora_export import (LoraAdapters, export_adapter_gguf,
                                                        export_peft, write_adapter_modelfile)


def export_adapter(session, args) -> int:
    """Write the adapters of a LoRA run `session`: a GGUF LoRA adapter (and an Ollama
    Modelfile, FROM the base GGUF and ADAPTER it) or, with --format peft, a PEFT folder.
    StudioError for a run that is not a LoRA run."""
    if session.lora is None:
        raise StudioError("This run tunes the whole model, so it has no adapters to export.",
                          "Export the model itself (leave out --adapter and --format peft); "
                          "adapters come from `train --continue ... --lora-rank R` runs.")
    lora, cfg = session.lora, session.model_config
    adapters = LoraAdapters.from_named(lora, session.model.adapters())
    base = session.base_ref or {}
    base_name = base.get("name", "base.gguf")
    if args.format == "peft":
        folder = export_peft(adapters, session.export_config(), args.output,
                             (session.source or {}).get("name") or Path(base_name).stem,
                             force=args.force, lora_dropout=lora.dropout)
        print(f"Wrote {folder} (PEFT LoRA adapter: adapter_config.json, "
              "adapter_model.safetensors; load with PeftModel.from_pretrained over the base)")
        return 0
    if args.format == "hf":
        raise StudioError("--adapter writes a GGUF LoRA adapter or, with --format peft, a PEFT "
                          "folder.", "Use --format gguf (default) or --format peft.")
    path = export_adapter_gguf(adapters, cfg, args.output, base_name, force=args.force)
    modelfile = Path(path).with_suffix(".Modelfile")
    # Ollama reads FROM and ADAPTER relative to the Modelfile's folder
    from_base = (os.path.relpath(base["path"], modelfile.resolve().parent) if base.get("path")
                 else base_name)
    chat, fmt = None, session.chat_format
    if session.source is not None:   # an imported model: its own template in Ollama's terms
        from opencl_llm_studio.engine.files.ollama_template import ollama_chat
        chat, fmt = ollama_chat(session.tokenizer), 2
    written = [path]
    if session.source is None or chat is not None:   # else Ollama reads the base's template
        written.append(write_adapter_modelfile(modelfile, from_base, Path(path).name, cfg, fmt,
                                               chat, force=args.force))
    print(f"Wrote {' and '.join(map(str, written))} (LoRA adapter of rank {lora.rank} for "
          f"{base_name}: `llama-cli -m {base.get('path', base_name)} --lora {path}`)")
    return 0
