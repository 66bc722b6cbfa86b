"""Pack a run for multi-GPU training with PyTorch DDP (`llm-studio scale-out RUN OUT_DIR`).

OUT_DIR is a transformers Llama folder (engine.files.hf.export) plus:
  optimizer.safetensors   AdamW moments under HF names (`exp_avg.<name>`, `exp_avg_sq.<name>`)
                          and the AdamW step, so the run continues without a restart bump
  data/pretrain.txt, data/tune.txt   the training texts, for people and other tools
  data/*.npy              the engine's own token streams (training / validation stream, tune
                          rows and loss masks): the DDP script draws the same windows
  train_ddp.py            self-contained (PyTorch + transformers), torchrun-ready
  README.md               the model card and the exact torchrun command
The DDP run writes the same kind of folder, which `llm-studio import` turns back into a run.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from opencl_llm_studio.engine.files.hf.export import DATA, export_hf, studio_state
from opencl_llm_studio.engine.files.hf.names import hf_name, to_hf_tensor
from opencl_llm_studio.engine.model.params import ParamTable

SCRIPT = Path(__file__).with_name("train_ddp.py")


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def moments_to_hf(cfg, flat: np.ndarray) -> dict[str, np.ndarray]:
    """A flat AdamW moment buffer (ParamTable layout) -> {HF name: array}, q/k rows permuted
    like the weights (the moments are element-wise)."""
    out = {}
    for name, w in ParamTable(cfg).unflatten(flat).items():
        out[hf_name(name)] = np.ascontiguousarray(to_hf_tensor(name, w, cfg))
    return out


def optimizer_file(session) -> bytes:
    from safetensors.numpy import save
    cfg, m = session.model_config, session.model
    tensors = {f"exp_avg.{k}": v for k, v in moments_to_hf(cfg, m.read_flat("m")).items()}
    tensors.update({f"exp_avg_sq.{k}": v
                    for k, v in moments_to_hf(cfg, m.read_flat("v")).items()})
    return save(tensors, metadata={"adam_step": str(m.adam_t)})


def data_files(session) -> dict[str, bytes | str]:
    """The texts, and the engine's own arrays: the training stream windows are drawn from, the
    validation windows exactly as the studio scores them (engine.data.corpus.val_batches) with the
    bytes per token for bits per byte, and the tune rows with their loss masks."""
    tc, pre = session.train_config, session.pretrain
    vx, vy = (np.concatenate(a) for a in zip(*pre.val_batches(tc.batch_size, tc.eval_tokens)))
    files: dict[str, bytes | str] = {DATA["pretrain_text"]: session.pretrain_text,
                                     DATA["pretrain_train"]: _npy(pre.train_stream),
                                     DATA["val_inputs"]: _npy(vx),
                                     DATA["val_targets"]: _npy(vy),
                                     DATA["token_bytes"]: _npy(np.asarray(pre.token_bytes)),
                                     DATA["val_source"]: pre.val_source}
    if session.tune is not None:
        ids, mask = session.tune.rows
        files[DATA["tune_text"]] = session.tune_text
        files[DATA["tune_ids"]] = _npy(ids)
        files[DATA["tune_mask"]] = _npy(mask)
    return files


def torchrun_command(nproc: str = "N") -> str:
    return f"torchrun --standalone --nproc_per_node={nproc} train_ddp.py --out continued"


def scale_out(session, folder, force: bool = False) -> Path:
    """Write the scale-out folder for `session` (see the module docstring). Raises ExportError."""
    extra = {"optimizer.safetensors": optimizer_file(session),
             "train_ddp.py": SCRIPT.read_text(encoding="utf-8"), **data_files(session)}
    tc = session.run_config()   # the stage totals the run stands at
    more = (f"\n## Continue on many GPUs\n\nOn a machine with PyTorch (CUDA) and transformers, in "
            f"this folder:\n\n```bash\n{torchrun_command()}\n```\n\nN = GPUs (1 works too; without "
            f"CUDA it runs on the CPU with the gloo backend). The run continues at step "
            f"{session.step} with the studio's AdamW state, learning-rate schedule and data "
            f"windows; `--pretrain-steps` / `--tune-steps` set new totals per stage (now "
            f"{tc.pretrain_steps} / {tc.tune_steps}). Bring the result back with "
            "`llm-studio import continued RUN_FOLDER`.\n")
    return export_hf(session.bundle(), folder, force=force, studio=studio_state(session),
                     extra_files=extra, card_extra=more)
