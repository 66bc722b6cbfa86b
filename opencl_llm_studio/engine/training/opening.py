"""Opening a TrainingSession, whatever it comes from: a new run (create_session), a saved run
(load_session: a run folder or its checkpoint), a GGUF (session_from_gguf, session_from_bundle),
a transformers folder (engine.training.open_hf.session_from_hf), and open_session(path), which
takes any of these paths and tells them apart by what the path holds
(engine.files.model_path.model_path_kind).

Each raises ConfigError / DataError / DeviceError / CheckpointError / ModelImportError with a
message for the person, and engine.progress.Cancelled when its monitor is cancelled.
"""

from __future__ import annotations

import dataclasses

from opencl_llm_studio.engine.config import (DEFAULT_TOKENIZER, LORA_LR_FACTOR, LoraConfig,
                                             ModelConfig, TrainConfig, pretrained_train_config)
from opencl_llm_studio.engine.data.open_tokenizer import tokenizer_from_bytes
from opencl_llm_studio.engine.data.textio import bundled_corpus, read_text
from opencl_llm_studio.engine.data.tokenizer import Tokenizer
from opencl_llm_studio.engine.errors import CheckpointError, ConfigError, ModelImportError
from opencl_llm_studio.engine.files import checkpoint
from opencl_llm_studio.engine.files.gguf_base import base_reference, open_quant_base
from opencl_llm_studio.engine.files.gguf_import import import_gguf
from opencl_llm_studio.engine.files.hf.load import has_texts
from opencl_llm_studio.engine.files.model_path import ModelPathKind, model_path_kind
from opencl_llm_studio.engine.files.open_run import run_form
from opencl_llm_studio.engine.limits import MIN_VOCAB
from opencl_llm_studio.engine.model.lora_table import LoraTable
from opencl_llm_studio.engine.model.params import ParamTable
from opencl_llm_studio.engine.opencl.runtime import Runtime
from opencl_llm_studio.engine.progress import Monitor
from opencl_llm_studio.engine.training.open_hf import session_from_hf
from opencl_llm_studio.engine.training.schedule import Rewarm
from opencl_llm_studio.engine.training.session import TrainingSession


def create_session(model_cfg: ModelConfig, train_cfg: TrainConfig, pretrain_text: str,
                   tune_text: str | None = None, device=None,
                   tokenizer_kind: str = DEFAULT_TOKENIZER, runtime: Runtime | None = None,
                   monitor: Monitor | None = None, autotune: bool | None = None
                   ) -> TrainingSession:
    """A new run: train the tokenizer on both texts, size the vocabulary from it, build the
    model (autotune: as TrainingSession's). Raises ConfigError / DataError / DeviceError, and
    Cancelled when `monitor` is cancelled (also while tuning). The settings are checked once,
    where the session opens (TrainingSession); the model's shape also here, before the
    tokenizer trains on the texts."""
    model_cfg.replace(vocab_size=max(model_cfg.vocab_size, MIN_VOCAB)).validate()
    monitor = monitor or Monitor()
    texts = [pretrain_text] + ([tune_text] if tune_text else [])
    monitor.tick("training the tokenizer", 0, 1)  # bounded input, not interruptible
    tokenizer = Tokenizer.train(texts, model_cfg.vocab_size, tokenizer_kind)
    cfg = model_cfg.replace(vocab_size=tokenizer.vocab_size)
    monitor.tick("opening the device", 0, 1)
    rt = runtime or Runtime(device)
    return TrainingSession(rt, cfg, train_cfg, tokenizer, pretrain_text, tune_text,
                           monitor=monitor, autotune=autotune)


def load_session(path, device=None, runtime: Runtime | None = None,
                 monitor: Monitor | None = None, autotune: bool | None = None
                 ) -> TrainingSession:
    """A saved run: a run folder's checkpoint (engine.files.checkpoint.load's choice of file) or
    a checkpoint file, with its weights, AdamW state, step and RNG, to continue, chat with or
    export (autotune: as TrainingSession's)."""
    ck = checkpoint.load(path, arrays=False)
    with ck["members"] as members:   # weights and moments go to the device piece by piece
        return _from_checkpoint(ck, members, device, runtime, monitor, autotune)


