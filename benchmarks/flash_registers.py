"""Registers and spills of the fused attention kernels on an NVIDIA GPU (issue 24 goal 2): builds
kernels/attention_flash.cl (and attention.cl, the fallback) for head_dim 64 and 128 with
-cl-nv-verbose and prints ptxas' lines for each entry function, and how many float2/float4
__local reads the PTX of each flash kernel holds.

    PYTHONPATH=. python benchmarks/flash_registers.py [--device NVIDIA]
"""

from __future__ import annotations

import argparse
import re

import pyopencl as cl

from opencl_llm_studio.engine.model import attention, attention_flash
from opencl_llm_studio.engine.opencl.runtime import Runtime


def report(device: str) -> str:
    rt = Runtime(device, build_options=("-cl-nv-verbose",))
    lines = []
    for hd in (64, 128):
        for name, ds in [(n, False) for n in attention_flash.DEFINES] + [
                ("attention_backward_dkv", True), ("attention_backward_dq", True)]:
            got = attention_flash.program(rt, name, hd, 1, ds)
            label = name + (" (dS path)" if ds else "")
            if got is None:
                lines.append(f"hd{hd} {label}: flash tiles do not fit; attention.cl runs it")
                continue
            built, t = got
            ptx = b"".join(built.program.get_info(cl.program_info.BINARIES)).decode("latin-1")
            vec = {w: len(re.findall(rf"ld\.shared\.v{w}\.f32", ptx)) for w in (2, 4)}
            lines.append(f"hd{hd} {label} {tuple(t)}: vector __local reads in the PTX "
                         f"v2 {vec[2]}, v4 {vec[4]}")
            lines += _ptxas(built.program.get_build_info(rt.device, cl.program_build_info.LOG))
        built, _ = attention.program(rt, hd, "tiled")
        lines.append(f"hd{hd} attention.cl:")
        lines += _ptxas(built.program.get_build_info(rt.device, cl.program_build_info.LOG))
    return "\n".join(lines)


def _ptxas(log: str) -> list[str]:
    """The entry-function, register and spill lines of a ptxas verbose log."""
    return [ln.strip() for ln in log.splitlines()
            if re.search(r"entry function|Used \d+ registers|spill", ln)]


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="NVIDIA")
    print(report(p.parse_args().device))
