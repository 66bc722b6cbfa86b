"""How much device memory a model needs, checked before anything is allocated.

Counts the bytes of what engine.model.transformer and engine.generation.decode allocate, from the lists they allocate
from (engine.model.activations): the Model's own buffers (model_buffers: parameters, gradients, two
AdamW moments, grad-norm scratch, the transposed-weight scratch, RoPE tables), the training
activations for (batch_size, context_length) (evaluation runs on the same set), the
generation window (1, context_length) and the KV decoder's rows that samples use
(DECODE_BUFFERS), and on GPUs the runtime scratch of the fused backward's dS^T
(attention_flash.ds_scratch_bytes), or with the runtime every scratch request of a run
(engine.model.scratch); the activation sets from BUFFERS (grouped-query
attention's narrower k, v and the logits of a large vocabulary held a chunk of rows at a time,
logit_rows, included).
Attention keeps
a logsumexp (B, H, T) per layer on the fused path and the probabilities (B, H, T, T) on the
GEMM path; each activation set counts the path engine.model.attention_gemm.choose gives it.
"""

from __future__ import annotations

import os

from opencl_llm_studio.engine.model import activations, attention_flash, attention_gemm, scratch
from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.opencl.device import DeviceInfo
from opencl_llm_studio.engine.opencl.runtime import Runtime
from opencl_llm_studio.engine.errors import ConfigError


def activation_floats(cfg: ModelConfig, B: int, T: int, with_grad: bool,
                      path: str = "fused") -> tuple[int, int]:
    """(total, largest single buffer) in 4-byte words of engine.model.transformer.Activations(B, T) with
    attention on `path` ("fused" or "gemm"): the buffers engine.model.activations.BUFFERS declares."""
    total, largest = activations.set_bytes(cfg, B, T, with_grad, path)
    return total // 4, largest // 4


def training_bytes(cfg: ModelConfig, batch_size: int, device: DeviceInfo | None = None,
                   attention_path: str | None = None, rt: Runtime | None = None,
                   window: int | None = None, model_part: tuple[int, int] | None = None
                   ) -> tuple[int, int]:
    """(total bytes, largest single buffer in bytes) for training `cfg` at `batch_size`: what
    engine.model.transformer.Model, its activation sets (training, which evaluation shares, and
    generation), a KVDecoder and the runtime's scratch allocate on `device`; each activation
    set's attention path as engine.model.attention_gemm.choose picks it there (attention_path
    forces one; no device: "fused"). With the runtime rt (device: rt.info) every scratch
    request of a step, an evaluation and a generation is counted (engine.model.scratch);
    without one only the largest, the GPU backward's dS^T (the K split partial products,
    which follow the runtime's GEMM plan, are left out: a few MB to tens of MB).
    window: the training set's T (None: cfg.context_length; a tuning stage trains in its
    dialogues' window, engine.data.dialogue.tune_window); generation keeps cfg's.
    model_part: (total, largest) bytes of the model's own buffers where they are not a full
    model's (a LoRA model: its base and adapters, lora_model_bytes)."""
    T = window or cfg.context_length
    device = rt.info if rt is not None else device
    # train (evaluation shares its set: Model.activations) and generate; at batch size 1 the
    # generation set is its own where a KVDecoder made it before training (counted so)
    sets = ((batch_size, T, True), (1, cfg.context_length, False))
    paths = [_path(cfg, B, t, grad, device, attention_path) for B, t, grad in sets]
    parts = [activations.set_bytes(cfg, B, t, grad, path)
             for (B, t, grad), path in zip(sets, paths)]
    if rt is not None:   # one scratch buffer per queue
        parts += [(n, n) for n in scratch.step_scratch_bytes(rt, cfg, batch_size, *paths, T)
                  if n]
    elif device is not None and paths[0] == "fused":   # the training set's backward's dS
        ds = attention_flash.ds_scratch_bytes(device, cfg, batch_size, T)
        parts.append((ds, ds))
    parts.append(model_part or activations.model_bytes(cfg))
    parts.append(activations.decode_bytes(cfg))
    return sum(n for n, _ in parts), max(b for _, b in parts)


def chat_bytes(cfg: ModelConfig, device: DeviceInfo | None = None,
               attention_path: str | None = None,
               model_part: tuple[int, int] | None = None) -> tuple[int, int]:
    """(total bytes, largest single buffer in bytes) for chatting with, sampling from or
    exporting `cfg`: the Model without its training state (engine.model.activations.ModelBuffer
    .training: gradients and moments are made at the first training use), the generation set
    (1, context_length) and a KVDecoder's rows. model_part: (total, largest) bytes of the
    model's own buffers where they are not a full float32 model's (a LoRA model: its
    still-quantized base and adapters, engine.model.lora.LoraModel.chat_bytes)."""
    path = _path(cfg, 1, cfg.context_length, False, device, attention_path)
    parts = [model_part or activations.model_bytes(cfg, training=False),
             activations.set_bytes(cfg, 1, cfg.context_length, False, path),
             activations.decode_bytes(cfg)]
    return sum(n for n, _ in parts), max(b for _, b in parts)


