"""Launches of the packed-panel CPU GEMM (kernels/matmul_packed.cl): the C block of one
work-group, the split of K among work-groups, and the launch itself (engine.opencl.ops calls
gemm_packed where the GemmPlan says "packed").

Each work-group is one work-item looping over its C block (PoCL runs a work-group per thread),
so the launch is sized for the device's cores: PACKED_GROUPS_PER_CU equal blocks per compute
unit, or fewer, wider blocks over K ranges whose partial products sum_slices adds up, where the
blocks would otherwise be so thin that packing costs more than the split (a weight gradient
dW (N, K) += dY^T @ X: small M x N, long K = B*T).
"""

from __future__ import annotations

from opencl_llm_studio.engine.opencl import gemm_tiles
from opencl_llm_studio.engine.opencl.runtime import Runtime

PACKED_GROUPS_PER_CU = 2  # C blocks per compute unit: equal blocks, whole rounds of them
PACKED_MIN_COLS = 256  # narrowest block split further by columns (packed A reused by 8 panels)
# Flops the cores could do while one float is packed (read from L2/L3 and stored to __local):
# the tn products of M's weight gradients lost 15-25% to packing with 64-row blocks
# (2 * 64 flops per packed float of B; benchmarks/RESULTS.md, "tn products at nn's speed")
PACK_COST = 25
MIN_SPLIT_DEPTH = 4  # K slices of PK_KC per K range at least (C is re-read once per slice)
# Largest C block (floats) of a split launch: 512 KiB, a quarter of a 2 MiB L2 beside the packed
# blocks (split with 1408 x 256 or 768 x 256 blocks, M's and B's qkv and gate_up dW ran 1-4%
# slower; 256 x 256 and 512 x 256 ones 7-15% faster)
SPLIT_MAX_BLOCK = 1 << 17


def gemm_packed(rt: Runtime, form: str, C, A, B, M: int, N: int, K: int, beta: float,
                width: int):
    """C (M, N) = beta * C + op(A) @ op(B) by kernels/matmul_packed.cl (packed panels, one
    work-item per work-group) in float`width` micro-tiles, form "nn" (A (M,K), B (K,N)), "nt"
    (B stored (N,K)) or "tn" (A stored (K,M)). Blocks and K ranges: packed_launch; with more
    than one K range the partial products go to rt.scratch and sum_slices adds them to C."""
    defines, mb, nb, grid, kz = packed_launch(rt, width, M, N, K)
    built = rt.build(("matmul_packed.cl",), defines)
    name, ranges = f"matmul_{form}_packed", grid[2]
    if ranges == 1:
        rt.launch_local(name, grid, (1, 1, 1), C, A, B, M, N, K, beta, mb, nb, kz, built=built)
        return
    parts = rt.scratch(ranges * M * N)   # packed_scratch_floats, from the launch in hand
    rt.launch_local(name, grid, (1, 1, 1), parts, A, B, M, N, K, 0.0, mb, nb, kz, built=built)
    rt.launch_long("sum_slices", M * N, C, parts, ranges, M * N, beta)


def packed_scratch_floats(rt: Runtime, width: int, M: int, N: int, K: int) -> int:
    """Floats of rt.scratch that gemm_packed takes: the K ranges' partial products (ranges x
    M x N), 0 in one range."""
    ranges = packed_launch(rt, width, M, N, K)[3][2]
    return ranges * M * N if ranges > 1 else 0


def packed_launch(rt: Runtime, width: int, M: int, N: int, K: int) -> tuple:
    """(defines, mb, nb, grid, kz) of the packed GEMM of C (M, N) over K at float`width` on
    rt's device limits: matmul_packed.cl's sizes (gemm_tiles.packed_defines; software
    prefetches on CPUs), the C block of one work-group (packed_blocks), the grid of
    one-work-item groups (columns, rows of blocks, K ranges) and the K rows per range."""
    defines = gemm_tiles.packed_defines(width, rt.limits.usable_local_bytes, rt.is_cpu)
    sizes, cu = dict(defines), rt.limits.compute_units
    splits = packed_splits(M, N, K, sizes, cu)
    mb, nb = packed_blocks(M, N, sizes, cu, max(1, PACKED_GROUPS_PER_CU * cu // splits))
    kc = sizes["PK_KC"]
    kz = max(1, -(-(-(-K // splits)) // kc) * kc) if splits > 1 else max(K, 1)
    return defines, mb, nb, (-(-N // nb), -(-M // mb), -(-K // kz) if K else 1), kz


def packed_blocks(M: int, N: int, sizes: dict, compute_units: int,
                  groups: int | None = None) -> tuple[int, int]:
    """(rows mb, columns nb) of the C block one matmul_packed.cl work-group computes, for
    `groups` equal blocks (default PACKED_GROUPS_PER_CU per compute unit). Each group packs
    its PK_KC x nb slice of B once per K slice and reuses it over mb rows (2 * mb flops per
    packed float), so blocks are split by columns first (down to PACKED_MIN_COLS) and by rows
    after; nb is a multiple of 2 * VEC_W and at most PK_NB, mb a multiple of PK_MR."""
    nr, mr = 2 * sizes["VEC_W"], sizes["PK_MR"]
    want = groups or PACKED_GROUPS_PER_CU * compute_units
    col_blocks, row_blocks = -(-N // sizes["PK_NB"]), 1
    while col_blocks * row_blocks < want:
        if -(-N // (2 * col_blocks)) >= PACKED_MIN_COLS:
            col_blocks *= 2
        elif -(-M // (2 * row_blocks)) >= mr:
            row_blocks *= 2
        else:
            break
    nb = -(-(-(-N // col_blocks)) // nr) * nr
    mb = -(-(-(-M // row_blocks)) // mr) * mr
    return mb, nb


def packed_splits(M: int, N: int, K: int, sizes: dict, compute_units: int) -> int:
    """How many K ranges (1, 2, 4, ... up to the groups of one launch) the product is split
    into: the count with the least estimated time, rounds of groups per core x (K / ranges)
    x (2 * mb * nb flops + PACK_COST x (mb + nb) packed floats) per K row, plus summing the
    ranges' partial products (PACK_COST x (ranges + 1) x M x N over the cores); each range
    at least MIN_SPLIT_DEPTH K slices deep, its C blocks at most SPLIT_MAX_BLOCK floats."""
    want = PACKED_GROUPS_PER_CU * compute_units

    def blocks(s: int) -> tuple[int, int]:
        return packed_blocks(M, N, sizes, compute_units, max(1, want // s))

    def cost(s: int) -> float:
        mb, nb = blocks(s)
        rounds = -(-(-(-M // mb) * -(-N // nb) * s) // compute_units)
        t = rounds * K / s * (2.0 * mb * nb + PACK_COST * (mb + nb))
        return t + (PACK_COST * (s + 1) * M * N / compute_units if s > 1 else 0.0)

    options = [s for s in (1 << i for i in range(want.bit_length()))
               if s == 1 or (s <= want and K >= s * MIN_SPLIT_DEPTH * sizes["PK_KC"]
                             and blocks(s)[0] * blocks(s)[1] <= SPLIT_MAX_BLOCK)]
    return min(options, key=lambda s: (cost(s), s))
