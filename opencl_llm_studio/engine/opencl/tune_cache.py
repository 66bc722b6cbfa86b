"""The winners of the kernel tuner (engine/model/gemm_tune.py), kept per device, driver and model shape.

One JSON file in the user's cache folder (platformdirs.user_cache_dir("llm-studio"), or the
folder LLM_STUDIO_CACHE_DIR names): {"version": 1, "entries": {device key: {shape key:
GemmPlan.to_dict() plus "measured"}}}. Written atomically (engine/fsutil.py); a file that cannot
be read or parsed is ignored with a warning (the engine then uses its hand table and the next
tuning run writes a fresh file), never an error: the cache only ever makes things faster.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from opencl_llm_studio.engine.fsutil import atomic_write_text

CACHE_ENV = "LLM_STUDIO_CACHE_DIR"  # a folder for the cache file (tests, portable installs)
FILE_NAME = "kernel_tuning.json"
VERSION = 1


def cache_dir() -> Path:
    """The app's cache folder: LLM_STUDIO_CACHE_DIR when set, else the user cache folder (also
    where engine.training.snapshot keeps a large model's NaN-guard copy)."""
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        import platformdirs
        folder = platformdirs.user_cache_dir("llm-studio", appauthor=False)
    return Path(folder)


def cache_path() -> Path:
    """The cache file, in cache_dir()."""
    return cache_dir() / FILE_NAME


def device_key(rt) -> str:
    """What makes measurements of one device valid: platform (vendor), device name, driver and
    OpenCL version, and any overridden limits (a profile of another device is another key)."""
    return _key(rt.info, rt.device, rt.limits)


def device_key_of(info) -> str:
    """device_key of a Runtime on engine.opencl.device.DeviceInfo `info` with the limits the
    device reports, without building one (no program compiled: the studio asks this on its GUI
    thread whenever the device or the model settings change)."""
    from opencl_llm_studio.engine.opencl.gemm_plan import DeviceLimits
    dev = info.cl_device()
    return _key(info, dev, DeviceLimits.of(info, dev))


def _key(info, dev, limits) -> str:
    parts = [info.platform, info.name, str(dev.driver_version).strip(), info.opencl_version,
             f"cu{limits.compute_units}", f"lm{limits.local_mem_bytes}",
             f"wg{limits.max_work_group_size}", f"vw{limits.native_float_width}"]
    return " | ".join(parts)


def shape_key(cfg, batch_size: int) -> str:
    """What makes one model's products: batch x context rows, widths, heads, vocabulary
    (n_layer repeats the same products, so it is not part of the key)."""
    return (f"B{batch_size} T{cfg.context_length} d{cfg.d_model} h{cfg.n_head}/"
            f"{cfg.n_kv_head or cfg.n_head} f{cfg.hidden_dim} V{cfg.vocab_size}")


def _read(path: Path) -> dict:
    """The file's entries, {} when it is missing; a warning and {} when it is unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as e:
        warnings.warn(f"Ignoring the kernel tuning cache {path}: {e}", stacklevel=3)
        return {}
    try:
        data = json.loads(text)
        if data.get("version") != VERSION or not isinstance(data.get("entries"), dict):
            raise ValueError("not a version 1 tuning cache")
        return data["entries"]
    except (ValueError, AttributeError) as e:
        warnings.warn(f"Ignoring the kernel tuning cache {path}, which is damaged ({e}); "
                      "the next tuning run replaces it.", stacklevel=3)
        return {}


def lookup(dev_key: str, shape: str, path: Path | None = None) -> dict | None:
    """The stored entry (GemmPlan.to_dict() and "measured") or None."""
    entry = _read(path or cache_path()).get(dev_key, {}).get(shape)
    return entry if isinstance(entry, dict) else None


def store(dev_key: str, shape: str, entry: dict, path: Path | None = None) -> Path:
    """Add or replace one entry, keeping the others; atomic. Returns the file. OSError when
    the folder cannot be written."""
    path = path or cache_path()
    entries = _read(path)
    if not isinstance(entries.get(dev_key), dict):
        entries[dev_key] = {}
    entries[dev_key][shape] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"version": VERSION, "entries": entries}, indent=1))
    return path
