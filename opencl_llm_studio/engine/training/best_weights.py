"""The weights of pretraining's lowest validation loss, kept for the stage's end.

A model given more steps than its text supports memorizes it: the held-out loss falls, then
rises, and the last step's weights are worse than earlier ones (on the studio's 91 KB prose,
the fixed defaults scored 3.07 bits per byte after a minute and 4.50 after five). The field's
answer is to keep the best: nanoGPT writes its checkpoint only when the validation loss
improves, Keras's EarlyStopping has restore_best_weights, transformers' Trainer
load_best_model_at_end. Here the trainer offers every periodic validation of the pretraining
stage (the same windows every time, engine.training.session.TrainingSession.pretrain_val, so
two readings compare like for like); a reading below all before it copies the weights
(engine.training.snapshot.Snapshot, weights only: in memory, or a temporary file for a large
model). At the stage's end, when that copy scored clearly below the last reading
(MIN_GAIN), both are scored on the stage end's own validation set (the whole held-out text
at a run's end) and the lower one stays in the model; the record says which.

Only the weights come back: the AdamW moments stay the last step's (a tuning stage that
follows starts from them as it would have). Tuning on dialogues keeps its last weights: there
memorizing the dialogues' facts is the aim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from opencl_llm_studio.engine.training.snapshot import Snapshot

MIN_GAIN = 0.005   # relative: the kept copy must have read this far below the last reading
#                    (paired readings on the same windows; below it, a rise is a step's noise)


@dataclass
class Kept:
    """The outcome of BestWeights.choose: the step whose weights the model now holds, the
    kept copy's stage-end score (a ValScore or anything with .loss, nats per token) and the
    last step's loss on the same set."""
    step: int
    score: object
    last_loss: float
    kept: bool   # True: the earlier weights are in the model; False: the last step's stayed


class BestWeights:
    """Tracks the lowest periodic validation loss of one stage and a copy of its weights."""

    def __init__(self):
        self._copy: Snapshot | None = None
        self.loss = math.inf        # the lowest reading so far (nats per token)
        self.step: int | None = None
        self.last_loss = math.inf   # the latest reading

    def offer(self, model, step: int, loss: float) -> None:
        """A periodic validation reading (nats per token) of the weights after `step`: copied
        when it is the lowest so far and the weights are finite."""
        if not math.isfinite(loss):
            return
        self.last_loss = loss
        if loss >= self.loss:
            return
        if self._copy is None:
            self._copy = Snapshot(model, which=("params",))
        if self._copy.take(model):
            self.loss, self.step = loss, step

    def worth_trying(self, step: int, reading: float | None = None) -> bool:
        """Whether the kept copy (of an earlier step than `step`) read clearly lower (MIN_GAIN)
        than `reading`, the last weights' score on the periodic windows (None: the latest
        periodic reading)."""
        reading = self.last_loss if reading is None else reading
        return (self.step is not None and self.step < step and math.isfinite(reading)
                and self.loss < reading * (1.0 - MIN_GAIN))

    def choose(self, model, step: int, last_loss: float, score) -> Kept:
        """Put the kept copy in the model, score it with `score()` (an object with .loss, nats
        per token, on the same set as last_loss, the last step's score) and keep the lower of
        the two weights. A Cancelled or failed scoring puts the last step's weights back
        before it propagates."""
        current = Snapshot(model, which=("params",))
        have_current = current.take(model)   # False: the last weights are not finite
        try:
            self._copy.restore(model)
            kept = score()
            if kept.loss < last_loss or not have_current:
                return Kept(self.step, kept, last_loss, True)
            current.restore(model)
            return Kept(step, kept, last_loss, False)
        except BaseException:
            current.restore(model)
            raise
        finally:
            current.close()

    def close(self) -> None:
        """Drop the copy."""
        if self._copy is not None:
            self._copy.close()
            self._copy = None
