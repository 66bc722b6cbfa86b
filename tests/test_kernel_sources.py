"""The kernel sources keep what they share in kernels/common.h: no .cl file uses a macro another
.cl file defines (the main program concatenates the files in name order, and the specialized
ones are built alone, so such a use works by accident or not at all), no macro is defined twice,
and the causal modes of kernels/common.h equal engine.model.attention_gemm.Causal."""

import re
from pathlib import Path

from opencl_llm_studio.engine.model.attention_gemm import Causal

KERNELS = Path(__file__).resolve().parents[1] / "opencl_llm_studio" / "kernels"
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)", re.M)


def _defines(text: str) -> set[str]:
    """Macros a source defines outside `#ifndef X / #define X` defaults for a build option."""
    defaults = set(re.findall(r"#ifndef\s+(\w+)\s*\n\s*#define\s+\1\b", text))
    return set(_DEFINE.findall(text)) - defaults


def _code(text: str) -> str:
    return re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)


def test_no_kernel_file_relies_on_another_files_macros():
    sources = {p.name: _code(p.read_text()) for p in sorted(KERNELS.glob("*.cl"))}
    owners = {}
    for name, text in sources.items():
        for macro in _defines(text):
            owners.setdefault(macro, []).append(name)
    twice = {m: files for m, files in owners.items() if len(files) > 1}
    assert not twice, f"macros defined in several .cl files (move them to common.h): {twice}"
    borrowed = [f"{name} uses {m} from {owners[m][0]}" for name, text in sources.items()
                for m in owners if owners[m][0] != name and re.search(rf"\b{m}\b", text)]
    assert not borrowed, borrowed


def test_common_h_causal_modes_equal_the_python_enum():
    text = (KERNELS / "common.h").read_text()
    modes = {m: int(v) for m, v in re.findall(r"#define CAUSAL_(\w+) (\d+)", text)}
    assert modes == {c.name: c.value for c in Causal}


def test_gemm_tile_sizes_come_from_the_python_table():
    """The GEMM tile sizes are -D options from engine/opencl/gemm_tiles.py (which the launchers size
    their grids from), never a literal in a kernel file, not even as an #ifndef default."""
    from opencl_llm_studio.engine.opencl import gemm_tiles
    tile_macros = {"MM_TM", "MM_TN", "VM_TM", "VM_TN", "BMM_TL", "TK"}
    for p in sorted(KERNELS.glob("*.cl")):
        defined = set(_DEFINE.findall(_code(p.read_text())))
        assert not defined & tile_macros, f"{p.name} defines {defined & tile_macros}"
    given = {d[2:].split("=")[0] for d in gemm_tiles.main_defines()}
    given |= {name for name, _ in gemm_tiles.vector_defines(16)}
    assert tile_macros <= given
