"""Make the pip PoCL 3.0 CPU device work on CPUs newer than its LLVM 14.

Why: `pocl-binary-distribution` 3.0 (the CPU device `pyopencl[pocl]` brings) asks LLVM 14 for the
host CPU name, and on CPUs newer than LLVM 14 the name is wrong in two ways:
- AMD family 1Ah ("Zen 5": Ryzen AI 300, EPYC 9005) is unknown to it: it gets "generic", passes
  `-target-cpu generic`, and every kernel build fails with "unknown target CPU 'generic'"
  (pocl/pocl#1049);
- AMD family 19h is "znver3" whatever the model (LLVM 14's sys::getHostCPUName), so a Zen 4
  (Ryzen 7040/8040 laptops, Ryzen 7000, EPYC 9004: family 19h with AVX-512) is compiled for a
  CPU without AVX-512 while PoCL's kernel library and the engine's vector width follow the CPU's
  AVX-512: building a kernel with a float16 sqrt aborted the process ("LLVM ERROR: Cannot
  select ... fsqrt", seen on an EPYC 9004, 2026-12-07).
The pip build has no override (later PoCL reads POCL_LLVM_CPU_NAME). We therefore make a patched copy of libpocl in the user cache whose
`pocl_get_llvm_cpu_name()` returns the x86-64 micro-architecture level the CPU supports
(x86-64-v4 / -v3 / -v2), point the OpenCL ICD loader at it, and leave the installed files alone.
The patch is applied only when the function's bytes are exactly the known ones.

Call `apply()` before pyopencl is first asked for platforms.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import platform
import shutil
import tempfile
from pathlib import Path

# pocl_get_llvm_cpu_name in libpocl-21062cec.so (pocl-binary-distribution 3.0, manylinux x86_64):
# call getHostCPUName; test rdx,rdx; je fallback; ... fallback: mov edi,8; mov ebx,7; lea rbp,"generic"
_FUNC_OFFSET = 0x7DE1B0
_FUNC_BYTES = bytes.fromhex(
    "55534883ec08e8058ab0034885d274304889c54889d3488d7a01e841b1ecff4889da4889ee4889c7e843a0ecff"
    "c60418004883c4085b5dc30f1f840000000000bf08000000bb07000000488d2d140bc603ebc7")
_applied = False
PATCHED_CPU: str | None = None


def _cpuinfo() -> tuple[str, int, set[str]]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "", 0, set()
    vendor, family, flags = "", 0, set()
    for line in text.splitlines():
        key, _, val = line.partition(":")
        key = key.strip()
        if key == "vendor_id" and not vendor:
            vendor = val.strip()
        elif key == "cpu family" and not family:
            family = int(val.strip() or 0)
        elif key == "flags" and not flags:
            flags = set(val.split())
    return vendor, family, flags


def _needs_patch() -> bool:
    """True on x86-64 Linux for the CPUs whose LLVM 14 name is wrong (misnamed_cpu), or when
    forced by the environment (LLM_STUDIO_POCL_PATCH=1 or 0)."""
    force = os.environ.get("LLM_STUDIO_POCL_PATCH")
    if force is not None:
        return force == "1"
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False
    return misnamed_cpu(*_cpuinfo())


def misnamed_cpu(vendor: str, family: int, flags: set[str]) -> bool:
    """True where LLVM 14 names the CPU wrongly (see the module's docstring): AMD family 1Ah and
    later ("generic"), and AMD family 19h with AVX-512 ("znver3", which has none). Intel CPUs
    newer than LLVM 14 are named by their features, so they keep their ISA level."""
    if vendor != "AuthenticAMD":
        return False
    return family >= 0x1A or (family == 0x19 and "avx512f" in flags)


def _cpu_level(flags: set[str]) -> bytes:
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx2", "fma"} <= flags:
        return b"x86-64-v4"
    if {"avx2", "fma", "bmi1", "bmi2", "movbe"} <= flags:
        return b"x86-64-v3"
    return b"x86-64-v2"


def _patched_bytes(lib: bytes, cpu: bytes) -> bytes | None:
    off = _FUNC_OFFSET
    if lib[off:off + len(_FUNC_BYTES)] != _FUNC_BYTES:
        return None
    at = lib.find(b"\x00" + cpu + b"\x00")
    if at < 0:
        return None
    str_addr = at + 1  # .rodata and .text map at file offset == virtual address in this build
    out = bytearray(lib)
    out[off + 6:off + 8] = b"\xeb\x38"  # jmp to the fallback block at +0x40, skip getHostCPUName
    fb = off + 0x40
    out[fb + 1:fb + 5] = (len(cpu) + 1).to_bytes(4, "little")   # malloc size
    out[fb + 6:fb + 10] = len(cpu).to_bytes(4, "little")        # strncpy length
    rel = str_addr - (fb + 0x11)                                # lea rbp, [rip + rel]
    out[fb + 13:fb + 17] = rel.to_bytes(4, "little", signed=True)
    return bytes(out)


def other_drivers(sources: list[str]) -> list[Path]:
    """The .icd files of the drivers other than PoCL in `sources`, each a folder of .icd files
    or one .icd file (OCL_ICD_VENDORS may be either, as ocl-icd reads it; a file was dropped
    once, and with it Intel's CPU runtime named that way). PoCL's are left out: the patched
    copy replaces the pip one, and two PoCL libraries in one process crashed at exit."""
    found = []
    for source in dict.fromkeys(s for s in sources if s):
        path = Path(source)
        files = sorted(path.glob("*.icd")) if path.is_dir() else [path] if path.is_file() else []
        found += [f for f in files if "pocl" not in f.read_text(errors="replace").lower()]
    return found


def apply() -> str | None:
    """Install the patched PoCL copy for this process when needed. Returns its cpu name or None."""
    global _applied
    if _applied or not _needs_patch():
        return None
    _applied = True
    try:
        import pyopencl
    except ImportError:
        return None
    libs = Path(pyopencl.__file__).parent / ".libs"
    icd = libs / "pocl.icd"
    if not icd.exists():
        return None
    lib_path = libs / icd.read_text().strip()
    if not lib_path.exists():
        return None
    cpu = _cpu_level(_cpuinfo()[2])
    cache_root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    stat = lib_path.stat()
    key = hashlib.sha1(f"{lib_path}:{stat.st_size}:{stat.st_mtime_ns}:{cpu}".encode()).hexdigest()[:12]
    root = cache_root / "opencl-llm-studio" / f"pocl-{key}"
    vendors = root / "pyopencl" / ".libs"
    patched = vendors / "libpocl-patched.so"
    if not patched.exists():
        data = _patched_bytes(lib_path.read_bytes(), cpu)
        if data is None:
            return None
        vendors.mkdir(parents=True, exist_ok=True)
        # The library finds libhwloc and its kernel bitcode through
        # $ORIGIN/../../pocl_binary_distribution/.libs: mirror that layout with a link.
        link = root / "pocl_binary_distribution"
        if not link.exists():
            import pocl_binary_distribution
            link.symlink_to(Path(pocl_binary_distribution.__file__).parent)
        tmp = patched.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.chmod(tmp, 0o755)
        os.replace(tmp, patched)
    # The loader reads only OCL_ICD_VENDORS when it is set, so this process gets its own
    # folder (not the cache: it must not outlive the drivers installed now): our pocl.icd and
    # every other installed driver's .icd.
    icd_dir = Path(tempfile.mkdtemp(prefix="llm-studio-icd-"))
    atexit.register(shutil.rmtree, icd_dir, True)
    (icd_dir / "pocl.icd").write_text(str(patched) + "\n")
    for f in other_drivers([os.environ.get("OCL_ICD_VENDORS", ""), "/etc/OpenCL/vendors"]):
        shutil.copy(f, icd_dir / f.name)
    os.environ["OCL_ICD_VENDORS"] = str(icd_dir)
    global PATCHED_CPU
    PATCHED_CPU = cpu.decode()
    return PATCHED_CPU
