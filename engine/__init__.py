"""The training engine: OpenCL device, tokenizer, data, model, optimizer, training loop,
generation, checkpoints and GGUF export. It never imports Qt (see the import-linter contract in
pyproject.toml)."""
