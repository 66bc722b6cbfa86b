"""The training engine, grouped by job. It never imports Qt (import-linter contract in pyproject.toml).

- engine/opencl/: the OpenCL device, its runtime (context, queue, program), the kernel launchers,
  the GEMM dispatch (GemmPlan) and the kernel tuner.
- engine/model/: the Llama-style model on the device: parameters, layers, attention, memory estimate.
- engine/data/: texts, tokenizers (the app's SentencePiece and open models' own), corpora, dialogues.
- engine/training/: the session (state), the Trainer (loop), schedule, time budget, checkpoints.
- engine/generation/: sampling, KV-cache decoding, chat turns.
- engine/files/: model files: GGUF export/import, Hugging Face folders, Modelfile, model cards.
- engine.config, engine.limits, engine.errors, engine.fsutil: settings, their ranges, user-facing
  errors, crash-safe files.
"""
