#!/usr/bin/env bash
# The engine against PyTorch eager per CPU SIMD kind, both on one AVX-512 machine (issue 13):
#
#   bash benchmarks/cpu_isa.sh [check|avx2|avx512] [bench_train.py arguments...]
#   bash benchmarks/cpu_isa.sh tests [avx2|avx512] [pytest arguments...]
#
# avx512  bench_train.py on Debian's PoCL 3.1 device as it is (pocl-opencl-icd; its kernel
#         library variant "avx512", device name pthread-skylake-avx512-...), PyTorch as it is.
# avx2    an EMULATED AVX2 CPU: the same PoCL 3.1 told to use its "avx2" kernel library
#         (POCL_KERNELLIB_NAME=avx2: LLVM target CPU haswell, so no zmm registers, no EVEX
#         encodings, 16 vector registers), the engine's float8 kernels (LLM_STUDIO_VECTOR_WIDTH=8:
#         what it picks where PoCL reports native float width 8, as on an AVX2 CPU; this PoCL
#         still reports 16), and PyTorch restricted to AVX2 (ATEN_CPU_CAPABILITY=avx2,
#         ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2). Caches, clock, memory and core
#         count stay this machine's, so it is not a measurement of a real AVX2 CPU.
# check   proves the restriction: builds and runs the engine's GEMMs under the avx2 setting in
#         a fresh PoCL cache, then counts zmm and ymm16-31 registers in the compiled kernels
#         (objdump), and prints the ISA MKL (MKL_VERBOSE) and oneDNN (ONEDNN_VERBOSE) report.
# tests   runs the kernel tests of benchmarks/device_tests.txt on PoCL 3.1 under one kind's
#         setting (default avx2), on the device of that kind (LLM_STUDIO_TEST_DEVICE).
#
# pocl-opencl-icd: `apt-get install pocl-opencl-icd` (Debian 12: PoCL 3.1, LLVM 15). The pip
# PoCL 3.0 cannot be retargeted (RESULTS.md, 2026-12-01). Only PoCL 3.1 is listed here
# (OCL_ICD_VENDORS names its .icd alone): with both PoCL libraries in one process the
# interpreter crashed at exit. On a shared machine, move its .icd out of /etc/OpenCL/vendors
# (so other programs keep the pip PoCL as their default device) and set POCL_ICD to it.
# Environment: PYTHON (default python3), POCL_ICD (default /etc/OpenCL/vendors/pocl.icd).
# Results: benchmarks/RESULTS.md, "CPU per SIMD kind".
set -euo pipefail

cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-python3}
export OCL_ICD_VENDORS=${POCL_ICD:-/etc/OpenCL/vendors/pocl.icd}
# Debian's PoCL alone: on CPUs the pip PoCL needs patched for (AMD Zen 5), the patched copy
# would replace every PoCL in OCL_ICD_VENDORS, this one included (engine/opencl/pocl_compat.py)
export LLM_STUDIO_POCL_PATCH=0
MODE=${1:-check}
shift || true

avx2_env() {
    export POCL_KERNELLIB_NAME=avx2 LLM_STUDIO_VECTOR_WIDTH=8
    export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
    export PYOPENCL_NO_CACHE=1  # a binary cached for one kernel library is not the other's
}

check() {
    avx2_env
    local cache
    cache=$(mktemp -d)
    POCL_CACHE_DIR="$cache" "$PYTHON" - <<'EOF'
import numpy as np
from opencl_llm_studio.engine.opencl import ops
from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.model.transformer import Model
from opencl_llm_studio.engine.opencl.runtime import Runtime
rt = Runtime("haswell")
print("device:", rt.info.name, "| vector width", rt.plan.vector_width, "| GEMM", rt.plan.default,
      "| large products", rt.plan.large)
rng = np.random.default_rng(0)
a, b = rng.standard_normal((96, 80), np.float32), rng.standard_normal((80, 48), np.float32)
c = rt.empty(96 * 48)
ops.matmul_nn(rt, c, rt.to_device(a), rt.to_device(b), 96, 48, 80)
got = rt.read(c, 96 * 48).reshape(96, 48)
print("nn product max error:", float(np.abs(got - a.astype(np.float64) @ b).max()))
cfg = ModelConfig(vocab_size=512, d_model=128, n_layer=2, n_head=4, context_length=64).validate()
x = rng.integers(0, 512, size=(4, 64)).astype(np.int32)
loss = Model(rt, cfg, seed=0).train_step(x, np.roll(x, -1, 1), 1e-3, TrainConfig())[0]
print("one training step (every kernel built), loss", round(float(loss), 4))
EOF
    local zmm=0 hi=0 n=0 f
    while IFS= read -r f; do
        n=$((n + 1))
        zmm=$((zmm + $(objdump -d "$f" | grep -c '%zmm' || true)))
        hi=$((hi + $(objdump -d "$f" | grep -cE '%[xy]mm(1[6-9]|2[0-9]|3[01])' || true)))
    done < <(find "$cache" -name '*.so')
    echo "compiled kernels: $n .so files, zmm references: $zmm, xmm/ymm16-31 references: $hi"
    rm -rf "$cache"
    MKL_VERBOSE=1 ONEDNN_VERBOSE=1 "$PYTHON" - <<'EOF' 2>&1 | grep -E "^isa|MKL_VERBOSE oneMKL|onednn_verbose.*info,cpu,isa|capability" | cut -c1-200
import torch
print("isa ATen capability:", torch.backends.cpu.get_cpu_capability())
x = torch.randn(64, 64, requires_grad=True)
(torch.nn.functional.linear(x, torch.randn(64, 64)).relu().sum()).backward()
torch.nn.functional.conv1d(torch.randn(1, 4, 16), torch.randn(4, 4, 3))  # wakes oneDNN
EOF
}

tests() {
    local kind=${1:-avx2} device
    shift || true
    case "$kind" in
        avx2) avx2_env; device=haswell ;;
        avx512) device=skylake-avx512 ;;
        *) echo "cpu_isa.sh tests: kind avx2 or avx512, not '$kind'" >&2; exit 2 ;;
    esac
    LLM_STUDIO_TEST_DEVICE="$device" QT_QPA_PLATFORM=offscreen "$PYTHON" -m pytest -q \
        -p no:cacheprovider -W ignore::UserWarning $(grep -v '^#' benchmarks/device_tests.txt) "$@"
}

case "$MODE" in
    check) check ;;
    tests) tests "$@" ;;
    avx2) avx2_env; "$PYTHON" benchmarks/bench_train.py --device haswell "$@" ;;
    avx512) "$PYTHON" benchmarks/bench_train.py --device skylake-avx512 "$@" ;;
    *) echo "usage: $0 [check|avx2|avx512|tests] [arguments...]" >&2; exit 2 ;;
esac