def check_chat_fits(cfg: ModelConfig, device: DeviceInfo,
                    attention_path: str | None = None,
                    model_part: tuple[int, int] | None = None) -> int:
    """Raise ConfigError when even chatting with cfg would not fit the device (chat_bytes above
    90% of usable_bytes, or a buffer above the largest single allocation), before anything is
    allocated; return the bytes needed. model_part: as chat_bytes (a LoRA run's base and
    adapters, not a float32 model). Training checks its own need when it starts
    (check_fits)."""
    need, biggest = chat_bytes(cfg, device, attention_path, model_part)
    have, gib = usable_bytes(device), 2 ** 30
    if need > 0.9 * have or biggest > device.max_alloc_bytes:
        weights = "its weights" if model_part else "its float32 weights"
        raise ConfigError(
            f"This model needs about {need / gib:.2f} GiB on {device.name} just to chat "
            f"({weights} and one generation window), which has {have / gib:.2f} GiB "
            f"available (largest single buffer {biggest / gib:.2f} GiB, limit "
            f"{device.max_alloc_bytes / gib:.2f} GiB).",
            "Close other programs, use a device with more memory, or a smaller model.")
    return need


def _path(cfg, B, T, grad, device, forced) -> str:
    if device is None:
        return forced or "fused"
    return attention_gemm.choose(device, cfg, B, T, grad, forced)


def available_host_bytes() -> int | None:
    """The host memory the system can give a process now, in bytes (Linux /proc/meminfo
    MemAvailable: free memory plus what the page cache would give back), or None where it
    cannot be read (then the device's own figure stands)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def usable_bytes(device: DeviceInfo) -> int:
    """What training may really take on `device`: its global memory, and on a CPU device (whose
    buffers are host RAM) no more than the host has available now. PoCL reports a CPU device's
    global memory as most of the machine's RAM whatever else runs: a 135M model's tuning took
    18.9 GB there and met the kernel's OOM killer instead of a refusal."""
    have = device.global_mem_bytes
    if device.is_cpu:
        host = available_host_bytes()
        if host is not None:
            have = min(have, host)
    return have


def fits(cfg: ModelConfig, batch_size: int, device: DeviceInfo,
         attention_path: str | None = None, rt: Runtime | None = None,
         window: int | None = None, model_part: tuple[int, int] | None = None) -> bool:
    """Whether training cfg at batch_size fits device: at most 90% of usable_bytes(device), no
    buffer above its largest single allocation (rt, window: as training_bytes)."""
    need, biggest = training_bytes(cfg, batch_size, device, attention_path, rt, window,
                                   model_part)
    return need <= 0.9 * usable_bytes(device) and biggest <= device.max_alloc_bytes


def _largest(ok, hi: int) -> int:
    """The largest n in 1..hi with ok(n) (ok monotone: true up to some n), 0 when none."""
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def largest_fit(cfg: ModelConfig, batch_size: int, device: DeviceInfo,
                attention_path: str | None = None, rt: Runtime | None = None,
                window: int | None = None, model_part: tuple[int, int] | None = None
                ) -> tuple[int, int]:
    """(largest batch size at the training window, largest training window at batch_size)
    that fit device (0 where none does), by bisection on training_bytes. window: as there;
    without one the window is cfg's context_length and the search changes the model's."""
    batch = _largest(lambda b: fits(cfg, b, device, attention_path, rt, window, model_part),
                     batch_size)
    if window is None:
        context = _largest(lambda t: fits(cfg.replace(context_length=t), batch_size, device,
                                          attention_path, rt, None, model_part),
                           cfg.context_length)
    else:
        context = _largest(lambda t: fits(cfg, batch_size, device, attention_path, rt, t,
                                          model_part), window)
    return batch, context


def check_fits(cfg: ModelConfig, batch_size: int, device: DeviceInfo,
               attention_path: str | None = None, rt: Runtime | None = None,
               window: int | None = None, model_part: tuple[int, int] | None = None) -> int:
    """Raise ConfigError when training would not fit the device, naming the largest batch size
    and context length (or training window) that do; return the bytes needed. attention_path:
    as engine.model.attention_gemm.choose's `forced` (default: its rule); rt: the runtime that
    will train (its scratch counted, training_bytes); window: the training set's T, and
    model_part the model's own bytes, as there."""
    need, biggest = training_bytes(cfg, batch_size, device, attention_path, rt, window,
                                   model_part)
    have = usable_bytes(device)
    gib = 2 ** 30
    if not fits(cfg, batch_size, device, attention_path, rt, window, model_part):
        batch, context = largest_fit(cfg, batch_size, device, attention_path, rt, window,
                                     model_part)
        at = (f"context length {cfg.context_length}" if window is None else
              f"a training window of {window} tokens")
        size = (f"context length {context}" if window is None else
                f"a training window of {context} tokens")
        if batch or context:
            fix = ("Largest that fits: " + " or ".join(
                part for part in (batch and f"batch size {batch} at {at}",
                                  context and f"{size} at batch size {batch_size}")
                if part) + ".")
        else:
            fix = ("Even batch size 1 at context length 1 does not fit: the weights, "
                   "gradients and AdamW moments alone are too large. Use a smaller d_model, "
                   "n_layer or vocabulary, or a device with more memory.")
        where = ("available in this machine's memory now" if have < device.global_mem_bytes
                 else "")
        raise ConfigError(
            f"This model needs about {need / gib:.2f} GiB on {device.name}, which has "
            f"{have / gib:.2f} GiB{' ' + where if where else ''} (largest single buffer "
            f"{biggest / gib:.2f} GiB, limit {device.max_alloc_bytes / gib:.2f} GiB).", fix)
    return need
