"""A training session: tokenizer, data, model and optimizer state on one device.

`train()` is the generator the CLI and the studio drive (docs/DESIGN.md): one StepMetrics per
optimizer step, pretraining then tuning; the caller stops by not asking for the next step.
Long phases (encoding the text, validation, samples, recall) tick `session.monitor`
(engine.progress): progress for the caller, and `Cancelled` within a fraction of a second
of `monitor.cancel()`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
import warnings
from pathlib import Path
from typing import Iterator

import numpy as np
import pyopencl as cl

from engine import checkpoint
from engine.config import DEFAULT_TOKENIZER, ModelConfig, TrainConfig, run_steps
from engine.corpus import PretrainData
from engine.decode import KVDecoder
from engine.device import DeviceInfo
from engine.dialogue import CHAT_FORMAT, Message, TuneData, check_chat_format
from engine.errors import CheckpointError, ConfigError, DeviceError, TrainingDiverged
from engine.export_types import DEFAULT_DTYPE
from engine.budget import TimeBudget
from engine.generation import GenerationMixin
from engine.evaluate import MAX_FACTS, answer_accuracy, fact_recall, training_documents
from engine.health import HealthMonitor
from engine.memory import check_fits
from engine.metrics import StepMetrics, ValScore, score_validation
from engine.model import Model
from engine.params import ParamTable
from engine.progress import Cancelled, Monitor
from engine.runtime import Runtime
from engine.sampling import SamplingParams
from engine.tokenizer import Tokenizer


MAX_BAD_STEPS = 3  # consecutive NaN/Inf steps before the run is stopped and restored
MAX_TUNE_EVAL_BATCHES = 16  # dialogue loss on at most this many batches, evenly spaced
SAMPLE_PROMPT_CHARS = 200   # sample prompts come from the start of a document / question


def _timed(budget: TimeBudget | None, kind: str, fn, *args):
    """fn(*args), its wall time reported to the budget (if any) as `kind`."""
    t0 = time.perf_counter()
    result = fn(*args)
    if budget:
        budget.measured(kind, time.perf_counter() - t0)
    return result


def _sha256(text: str | None) -> str:
    return hashlib.sha256((text or "").encode()).hexdigest()


def check_continuation(step: int, pretrain_steps: int, tune_steps: int, has_tune: bool,
                       new_pretrain: int, new_tune: int, require_more: bool = False) -> None:
    """Whether a run at optimizer step `step` (stage totals `pretrain_steps` and `tune_steps`,
    with dialogues to tune on or not) can be continued to the new totals; the one rule for
    TrainingSession.continue_training, `llm-studio train --continue` and the studio's Continue.

    Steps done cannot be undone; pretraining cannot grow once tuning has begun (the stages run
    in order), but tuning can, before or after; a run without dialogues has no tuning stage.
    require_more: also refuse totals that leave nothing to train. Raises ConfigError."""
    if new_pretrain < 0 or new_tune < 0:
        raise ConfigError("Step counts cannot be negative.", "Give totals of 0 or more.")
    if not has_tune and new_tune != tune_steps:
        raise ConfigError("This run has no dialogues, so it has no tuning stage.",
                          "Change the pretraining steps only (a new run can tune).")
    if has_tune and step > pretrain_steps and new_pretrain != pretrain_steps:
        raise ConfigError(
            f"This run is already tuning (step {step}); its pretraining stage "
            f"({pretrain_steps} steps) is over: keep pretraining steps at {pretrain_steps}.",
            f"Raise the tuning steps instead (now {tune_steps}).")
    total = run_steps(new_pretrain, new_tune, has_tune)
    if new_pretrain < min(step, pretrain_steps) or total < step:
        raise ConfigError(
            f"This run has already done {step} steps; the new totals ({new_pretrain} "
            f"pretraining + {new_tune if has_tune else 0} tuning) are fewer.",
            "Step counts are totals per stage: give larger numbers.")
    if require_more and total == step:
        what = "pretraining or tuning steps" if has_tune else "pretraining steps"
        raise ConfigError(f"This run has done all of its {step} steps.",
                          f"Raise the {what} above that to train further.")


class TrainingSession(GenerationMixin):
    """Everything one training run needs. Build with `create` or `load`."""

    def __init__(self, rt: Runtime, model_cfg: ModelConfig, train_cfg: TrainConfig,
                 tokenizer: Tokenizer, pretrain_text: str, tune_text: str | None,
                 flat_weights: np.ndarray | None = None, chat_format: int = CHAT_FORMAT,
                 monitor: Monitor | None = None):
        self.rt, self.tokenizer = rt, tokenizer
        self.chat_format = check_chat_format(chat_format)  # engine.dialogue: how turns render
        self.monitor = monitor or Monitor()
        self.model_config, self.train_config = model_cfg.validate(), train_cfg.validate()
        self.pretrain_text, self.tune_text = pretrain_text, tune_text
        T = model_cfg.context_length
        self.pretrain = PretrainData(tokenizer, pretrain_text, T, train_cfg.val_fraction,
                                     train_cfg.seed, train_cfg.val_split, monitor=self.monitor)
        self.monitor.tick("encoding the dialogues", 0, 1)
        self.tune = TuneData(tokenizer, tune_text, T, train_cfg.seed,
                             chat_format) if tune_text else None
        check_fits(model_cfg, train_cfg.batch_size, rt.info)
        self.monitor.tick("building the model", 0, 1)
        self.model = Model(rt, model_cfg, flat_weights, seed=train_cfg.seed)
        self.rng = np.random.default_rng(train_cfg.seed + 1)
        self.step = 0
        self.last_loss: float | None = None
        self.history: list[dict] = []  # compact per-step records (for plots after a reload)
        self._decoder: KVDecoder | None = None
        self.last_finish = "stop"      # why the last generate_ids ended: stop, length, context
        self._last_n_tokens = 0
        self._good = None  # last finite state, for the NaN guard
        self.loaded_from_previous = False  # load() fell back to checkpoint.prev.npz

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(cls, model_cfg: ModelConfig, train_cfg: TrainConfig, pretrain_text: str,
               tune_text: str | None = None, device=None, tokenizer_kind: str = DEFAULT_TOKENIZER,
               runtime: Runtime | None = None, monitor: Monitor | None = None
               ) -> "TrainingSession":
        """Train the tokenizer on both texts, size the vocabulary from it, build the model.
        Raises ConfigError / DataError / DeviceError with a message for the person, and
        engine.progress.Cancelled when `monitor` is cancelled."""
        model_cfg.replace(vocab_size=max(model_cfg.vocab_size, 259)).validate()
        train_cfg.validate()
        monitor = monitor or Monitor()
        texts = [pretrain_text] + ([tune_text] if tune_text else [])
        monitor.tick("training the tokenizer", 0, 1)  # bounded input, not interruptible
        tokenizer = Tokenizer.train(texts, model_cfg.vocab_size, tokenizer_kind)
        cfg = model_cfg.replace(vocab_size=tokenizer.vocab_size)
        monitor.tick("opening the device", 0, 1)
        rt = runtime or Runtime(device)
        return cls(rt, cfg, train_cfg, tokenizer, pretrain_text, tune_text, monitor=monitor)

    @classmethod
    def load(cls, path, device=None, runtime: Runtime | None = None,
             monitor: Monitor | None = None) -> "TrainingSession":
        """Open a run folder's checkpoint (weights, AdamW state, step, RNG) to continue,
        chat with or export it."""
        ck = checkpoint.load(path)
        h = ck["header"]
        known = {f.name for f in dataclasses.fields(TrainConfig)}  # an older run's fields
        try:
            mc = ModelConfig(**h["model_config"])
            tc = TrainConfig(**{k: v for k, v in h["train_config"].items() if k in known})
        except TypeError as e:
            raise CheckpointError(f"The checkpoint's configuration is not understood: {e}") from e
        tok = Tokenizer.from_bytes(ck["tokenizer"])
        rt = runtime or Runtime(device)
        s = cls(rt, mc, tc, tok, ck["pretrain_text"], ck["tune_text"],   # saved before the
                chat_format=h.get("chat_format", 1), monitor=monitor)      # key: format 1
        if ck["params"].size != s.model.table.size:
            raise CheckpointError("The checkpoint's weights do not match its configuration.")
        s.model.write_flat("params", ck["params"])
        s.model.write_flat("m", ck["adam_m"])
        s.model.write_flat("v", ck["adam_v"])
        s.model.adam_t = int(h["adam_t"])
        s.step = int(h["step"])
        s.last_loss = h.get("last_loss")
        s.rng.bit_generator.state = h["rng_state"]
        s.history = h.get("history", [])
        s.loaded_from_previous = ck["from_previous"]
        return s

    @classmethod
    def from_gguf(cls, path, pretrain_text: str, tune_text: str | None = None,
                  train_cfg: TrainConfig | None = None, device=None,
                  runtime: Runtime | None = None, monitor: Monitor | None = None
                  ) -> "TrainingSession":
        """A session around a GGUF this app exported (config, tokenizer, weights), to chat with
        or keep training on the given texts. AdamW state starts fresh. Raises ModelImportError
        for a file that is not such a GGUF."""
        from engine.gguf_export import import_gguf
        b = import_gguf(path)
        rt = runtime or Runtime(device)
        s = cls(rt, b.config, train_cfg or TrainConfig(), b.tokenizer, pretrain_text, tune_text,
                flat_weights=ParamTable(b.config).flatten(b.weights),
                chat_format=b.metadata.get("chat_format", 1),   # exported before the key: 1
                monitor=monitor)
        s.last_loss = b.metadata.get("final_loss")
        return s

    def save(self, path) -> Path:
        """Write the checkpoint atomically into folder `path` (made if missing) as
        checkpoint.npz, whatever the folder's name looks like; returns the file. Raises
        CheckpointError when `path` is a file (never overwritten) or cannot be written."""
        folder = Path(path)
        if folder.exists() and not folder.is_dir():
            raise CheckpointError(
                f"{folder} is a file, not a folder: a checkpoint is saved into a folder, as "
                f"{checkpoint.FILENAME}.",
                "Choose a new folder name or a run folder to save into; the file is unchanged.")
        header = {
            "model_config": self.model_config.__dict__, "train_config": self.train_config.__dict__,
            "step": self.step, "adam_t": self.model.adam_t, "last_loss": self.last_loss,
            "rng_state": self.rng.bit_generator.state, "history": self.history,
            "tokenizer_kind": self.tokenizer.kind, "data": self.data_summary(),
            "chat_format": self.chat_format,
            "device": self.rt.info.name,  # shown by the Runs panel (studio.runs)
        }
        m = self.model
        return checkpoint.save(folder / checkpoint.FILENAME, header, m.read_flat("params"),
                               m.read_flat("m"), m.read_flat("v"), self.tokenizer.to_bytes(),
                               self.pretrain_text, self.tune_text)

    def continue_training(self, pretrain_steps: int | None = None,
                          tune_steps: int | None = None) -> None:
        """Continue a saved run: set new step totals per stage, then train() goes on to them.

        "Continue" is this (more steps of a run, in this or a later process; the CLI's
        `train --continue`, the studio's Continue); "resume" is only the studio's going on
        after Pause. Both are totals, not additions; the rule is `check_continuation`.
        Raises ConfigError."""
        tc = self.train_config
        pre = tc.pretrain_steps if pretrain_steps is None else pretrain_steps
        tune = tc.tune_steps if tune_steps is None else tune_steps
        check_continuation(self.step, tc.pretrain_steps, tc.tune_steps, self.has_tune,
                           pre, tune)
        self.train_config = tc.replace(pretrain_steps=pre, tune_steps=tune).validate()

    def extend(self, pretrain_steps: int | None = None, tune_steps: int | None = None) -> None:
        """Deprecated name of continue_training (kept so older scripts run)."""
        warnings.warn("TrainingSession.extend is now continue_training", DeprecationWarning,
                      stacklevel=2)
        self.continue_training(pretrain_steps, tune_steps)

    def data_summary(self) -> dict:
        return {"pretrain_chars": len(self.pretrain_text), "pretrain_sha256": _sha256(self.pretrain_text),
                "pretrain_tokens": self.pretrain.n_tokens, "pretrain_documents": len(self.pretrain.documents),
                "tune_chars": len(self.tune_text or ""), "tune_sha256": _sha256(self.tune_text),
                "tune_dialogues": len(self.tune.dialogues) if self.has_tune else 0,
                "val_split": f"{self.pretrain.val_split}:{self.pretrain.val_fraction:g}",
                "val_source": self.pretrain.val_source,
                "val_tokens": int(self.pretrain.val_stream.size)}

    def last_validation(self) -> dict:
        """The newest pretraining-text validation numbers: {"val_loss" (nats per token),
        "val_bpb", "val_source"} from history ({} before the first evaluation)."""
        for r in reversed(self.history):
            loss = r.get("val_loss") if r.get("stage") == "pretrain" else r.get("pretrain_val_loss")
            if loss is not None and "val_bpb" in r:
                return {"val_loss": loss, "val_bpb": r["val_bpb"], "val_source": r["val_source"]}
        return {}

    @property
    def device_info(self) -> DeviceInfo:
        """The OpenCL device this session runs on (name, memory limits)."""
        return self.rt.info

    @property
    def has_tune(self) -> bool:
        """The session has tune dialogues, so a tuning stage follows pretraining."""
        return self.tune is not None

    @property
    def tune_tokens(self) -> int:
        """Tokens in the encoded tune dialogues (0 without them)."""
        return sum(len(ids) for ids, _ in self.tune.encoded) if self.has_tune else 0

    # ------------------------------------------------------------------ training
    def stage_at(self, step: int) -> str:
        pretraining = step < self.train_config.pretrain_steps or not self.has_tune
        return "pretrain" if pretraining else "tune"

    @property
    def total_steps(self) -> int:
        tc = self.train_config
        return run_steps(tc.pretrain_steps, tc.tune_steps, self.has_tune)

    def lr_at(self, step: int) -> float:
        tc = self.train_config
        if self.stage_at(step) == "pretrain":
            return tc.lr_at(step, 0, tc.pretrain_steps, tc.learning_rate)
        peak = tc.tune_learning_rate or tc.learning_rate / 3
        return tc.lr_at(step, tc.pretrain_steps, tc.tune_steps, peak)

    def _batch(self, stage: str):
        B = self.train_config.batch_size
        if stage == "pretrain":
            return self.pretrain.train_batch(self.rng, B)
        n_replay = int(round(B * self.train_config.replay_fraction))
        x, y = self.tune.train_batch(self.rng, B - n_replay)
        if n_replay:
            rx, ry = self.pretrain.train_batch(self.rng, n_replay)
            x, y = np.concatenate([x, rx]), np.concatenate([y, ry])
        return x, y

    def pretrain_val(self) -> ValScore:
        """The pretraining validation text scored: loss (nats per token), bits per byte and
        how much text. The windows are PretrainData.val_batches: the val stream in
        consecutive windows, at most train_config.eval_tokens targets, the same every call.
        The text is held out unless pretrain.val_source says "training text"."""
        tc = self.train_config
        batches = self.pretrain.val_batches(tc.batch_size, tc.eval_tokens)

        def ticking():   # progress and cancellation between batches
            for i, batch in enumerate(batches):
                self.monitor.tick("validation", i, len(batches))
                yield batch
        return score_validation(ticking(), self.model.loss, self.pretrain.token_bytes)

    def pretrain_val_loss(self) -> float:
        """pretrain_val().loss: mean cross-entropy in nats per token."""
        return self.pretrain_val().loss

    def tune_val_loss(self) -> float:
        """Mean loss over the tune dialogues (assistant tokens only), in batches of batch_size:
        all of them, or MAX_TUNE_EVAL_BATCHES batches evenly spaced through a large set."""
        total = count = 0.0
        batches = self.tune.eval_batches(self.train_config.batch_size, MAX_TUNE_EVAL_BATCHES)
        for i, (x, y) in enumerate(batches):
            n = int((y >= 0).sum())
            self.monitor.tick("dialogue loss", i, len(batches))
            total += self.model.loss(x, y) * n
            count += n
        return total / max(count, 1)

    def sample_prompts(self, stage: str) -> list[str]:
        docs = self.pretrain.documents
        prompts = [" ".join(d[:SAMPLE_PROMPT_CHARS].split()[:3])
                   for d in docs[:: max(len(docs) // 3, 1)][:3]]
        if stage == "tune" and self.has_tune:
            q = self.tune.questions()[0][0]
            prompts = [q[-1].content[:SAMPLE_PROMPT_CHARS]] + prompts[:2]
        return prompts

    def samples(self, stage: str) -> list[tuple[str, str]]:
        out = []
        n = self.train_config.sample_tokens
        prompts = self.sample_prompts(stage)
        for i, p in enumerate(prompts):
            self.monitor.tick("generating samples", i, len(prompts))
            if stage == "tune" and i == 0:
                text = self.chat([Message("user", p)], max_new_tokens=n, greedy=True)
            else:
                text = self.generate(p, max_new_tokens=n, greedy=True)
            out.append((p, text))
        return out

    def train(self) -> Iterator[StepMetrics]:
        """Run from self.step to total_steps, one StepMetrics per step. Stops when the caller
        stops iterating; call `save` after a stop to keep the work. With
        train_config.time_budget_s the step counts are re-planned after every step to end
        when elapsed_s reaches the budget (engine.budget).

        When `monitor` is cancelled during a step's validation, samples or recall, that step's
        record is still yielded with what was computed (extra["interrupted"] names the phase);
        asking for a step after a cancel raises engine.progress.Cancelled."""
        tc = self.train_config
        t_start = time.perf_counter() - self.elapsed_s()   # elapsed_s continues in a continued run
        budget = self._time_budget()
        self._snapshot()
        bad = 0
        t_mark = time.perf_counter()
        health = HealthMonitor(self.model, tc, self.pretrain.train_stream)  # engine/health.py
        while self.step < self.total_steps:
            self.monitor.check()
            stage = self.stage_at(self.step)
            lr = self.lr_at(self.step)
            x, y = self._batch(stage)
            health.before_step(self.step + 1)
            t0 = time.perf_counter()
            try:
                loss, gnorm, skipped = self.model.train_step(x, y, lr, tc)
            except cl.Error as e:
                raise DeviceError(f"The OpenCL device failed during step {self.step + 1}: {e}",
                                  "It may have run out of memory: use a smaller batch size, "
                                  "context length or model, or another device. The last "
                                  "checkpoint is intact.") from e
            dt = time.perf_counter() - t0
            self.step += 1
            bad = bad + 1 if skipped or not np.isfinite(loss) else 0
            if bad >= MAX_BAD_STEPS:
                self._restore()
                raise TrainingDiverged(
                    f"The loss or gradient was NaN/Inf for {bad} steps in a row (learning rate "
                    f"{lr:.2e}); training stopped and the last good weights (step {self.step}) "
                    "were restored.", "Lower the learning rate (e.g. by 3x) and train again.")
            if not skipped and np.isfinite(loss):
                self.last_loss = loss
            if budget:
                budget.step_done(time.perf_counter() - t_mark)
                self._plan(budget, stage, time.perf_counter() - t_start)
            m = StepMetrics(self.step, self.total_steps, stage, loss, gnorm, lr,
                            x.size / max(dt, 1e-9), time.perf_counter() - t_start, skipped=skipped)
            health.after_step(m)
            try:
                self._step_checks(m, stage, budget)
            except Cancelled:  # keep the step and what was measured; the caller saves
                m.extra["interrupted"] = self.monitor.phase or "checks"
            m.elapsed_s = time.perf_counter() - t_start   # evaluations of this step included
            self.history.append({k: v for k, v in m.to_dict().items() if k != "samples"})
            if m.val_loss is not None and bad == 0 and "interrupted" not in m.extra:
                self._snapshot()
            t_mark = time.perf_counter()
            yield m

    def _step_checks(self, m: StepMetrics, stage: str, budget: "TimeBudget | None") -> None:
        """Validation, samples and the stage-end recall due after step m.step, into m; each
        phase's wall time reported to the budget (if any)."""
        tc = self.train_config
        stage_end = self.step == self.total_steps or self.stage_at(self.step) != stage
        if self.step % tc.eval_interval == 0 or stage_end:
            _timed(budget, "eval", self._evaluate, m, stage)
        if tc.sample_interval and (self.step % tc.sample_interval == 0 or stage_end):
            m.samples = _timed(budget, "samples", self.samples, stage)
        if stage_end and tc.evaluate_recall:
            m.recall = _timed(budget, "recall", self._recall, stage)

    def _evaluate(self, m: StepMetrics, stage: str) -> None:
        """Validation numbers into m: the pretraining text (val_loss while pretraining,
        pretrain_val_loss while tuning; val_bpb and val_source with it) and, while tuning,
        val_loss on the tune dialogues."""
        score = self.pretrain_val()
        m.val_bpb, m.val_source = score.bpb, self.pretrain.val_source
        if stage == "pretrain":
            m.val_loss = score.loss
        else:
            m.val_loss = self.tune_val_loss()
            m.pretrain_val_loss = score.loss

    def _recall(self, stage: str) -> dict:
        recall = {"stage": stage, "facts": fact_recall(self).to_dict()}
        if stage == "tune":
            recall["answers"] = answer_accuracy(self).to_dict()
        return recall

    def elapsed_s(self) -> float:
        """Wall seconds of training this run has had (the last record's elapsed_s; 0 new)."""
        for record in reversed(self.history):
            value = record.get("elapsed_s")
            if isinstance(value, (int, float)) and math.isfinite(value):
                return float(value)
        return 0.0

    def _time_budget(self) -> TimeBudget | None:
        """A TimeBudget for train_config.time_budget_s (None when 0), told how much text the
        samples and the recall check generate and how fast this model decodes (16 tokens)."""
        tc = self.train_config
        if tc.time_budget_s <= 0:
            return None
        stamps: list[float] = []
        self.generate_ids([self.tokenizer.bos_id], 24, SamplingParams(greedy=True),
                          on_token=lambda _: stamps.append(time.perf_counter()))
        per_token = float(np.median(np.diff(stamps[4:]))) if len(stamps) > 5 else 0.0
        recall = 0
        if tc.evaluate_recall:   # fact_recall reads each document's first half, writes the rest
            recall = sum(len(self.tokenizer.encode(d)) + 3
                         for d in training_documents(self, MAX_FACTS))
        self._tune_share = tc.tune_steps / max(tc.total_steps, 1)
        return TimeBudget(tc.time_budget_s, len(self.pretrain.val_batches(tc.batch_size,
                                                                          tc.eval_tokens)),
                          tc.eval_interval, tc.sample_interval,
                          len(self.sample_prompts("pretrain")) * tc.sample_tokens, recall,
                          per_token)

    def _plan(self, budget: TimeBudget, stage: str, elapsed: float) -> None:
        """Set the step counts to what fits in the budget after the step just done."""
        tc, done = self.train_config, self.step
        if stage == "tune":
            left = budget.remaining_steps(elapsed, 1)
            self.train_config = tc.replace(tune_steps=done - tc.pretrain_steps + left)
            return
        left = budget.remaining_steps(elapsed, 2 if self.tune else 1)
        pre = done + (round(left * (1 - self._tune_share)) if self.tune else left)
        self.train_config = tc.replace(pretrain_steps=pre, tune_steps=done + left - pre
                                       if self.tune else tc.tune_steps)

    def _snapshot(self):
        """Host copy of the last good state (weights, AdamW, step, RNG) for the NaN guard;
        kept only when the weights are finite."""
        m = self.model
        params = m.read_flat("params")
        if np.all(np.isfinite(params)):
            self._good = (params, m.read_flat("m"), m.read_flat("v"), m.adam_t, self.step,
                          self.rng.bit_generator.state, len(self.history))

    def _restore(self):
        if self._good is None:
            return
        p, mm, v, t, step, rng, n_hist = self._good
        self.model.write_flat("params", p)
        self.model.write_flat("m", mm)
        self.model.write_flat("v", v)
        self.model.adam_t, self.step = t, step
        self.rng.bit_generator.state = rng
        del self.history[n_hist:]

    def bundle(self):
        """The model as an engine.gguf_export.ModelBundle (weights copied from the device)."""
        from engine.gguf_export import ModelBundle
        tc = self.train_config
        meta = {"learning_rate": tc.learning_rate, "pretrain_steps": tc.pretrain_steps,
                "tune_steps": tc.tune_steps, "batch_size": tc.batch_size, "seed": tc.seed,
                "steps_done": self.step, "final_loss": self.last_loss, **self.data_summary(),
                "chat_format": self.chat_format, **self.last_validation()}
        meta = {k: v for k, v in meta.items() if v is not None}
        return ModelBundle(self.model_config, self.tokenizer, self.model.weights(), meta)

    def export_gguf(self, path, dtype: str = DEFAULT_DTYPE, force: bool = False):
        """Write the GGUF (and an Ollama Modelfile beside it). Returns ExportResult."""
        from engine.gguf_export import export_gguf
        return export_gguf(self.bundle(), path, dtype=dtype, force=force)
