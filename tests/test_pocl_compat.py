"""engine/opencl/pocl_compat.py: the patched PoCL's process-private ICD folder keeps every
other installed driver, however OCL_ICD_VENDORS names it."""

from opencl_llm_studio.engine.opencl.pocl_compat import other_drivers


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
