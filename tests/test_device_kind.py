"""Device-kind detection and the GEMM variant chosen from it (issue 13: Intel's CPU runtime)."""

from engine.device import DeviceInfo
from engine.runtime import gemm_variant


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
