"""Model files: GGUF export and import (gguf_export, gguf_import, gguf_vocab, export_types), pretrained open
models (open_gguf, open_run, model_card), run checkpoints (checkpoint), Ollama Modelfiles and Hugging Face folders (hf)."""
