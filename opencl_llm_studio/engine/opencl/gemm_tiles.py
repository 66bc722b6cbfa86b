"""Tile sizes of the GEMM kernels, one table: the kernels receive them as -D build options
(engine.opencl.runtime builds the main program with main_defines(); engine.opencl.ops builds matmul_vec.cl
with vector_defines()), and the launchers size their grids from the same entries.

Each tile is (rows, columns) of C one work-item computes (kernels/matmul.cl, matmul_vec.cl) or
the edge of the square tile one 16 x 16 work-group computes (kernels/matmul_tiled.cl). Why
each size: docs/DESIGN.md ("register-blocked GEMM") and benchmarks/results/tuning-timings.md.
"""

from __future__ import annotations

# matmul.cl (scalar CPU GEMM, bmm_blocked): 6 x 16 floats of C per work-item, in registers
BLOCKED = (6, 16)
# matmul_vec.cl by vector width: 8 x 2 float16 accumulators on AVX-512 (16 of 32 zmm
# registers), 6 x 2 float8 on AVX2 (12 of 16 ymm, room for B's row and A's broadcast)
VECTOR = {16: (8, 32), 8: (6, 16)}
# matmul_packed.cl (GotoBLAS-style CPU GEMM) by vector width: rows of the PK_MR x 2*VEC_W
# micro-tile (8 x 2 float16 accumulators on AVX-512, 6 x 2 float8 on AVX2, as VECTOR), depth of
# a K slice, the most columns of one work-group's packed block of B (PK_KC x PK_NB floats in
# __local: 512 KiB, within a 2 MiB L2) and the rows of A packed at once (PK_MC x PK_KC floats:
# 128 KiB; packed_defines shrinks them where __local is small)
PACKED = {16: (8, 256, 512, 128), 8: (6, 256, 256, 96)}
# matmul_tiled.cl: output tile edges of the GPU GEMMs (4x4 or 8x8 per work-item; engine.opencl.ops
# picks per product) and of bmm_tiled (attention's batched products)
TILED_EDGES = (64, 128)
BMM_EDGE = 64
TILED_K = 16  # K slice staged in __local per step (TK); split-K slices are multiples of it
# work-items per tiled work-group: fixed by the kernels (reqd_work_group_size, tid = ty*16 + tx)
TILED_GROUP = (16, 16)


def tiled_local_bytes(edge: int) -> int:
    """Bytes of one of the two __local tile arguments (A's or B's) of a tiled kernel with tile
    edge `edge`: 2 buffers x TILED_K rows x (edge + 4) floats (LDS_STRIDE in the kernel)."""
    return 2 * TILED_K * (edge + 4) * 4


def main_defines() -> list[str]:
    """-D options of the main program for the tiles of matmul.cl and matmul_tiled.cl (the
    tiled kernels' edges TL_SMALL, TL_BIG and group edge TG: kernel names carry no suffix for
    the small edge and the edge for the big one, see tiled_kernel)."""
    small, big = TILED_EDGES
    return [f"-DMM_TM={BLOCKED[0]}", f"-DMM_TN={BLOCKED[1]}", f"-DBMM_TL={BMM_EDGE}",
            f"-DTK={TILED_K}", f"-DTL_SMALL={small}", f"-DTL_BIG={big}",
            f"-DTG={TILED_GROUP[0]}"]


def tiled_kernel(form: str, edge: int, fetch4: bool) -> str:
    """The name of the tiled GEMM kernel of kernels/matmul_tiled.cl for form "nn" or "tn",
    a tile edge of TILED_EDGES and float4 fetches or not (matmul_nn_tiled128_v4, ...).
    ValueError for another edge."""
    if edge not in TILED_EDGES:
        raise ValueError(f"tile edge {edge}: the tiled kernels have {TILED_EDGES}")
    return f"matmul_{form}_tiled" + ("" if edge == TILED_EDGES[0] else str(edge)) + \
        ("_v4" if fetch4 else "")


def vector_defines(width: int) -> tuple[tuple[str, int], ...]:
    """(name, value) defines of matmul_vec.cl for a vector width of 8 or 16 floats.
    KeyError for other widths (engine.opencl.runtime.pick_vector_width gives only these)."""
    tm, tn = VECTOR[width]
    return (("VEC_W", width), ("VM_TM", tm), ("VM_TN", tn))


def packed_defines(width: int, local_bytes: int, prefetch: bool = False
                   ) -> tuple[tuple[str, int], ...]:
    """(name, value) defines of matmul_packed.cl for a vector width of 8 or 16 floats on a
    device with local_bytes of __local memory: PACKED's sizes, the K slice, then the rows of A
    packed at once, then the block width halved until the kernel's __local arrays fit
    (packed_local_bytes); PK_PREFETCH 1 where `prefetch` (CPU compilers: __builtin_prefetch,
    which Oclgrind cannot run). KeyError for other widths."""
    mr, kc, nb, mc = PACKED[width]
    while packed_local_bytes(width, mr, kc, nb, mc) > local_bytes and (
            kc > 16 or nb > 2 * width or mc > mr):
        if kc > 64 or (nb <= 2 * width and mc <= mr):
            kc //= 2
        elif mc > mr:
            mc = max(mr, mc // 2 // mr * mr)
        else:
            nb //= 2
    return (("VEC_W", width), ("PK_MR", mr), ("PK_KC", kc), ("PK_NB", nb), ("PK_MC", mc),
            ("PK_PREFETCH", int(prefetch)))


def packed_local_bytes(width: int, mr: int, kc: int, nb: int, mc: int) -> int:
    """Bytes of matmul_packed.cl's __local arrays: the packed block of B (kc x nb floats), the
    packed rows of A (mc x kc) and one micro-tile of C (mr x 2 * width)."""
    return (kc * (nb + mc) + mr * 2 * width) * 4
