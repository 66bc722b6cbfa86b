"""How every matrix product is launched on one device, as one immutable object (issue 23 item 5).

A `GemmPlan` holds the choices that used to live in mutable Runtime fields: the GEMM variant
("blocked": scalar 6x16 register tiles, matmul.cl; "vector": float8/float16 register tiles,
matmul_vec.cl; "packed": GotoBLAS-style packed panels for CPUs, matmul_packed.cl, launched by
engine.opencl.gemm_packed; "tiled": local-memory tiles for GPUs, matmul_tiled.cl), its vector width,
work-group shape and K slice (CPU variants), tile edge, float4 fetches and split-K depth (tiled),
the attention path and kernel variant. The Runtime is built with one (`Runtime(plan=...)`,
default `default_plan(limits)`: the hand table below, measured on two devices, docs/DESIGN.md);
`engine.model.gemm_tune` measures better ones per device and model shape and stores them per product
in `GemmPlan.shapes`. Launchers ask `plan.launch_for(form, M, N, K)` (engine/opencl/ops.py) and
`plan.bmm_variant` (engine/model/attention_gemm.py); tile sizes come from engine/opencl/gemm_tiles.py.

`DeviceLimits` are the device facts the plan reads; Runtime(limits={...}) overrides them, so a
test can present the profile of a device we do not have (an integrated GPU's small local memory,
maximum work-group size or preferred vector width).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import NamedTuple

from opencl_llm_studio.engine.opencl import gemm_tiles
from opencl_llm_studio.engine.errors import DeviceError

VECTOR_WIDTH_ENV = "LLM_STUDIO_VECTOR_WIDTH"  # 8 or 16: overrides the device's float SIMD width
VECTOR_WIDTHS = (8, 16)  # float vector widths of the CPU kernels (AVX2, AVX-512)
VARIANTS = ("blocked", "vector", "packed", "tiled")
FORMS = ("nn", "tn")
# Resident 256-work-item tiled groups per compute unit (122 registers per work-item on an H200:
# 2 groups fit); split-K and the tile choice aim for whole waves of these.
GROUPS_PER_CU = 2
SUM_DEPTH = 64  # a split-K slice's partial sums cost about as much as 64 more K per tile
# Products of at least this many multiply-adds (M * N * K) take GemmPlan.large where the plan has
# one: on PoCL CPUs the packed GEMM, 1.05-1.8x the vector kernel on config M's and the 135M
# model's products; on S's (2^23.6-2^25.6) alone it was 0.78-1.75x, but the S step ran 5-10%
# faster with them packed (no K-slice launches, no weight transposes: 141 launches, not 209),
# while below 2^22 the vector kernel won 1.2-1.3x (benchmarks/RESULTS.md, "tn products at nn's
# speed")
LARGE_PRODUCT = 1 << 23
# Products with fewer than this many columns of C (LoRA's rank-8 products: (M, 8) = x A^T,
# du = G B, dB = G^T u) take GemmPlan.narrow where the plan has one: PoCL's vector
# kernel left most of its 6 x 16 register tiles' lanes and work-groups idle there and ran at
# 2-10 GFLOP/s where the scalar blocked kernel ran 12-45 (2-core Zen 2, C of 240 x 8 .. 8 x 576;
# N = 16 and 32 about level), and one LoRA step of the 135M model spent 0.87 of its 2.0 s in
# them. Products with fewer rows than this but wider C (a short prompt's prefill: 16-64 rows
# through every weight) take GemmPlan.few_rows: the packed GEMM reads W in place where the other
# CPU variants transpose it first, a pass over W that cost about as much as the product: the
# packed forward ran 1.1-4x the blocked kernel and 2-14x the vector one on the 135M model's
# products at 8-64 rows (benchmarks/results/journal-2026-12-06.md)
NARROW_EDGE = 64
# __local bytes no kernel's tiles may take of what a device reports: NVIDIA's driver refused a
# kernel using exactly its reported 48 KiB (OUT_OF_RESOURCES at launch on an H200) and ran one
# using 47.5 KiB (flash dq tiles 64 x 16 at head_dim 64; benchmarks/RESULTS.md 2026-12-02), so
# every choice by local memory keeps this much spare
LOCAL_RESERVE = 512


@dataclass(frozen=True)
class DeviceLimits:
    """What the plan reads from a device (CL_DEVICE_* queries), overridable per field."""

    is_cpu: bool
    is_intel_cpu_runtime: bool  # as DeviceInfo.is_intel_cpu_runtime (see gemm_variant)
    compute_units: int
    local_mem_bytes: int      # CL_DEVICE_LOCAL_MEM_SIZE
    max_work_group_size: int  # CL_DEVICE_MAX_WORK_GROUP_SIZE
    native_float_width: int   # CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT

    @classmethod
    def of(cls, info, device, overrides: dict | None = None) -> "DeviceLimits":
        """The limits of DeviceInfo info / pyopencl device, with overrides {field: value}.
        DeviceError for a field that does not exist."""
        limits = cls(info.is_cpu, info.is_intel_cpu_runtime, info.compute_units,
                     int(device.local_mem_size), int(device.max_work_group_size),
                     int(device.native_vector_width_float))
        unknown = set(overrides or ()) - {f.name for f in fields(cls)}
        if unknown:
            raise DeviceError(f"Unknown device limit(s) {sorted(unknown)}.",
                              f"Override only {[f.name for f in fields(cls)]}.")
        return replace(limits, **(overrides or {}))

    @property
    def usable_local_bytes(self) -> int:
        """local_mem_bytes less LOCAL_RESERVE: what the kernels' __local tiles may take."""
        return max(0, self.local_mem_bytes - LOCAL_RESERVE)

    def tile_edges(self) -> tuple[int, ...]:
        """The tiled GEMM edges whose two __local tiles fit the usable local memory (OpenCL
        guarantees 32 KiB; the 128 tiles take 33 KiB)."""
        return tuple(e for e in gemm_tiles.TILED_EDGES
                     if 2 * gemm_tiles.tiled_local_bytes(e) <= self.usable_local_bytes)


