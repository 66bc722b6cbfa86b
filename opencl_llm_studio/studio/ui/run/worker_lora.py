"""Tuning method LoRA on the worker's thread: whether LoRA can tune the worker's model
(studio.protocol.LoraOption, sent with every SessionInfo), and Continue with LoRA chosen, which
turns the opened run's session into a LoRA session over its still-quantized GGUF
(engine.training.opening.lora_session, as `llm-studio train --continue --lora-rank R`).

A part of studio.ui.run.worker.TrainingWorker, composed; it holds where the worker's model was
opened from (a run folder, or a GGUF / transformers folder opened as it is), since LoRA starts
from the run folder's checkpoint. No Qt here.
"""

from __future__ import annotations

import gc
import logging
from pathlib import Path
from typing import Callable

from opencl_llm_studio.engine.config import LoraConfig
from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.progress import Monitor
from opencl_llm_studio.studio.protocol import LoraOption, ModelSource

log = logging.getLogger(__name__)

# Why LoRA cannot tune the model at hand (the Tuning method's tooltip), in the studio's words
NOT_IMPORTED_WHY = ("LoRA tunes a model imported from a GGUF file, which stays quantized as "
                    "its base: open one with File › Open model…, then choose LoRA. This model "
                    "was not imported from a GGUF file.")
OPENED_FILE_WHY = ("LoRA tunes a run imported from a GGUF file, which stays quantized as its "
                   "base: open the file with File › Open model… (it becomes a run), then "
                   "choose LoRA.")
TRAINED_WHY = ("LoRA keeps the GGUF this run was imported from as its base, and the run has "
               "trained {step} steps since, so its weights are no longer that file's. Export "
               "it as a Q8_0 GGUF and open that with File › Open model… to tune it with LoRA.")
MISSING_WHY = ("LoRA keeps the GGUF this run was imported from as its base, and it is no "
               "longer at {path}: put it back there to choose LoRA.")


class LoraTuning:
    """The worker's LoRA part (see the module). monitor: the run's (Stop ends opening the
    base); say: a phase or note for the run bar (lora_session's note)."""

    def __init__(self, monitor: Monitor, say: Callable[[str], None]):
        self.monitor, self.say = monitor, say
        self.source: ModelSource | None = None   # what the worker's model was opened from
        self.path: Path | None = None            # that path: the run folder of a checkpoint

    def opened(self, source: ModelSource | None, path: Path | None) -> None:
        """The worker's model was opened from `path` (source None: trained here from scratch)."""
        self.source, self.path = source, path

    def option(self, session) -> LoraOption:
        """Whether LoRA can tune `session` (an engine TrainingSession), and a LoRA run's shape."""
        if session.lora is not None:
            base = session.base_ref or {}
            return LoraOption(config=session.lora.to_dict(), base_bytes=int(base.get("size", 0)),
                              base_name=str(base.get("name", "")))
        gguf = (session.source or {}).get("path") or ""
        if self.source is ModelSource.GGUF:   # a file opened as it is: no run folder
            return LoraOption(OPENED_FILE_WHY)
        if self.source is not ModelSource.CHECKPOINT or not gguf:
            return LoraOption(NOT_IMPORTED_WHY)
        if session.step > 0:
            return LoraOption(TRAINED_WHY.format(step=session.step))
        if not Path(gguf).is_file():
            return LoraOption(MISSING_WHY.format(path=gguf))
        return LoraOption(base_bytes=Path(gguf).stat().st_size, base_name=Path(gguf).name)

    def adopt(self, holder, lora: dict) -> None:
        """Make holder.session (the worker's) the LoRA session `lora` (LoraConfig.to_dict())
        asks for: a LoRA run asked for its own shape stays as it is; a run LoRA can start on
        is reopened from its run folder as a LoRA session, its float32 model dropped from the
        device first (and reopened as it was when the LoRA session cannot be made, so chat and
        export go on). Raises ConfigError, with nothing changed, where LoRA cannot tune it;
        what lora_session raises (ModelImportError for a changed base, Cancelled on Stop)."""
        from opencl_llm_studio.engine.training.opening import load_session, lora_session
        s, wanted = holder.session, LoraConfig.from_dict(lora)
        if s.lora is not None:
            if s.lora != wanted:
                raise ConfigError(f"This run already tunes LoRA adapters of rank {s.lora.rank} "
                                  f"(alpha {s.lora.alpha:g}).",
                                  "A LoRA run keeps its adapters' shape; open its base GGUF "
                                  "again (File › Open model…) to tune another.")
            return
        why = self.option(s).why_not
        if why:
            raise ConfigError(why)
        rt, path = s.rt, self.path
        holder.session = s = None   # the whole model's float32 weights leave the device first
        gc.collect()
        try:
            holder.session, note = lora_session(path, wanted, runtime=rt, monitor=self.monitor)
        except BaseException:
            holder.session = load_session(path, runtime=rt)   # the run as it was opened
            raise
        if note:   # rank, alpha, targets, base and the learning rate it trains at
            log.info("%s", note)
            self.say(note)
