"""What crosses the thread boundary between the window and the training worker, typed.

Jobs go from the GUI thread to studio.ui.run.worker.TrainingWorker (through studio.ui.run.worker_host);
session info and run results come back as the payload of the worker's signals. Every type is a
frozen dataclass, so a job cannot change after it was queued and a result cannot be edited by
one receiver under another's feet. `RunState` names where a run is, and `CONTROLS` says which
controls each state enables (studio.ui.window.window_controls applies it; studio.ui.run.run_controller
moves the state). No Qt here (a contract in pyproject.toml): the protocol is testable without a display.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from opencl_llm_studio.engine.config import (CHECKPOINT_EVERY, DEFAULT_TOKENIZER, ModelConfig, TrainConfig, MAX_NEW_TOKENS, SamplingParams)
from opencl_llm_studio.engine.data.dialogue import Message
from opencl_llm_studio.studio.run_folder import HF_KINDS, ModelKind, path_kind
from opencl_llm_studio.engine.files.export_types import DEFAULT_DTYPE

if TYPE_CHECKING:
    from opencl_llm_studio.engine.opencl.device import DeviceInfo



_SAMPLING = SamplingParams()


class ModelSource(Enum):
    """What an opened model was read from."""
    CHECKPOINT = "checkpoint"          # a run folder or checkpoint .npz
    GGUF = "gguf"                      # a GGUF this app exported
    HF = "hf"                          # a Hugging Face transformers folder

    @classmethod
    def of(cls, path) -> "ModelSource":
        """How File › Open reads `path`, by its kind (studio.run_folder.path_kind). Raises
        StudioError for a path that holds no model."""
        kind = path_kind(path)
        return cls.GGUF if kind is ModelKind.GGUF else cls.HF if kind in HF_KINDS \
            else cls.CHECKPOINT


# -- jobs: GUI thread -> worker ---------------------------------------------------------------
@dataclass(frozen=True)
class TrainJob:
    """Train a new model from scratch into a new run folder (TrainingWorker.start)."""
    model_config: ModelConfig
    train_config: TrainConfig
    pretrain_text: str                 # the whole pretraining text
    run_dir: str                       # the run folder to create (studio.run_folder.new_run_dir)
    tune_text: str | None = None       # the tune dialogues, or None for no tuning stage
    device: int | str | None = None  # device index or name; None: default (select_device)
    tokenizer_kind: str = DEFAULT_TOKENIZER  # engine.data.tokenizer kind: "bpe" or "char"
    checkpoint_every: int = CHECKPOINT_EVERY  # autosave every N steps (0: only on pause/stop/end)
    autotune: bool = False             # tune the kernels first when this device and shape have
    #                                    no tuned entry (engine.model.gemm_tune.runtime_for_model)


@dataclass(frozen=True)
class ContinueJob:
    """Continue the worker's session (opened or last trained) to new step totals
    (TrainingWorker.proceed; the engine's check_continuation decides what is allowed)."""
    pretrain_steps: int                # new total of pretraining steps (not steps to add)
    tune_steps: int                    # new total of tuning steps
    run_dir: str                       # the run folder: the opened one (in place) or a new one;
                                       # metrics.jsonl starts with the session's history
    checkpoint_every: int = CHECKPOINT_EVERY  # autosave every N steps (0: only on pause/stop/end)
    more_seconds: float = 0.0          # > 0 ("Train for N minutes"): train this much longer by
    #                                    time instead of to the step totals
    autotune: bool = False             # as TrainJob.autotune, before the session trains on
    tune_text: str | None = None       # the open dialogue file: becomes the dialogues of a
    #                                    session that has none (TrainingSession.set_dialogues)
    retrain: tuple = ()                # (TrainConfig field, value) pairs of how the run trains
    #                                    from here: batch size, learning rate
    #                                    (TrainingSession.retrain_with)
    lora: dict | None = None           # Tuning method LoRA: engine.config.LoraConfig.to_dict();
    #                                    the run becomes (or stays) a LoRA run over its GGUF
    #                                    (engine.training.opening.lora_session); None: as it is


@dataclass(frozen=True)
class LoadJob:
    """Open a model (TrainingWorker.load): a run folder, a checkpoint .npz, an exported .gguf
    or a Hugging Face transformers folder."""
    path: str
    device: int | str | None = None    # as TrainJob.device
    # What the person asked to open (File › Open exported GGUF / Hugging Face folder): its
    # errors then name that kind; None: told by the path (Open checkpoint takes all three).
    source: ModelSource | None = None
    # A GGUF, or a transformers folder without data/, holds no training text: these are the
    # texts it is trained further on, and the training settings for that (None: defaults).
    pretrain_text: str | None = None
    tune_text: str | None = None
    train_config: TrainConfig | None = None
    # File › Open model…: import the pretrained model at `path` into this new run folder
    # (studio.open_import, as `llm-studio import` does) and open that run; None: open `path`
    import_to: str | None = None


@dataclass(frozen=True)
class TuneJob:
    """Tune the kernels for a device and a model shape and cache the winners
    (TrainingWorker.tune_kernels; engine.model.gemm_tune.tune and save)."""
    model_config: ModelConfig          # the shape: d_model, heads, context, vocabulary, n_layer
    batch_size: int                    # windows per step
    device: int | str | None = None    # as TrainJob.device
    seconds: float = 30.0              # the time bound (engine.model.gemm_tune.TUNE_SECONDS)


@dataclass(frozen=True)
class SpeedJob:
    """Measure a device's training speed for Auto (TrainingWorker.measure_speed; engine.training.
    auto_size.measure_speed): two probe shapes, about a second once the kernels are built."""
    device: int | str | None = None    # as TrainJob.device


@dataclass(frozen=True)
class SpeedReport:
    """What SpeedJob measured: the DeviceSpeed (engine.training.auto_size) and the device's
    DeviceInfo (its memory bounds Auto's shapes)."""
    speed: object                      # engine.training.auto_size.DeviceSpeed
    device: object                     # engine.opencl.device.DeviceInfo


@dataclass(frozen=True)
class ChatRequest:
    """Answer the conversation's last user message on the current weights (TrainingSession.chat)."""
    messages: tuple[Message, ...]      # oldest first; the last one is the user's
    # the engine's defaults (engine.config.SamplingParams, MAX_NEW_TOKENS), not copies
    temperature: float = _SAMPLING.temperature   # softmax temperature (0: greedy)
    top_k: int = _SAMPLING.top_k                 # keep the k most likely tokens (0: all)
    top_p: float = _SAMPLING.top_p               # nucleus sampling mass (1: off)
    max_new_tokens: int = MAX_NEW_TOKENS         # answer length bound, in tokens

    @classmethod
    def from_panel(cls, messages: Sequence[Mapping[str, str]],
                   knobs: Mapping[str, Any]) -> ChatRequest:
        """From studio.ui.panels.chat_panel's sendRequested: [{"role", "content"}] and its knobs."""
        return cls(tuple(Message(role=m["role"], content=m["content"]) for m in messages),
                   **knobs)

    def sampling(self) -> dict:
        """The sampling keyword arguments of TrainingSession.chat."""
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p,
                "max_new_tokens": self.max_new_tokens}