def pick_vector_width(reported: int, override: int | str | None = None) -> int:
    """The float vector width of the CPU kernels: `override` when given, else 16 where the
    device reports a native float width of 16 or more (PoCL reports
    CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT 16 on AVX-512 and 8 on AVX2), else 8. DeviceError for
    an override other than 8 or 16."""
    if override is not None and override != "":
        if str(override).strip() not in [str(w) for w in VECTOR_WIDTHS]:
            raise DeviceError(f"Vector width {override!r} is not supported.",
                              f"Use one of {VECTOR_WIDTHS} (Runtime argument vector_width or "
                              f"the environment variable {VECTOR_WIDTH_ENV}), or leave it unset.")
        return int(override)
    return 16 if reported >= 16 else 8


def gemm_variant(info, native_float_width: int, forced: bool = False) -> str:
    """The GEMM variant of the hand table for a device (DeviceInfo or DeviceLimits): "tiled" on
    GPUs; on CPUs "vector" for 8- or 16-float SIMD, a forced vector width, and on Intel's CPU
    runtime at any width, else "blocked". Intel's runtime ran config S 1.9x slower with
    "blocked" than with "vector" on an AVX2 target and 2.8x on AVX-512 (benchmarks/RESULTS.md,
    2026-11-30): its compiler vectorizes across work-items, not along the 16 columns of one
    work-item's tile as PoCL does."""
    if not info.is_cpu:
        return "tiled"
    intel = info.is_intel_cpu_runtime
    wide = native_float_width >= 8 or forced
    return "vector" if wide or intel else "blocked"


