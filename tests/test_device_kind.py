"""Device-kind detection and the GEMM variant chosen from it (issue 13: Intel's CPU runtime)."""

import pytest

from opencl_llm_studio.engine.opencl.device import DeviceInfo
from opencl_llm_studio.engine.opencl.gemm_plan import gemm_variant


def _info(platform: str, type_: str) -> DeviceInfo:
    return DeviceInfo(index=0, platform=platform, name="Some Processor", type=type_,
                      compute_units=2, global_mem_bytes=2**30, max_alloc_bytes=2**28,
                      opencl_version="OpenCL 3.0", platform_index=0, device_index=0)


def test_intel_cpu_runtime_is_recognised_and_nothing_else():
    assert _info("Intel(R) OpenCL", "CPU").is_intel_cpu_runtime
    assert not _info("Intel(R) OpenCL Graphics", "GPU").is_intel_cpu_runtime
    assert not _info("Intel(R) OpenCL", "GPU").is_intel_cpu_runtime
    assert not _info("Portable Computing Language", "CPU").is_intel_cpu_runtime


def test_gemm_variant_per_device_kind():
    pocl, intel = _info("Portable Computing Language", "CPU"), _info("Intel(R) OpenCL", "CPU")
    assert gemm_variant(pocl, 8) == "vector"       # AVX2 through PoCL: float8 tiles
    assert gemm_variant(pocl, 4) == "blocked"      # SSE-only CPUs: scalar tiles
    assert gemm_variant(pocl, 16) == "vector"      # AVX-512 through PoCL
    # Intel's runtime: the float16 GEMM at any width (blocked ran S 1.9x slower on AVX2)
    assert gemm_variant(intel, 4) == "vector"
    assert gemm_variant(intel, 16) == "vector"
    assert gemm_variant(_info("NVIDIA CUDA", "GPU"), 1) == "tiled"


def _devices(*kinds):
    """DeviceInfos from (platform, type) pairs, indexed in order."""
    from dataclasses import replace
    return [replace(_info(p, t), index=i, name=f"{p} device") for i, (p, t) in enumerate(kinds)]


GRIND, POCL, CUDA = ("Oclgrind", "GPU"), ("Portable Computing Language", "CPU"), ("NVIDIA CUDA", "GPU")


@pytest.mark.parametrize("kinds,want", [((GRIND, POCL, CUDA), 2), ((GRIND, POCL), 1),
                                        ((GRIND,), 0), ((POCL, CUDA), 1), ((POCL,), 0)])
def test_default_device_is_a_real_gpu_then_a_cpu(monkeypatch, qapp, kinds, want):
    """The engine's default (select_device, the CLI's) and the studio's device picker agree: the
    first GPU, else CPU, and a simulator such as Oclgrind (which says it is a GPU) only alone."""
    from opencl_llm_studio.engine.opencl import device
    from opencl_llm_studio.studio.ui.panels.device_panel import DevicePanel
    devices = _devices(*kinds)
    monkeypatch.setattr(device, "list_devices", lambda: devices)
    monkeypatch.delenv(device.DEVICE_ENV, raising=False)
    assert device.select_device().index == want
    assert DevicePanel().current().index == want
    monkeypatch.setenv(device.DEVICE_ENV, "0")
    assert device.select_device().index == 0 and DevicePanel().current().index == 0


def test_select_device_by_index_name_or_type(monkeypatch):
    from opencl_llm_studio.engine.opencl import device
    from opencl_llm_studio.engine.errors import DeviceError
    devices = _devices(GRIND, POCL, CUDA)
    monkeypatch.setattr(device, "list_devices", lambda: devices)
    assert [device.select_device(s).index for s in (1, " 2 ", "cpu", "nvidia", "GRIND")] == [1, 2, 1, 2, 0]
    with pytest.raises(DeviceError, match="No OpenCL device matches '7'"):
        device.select_device("7")
    with pytest.raises(DeviceError, match="matches 'amd'") as e:
        device.select_device("amd")
    assert "NVIDIA CUDA device" in e.value.hint