@dataclass(frozen=True)
class ExportRequest:
    """Write the current weights (TrainingWorker.export)."""
    path: str                          # the .gguf file, or the folder for "hf" and "peft"
    # GGUF tensor type ("f32", "f16", "q8_0"), "hf" (a transformers folder), or for a LoRA run
    # its adapters alone (studio.adapter_files.ADAPTER_FORMS): "adapter" (a GGUF LoRA adapter
    # for llama.cpp --lora and Ollama ADAPTER) or "peft" (a PEFT folder)
    dtype: str = DEFAULT_DTYPE


@dataclass(frozen=True)
class SaveRequest:
    """Save a checkpoint of the current session into `directory` (TrainingWorker.save)."""
    directory: str


# -- what comes back: worker -> GUI thread ---------------------------------------------------
@dataclass(frozen=True)
class LoraOption:
    """Whether LoRA can tune the worker's model (the settings column's Tuning method): a run
    imported from a GGUF and not trained since, or a LoRA run (its adapters' shape fixed)."""
    why_not: str = ""                  # why LoRA cannot tune it ("": it can)
    config: dict | None = None         # a LoRA run's LoraConfig.to_dict(); None: not one yet
    base_bytes: int = 0                # the base GGUF's size in bytes (the estimate's base)
    base_name: str = ""                # its file name


@dataclass(frozen=True)
class SessionInfo:
    """The worker's session as the window shows it: the payload of sessionReady (a run is about
    to take its first step) and of loaded (a model was opened; then path and source are set)."""
    model_config: ModelConfig          # with the real vocabulary size of the trained tokenizer
    train_config: TrainConfig          # step totals as the session will train them
    device: "DeviceInfo"               # the OpenCL device the session runs on
    step: int                          # optimizer steps done so far
    total_steps: int                   # pretraining + tuning steps (tuning only with a tune set)
    has_tune: bool                     # the session has tune dialogues (a tuning stage)
    run_dir: str | None = None         # the run folder written to, None when no run is going
    pretrain_tokens: int | None = None  # tokens in the pretraining text, when just encoded
    tune_tokens: int | None = None     # tokens in the tune dialogues, when just encoded
    history: tuple | None = None       # StepMetrics of the steps done, oldest first, or None
    path: str | None = None            # the file or folder opened (loaded only)
    source: ModelSource | None = None  # what it was (loaded only)
    tokenizer: str = ""                # the tokenizer in words (engine.files.model_card.tokenizer_name)
    lora: LoraOption | None = None     # whether LoRA can tune it; None: not told (a new model)


class Outcome(Enum):
    """How a run came back to the event loop; one worker signal each."""
    FINISHED = "finished"              # every planned step trained
    STOPPED = "stopped"                # Stop or closing the window (also while preparing)
    FAILED = "failed"                  # an error ended it (or it could not start)


