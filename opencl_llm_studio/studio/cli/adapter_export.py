"""`llm-studio export RUN OUT.gguf --adapter` and `export RUN OUT --format peft`: a LoRA run's
adapters alone, beside the base model they were tuned on (studio.adapter_files, which the
studio's export dialog writes through too)."""

from __future__ import annotations

from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.studio.adapter_files import export_adapters


def export_adapter(session, args) -> int:
    """Write the adapters of a LoRA run `session`: a GGUF LoRA adapter (and an Ollama
    Modelfile, FROM the base GGUF and ADAPTER it) or, with --format peft, a PEFT folder.
    StudioError for a run that is not a LoRA run, and for --format hf."""
    if args.format == "hf" and session.lora is not None:
        raise StudioError("--adapter writes a GGUF LoRA adapter or, with --format peft, a PEFT "
                          "folder.", "Use --format gguf (default) or --format peft.")
    done = export_adapters(session, args.output, "peft" if args.format == "peft" else "adapter",
                           force=args.force)
    written = [done.path] + ([done.modelfile] if done.modelfile else [])
    print(f"Wrote {' and '.join(map(str, written))} ({done.usage})")
    return 0