def _from_checkpoint(ck: dict, members, device, runtime, monitor, autotune) -> TrainingSession:
    h = ck["header"]
    known = {f.name for f in dataclasses.fields(TrainConfig)}  # an older run's fields
    try:
        mc = ModelConfig(**h["model_config"])
        tc = TrainConfig(**{k: v for k, v in h["train_config"].items() if k in known})
    except TypeError as e:
        raise CheckpointError(f"The checkpoint's configuration is not understood: {e}") from e
    tok = tokenizer_from_bytes(ck["tokenizer"])   # the app's, or an imported model's
    lora = LoraConfig.from_dict(h["lora"]) if h.get("lora") else None
    size = (LoraTable(mc.validate(), lora) if lora else ParamTable(mc.validate())).size
    trained = int(h["adam_t"]) > 0   # before the first step the moments are the model's zeros
    names = ("params", "adam_m", "adam_v") if trained else ("params",)
    if any(members.size(k) != size for k in names):
        raise CheckpointError("The checkpoint's weights do not match its configuration.")
    rt = runtime or Runtime(device)
    base = open_quant_base(rt, mc, h["lora"]["base"]) if lora else None
    # the model is built from the saved weights (a random init first would cost a second
    # copy of them on the host), and no whole array is on the host: a 135M model's load
    # held 1.5 GiB beside the model when params, m and v were read whole
    s = TrainingSession(rt, mc, tc, tok, ck["pretrain_text"], ck["tune_text"],   # saved before
                        flat_weights=members.chunks("params"),                    # the key: 1
                        chat_format=h.get("chat_format", 1), monitor=monitor,
                        autotune=autotune, short_text_ok=True, opened=True,
                        lora=lora, base=base, base_ref=h["lora"]["base"] if lora else None)
    if trained:   # read when it trains: opened to chat or export, it holds its weights alone
        s.model.defer_moments(members.moment_source())
    s.model.adam_t = int(h["adam_t"])
    s.step = int(h["step"])
    s.last_loss = h.get("last_loss")
    s.rng.bit_generator.state = h["rng_state"]
    s.history = h.get("history", [])
    s.rewarm = Rewarm.from_list(h.get("rewarm"))
    s.loaded_from_previous = ck["from_previous"]
    s.source = h.get("source")
    return s


def session_from_gguf(path, pretrain_text: str, tune_text: str | None = None,
                      train_cfg: TrainConfig | None = None, device=None,
                      runtime: Runtime | None = None, monitor: Monitor | None = None
                      ) -> TrainingSession:
    """A session around a GGUF (this app's export, or a pretrained open model), to chat with or
    keep training on the given texts. AdamW state starts fresh. Raises ModelImportError for a
    file the engine cannot run."""
    return session_from_bundle(import_gguf(path), pretrain_text, tune_text, train_cfg, device,
                               runtime, monitor)


def session_from_bundle(bundle, pretrain_text: str, tune_text: str | None = None,
                        train_cfg: TrainConfig | None = None, device=None,
                        runtime: Runtime | None = None, monitor: Monitor | None = None
                        ) -> TrainingSession:
    """session_from_gguf of a GGUF already read (engine.files.gguf_import.import_gguf's
    ModelBundle `bundle`, weights included), so a caller that read it once need not read it
    again."""
    rt = runtime or Runtime(device)
    # a pretrained open model: a training window, its own template, its card; an app's export:
    # its chat format (exported before the key: 1)
    cfg, fmt, source = run_form(bundle, bundle.metadata.get("chat_format", 1))
    if source is not None:
        train_cfg = train_cfg or pretrained_train_config()
    s = TrainingSession(rt, cfg, train_cfg or TrainConfig(), bundle.tokenizer, pretrain_text,
                        tune_text, flat_weights=ParamTable(cfg).flatten(bundle.weights),
                        chat_format=fmt, monitor=monitor, short_text_ok=True, opened=True)
    s.last_loss = bundle.metadata.get("final_loss")
    s.source = source
    if "steps_done" in bundle.metadata:   # exported by this app: where its training stood
        s.adopt_progress(bundle.metadata["steps_done"], bundle.metadata.get("pretrain_steps"),
                         bundle.metadata.get("tune_steps"))
    return s


