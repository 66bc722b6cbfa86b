"""The training engine, in layers (docs/DESIGN.md "Layers"; import-linter contracts in
pyproject.toml): each imports only those below it, and none imports Qt.

- engine/training/: the session (state), the Trainer (loop), schedule, time budget, health,
  evaluation, presets.
- engine/files/: checkpoints, GGUF export/import, Hugging Face folders, Modelfile, model cards.
- engine/generation/: sampling, KV-cache decoding, chat turns.
- engine/data/: texts, tokenizers (the app's SentencePiece and open models' own), corpora, dialogues.
- engine/model/: the Llama-style model on the device: parameters, layers, attention, memory
  estimate, and the tuner that times its products.
- engine/opencl/: the OpenCL device, its runtime (context, queue, program), the kernel launchers,
  the GEMM dispatch (GemmPlan).
- engine.config, engine.limits: settings and their ranges; engine.progress, engine.metrics,
  engine.fsutil, engine.extras: leaves; engine.errors: user-facing errors.
"""
