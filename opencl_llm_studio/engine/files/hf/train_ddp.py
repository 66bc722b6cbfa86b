#!/usr/bin/env python3
"""Continue an OpenCL LLM Studio run on one or many GPUs with PyTorch DDP.

Written by `llm-studio scale-out RUN OUT_DIR`; run it inside that folder:

    torchrun --standalone --nproc_per_node=N train_ddp.py --out continued [--tune-steps 400]

It reads this folder (config.json, model.safetensors, optimizer.safetensors, studio.json,
data/*.npy), continues at the run's step with the same AdamW state (PyTorch's AdamW: decay on
2-D weights only, the run's betas, eps, weight decay, grad-norm clipping), the same learning-rate
schedule (warmup, stable, 1-sqrt decay per stage, as engine.training.schedule.lr_at) and windows drawn
the same way from the same token streams (pretraining windows; tuning rows with their assistant
loss mask plus a replay share of pretraining windows). The global batch is the run's batch_size,
split over the processes. It writes --out as the same kind of folder plus metrics.jsonl (one
JSON object per step, the studio's keys), which `llm-studio import OUT RUN` turns back into a run.
Self-contained on purpose: only torch, transformers, safetensors and numpy.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import LlamaForCausalLM

HERE = Path(__file__).resolve().parent
COPY = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "generation_config.json",
        "train_ddp.py", "data")
# engine.training.evaluate.MAX_TUNE_EVAL_BATCHES (this script imports no engine code; a test keeps them equal)
MAX_TUNE_EVAL_BATCHES = 16


def lr_at(step: int, stage_start: int, stage_steps: int, peak: float, tc: dict) -> float:
    """engine.training.schedule.lr_at: linear warmup (at most a fifth of
    the stage), a stable phase, then a 1-sqrt decay over the last decay_fraction of the stage
    to peak * min_lr_ratio at its last step."""
    s = step - stage_start
    warm = min(tc["warmup_steps"], max(stage_steps // 5, 1))
    factor = min(1.0, (s + 1) / max(warm, 1))
    p = min(max((s + 1) / max(stage_steps, 1), 0.0), 1.0)
    decay, floor = tc.get("decay_fraction", 0.2), tc["min_lr_ratio"]
    if decay > 0 and p > 1.0 - decay:
        factor *= floor + (1.0 - floor) * (1.0 - math.sqrt((p - (1.0 - decay)) / decay))
    return peak * factor


class Schedule:
    """Stages and learning rate of the run (engine.training.session.TrainingSession.stage_at / lr_at)."""

    def __init__(self, tc: dict, has_tune: bool):
        self.tc, self.has_tune = tc, has_tune

    @property
    def total(self) -> int:
        return self.tc["pretrain_steps"] + (self.tc["tune_steps"] if self.has_tune else 0)

    def stage(self, step: int) -> str:
        return "pretrain" if step < self.tc["pretrain_steps"] or not self.has_tune else "tune"

    def lr(self, step: int) -> float:
        tc = self.tc
        if self.stage(step) == "pretrain":
            return lr_at(step, 0, tc["pretrain_steps"], tc["learning_rate"], tc)
        # engine.config.tune_peak: a third of the rate after a pretraining stage, else the rate
        peak = tc.get("tune_learning_rate") or (
            tc["learning_rate"] / 3 if tc["pretrain_steps"] else tc["learning_rate"])
        return lr_at(step, tc["pretrain_steps"], tc["tune_steps"], peak, tc)


class Data:
    """The engine's token streams (data/*.npy) and its way of drawing batches."""

    def __init__(self, folder: Path, T: int):
        d = folder / "data"
        self.T = T
        self.train = np.load(d / "pretrain_train.npy", allow_pickle=False)
        self.val_x = np.load(d / "pretrain_val_inputs.npy", allow_pickle=False)
        self.val_y = np.load(d / "pretrain_val_targets.npy", allow_pickle=False)
        self.token_bytes = np.load(d / "token_bytes.npy", allow_pickle=False)
        self.val_source = (d / "val_source.txt").read_text().strip()
        tune = d / "tune_ids.npy"
        self.tune_ids = np.load(tune, allow_pickle=False) if tune.exists() else None
        self.tune_mask = np.load(d / "tune_mask.npy", allow_pickle=False) if tune.exists() else None

    def windows(self, stream: np.ndarray, starts: np.ndarray, T: int):
        idx = starts[:, None] + np.arange(T + 1)[None, :]
        w = stream[idx].astype(np.int64)
        return w[:, :-1], w[:, 1:]

    def pretrain(self, rng, n: int, T: int | None = None):
        """n windows of T tokens (None: the model's; the tuning stage replays in the dialogue
        rows' own width, engine.data.dialogue.tune_window)."""
        T = T or self.T
        return self.windows(self.train, rng.integers(0, self.train.size - T, size=n), T)

    def tune(self, rng, n: int):
        rows = rng.integers(0, len(self.tune_ids), size=n)
        ids, mask = self.tune_ids[rows].astype(np.int64), self.tune_mask[rows]
        return ids[:, :-1], np.where(mask[:, 1:], ids[:, 1:], -1)

    def batch(self, rng, stage: str, n: int, replay: float):
        if stage == "pretrain":
            return self.pretrain(rng, n)
        n_replay = int(round(n * replay))
        x, y = self.tune(rng, n - n_replay)
        if n_replay:
            rx, ry = self.pretrain(rng, n_replay, x.shape[1])
            x, y = np.concatenate([x, rx]), np.concatenate([y, ry])
        return x, y

    def tune_eval_batches(self, B: int):
        """The dialogues the studio scores (engine.data.dialogue.TuneData.eval_batches): all, in
        batches of B, or MAX_TUNE_EVAL_BATCHES batches evenly spaced through a large set."""
        ids, mask = self.tune_ids.astype(np.int64), self.tune_mask
        y = np.where(mask[:, 1:], ids[:, 1:], -1)
        k = -(-len(ids) // B)
        picked = range(k) if k <= MAX_TUNE_EVAL_BATCHES else \
            [i * k // MAX_TUNE_EVAL_BATCHES for i in range(MAX_TUNE_EVAL_BATCHES)]
        return [(ids[i * B:(i + 1) * B, :-1], y[i * B:(i + 1) * B]) for i in picked]

    def val_batches(self, B: int):
        """The studio's own validation windows (engine.data.corpus.PretrainData.val_batches)."""
        return [(self.val_x[i:i + B].astype(np.int64), self.val_y[i:i + B].astype(np.int64))
                for i in range(0, len(self.val_x), B)]


def loss_fn(model, x, y) -> torch.Tensor:
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1),
                           ignore_index=-1)


