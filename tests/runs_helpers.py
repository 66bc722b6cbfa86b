"""Run folders for the Runs tests, written the way the engine writes them (engine.files.checkpoint.save
and StepMetrics records), with tiny weight arrays: no training needed."""

import json
import math
import time
from pathlib import Path

import numpy as np

from opencl_llm_studio.engine.files import checkpoint
from opencl_llm_studio.engine.config import ModelConfig, TrainConfig


def make_run(root, name, lr=3e-3, d_model=32, steps_done=40, total=40, saved_step=None,
             tune=False, health=True, bpb=False, stamp="20261101-120000", age_s=3600):
    """A run folder root/<stamp>: checkpoint at saved_step (None: steps_done; -1: none) and
    metrics.jsonl for steps 1..steps_done, loss falling faster for a lower lr."""
    folder = Path(root) / stamp
    folder.mkdir(parents=True)
    mc = ModelConfig(vocab_size=300, d_model=d_model, n_layer=1, n_head=2, context_length=8)
    tc = TrainConfig(pretrain_steps=total, tune_steps=0, learning_rate=lr, batch_size=2,
                     eval_interval=10)
    records = []
    for s in range(1, steps_done + 1):
        loss = math.log(300) * math.exp(-s * lr * 10) + 0.1
        r = {"step": s, "total_steps": total, "stage": "pretrain", "loss": loss,
             "grad_norm": 2.0 if s % 7 == 0 else 0.5, "lr": lr, "tokens_per_s": 1000.0,
             "elapsed_s": 0.5 * s}
        if s % 10 == 0:
            r["val_loss"] = loss + 0.2
            if bpb:
                r["val_bpb"], r["val_source"] = (loss + 0.2) / math.log(2) / 3, "held-out text"
            if health:
                r["health"] = {"grad_norm": {"attention": 0.3, "feed_forward": 0.2,
                                             "embedding": 0.1, "norms": 0.01},
                               "update_ratio": {"attention": lr * 5, "feed_forward": lr * 4,
                                                "embedding": lr * 3, "norms": lr / 2},
                               "clipped": 1, "skipped": 0, "window": 10}
        records.append(r)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    saved = steps_done if saved_step is None else saved_step
    if saved >= 0:
        header = {"model_config": mc.__dict__, "train_config": tc.__dict__, "step": saved,
                  "adam_t": saved, "last_loss": records[saved - 1]["loss"] if saved else None,
                  "rng_state": {}, "history": [], "tokenizer_kind": "bpe",
                  "data": {"pretrain_chars": 100, "pretrain_sha256": "ab" * 32,
                           "tune_chars": 50 if tune else 0, "tune_sha256": "cd" * 32},
                  "device": "Test CPU"}
        z = np.zeros(4, np.float32)
        checkpoint.save(folder, header, z, z, z, b"tok", "text", None)
    old = time.time() - age_s  # not "running"
    for f in folder.iterdir():
        import os
        os.utime(f, (old, old))
    (folder / "run.json").write_text(json.dumps({"name": name}))
    return folder