@dataclass(frozen=True)
class GemmChoice:
    """How one product runs. variant: one of VARIANTS. CPU variants: vector_width (vector),
    group (work-items over (column tiles, row tiles)), k_slice (K rows per launch, so the slice
    of A and B stays in cache; 0: the whole K in one launch where the kernel allows). Tiled:
    tile_edge (None: the rule of GemmPlan.edge_for), fetch4 (float4 loads where M, N, K are
    multiples of 4), split_depth (least K per split-K slice)."""

    variant: str
    vector_width: int = 8
    group: tuple[int, int] = (4, 4)
    k_slice: int = 256
    tile_edge: int | None = None
    fetch4: bool = True
    split_depth: int = 256

    def label(self) -> str:
        """A short name for progress lines and benchmark tables, e.g. "vector16 g4x4 k256"."""
        if self.variant == "tiled":
            return (f"tiled{self.tile_edge or ''}{'' if self.fetch4 else 's'} "
                    f"split{self.split_depth}")
        width = str(self.vector_width) if self.variant == "vector" else ""
        return f"{self.variant}{width} g{self.group[0]}x{self.group[1]} k{self.k_slice}"


class GemmLaunch(NamedTuple):
    """One product's launches (engine/opencl/ops.py runs them). kernel: its name; vector_width: the
    build of matmul_vec.cl to take it from (None: the main program); grid, local: the NDRange
    (tiled: the third dimension is the number of K slices); k_step: K rows per launch (CPU
    variants; None: one launch over the whole K); edge: tiled tile edge (None on CPUs);
    kslice: K rows per split-K slice (tiled)."""

    kernel: str
    vector_width: int | None
    grid: tuple
    local: tuple
    k_step: int | None
    edge: int | None
    kslice: int | None


Shape = tuple[str, int, int, int]  # (form, M, N, K)