@torch.no_grad()
def evaluate(model, data: "Data", stage: str, B: int, device) -> dict:
    """The studio's validation keys (engine.training.session): the pretraining text's loss summed over
    its scored tokens (nats per token) and in bits per byte (total nats / ln 2 / UTF-8 bytes);
    while tuning, val_loss = token-weighted loss over every dialogue and pretrain_val_loss =
    the pretraining text (the forgetting monitor)."""
    def score(batches):
        nats = tokens = n_bytes = 0.0
        for x, y in batches:
            scored = y[y >= 0]
            if scored.size:
                xt, yt = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
                nats += float(loss_fn(model, xt, yt)) * scored.size
                tokens += scored.size
                n_bytes += float(data.token_bytes[scored].sum())
        return nats / max(tokens, 1.0), nats / math.log(2) / max(n_bytes, 1.0)
    model.eval()
    pre, bpb = score(data.val_batches(B))
    out = {"val_loss": pre, "val_bpb": bpb, "val_source": data.val_source}
    if stage == "tune":
        out.update(val_loss=score(data.tune_eval_batches(B))[0], pretrain_val_loss=pre)
    model.train()
    return out


def make_optimizer(model, tc: dict, folder: Path, device) -> torch.optim.AdamW:
    named = dict(model.named_parameters())
    decay = [p for p in named.values() if p.dim() >= 2]
    rest = [p for p in named.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc["weight_decay"]},
                             {"params": rest, "weight_decay": 0.0}], lr=tc["learning_rate"],
                            betas=(tc["beta1"], tc["beta2"]), eps=tc["adam_eps"])
    path = folder / "optimizer.safetensors"
    if path.exists():   # continue the run's AdamW state exactly (no fresh-moment bump)
        from safetensors import safe_open
        with safe_open(str(path), framework="pt") as f:
            step = float(f.metadata()["adam_step"])
        moments = load_file(str(path), device=str(device))
        missing = [n for n in named if f"exp_avg.{n}" not in moments]
        if missing:
            raise SystemExit(f"{path} has no AdamW state for {missing[0]}: not this model's.")
        for name, p in named.items():
            opt.state[p] = {"step": torch.tensor(step),
                            "exp_avg": moments[f"exp_avg.{name}"].clone(),
                            "exp_avg_sq": moments[f"exp_avg_sq.{name}"].clone()}
    return opt


