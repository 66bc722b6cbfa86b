"""OpenCL device discovery and choice.

Default choice (docs/DESIGN.md): the first GPU, else the first CPU (PoCL's CPU device comes with the
`pyopencl[pocl]` dependency, so every machine has one). A person may name a device by its index
in `list_devices()` or by a case-insensitive part of its platform or device name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from opencl_llm_studio.engine.errors import DeviceError

DEVICE_ENV = "LLM_STUDIO_DEVICE"  # a device index or name part: select_device's default

NO_DEVICE_HINT = (
    "Install an OpenCL driver for your GPU (Intel: intel-opencl-icd, AMD: ROCm, NVIDIA: the "
    "proprietary driver), or reinstall this app with `pip install \"pyopencl[pocl]\"`, which "
    "brings PoCL's CPU device.")


@dataclass(frozen=True)
class DeviceInfo:
    """One OpenCL device. `global_mem_bytes` in bytes; `type` is 'GPU', 'CPU', 'ACCELERATOR'..."""

    index: int
    platform: str
    name: str
    type: str
    compute_units: int
    global_mem_bytes: int
    max_alloc_bytes: int
    opencl_version: str
    platform_index: int
    device_index: int

    @property
    def is_cpu(self) -> bool:
        return self.type == "CPU"

    @property
    def is_intel_cpu_runtime(self) -> bool:
        """Intel's CPU OpenCL runtime (PyPI intel-opencl-rt; platform "Intel(R) OpenCL"; its GPU
        platforms are named "Intel(R) OpenCL Graphics" and are not CPUs). Its compiler vectorizes
        across work-items, so kernels tuned for PoCL's per-work-item loops can run differently."""
        return self.is_cpu and self.platform == "Intel(R) OpenCL"

    @property
    def is_simulator(self) -> bool:
        """Oclgrind presents itself as a GPU but runs kernels ~1000x slower: never a default."""
        return "oclgrind" in (self.platform + self.name).lower()

    def label(self) -> str:
        gib = self.global_mem_bytes / 2**30
        return f"[{self.index}] {self.name} ({self.type}, {self.platform}, {gib:.1f} GiB)"

    def cl_device(self):
        """The pyopencl.Device object (looked up again; DeviceInfo itself stays picklable-free)."""
        import pyopencl as cl
        return cl.get_platforms()[self.platform_index].get_devices()[self.device_index]


def _type_name(cl, t: int) -> str:
    for flag, name in ((cl.device_type.GPU, "GPU"), (cl.device_type.CPU, "CPU"),
                       (cl.device_type.ACCELERATOR, "ACCELERATOR")):
        if t & flag:
            return name
    return "OTHER"


def list_devices() -> list[DeviceInfo]:
    """Every device of every OpenCL platform, in platform order. Empty list when there is none."""
    from opencl_llm_studio.engine.opencl import pocl_compat
    pocl_compat.apply()
    try:
        import pyopencl as cl
        platforms = cl.get_platforms()
    except Exception:  # no ICD loader or no platform: pyopencl raises LogicError/RuntimeError
        return []
    out: list[DeviceInfo] = []
    seen = set()
    for pi, plat in enumerate(platforms):
        try:
            devices = plat.get_devices()
        except Exception:
            continue
        for di, dev in enumerate(devices):
            # The patched PoCL (engine/opencl/pocl_compat.py) is loaded under the same soname as the
            # original, so the ICD loader lists it twice: keep one.
            ident = (plat.name, dev.name, dev.version)
            if pocl_compat.PATCHED_CPU and ident in seen:
                continue
            seen.add(ident)
            out.append(DeviceInfo(
                index=len(out), platform=plat.name.strip(), name=dev.name.strip(),
                type=_type_name(cl, dev.type), compute_units=int(dev.max_compute_units),
                global_mem_bytes=int(dev.global_mem_size),
                max_alloc_bytes=int(dev.max_mem_alloc_size),
                opencl_version=dev.version.strip(), platform_index=pi, device_index=di))
    return out


def default_device(devices: list[DeviceInfo]) -> DeviceInfo:
    """The device used when none is asked for: the first GPU, else the first CPU, else the
    first device; simulators (Oclgrind) only when nothing else exists. devices: not empty."""
    real = [d for d in devices if not d.is_simulator] or devices
    gpus = [d for d in real if d.type == "GPU"]
    return (gpus or [d for d in real if d.type == "CPU"] or real)[0]


def _matching(devices: list[DeviceInfo], spec: int | str) -> DeviceInfo | None:
    """The device `spec` names: an index (int or digits), else part of a name or platform, or a
    type ("gpu", "cpu"); None when none matches."""
    if isinstance(spec, int) or spec.strip().isdigit():
        i = int(spec)
        return devices[i] if 0 <= i < len(devices) else None
    want = spec.strip().lower()
    return next((d for d in devices if want in d.name.lower() or want in d.platform.lower()
                 or want == d.type.lower()), None)


def select_device(spec: int | str | None = None) -> DeviceInfo:
    """Pick a device by index, by part of its name, or by default (default_device).

    `spec` None also honours the environment variable LLM_STUDIO_DEVICE.
    Raises DeviceError when there is no device or the spec matches none (listing those found).
    """
    devices = list_devices()
    if not devices:
        raise DeviceError("No OpenCL device was found on this computer.", NO_DEVICE_HINT)
    if spec is None or spec == "":
        spec = os.environ.get(DEVICE_ENV) or None
    if spec is None:
        return default_device(devices)
    found = _matching(devices, spec)
    if found is not None:
        return found
    listing = "\n".join("  " + d.label() for d in devices)
    raise DeviceError(f"No OpenCL device matches '{spec}'.",
                      f"Use an index or part of a name from this list:\n{listing}")