@dataclass(frozen=True)
class GemmPlan:
    """The launch choices of one runtime (module docstring). default: the choice of products
    not in `shapes`; shapes: (form, M, N, K) -> GemmChoice measured by engine.model.gemm_tune;
    large: the choice of products of at least LARGE_PRODUCT multiply-adds not in `shapes`
    (None: `default` for those too); narrow: the choice of products with N below NARROW_EDGE
    not in `shapes`, few_rows: of the others with M below it (None: as the others); wave:
    tiled work-groups the device runs at once; edges:
    tile edges that fit its local memory; attention_path: None
    (engine.model.attention_gemm.choose decides), "gemm" or "fused"; attention_variant: None
    (by device type), "blocked" or "tiled"."""

    default: GemmChoice
    wave: int = 2
    edges: tuple[int, ...] = gemm_tiles.TILED_EDGES
    shapes: tuple[tuple[Shape, GemmChoice], ...] = ()
    attention_path: str | None = None
    attention_variant: str | None = None
    large: GemmChoice | None = None
    narrow: GemmChoice | None = None
    few_rows: GemmChoice | None = None
    _by_shape: dict = field(default=None, init=False, repr=False, compare=False)
    # launch_for's answers by (form, M, N, K): the plan never changes, and a split's k_slices
    # search runs up to K / 256 estimates (87 us for a tied head's dX) on every launch of a step
    _launches: dict = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.default.variant not in VARIANTS:
            raise ValueError(f"GEMM variant {self.default.variant!r}: use one of {VARIANTS}")
        object.__setattr__(self, "_by_shape", dict(self.shapes))
        object.__setattr__(self, "_launches", {})

    @property
    def variant(self) -> str:
        """The default variant; the batched products of attention follow it (bmm_variant)."""
        return self.default.variant

    @property
    def vector_width(self) -> int:
        """Float SIMD width of the CPU kernels (matmul_vec.cl, attention_blocked.cl)."""
        return self.default.vector_width

    @property
    def bmm_variant(self) -> str:
        """"blocked" (bmm_blocked, matmul.cl: CPUs) or "tiled" (bmm_tiled: GPUs)."""
        return "tiled" if self.variant == "tiled" else "blocked"

    def replace(self, **changes) -> "GemmPlan":
        """A copy with fields changed; a GemmChoice field name (variant, tile_edge, ...)
        changes the default choice and makes it every product's (large, narrow and few_rows
        None; tests: plan.replace(variant="tiled", tile_edge=128))."""
        choice = {k: changes.pop(k) for k in list(changes) if k in GemmChoice.__annotations__}
        if choice:
            changes["default"] = replace(self.default, **choice)
            changes.setdefault("large", None)
            changes.setdefault("narrow", None)
            changes.setdefault("few_rows", None)
        return replace(self, **changes)

    def choice_for(self, form: str, M: int, N: int, K: int) -> GemmChoice:
        """The choice of product C (M, N) = op(A) @ op(B) over K: the tuned one of its shape,
        else `narrow` where N is below NARROW_EDGE, `few_rows` where M is, else `large` for
        products of at least LARGE_PRODUCT multiply-adds, else `default`."""
        tuned = self._by_shape.get((form, M, N, K))
        if tuned is not None:
            return tuned
        if self.narrow is not None and N < NARROW_EDGE:
            return self.narrow
        if self.few_rows is not None and M < NARROW_EDGE:
            return self.few_rows
        if self.large is not None and M * N * K >= LARGE_PRODUCT:
            return self.large
        return self.default

    def launch_for(self, form: str, M: int, N: int, K: int) -> GemmLaunch:
        """The launch of C (M, N) = A @ B (form "nn", A (M, K)) or A^T @ B ("tn", A (K, M))."""
        key = (form, M, N, K)
        if key not in self._launches:
            self._launches[key] = self._launch(form, M, N, K)
        return self._launches[key]

    def _launch(self, form: str, M: int, N: int, K: int) -> GemmLaunch:
        c = self.choice_for(form, M, N, K)
        if c.variant == "packed":   # its blocks follow the device's local memory and cores
            raise ValueError("the packed GEMM's launch is engine.opencl.gemm_packed's")
        if c.variant == "tiled":
            return self._tiled(c, form, M, N, K)
        vec = c.variant == "vector"
        tm, tn = gemm_tiles.VECTOR[c.vector_width] if vec else gemm_tiles.BLOCKED
        grid = round_grid((-(-N // tn), -(-M // tm)), c.group)
        one_launch = form == "nn" and not vec  # matmul_nn (matmul.cl) takes no K range
        name = f"matmul_{form}" + ("_vec" if vec else "")
        return GemmLaunch(name, c.vector_width if vec else None, grid, c.group,
                          None if one_launch else (c.k_slice or max(K, 1)), None, None)

    def _tiled(self, c: GemmChoice, form: str, M: int, N: int, K: int) -> GemmLaunch:
        tl = self.edge_for(c, form, M, N, K)
        gx, gy = gemm_tiles.TILED_GROUP
        fetch4 = c.fetch4 and M % 4 == 0 and N % 4 == 0 and K % 4 == 0
        name = gemm_tiles.tiled_kernel(form, tl, fetch4)
        grid = (gx * -(-N // tl), gy * -(-M // tl))
        kslice = -(-K // self._splits(c, form, -(-N // tl) * -(-M // tl), K))
        kslice = max(gemm_tiles.TILED_K, -(-kslice // gemm_tiles.TILED_K) * gemm_tiles.TILED_K)
        slices = -(-K // kslice) if K else 1
        return GemmLaunch(name, None, grid + (slices,), (gx, gy, 1), None, tl,
                          kslice if slices > 1 else max(K, 1))

    def _splits(self, c: GemmChoice, form: str, n_tiles: int, K: int) -> int:
        """Slices of K for a tiled product of n_tiles tiles (k_slices). nn splits only where its
        tiles fill less than a wave: with a wave and a bit (XL's 8192 x 768 products, 384 tiles
        of 128 where 264 fit) the split ran 2-12% slower on an H200, while the tied output
        head's dX per chunk (36 tiles, K 49152) idles 96 of 132 compute units unsplit
        (benchmarks/RESULTS.md, "nn split over K")."""
        if form == "nn" and n_tiles >= self.wave:
            return 1
        return k_slices(self.wave, n_tiles, K, c.split_depth)

    def edge_for(self, c: GemmChoice, form: str, M: int, N: int, K: int) -> int:
        """The tile edge: the choice's when set (and it fits), else 128x128 tiles (8x8 per
        work-item, twice the arithmetic per local-memory read) where their groups, K split as
        _splits says, fill at least 3/4 of a wave (nn), or for tn (split over K, which makes
        its own parallelism) once C has 2^17 elements (measured on an H200, M, L and the 135M
        model's shapes: bench_kernels.py; 160 groups of 128 ran 13% slower than 576 of 64,
        256 groups 34% faster); the small edge where the device's local memory is too small
        for the big one."""
        small, big = gemm_tiles.TILED_EDGES
        if c.tile_edge in self.edges:
            return c.tile_edge
        if c.tile_edge is not None or big not in self.edges:
            return small
        if form == "tn":
            return big if M * N >= 1 << 17 and min(M, N) >= big else small
        tiles = -(-M // big) * -(-N // big)
        return big if 4 * tiles * self._splits(c, form, tiles, K) >= 3 * self.wave else small

    # -- the cache's form (engine.model.gemm_tune) ---------------------------------------------------
    def to_dict(self) -> dict:
        return {"default": asdict(self.default),
                "shapes": [[list(s), asdict(c)] for s, c in self.shapes],
                "attention_path": self.attention_path}

    def with_tuned(self, data: dict) -> "GemmPlan":
        """This plan (the device's table) with the tuned choices of a to_dict() dictionary.
        ValueError/TypeError/KeyError for a malformed one."""
        shapes = tuple((_shape(s), _choice(c)) for s, c in data["shapes"])
        path = data.get("attention_path")
        if path not in (None, "gemm", "fused"):
            raise ValueError(f"attention path {path!r}")
        return replace(self, default=_choice(data["default"]), shapes=shapes,
                       attention_path=path)


def _shape(s) -> Shape:
    form, M, N, K = s
    if form not in FORMS:
        raise ValueError(f"product form {form!r}")
    return (form, int(M), int(N), int(K))


def _choice(d: dict) -> GemmChoice:
    d = dict(d)
    d["group"] = tuple(int(g) for g in d.get("group", (4, 4)))
    c = GemmChoice(**d)
    if c.variant not in VARIANTS or c.vector_width not in VECTOR_WIDTHS:
        raise ValueError(f"GEMM choice {c}")
    return c


def default_plan(limits: DeviceLimits, vector_width: int | str | None = None) -> GemmPlan:
    """The hand table's plan for a device: variant by gemm_variant, vector width by
    pick_vector_width (vector_width overrides it and forces the vector GEMM on CPUs), 4x4
    groups and 256-deep K slices on CPUs (benchmarks/results/tuning-timings.md), the packed
    GEMM for large products and products of few rows, and the blocked one for narrow products
    (NARROW_EDGE), where the vector one is the default and the runtime is not Intel's (its compiler vectorizes across
    work-items, and a packed work-group is one work-item; the narrow rule was measured on PoCL
    alone), tiles by GemmPlan.edge_for, split-K slices at least 256 deep."""
    forced = vector_width is not None and vector_width != ""
    width = pick_vector_width(limits.native_float_width, vector_width)
    variant = gemm_variant(limits, limits.native_float_width, forced)
    packs = variant == "vector" and not limits.is_intel_cpu_runtime
    return GemmPlan(GemmChoice(variant, vector_width=width),
                    wave=GROUPS_PER_CU * limits.compute_units, edges=limits.tile_edges(),
                    large=GemmChoice("packed", vector_width=width) if packs else None,
                    narrow=GemmChoice("blocked", vector_width=width) if packs else None,
                    few_rows=GemmChoice("packed", vector_width=width) if packs else None)


def k_slices(wave: int, n_tiles: int, K: int, min_depth: int = 256) -> int:
    """How many slices of K a tiled product of n_tiles output tiles is split into: the count
    with the least estimated time, waves x depth per slice (a last, partly empty wave costs as
    much as a full one: 270 groups where 264 fit ran at 2/3 of the speed of 264) plus the
    summing of the slices (sum_slices); each slice at least min_depth deep."""

    def cost(s: int) -> float:
        return -(-n_tiles * s // wave) * K / s + (SUM_DEPTH * s * n_tiles / wave if s > 1 else 0)

    return min(range(1, max(1, K // min_depth) + 1), key=lambda s: (cost(s), s))


def round_grid(grid: tuple, local: tuple) -> tuple:
    """grid rounded up to multiples of local, per dimension."""
    return tuple(-(-g // l) * l for g, l in zip(grid, local))