@dataclass(frozen=True)
class RunResult:
    """The end of a run: the payload of TrainingWorker.finished / stopped / failed."""
    outcome: Outcome
    step: int                          # optimizer steps of the session at the end (0: none)
    run_dir: str | None = None         # the run folder, None when the run never started
    saved_step: int | None = None      # step of the last checkpoint in run_dir, None if none
    train_config: TrainConfig | None = None  # the session's, with its final step totals
    lora: LoraOption | None = None     # whether LoRA can tune it now (None: not told)


@dataclass(frozen=True)
class TuneProgress:
    """Where a tuning job is: the payload of TrainingWorker.tuneProgress."""
    what: str                          # "qkv fwd", "attention path", or "opening the device"
    done: int                          # products measured
    total: int                         # products + the attention path (0: not started)
    elapsed_s: float                   # seconds of tuning so far (the bound is TuneJob.seconds)


@dataclass(frozen=True)
class TuneReport:
    """What a tuning job found: the payload of TrainingWorker.tuned (None there: it failed)."""
    device: str                        # the device's name
    seconds: float                     # tuning time
    speedup: float | None              # a step's products, tuned over the table (step_speedup)
    changed: int                       # products whose choice differs from the table's
    measured: int                      # distinct products measured
    complete: bool                     # every product and the attention path measured
    cancelled: bool                    # Stop: nothing was stored
    saved_to: str | None = None        # the cache file written (None: cancelled)


@dataclass(frozen=True)
class RunPoint:
    """Where a run holds or goes on: the payload of TrainingWorker.paused and resumed."""
    step: int                          # optimizer steps done
    run_dir: str | None = None         # the run folder
    saved_step: int | None = None      # step of the last checkpoint written (pause autosaves)


@dataclass(frozen=True)
class ContinuePoint:
    """An opened model that Train continues: its step and the step totals it was trained to."""
    step: int
    pretrain_steps: int
    tune_steps: int
    has_tune: bool                     # with a tuning stage (the Tuning steps spin is editable)
    # The run folder that holds the model's checkpoint: "Continue in place" trains on in it
    # (as `llm-studio train --out RUN --continue`); None for a GGUF or transformers folder,
    # which can only continue as a new run.
    run_dir: str | None = None

    @classmethod
    def of(cls, info: SessionInfo) -> ContinuePoint:
        tc = info.train_config
        folder = None
        if info.source is ModelSource.CHECKPOINT and info.path:
            p = Path(info.path)
            folder = str(p if p.is_dir() else p.parent)
        return cls(info.step, tc.pretrain_steps, tc.tune_steps, info.has_tune, folder)


class FileTask(Enum):
    """A one-off job the worker does between runs; the controls wait for it."""
    NONE = "none"
    EXPORT = "export"
    SAVE = "save"
    LOAD = "load"
    TUNE = "tune"                      # kernel tuning: Stop cancels it
    SPEED = "speed"                    # Auto's measure of the device's training speed


# -- run states and the controls each one enables ------------------------------------------
class RunState(Enum):
    """Where the run is. Moves: IDLE -train-> PREPARING -sessionReady-> RUNNING -pause->
    PAUSING -paused-> PAUSED -resume-> RUNNING; Stop from PREPARING..PAUSED -> STOPPING; the
    worker's finished / stopped / failed -> IDLE (studio.ui.run.run_controller.RunController)."""
    IDLE = "idle"
    PREPARING = "preparing"            # tokenizer, encoding, building the model
    RUNNING = "running"                # steps are being taken
    PAUSING = "pausing"                # Pause pressed; the current step ends first
    PAUSED = "paused"                  # the worker waits in its event loop, weights usable
    STOPPING = "stopping"              # Stop pressed; the worker saves and ends the run


TRAINING_NOTE = "Training is running: pause it to chat with the current weights."


@dataclass(frozen=True)
class Controls:
    """What a run state allows. The window also needs: valid settings, data and a device for
    Train; a model for export / save / chat; no FileTask in progress for Train, the model
    controls and the open actions; and no opened model (ContinuePoint) for the data and device
    controls, which that model fixes."""
    train: bool = False                # Train / Continue
    pause: bool = False                # the Pause / Resume button
    resume: bool = False               # that button reads Resume
    stop: bool = False
    use_model: bool = False            # export, save a checkpoint, chat on the weights
    edit: bool = False                 # settings, data, device, autosave are editable
    open_model: bool = False           # File › Open checkpoint / GGUF / HF, New model, drops
    hint: bool = False                 # say why Train is disabled
    chat_note: str | None = None       # why chat is off in this state (None: by the model)


CONTROLS: dict[RunState, Controls] = {
    RunState.IDLE: Controls(train=True, use_model=True, edit=True, open_model=True, hint=True),
    RunState.PREPARING: Controls(stop=True, chat_note=TRAINING_NOTE),
    RunState.RUNNING: Controls(pause=True, stop=True, chat_note=TRAINING_NOTE),
    RunState.PAUSING: Controls(stop=True, chat_note=TRAINING_NOTE),
    RunState.PAUSED: Controls(pause=True, resume=True, stop=True, use_model=True),
    RunState.STOPPING: Controls(chat_note=TRAINING_NOTE),
}
