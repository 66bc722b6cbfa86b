"""One OpenCL context, queue and program per device; kernels fetched once with declared dtypes.

The main program is kernels/common.h followed by every kernels/*.cl file except the SPECIALIZED
ones, which are built on demand with their own -D options (attention.cl once per head_dim:
engine/model/attention.py). Each file includes what it shares through common.h, never through the
order of concatenation. Scalar argument dtypes are read from the kernel signatures, so launches
skip pyopencl's per-call type inference (docs/DESIGN.md: a `program.name` lookup per call
costs far more than a cached kernel).

Device limits (issue 13): no buffer above CL_DEVICE_MAX_MEM_ALLOC_SIZE (`empty` refuses with a
DeviceError; LLM_STUDIO_MAX_ALLOC_MB or the max_alloc_bytes argument lowers the reported limit,
so tests can check it), no launch with more work-items per group than the kernel allows.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import re
import warnings
from contextlib import contextmanager
from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np
import pyopencl as cl

from opencl_llm_studio.engine.opencl import gemm_tiles
from opencl_llm_studio.engine.opencl.device import DeviceInfo, select_device
from opencl_llm_studio.engine.opencl.gemm_plan import VECTOR_WIDTH_ENV, DeviceLimits, GemmPlan, default_plan
from opencl_llm_studio.engine.errors import DeviceError

# The .cl sources are package data of opencl_llm_studio.kernels, found wherever the package is
# installed (a wheel, an editable checkout, the desktop bundle), never relative to a checkout.
KERNEL_DIR = Path(str(resources.files("opencl_llm_studio.kernels")))
log = logging.getLogger("opencl_llm_studio")
_SIG = re.compile(r"__kernel\s+(?:__attribute__\(\(.*?\)\)\s*)?void\s+(\w+)\s*\(([^)]*)\)", re.S)
_SCALAR = {"int": np.int32, "uint": np.uint32, "float": np.float32, "long": np.int64}


# built per set of -D options (Runtime.build), not in main: attention per head_dim (and vector
# width), the vector GEMMs per vector width
SPECIALIZED = ("attention.cl", "attention_blocked.cl", "attention_flash.cl", "matmul_packed.cl",
               "matmul_vec.cl")
GPU_GROUP = gemm_tiles.TILED_GROUP[0] * gemm_tiles.TILED_GROUP[1]  # tiled GPU GEMM's group
GPU_LAUNCH_FLOPS = 2.0 ** 32  # the least per-launch cap on a GPU (see launch_flops_cap)
# The way to another device in the command line's words (StudioError.cli_hint)
OTHER_DEVICE_CLI = ("Give another --device (`llm-studio devices` lists them; a CPU device "
                    "always works).")
LAUNCH_SECONDS = 0.1  # a GPU launch's work at the device's estimated peak (launch_flops_cap)
# a CPU launch's work in a training step at an estimate of the device's rate (stop_flops_cap):
# a stop asked for inside a long kernel lands within about one of them
CPU_LAUNCH_SECONDS = 0.5
LAUNCH_FLOPS_ENV = "LLM_STUDIO_MAX_LAUNCH_GFLOP"  # overrides the cap; 0 = none (tests, benches)
MAX_ALLOC_ENV = "LLM_STUDIO_MAX_ALLOC_MB"  # lowers the device's reported max allocation (tests)
def kernel_source(files: tuple[str, ...] | None = None) -> str:
    """common.h followed by `files` (default: every .cl file but the SPECIALIZED), name order."""
    if files is None:
        files = tuple(p.name for p in sorted(KERNEL_DIR.glob("*.cl")) if p.name not in SPECIALIZED)
    parts = [(KERNEL_DIR / "common.h").read_text()]
    parts += [(KERNEL_DIR / f).read_text() for f in files]
    return "\n".join(parts)


def kernel_signatures(src: str) -> dict[str, list]:
    """kernel name -> per-argument dtype (None for pointers), parsed from the source."""
    sigs = {}
    for name, args in _SIG.findall(src):
        dtypes = []
        for arg in args.split(","):
            arg = arg.strip()
            if "*" in arg:
                dtypes.append(None)
            else:
                ctype = arg.replace("const", "").split()[0]
                dtypes.append(_SCALAR[ctype])
        sigs[name] = dtypes
    return sigs


def launch_flops_cap(is_cpu: bool, compute_units: int, clock_mhz: int,
                     env: str | None = None) -> float | None:
    """The most flops one launch of a long kernel may carry (GEMMs and attention split bigger
    ones: engine/opencl/ops.py, engine/attention*.py), or None for no cap.

    A display GPU's driver kills a kernel that runs for seconds (Windows TDR: 2 s), so a GPU
    launch carries at most LAUNCH_SECONDS of work at a low estimate of the device's peak:
    compute units x clock x 16 flops (8 fp32 lanes with fused multiply-add, an Intel EU, the
    narrowest GPU compute unit; NVIDIA SMs have 128 lanes, AMD CUs 64), and never less than
    2^32 flops (~0.1 s at 40 GFLOP/s, a slow iGPU's rate). An H200 (132 units, 1980 MHz) gets
    4.2e11: no GEMM of the XL config is split, where 2^32 split them into hundreds of launches.
    CPUs drive no display: None (their training steps split for stops: stop_flops_cap). env
    (LLM_STUDIO_MAX_LAUNCH_GFLOP) overrides, in GFLOP, on any device; 0 or a negative value
    means no cap."""
    if env:
        gflop = float(env)
        return gflop * 1e9 if gflop > 0 else None
    if is_cpu:
        return None
    return max(GPU_LAUNCH_FLOPS, LAUNCH_SECONDS * compute_units * clock_mhz * 1e6 * 16)


def stop_flops_cap(compute_units: int, clock_mhz: int) -> float:
    """The most flops one launch may carry on a CPU while a training step runs, so that a stop
    (Ctrl-C, the studio's Stop), which lands between launches, waits for about
    CPU_LAUNCH_SECONDS: compute units x clock x 16 flops (PoCL's GEMMs run 16-50 flops per
    core-cycle on AVX2 and AVX-512), never less than 2^32. A d256, 2-block step at context
    2048, batch 64 took 5-20 s to stop with one attention launch per layer. Not lower: SmolLM2-
    135M's output-head products (14.5 GFLOP at batch 8 x 64) then split, and the split shapes'
    GEMM scratch raised its tuning's peak by 0.15 GB. Generation and evaluation keep whole
    launches (they stop between items)."""
    return max(GPU_LAUNCH_FLOPS, CPU_LAUNCH_SECONDS * compute_units * clock_mhz * 1e6 * 16)


def _log_build(program: "cl.Program", device, name: str) -> None:
    """The compiler's output of a successful build, at DEBUG level when there is any."""
    try:
        text = program.get_build_info(device, cl.program_build_info.LOG).strip()
    except cl.Error:
        return
    if text:
        log.debug("OpenCL compiler output on %s:\n%s", name, text)


class Built:
    """One built program: kernels fetched once, with declared scalar dtypes and the largest
    work-group each may run on the device (launches above it raise DeviceError)."""

    def __init__(self, rt: "Runtime", src: str, opts: list[str]):
        try:
            # pyopencl warns (CompilerWarning, with a line of its own source) whenever the
            # compiler says anything, warnings included: a person saw it on every command. The
            # log goes to the `opencl_llm_studio` logger; a failed build shows it in the error.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cl.CompilerWarning)
                self.program = cl.Program(rt.ctx, src).build(options=opts)
            _log_build(self.program, rt.device, rt.info.name)
        except cl.Error as e:
            raise DeviceError(f"The OpenCL kernels failed to compile on {rt.info.name}.",
                              f"Pick another device. Compiler said:\n{e}",
                              f"{OTHER_DEVICE_CLI} Compiler said:\n{e}") from e
        self.device, self.device_name = rt.device, rt.info.name
        self._sigs = kernel_signatures(src)
        self._kernels: dict[str, cl.Kernel] = {}
        self.max_group: dict[str, int] = {}

    def kernel(self, name: str) -> cl.Kernel:
        k = self._kernels.get(name)
        if k is None:
            k = cl.Kernel(self.program, name)
            k.set_scalar_arg_dtypes(self._sigs[name])
            self.max_group[name] = int(k.get_work_group_info(
                cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device))
            self._kernels[name] = k
        return k

    def check_group(self, name: str, local_size: tuple, device_max: int | None = None):
        """DeviceError when local_size has more work-items than kernel `name` (or device_max,
        the device's limit as overridden: Runtime(limits=...)) allows."""
        items = math.prod(local_size)
        allowed = min(self.max_group[name], device_max or self.max_group[name])
        if items > allowed:
            raise DeviceError(
                f"{self.device_name} runs at most {allowed} work-items per group "
                f"of kernel {name}; this engine's kernel needs {items}.",
                "Pick another OpenCL device (a CPU device always works).", OTHER_DEVICE_CLI)


def _capped_info(device: DeviceInfo | int | str | None, max_alloc_bytes: int | None) -> DeviceInfo:
    """The chosen device's DeviceInfo, its largest buffer lowered to max_alloc_bytes or the
    environment's LLM_STUDIO_MAX_ALLOC_MB (MiB) where either is lower than what it reports."""
    info = device if isinstance(device, DeviceInfo) else select_device(device)
    env = os.environ.get(MAX_ALLOC_ENV)
    cap = max_alloc_bytes or (int(float(env) * 2**20) if env else None)
    if cap and cap < info.max_alloc_bytes:
        info = replace(info, max_alloc_bytes=int(cap))
    return info


class Runtime:
    """Context, in-order queue and built program for one device.

    `rt.launch(name, global_size, local_size, *args)` enqueues a cached kernel. Global sizes are
    rounded up to multiples of the fixed local size (kernels guard their indices), because on
    PoCL every new local size costs a separate compile.
    """

    def __init__(self, device: DeviceInfo | int | str | None = None,
                 row_lanes: tuple[int, int] | None = None, build_options: tuple[str, ...] = (),
                 max_alloc_bytes: int | None = None, vector_width: int | None = None,
                 plan: GemmPlan | None = None, limits: dict | None = None):
        """row_lanes: (lanes per row, rows per work-group) of the row kernels, overriding the
        device-type default (tests run the GPU layout on a CPU); lanes a power of two; more
        than one lane also takes the GPU's form of reductions (ops.grad_norm).
        build_options: extra OpenCL compiler options (benchmarks compare them).
        max_alloc_bytes: a lower limit for one buffer than the device reports (default: the
        environment variable LLM_STUDIO_MAX_ALLOC_MB, else none); self.info reports it.
        limits: {DeviceLimits field: value} overriding what the device reports (local memory,
        maximum work-group size, native float vector width: a profile of another device).
        plan: how products launch (engine/opencl/gemm_plan.py); default the hand table's for the
        device, whose vector width `vector_width` (or LLM_STUDIO_VECTOR_WIDTH) overrides."""
        self.info = _capped_info(device, max_alloc_bytes)
        self._open(limits)
        self.plan = plan or default_plan(
            self.limits, vector_width or os.environ.get(VECTOR_WIDTH_ENV) or None)
        # Row kernels (softmax, RMSNorm; kernels/common.h): work-items per row and rows per
        # work-group. CPU: one work-item per contiguous row; GPU: 64 lanes share a row.
        default_rows = (1, 16) if self.is_cpu else (64, 4)
        self.row_lanes, self.row_group_rows = row_lanes or default_rows
        opts = ["-cl-std=CL1.2", f"-DSM_LANES={self.row_lanes}",
                f"-DSM_ROWS={self.row_group_rows}"] + (["-DCPU_DEVICE"] if self.is_cpu else [])
        opts += gemm_tiles.main_defines()
        self.build_options = opts + list(build_options)
        self.main = Built(self, kernel_source(), self.build_options)
        self.program = self.main.program
        self._built: dict[tuple, Built] = {}
        self._gemm_tiles: dict[int, tuple | None] = {}  # tile edge -> __local args (gemm_tiles)
        self.launches = 0  # kernel enqueues since creation (reported by benchmarks)
        # Fixed local sizes (see class docstring). CPU: small groups keep both cores busy.
        self.local_1d = (16,) if self.is_cpu else (64,)
        # Long element-wise 1-D kernels (AdamW, split-K sums): PoCL pays per work-group, so on a
        # CPU they take big groups (with 16, adamw_update took a visible share of a step:
        # benchmarks/results/tuning-timings.md).
        self.local_1d_long = (1024,) if self.is_cpu else (256,)
        # CPU: PoCL pays per work-group, so 2-D element-wise kernels take long rows
        # (swiglu ran several times faster with (64, 1) than (4, 4): benchmarks/RESULTS.md).
        self.local_2d = (64, 1) if self.is_cpu else (16, 16)
        self.local_3d = (16, 1, 1) if self.is_cpu else (64, 1, 1)
        # GPUs: a second in-order queue for weight gradients, so they run beside the chain of
        # input gradients (filling the partly empty last wave of each product); see side().
        # None on CPUs (PoCL's two cores are busy with one kernel at a time).
        self.side_queue = None if self.is_cpu else cl.CommandQueue(self.ctx)
        self._set_launch_caps()
        self._pending: list[tuple[cl.Event, tuple]] = []  # side work: (done event, buffers read)
        self._scratch_slots = {"main": (None, 0), "side": (None, 0)}
        self._stop_mark: cl.Event | None = None  # see stop_point
        self.chunk_check = None   # the running step's stop check (between_chunks), or None

    def _open(self, limits: dict | None) -> None:
        """The device's context and queue, its limits; DeviceError when it cannot be opened or
        its work-groups are too small for the GPU kernels."""
        try:
            self.device = self.info.cl_device()
            self.ctx = cl.Context([self.device])
            self.queue = cl.CommandQueue(self.ctx)
        except cl.Error as e:
            raise DeviceError(f"Could not open OpenCL device {self.info.name}: {e}",
                              "Pick another device, or check its driver.",
                              f"{OTHER_DEVICE_CLI} Or check its driver.") from e
        self.limits = DeviceLimits.of(self.info, self.device, limits)
        self.is_cpu = self.info.is_cpu
        if not self.is_cpu and self.limits.max_work_group_size < GPU_GROUP:
            raise DeviceError(
                f"{self.info.name} runs at most {self.limits.max_work_group_size} work-items "
                f"per group; this engine's GPU kernels need {GPU_GROUP}.",
                "Pick another OpenCL device (a CPU device always works).", OTHER_DEVICE_CLI)

    def _set_launch_caps(self) -> None:
        """max_launch_flops: the most work (flops) one launch of a long kernel may carry
        (display watchdogs; None: no cap; tests set LAUNCH_FLOPS_ENV to force split launches);
        stop_launch_flops: a CPU's cap while a training step runs (launch_cap), unless the
        environment set one."""
        env = os.environ.get(LAUNCH_FLOPS_ENV)
        clock = int(self.device.max_clock_frequency)
        self.max_launch_flops: float | None = launch_flops_cap(
            self.is_cpu, self.info.compute_units, clock, env)
        self.stop_launch_flops: float | None = (
            stop_flops_cap(self.info.compute_units, clock) if self.is_cpu and not env else None)

    def with_plan(self, plan: GemmPlan) -> "Runtime":
        """A runtime on the same context, queues, programs and buffers that launches products
        by `plan` (tests and the tuner run each variant on one device; this one is unchanged).
        Use one of the two at a time: they share the queues' side-work bookkeeping."""
        other = copy.copy(self)
        other.plan = plan
        return other

    def stop_point(self, check) -> None:
        """A place inside a long step where a stop may land: wait until the work enqueued
        before the previous stop point is done (so the host runs at most about one layer ahead
        of the device, and what is left to drain after a stop is about one layer), then call
        check(), which raises to abandon the step. end_stop_points() after the step."""
        mark = cl.enqueue_marker(self.queue)
        if self._stop_mark is not None:
            self._stop_mark.wait()
        self._stop_mark = mark
        check()

    def end_stop_points(self) -> None:
        self._stop_mark = None

    def launch_cap(self) -> float | None:
        """The most flops one launch may carry now: max_launch_flops, or on a CPU while a
        training step runs (chunk_check set) stop_launch_flops; None: no cap."""
        if self.max_launch_flops is not None or self.chunk_check is None:
            return self.max_launch_flops
        return self.stop_launch_flops

    def between_chunks(self) -> None:
        """Between two launches of one split kernel (max_launch_flops): a stop point of the
        running training step (chunk_check, set by engine.model.transformer.Model.train_step),
        so a stop asked for inside a long product lands after the launch that is running."""
        if self.chunk_check is not None:
            self.stop_point(self.chunk_check)

    def kernel(self, name: str) -> cl.Kernel:
        return self.main.kernel(name)

    def build(self, files: tuple[str, ...], defines: tuple[tuple[str, int], ...]) -> Built:
        """common.h + the SPECIALIZED `files` built with -D name=value for each define (cached:
        a build per distinct set; PoCL compiles each once and keeps a disk cache)."""
        key = (files, defines)
        if key not in self._built:
            opts = self.build_options + [f"-D{k}={v}" for k, v in defines]
            self._built[key] = Built(self, kernel_source(files), opts)
        return self._built[key]

    def gemm_tiles(self, tl: int) -> tuple | None:
        """The __local tile arguments of the tiled GEMM kernels for tile edge tl (64 or 128):
        gemm_tiles.tiled_local_bytes(tl) for A and as many for B (kernels/matmul_tiled.cl),
        or None where the device's local memory is too small (OpenCL guarantees 32 KiB; the
        128 tiles take 33 KiB). Made once per tile edge: every tiled launch asks."""
        if tl not in self._gemm_tiles:
            nbytes = gemm_tiles.tiled_local_bytes(tl)
            fits = tl in self.limits.tile_edges()
            self._gemm_tiles[tl] = (cl.LocalMemory(nbytes), cl.LocalMemory(nbytes)) if fits \
                else None
        return self._gemm_tiles[tl]

    def launch(self, name: str, global_size: tuple, *args):
        """Enqueue kernel `name` over `global_size` (rounded up to the fixed local size)."""
        local = {1: self.local_1d, 2: self.local_2d, 3: self.local_3d}[len(global_size)]
        gs = tuple(-(-g // l) * l for g, l in zip(global_size, local))
        return self.launch_local(name, gs, local, *args)

    def launch_elementwise(self, name: str, columns: int, rows: int, *args):
        """Enqueue an element-wise kernel over (rows, columns) written with FOR_COLUMNS
        (kernels/common.h): on a CPU device (built with CPU_DEVICE) 16 rows per work-group, one
        work-item per row walking its columns; on a GPU one work-item per element."""
        if self.info.is_cpu:  # as the build was made (CPU_DEVICE)
            return self.launch_local(name, (1, -(-rows // 16) * 16), (1, 16), *args)
        return self.launch(name, (columns, rows), *args)

    def launch_long(self, name: str, n: int, *args):
        """Enqueue a 1-D element-wise kernel over n items with the long-kernel group size."""
        local = self.local_1d_long
        return self.launch_local(name, (-(-n // local[0]) * local[0],), local, *args)

    def launch_local(self, name: str, global_size: tuple, local_size: tuple, *args,
                     built: Built | None = None):
        """Enqueue with an explicit local size (kernels with reqd_work_group_size), from the
        main program or `built`. DeviceError when the device cannot run groups that big."""
        prog = built or self.main
        k = prog.kernel(name)
        prog.check_group(name, local_size, self.limits.max_work_group_size)
        self.launches += 1
        return k(self.queue, global_size, local_size, *args)

    def scratch(self, n: int) -> cl.Buffer:
        """A shared float scratch buffer of at least n elements (grown on demand; valid until
        the next call: the queue is in order). Work inside side() has its own."""
        slot = "side" if self.side_queue is not None and self.queue is self.side_queue else "main"
        buf, size = self._scratch_slots[slot]
        if size < n:
            buf = self.empty(n)
            self._scratch_slots[slot] = (buf, n)
        return buf

    # -- the side queue ------------------------------------------------------------------
    @contextmanager
    def side(self, reads: tuple = ()):
        """Launches inside run on the side queue (where there is one), after everything enqueued
        on the main queue so far, and may overlap the main queue's later work. `reads`: the
        buffers they read, which the main queue must not overwrite before they finish (the
        caller says when with before_write, or waits for all with join). Without a side queue
        this is a no-op: the launches go to the main queue in order."""
        if self.side_queue is None:
            yield
            return
        ready = cl.enqueue_marker(self.queue)
        main = self.queue
        self.queue = self.side_queue
        try:
            cl.enqueue_barrier(self.queue, wait_for=[ready])
            yield
        finally:
            self._pending.append((cl.enqueue_marker(self.queue), tuple(reads)))
            self.queue = main

    def before_write(self, *bufs):
        """Make the main queue wait for side work that reads any of bufs (before it writes)."""
        waits = [ev for ev, reads in self._pending if any(b == r for b in bufs for r in reads)]
        if waits:
            cl.enqueue_barrier(self.queue, wait_for=waits)
            self._pending = [(ev, r) for ev, r in self._pending if ev not in waits]

    def join(self):
        """Make the main queue wait for all side work enqueued so far."""
        if self._pending:
            cl.enqueue_barrier(self.queue, wait_for=[ev for ev, _ in self._pending])
            self._pending = []

    # -- buffers ---------------------------------------------------------------------------
    def empty(self, n: int, dtype=np.float32) -> cl.Buffer:
        """Device buffer of n elements (at least one, OpenCL forbids size 0)."""
        nbytes = max(int(n), 1) * np.dtype(dtype).itemsize
        if nbytes > self.info.max_alloc_bytes:
            raise DeviceError(
                f"One buffer of {nbytes / 2**20:.1f} MiB is above the largest single "
                f"allocation {self.info.name} allows ({self.info.max_alloc_bytes / 2**20:.1f} "
                "MiB, CL_DEVICE_MAX_MEM_ALLOC_SIZE).",
                "Use a smaller batch size, context length, d_model or vocabulary.")
        try:
            return cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, nbytes)
        except cl.Error as e:
            raise DeviceError(f"The device could not allocate {nbytes / 2**20:.1f} MiB: {e}",
                              "Use a smaller model, batch size or context length.") from e

    def sub_buffer(self, buf: cl.Buffer, offset: int, n: int) -> cl.Buffer:
        """Elements [offset, offset + n) of float buffer buf (itself possibly a sub-buffer) as
        a buffer. offset * 4 must be a multiple of the device's base address alignment."""
        nbytes = offset * 4
        parent = buf.get_info(cl.mem_info.ASSOCIATED_MEMOBJECT)
        if parent is not None:  # OpenCL makes sub-buffers of whole buffers only
            nbytes += buf.get_info(cl.mem_info.OFFSET)
            buf = parent
        align = self.device.mem_base_addr_align // 8
        if nbytes % align:
            raise ValueError(f"sub-buffer origin {nbytes} is not a multiple of {align} bytes")
        return buf.get_sub_region(nbytes, n * 4)

    def zeros(self, n: int, dtype=np.float32) -> cl.Buffer:
        buf = self.empty(n, dtype)
        cl.enqueue_fill_buffer(self.queue, buf, np.zeros(1, dtype), 0, max(int(n), 1) * np.dtype(dtype).itemsize)
        return buf

    def to_device(self, arr: np.ndarray) -> cl.Buffer:
        arr = np.ascontiguousarray(arr)
        buf = self.empty(arr.size, arr.dtype)
        if arr.size:
            cl.enqueue_copy(self.queue, buf, arr)
        return buf

    def write(self, buf: cl.Buffer, arr: np.ndarray, offset_elems: int = 0, wait=False):
        arr = np.ascontiguousarray(arr)
        cl.enqueue_copy(self.queue, buf, arr, dst_offset=offset_elems * arr.itemsize,
                        is_blocking=wait)

    def read(self, buf: cl.Buffer, n: int, dtype=np.float32, offset_elems: int = 0) -> np.ndarray:
        out = np.empty(n, dtype)
        if n:
            # finish() waits with the GIL released; a blocking enqueue_copy would hold it for
            # the whole queued step and freeze the studio's GUI thread meanwhile.
            self.finish()
            cl.enqueue_copy(self.queue, out, buf, src_offset=offset_elems * out.itemsize)
        return out

    def fill_zero(self, buf: cl.Buffer, n: int, offset_elems: int = 0, dtype=np.float32):
        item = np.dtype(dtype).itemsize
        if n:
            cl.enqueue_fill_buffer(self.queue, buf, np.zeros(1, dtype), offset_elems * item, n * item)

    def finish(self):
        """Wait for every queue (side work included)."""
        self.join()
        self.queue.finish()
        if self.side_queue is not None:
            self.side_queue.finish()