def save(folder: Path, out: Path, model, opt, studio: dict) -> None:
    """Write `out` atomically: a temporary folder beside it, renamed into place."""
    tmp = out.parent / f".{out.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    for name in COPY:
        src = folder / name
        if src.is_dir():
            shutil.copytree(src, tmp / name)
        elif src.exists():
            shutil.copy(src, tmp / name)
    tensors, step = {}, 0.0
    for name, p in model.named_parameters():
        st = opt.state.get(p)
        if st:
            tensors[f"exp_avg.{name}"] = st["exp_avg"].detach().cpu().contiguous()
            tensors[f"exp_avg_sq.{name}"] = st["exp_avg_sq"].detach().cpu().contiguous()
            step = float(st["step"])
    save_file(tensors, str(tmp / "optimizer.safetensors"), metadata={"adam_step": str(int(step))})
    (tmp / "studio.json").write_text(json.dumps(studio, indent=2))
    (tmp / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in studio["history"]))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)


def _parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folder", default=str(HERE), help="the scale-out folder (this one)")
    ap.add_argument("--out", required=True, help="folder to write the continued model to")
    ap.add_argument("--pretrain-steps", type=int, help="new total of pretraining steps")
    ap.add_argument("--tune-steps", type=int, help="new total of tuning steps")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: all)")
    ap.add_argument("--save-every", type=int, default=0, help="also save every N steps")
    ap.add_argument("--evaluate", action="store_true",
                    help="print the validation keys of the model as it is, train nothing")
    return ap.parse_args(argv)