def open_session(path, pretrain_text: str | None = None, tune_text: str | None = None,
                 train_cfg: TrainConfig | None = None, device=None,
                 runtime: Runtime | None = None, monitor: Monitor | None = None,
                 autotune: bool | None = None, kind: ModelPathKind | None = None
                 ) -> TrainingSession:
    """The session of any model path: a run folder or checkpoint file (load_session: its own
    texts and settings; the texts and train_cfg given are not used), a GGUF (session_from_gguf)
    or a transformers folder (session_from_hf: a folder this app exported with its texts keeps
    them). A GGUF or a folder without texts trains on `pretrain_text` / `tune_text`, by default
    the bundled pretraining text. kind: what the caller asked to open (the studio's Open
    checkpoint, Open GGUF, Open Hugging Face folder), so a path of another kind is refused as
    that kind ("not a transformers model folder"); None: what the path holds. Raises
    ModelImportError for a path that holds no model, and what the opener raises."""
    kind = kind or model_path_kind(path)
    if kind in (ModelPathKind.RUN_FOLDER, ModelPathKind.CHECKPOINT):
        return load_session(path, device=device, runtime=runtime, monitor=monitor,
                            autotune=autotune)
    if kind is None:
        raise ModelImportError(f"{path} holds no model the engine can open.",
                               "Give a run folder (it holds checkpoint.npz), a checkpoint .npz, "
                               "a .gguf file or a transformers model folder (config.json).")
    if kind is not ModelPathKind.GGUF and has_texts(path):   # this app's export with its texts
        return session_from_hf(path, device=device, runtime=runtime)
    if pretrain_text is None:
        pretrain_text = read_text(bundled_corpus("pretrain"))
    if kind is ModelPathKind.GGUF:
        return session_from_gguf(path, pretrain_text, tune_text, train_cfg, device, runtime,
                                 monitor)
    return session_from_hf(path, pretrain_text, tune_text, device=device, runtime=runtime)


def lora_session(path, lora: LoraConfig, device=None, runtime: Runtime | None = None,
                 monitor: Monitor | None = None, autotune: bool | None = None,
                 base_path=None) -> tuple[TrainingSession, str | None]:
    """A saved run to tune with LoRA adapters (Hu et al. 2021) on its model as the frozen,
    still-quantized base (engine.model.quant_base.QuantBase): a run imported from a GGUF and
    not trained since (its weights are the file's), whose GGUF is at base_path or where the
    import found it; or a LoRA run already, continued when `lora` is its own. Its learning rate
    becomes LORA_LR_FACTOR times the run's (LoRA wants several times full fine-tuning's: "LoRA
    without regret", 2025). Returns (session, a note for the person or None). Raises
    ConfigError for a run LoRA cannot start on, with the way there; ModelImportError when the
    base GGUF is missing or changed."""
    ck = checkpoint.load(path, arrays=False)
    h = ck["header"]
    with ck["members"] as members:
        if h.get("lora"):
            kept = LoraConfig.from_dict(h["lora"])
            if kept != lora.validate():
                raise ConfigError(
                    f"This run already tunes LoRA adapters of rank {kept.rank} (alpha "
                    f"{kept.alpha:g}) on {', '.join(kept.targets)}.",
                    "A LoRA run keeps its adapters' shape: leave out the LoRA options to train "
                    "it further, or start a new run from the base model.")
            return _from_checkpoint(ck, members, device, runtime, monitor, autotune), None
    lora.validate()
    source = h.get("source") or {}
    if int(h["step"]) > 0:
        raise ConfigError(
            f"This run has trained {h['step']} steps, so its weights are no longer its base "
            "model's file, and LoRA keeps the base as that file.",
            "Export it (`llm-studio export RUN model.gguf --dtype q8_0`), import that file "
            "into a new run, and tune that one with LoRA.")
    base_path = base_path or source.get("path")
    if not base_path:
        raise ConfigError(
            "LoRA tunes a model imported from a GGUF file, which stays quantized as its base; "
            "this run was not imported from one (or before the app recorded the file).",
            "Import the GGUF again (`llm-studio import model.gguf --out RUN`) and tune that "
            "run with --lora-rank.")
    mc = ModelConfig(**h["model_config"]).validate()
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    tc = TrainConfig(**{k: v for k, v in h["train_config"].items() if k in known})
    tc = tc.replace(learning_rate=tc.learning_rate * LORA_LR_FACTOR,
                    tune_learning_rate=tc.tune_learning_rate * LORA_LR_FACTOR)
    rt = runtime or Runtime(device)
    ref = base_reference(base_path, source)
    s = TrainingSession(rt, mc, tc, tokenizer_from_bytes(ck["tokenizer"]), ck["pretrain_text"],
                        ck["tune_text"], chat_format=h.get("chat_format", 1), monitor=monitor,
                        autotune=autotune, short_text_ok=True, opened=True, lora=lora,
                        base=open_quant_base(rt, mc, ref), base_ref=ref)
    s.source, s.history = source, h.get("history", [])
    return s, (f"LoRA rank {lora.rank} (alpha {lora.alpha:g}) on {', '.join(lora.targets)} "
               f"of {ref['name']}, kept quantized; learning rate {tc.learning_rate:g} "
               f"({LORA_LR_FACTOR}x the run's)")
