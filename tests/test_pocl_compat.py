"""engine/opencl/pocl_compat.py: which CPUs get the patched PoCL, and its process-private ICD
folder keeps every other installed driver, however OCL_ICD_VENDORS names it."""

import pytest

from opencl_llm_studio.engine.opencl.pocl_compat import _cpu_level, misnamed_cpu, other_drivers

ZEN3_FLAGS = {"avx2", "fma", "bmi1", "bmi2", "movbe"}
ZEN4_FLAGS = ZEN3_FLAGS | {"avx512f", "avx512bw", "avx512dq", "avx512vl"}


@pytest.mark.parametrize("vendor, family, flags, misnamed", [
    ("AuthenticAMD", 0x1A, ZEN4_FLAGS, True),    # Zen 5: "generic", every build failed
    ("AuthenticAMD", 0x19, ZEN4_FLAGS, True),    # Zen 4: "znver3" without AVX-512, builds aborted
    ("AuthenticAMD", 0x19, ZEN3_FLAGS, False),   # Zen 3: "znver3" is right
    ("AuthenticAMD", 0x17, ZEN3_FLAGS, False),   # Zen 2
    ("GenuineIntel", 6, ZEN4_FLAGS, False),      # Intel: named by its features
], ids=["zen5", "zen4", "zen3", "zen2", "intel"])
def test_the_cpus_llvm14_misnames_get_the_patch(vendor, family, flags, misnamed):
    """A Zen 4 (family 19h with AVX-512) ran unpatched on 2026-12-07 and the first kernel with a
    float16 sqrt aborted the process in LLVM; patched to x86-64-v4 it trains."""
    assert misnamed_cpu(vendor, family, flags) is misnamed
    if misnamed:
        assert _cpu_level(flags) == b"x86-64-v4"


def test_other_drivers_from_folders_and_files(tmp_path):
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    (vendors / "intel-cpu.icd").write_text("/opt/intel/libintelocl.so\n")
    (vendors / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    (vendors / "pocl.icd").write_text("libpocl.so.2\n")
    (vendors / "notes.txt").write_text("not a driver\n")
    one = tmp_path / "only" / "intel.icd"
    one.parent.mkdir()
    one.write_text("/elsewhere/libintelocl.so\n")
    pocl_file = tmp_path / "PoCL.icd"
    pocl_file.write_text("/usr/lib/x86_64-linux-gnu/libPOCL.so.2\n")
    assert [f.name for f in other_drivers([str(vendors)])] == ["intel-cpu.icd", "nvidia.icd"]
    # OCL_ICD_VENDORS as one .icd file (ocl-icd reads that too): kept, PoCL's left out
    assert other_drivers([str(one), str(vendors)])[0] == one
    assert other_drivers([str(pocl_file)]) == []
    # unset, missing or named twice: nothing, nothing, once
    assert other_drivers(["", str(tmp_path / "missing")]) == []
    assert len(other_drivers([str(vendors), str(vendors)])) == 2