class Job:
    """One process's share of the run: its rank, device, model (DDP-wrapped when distributed),
    optimizer, data and schedule."""

    def __init__(self, folder: Path, studio: dict, tc: dict):
        self.distributed = "RANK" in os.environ
        if self.distributed:
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        self.rank, self.world = ((dist.get_rank(), dist.get_world_size()) if self.distributed
                                 else (0, 1))
        local = int(os.environ.get("LOCAL_RANK", 0))
        self.device = torch.device(f"cuda:{local}" if torch.cuda.is_available() else "cpu")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            torch.backends.cuda.matmul.allow_tf32 = False   # fp32, as the engine trains
        torch.manual_seed(tc["seed"])
        self.tc = tc
        self.model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).to(self.device)
        self.data = Data(folder, studio["model_config"]["context_length"])
        self.sched = Schedule(tc, self.data.tune_ids is not None)
        self.opt = make_optimizer(self.model, tc, folder, self.device)
        self.ddp = self.model
        if self.distributed:
            self.ddp = DDP(self.model, device_ids=[local] if self.device.type == "cuda" else None)
        self.B = tc["batch_size"]
        self.per_rank = -(-self.B // self.world)

    def train_step(self, step: int, t0: float) -> dict:
        """One optimizer step at global `step`; its metrics record (the studio's keys)."""
        tc, sched = self.tc, self.sched
        stage, lr = sched.stage(step), sched.lr(step)
        rng = np.random.default_rng([tc["seed"], step, self.rank])
        x, y = (torch.from_numpy(a).to(self.device)
                for a in self.data.batch(rng, stage, self.per_rank, tc["replay_fraction"]))
        t1 = time.perf_counter()
        for g in self.opt.param_groups:
            g["lr"] = lr
        loss = loss_fn(self.ddp, x, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        clip = tc["grad_clip"] or float("inf")
        gnorm = float(torch.nn.utils.clip_grad_norm_(self.ddp.parameters(), clip))
        self.opt.step()
        loss = loss.detach()
        if self.distributed:   # the mean over processes (gloo has no AVG)
            dist.all_reduce(loss, op=dist.ReduceOp.SUM)
            loss /= self.world
        tokens = self.per_rank * self.world * self.data.T
        return {"step": step + 1, "total_steps": sched.total, "stage": stage,
                "loss": float(loss), "grad_norm": gnorm, "lr": lr,
                "elapsed_s": time.perf_counter() - t0,
                "tokens_per_s": tokens / max(time.perf_counter() - t1, 1e-9)}

    def leave(self, wait: bool) -> None:
        """End the process group; wait: first let rank 0 finish its save."""
        if self.distributed:
            if wait:
                dist.barrier()
            dist.destroy_process_group()


def _train(job: Job, args, folder: Path, out: Path, studio: dict) -> None:
    tc, sched = job.tc, job.sched
    step = start = int(studio["step"])
    end = sched.total if not args.max_steps else min(sched.total, step + args.max_steps)
    metrics, t0 = [], time.perf_counter()
    if job.rank == 0:
        print(f"continuing at step {step} of {sched.total} on {job.world} x {job.device.type}, "
              f"global batch {job.per_rank * job.world}", flush=True)
    while step < end:
        stage = sched.stage(step)
        m = job.train_step(step, t0)
        step += 1
        if job.rank != 0:
            continue
        if step % tc["eval_interval"] == 0 or step == end or sched.stage(step) != stage:
            m.update(evaluate(job.model, job.data, stage, job.B, job.device))
        metrics.append(m)
        print(json.dumps(m), flush=True)
        if args.save_every and step % args.save_every == 0:
            _save(folder, out, job.model, job.opt, studio, tc, step, metrics)
    if job.rank == 0:
        _save(folder, out, job.model, job.opt, studio, tc, step, metrics)
        print(f"wrote {out} at step {step} ({step - start} steps here)", flush=True)


def main(argv=None) -> int:
    args = _parse(argv)
    folder, out = Path(args.folder).resolve(), Path(args.out).resolve()
    studio = json.loads((folder / "studio.json").read_text())
    tc = dict(studio["train_config"])
    for key, value in (("pretrain_steps", args.pretrain_steps), ("tune_steps", args.tune_steps)):
        if value is not None:
            tc[key] = value
    job = Job(folder, studio, tc)
    if args.evaluate:
        if job.rank == 0:
            stage = job.sched.stage(max(studio["step"] - 1, 0))
            print(json.dumps(evaluate(job.model, job.data, stage, job.B, job.device)), flush=True)
        job.leave(wait=False)
        return 0
    _train(job, args, folder, out, studio)
    job.leave(wait=True)   # the others wait for rank 0's save, then all leave together
    return 0


def _save(folder, out, model, opt, studio, tc, step, metrics):
    history = list(studio.get("history", [])) + metrics
    meta = dict(studio.get("metadata", {}), steps_done=step, final_loss=metrics[-1]["loss"] if metrics else
                studio.get("metadata", {}).get("final_loss"),
                pretrain_steps=tc["pretrain_steps"], tune_steps=tc["tune_steps"])
    new = dict(studio, train_config=tc, step=step, history=history, metadata=meta,
               continued_with="train_ddp.py (PyTorch DDP)")
    save(folder, out, model, opt, new)


if __name__ == "__main__":
    raise SystemExit(main())
