#!/usr/bin/env bash
# The GPU run of issues 6 and 13 on a lent NVIDIA machine (Python 3.12, PyTorch CUDA, no
# pyopencl): install the carried wheels (.whl/), point the OpenCL ICD loader at NVIDIA's driver,
# run the kernel, attention, device-limit, model and decode tests on the GPU, then the device
# memory per layer at T = 256..2048 (d384), the training benchmark S/M/L/XL against PyTorch
# eager and torch.compile, and the kernel benchmark.
# Usage there, from the repository root: OUT=/some/dir [PART=tests|bench|gemm|tune] bash benchmarks/gpu_run.sh
# (WHEELS=.whlg: another folder of carried wheels, e.g. one without PoCL's 58 MB wheel, which the
# GPU runs do not use; OVERLAY=.ov: a folder whose files are copied over the tree first, so a branch's
# changed files can travel without its whole worktree)
# (or `PART=setup source benchmarks/gpu_run.sh` for the environment alone)
# (PART=tests: build log, tests, memory table, T2048 steps; PART=bench: the benchmarks; default
# both: two calls fit the 10-minute limit of one lent-machine command.)
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "${WHEELS:-.whl}"/*.whl || exit 1
if [ -n "${OVERLAY:-}" ] && [ -d "$OVERLAY" ]; then cp -r "$OVERLAY"/. . || exit 1; fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1

# NVIDIA's OpenCL driver: by soname when the loader can find it, else by its full path.
lib=libnvidia-opencl.so.1
if ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-opencl.so.1'; then
    found=$(find /usr/local/nvidia /usr/lib /usr/lib64 /lib -name 'libnvidia-opencl.so*' \
            2>/dev/null | head -1)
    [ -n "$found" ] && lib=$found
fi
mkdir -p /tmp/icd && echo "$lib" > /tmp/icd/nvidia.icd
cp /etc/OpenCL/vendors/*.icd /tmp/icd/ 2>/dev/null
export OCL_ICD_VENDORS=/tmp/icd
{
    date; nvidia-smi; echo "icd: $(cat /tmp/icd/*.icd)"; lscpu | head -15
    python3 -c 'import torch, numpy, pyopencl; print("torch", torch.__version__, "numpy",
numpy.__version__, "pyopencl", pyopencl.VERSION_TEXT)'
    python3 -c 'from opencl_llm_studio.engine.opencl.device import list_devices
for d in list_devices(): print(d.label(), d.opencl_version, d.compute_units, "CUs")'
} > "$OUT/gpu_env.txt" 2>&1
cat "$OUT/gpu_env.txt"

PART=${PART:-all}
# PART=setup with `source`: only the environment above (then run any benchmark by hand)
if [ "$PART" = setup ]; then return 0 2>/dev/null || exit 0; fi
if [ "$PART" = tune ]; then
    # Issue 24 goal 4: the kernel tuner's choice against the hand table on the GPU, per product,
    # then the tuner's tests on it.
    LLM_STUDIO_TEST_DEVICE=NVIDIA timeout "${TESTS_S:-200}" python3 -m pytest tests/test_gemm_tune.py \
        tests/test_gemm_split.py -q -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/gpu_tune_tests.txt"
    timeout "${TUNE_S:-360}" python3 benchmarks/bench_tune.py --device NVIDIA \
        --configs "${TUNE_CONFIGS:-S,M,L,XL}" --seconds "${TUNE_SECONDS:-30}" \
        --out "$OUT/gpu_tune.md" 2>&1 | tee "$OUT/gpu_tune_log.txt" | tail -20
    exit 0
fi
if [ "$PART" = gemm ]; then
    # The GEMM work of issue 13: registers, the GEMM tests on the GPU, GFLOP/s of every product
    # of L and XL beside torch.mm, and one profiled XL step against PyTorch eager.
    timeout 60 python3 - > "$OUT/gpu_gemm_build_log.txt" 2>&1 <<'PY'
import pyopencl as cl
from opencl_llm_studio.engine.opencl.runtime import Runtime
rt = Runtime("NVIDIA", build_options=("-cl-nv-verbose",))  # the main program, verbose log
print(rt.main.program.get_build_info(rt.device, cl.program_build_info.LOG))
PY
    grep -A4 -E "entry function 'matmul_(nn|tn)_tiled" "$OUT/gpu_gemm_build_log.txt" \
        | grep -E "entry|Used|spill"
    LLM_STUDIO_TEST_DEVICE=NVIDIA timeout 120 python3 -m pytest tests/test_kernels.py -k matmul \
        -q -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/gpu_gemm_tests.txt"
    # GEMM_SWEEP: extra kernel-benchmark runs, ';'-separated bench_kernels options
    # (e.g. "--groups-per-cu 3;--build-options=-cl-nv-maxrregcount=128"), each on XL only
    timeout "${KERNELS_S:-200}" python3 benchmarks/bench_kernels.py --device NVIDIA --no-numpy \
        --no-rowwise --torch-device cuda --configs "${GEMM_CONFIGS:-XL,L}" \
        --out "$OUT/gpu_gemm_kernels.md" > "$OUT/gpu_gemm_kernels_log.txt" 2>&1
    i=0
    IFS=';' read -ra sweep <<< "${GEMM_SWEEP:-}"
    for opts in "${sweep[@]}"; do
        i=$((i + 1))
        # shellcheck disable=SC2086  # opts holds several options
        timeout 120 python3 benchmarks/bench_kernels.py --device NVIDIA --no-numpy --no-rowwise \
            --torch-device cuda --configs XL $opts --out "$OUT/gpu_gemm_sweep_$i.md" \
            > "$OUT/gpu_gemm_sweep_${i}_log.txt" 2>&1
    done
    timeout "${BENCH_S:-240}" python3 benchmarks/bench_train.py --device NVIDIA --torch-device cuda \
        --configs "${TRAIN_CONFIGS:-XL}" --steps 20 --block 5 --budget-s 20 \
        --out "$OUT/gpu_gemm_train.md" > "$OUT/gpu_gemm_train_log.txt" 2>&1
    tail -n 3 "$OUT/gpu_gemm_kernels_log.txt" "$OUT/gpu_gemm_train_log.txt"
    exit 0
fi
if [ "$PART" != bench ]; then
# Register use and spills per kernel (NVIDIA's compiler log with -cl-nv-verbose).
timeout 60 python3 - > "$OUT/gpu_build_log.txt" 2>&1 <<'PY'
import pyopencl as cl
from opencl_llm_studio.engine.model import attention
from opencl_llm_studio.engine.opencl.runtime import Runtime
# the programs as the engine builds them (its -D options), with NVIDIA's verbose log
rt = Runtime("NVIDIA", build_options=("-cl-nv-verbose",))
info = cl.program_build_info.LOG
print("main", rt.main.program.get_build_info(rt.device, info))
print("attention.cl", attention.program(rt, 64)[0].program.get_build_info(rt.device, info))
PY
grep -A3 -E "entry function '(matmul_(nn|tn)_tiled|bmm_tiled|attention_.*_tiled)" \
    "$OUT/gpu_build_log.txt" \
    | grep -E "entry|Used|spill"
# the FlashAttention-2 kernels (attention_flash.cl) at head_dim 64 and 128
timeout 90 python3 benchmarks/flash_registers.py --device NVIDIA > "$OUT/gpu_flash_registers.txt" 2>&1
grep -E "entry|Used|spill" "$OUT/gpu_flash_registers.txt" | head -20

if [ -n "${QUALITY_TEXT:-}" ]; then
    # Issue 12's GPU goal instead of the suite: nanoGPT's GPU recipe in PyTorch against the
    # engine's gpu-discrete preset, to validation 1.47. QUALITY_TEXT: tinyshakespeare's input.txt;
    # QUALITY_SIDES (eager,compile,engine) and QUALITY_DTYPE (float32; nanoGPT's default is
    # bfloat16) choose the run. nanoGPT stops at iter 2500 (its lr schedule is unchanged;
    # validation bottoms out near 1750).
    tag=${QUALITY_DTYPE:-float32}
    timeout "${QUALITY_S:-540}" python3 benchmarks/quality_nanogpt.py --text "$QUALITY_TEXT" --recipe gpu \
        --torch-device cuda --device NVIDIA --max-iters 2500 \
        --sides "${QUALITY_SIDES:-eager,compile,engine}" --dtype "$tag" \
        --out "$OUT/quality_gpu_$tag.md" 2>&1 | tee "$OUT/quality_gpu_${tag}_log.txt"
    exit 0
fi

export LLM_STUDIO_TEST_DEVICE=NVIDIA
# Every file of benchmarks/device_tests.txt (the list the CPU implementations run; a hand list
# here once left test_activations.py's memory estimate unrun on GPUs, where it failed) and the
# GPU-only flash kernels; files that need Qt only where pytest-qt is installed. With
# pytest-xdist carried, one worker per core: NVIDIA compiles every kernel variant cold.
files=$(grep -v '^#' benchmarks/device_tests.txt)
python3 -c 'import pytestqt' 2>/dev/null || files=$(echo "$files" | grep -v test_device_kind)
workers=$(python3 -c 'import xdist' 2>/dev/null && echo "-n $(nproc)")
# shellcheck disable=SC2086  # several files and options
timeout "${TESTS_S:-300}" python3 -m pytest $files tests/test_attention_flash.py $workers -q \
    -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.txt"
# Device memory a layer adds (nvidia-smi, fresh process per point) at d384, B8, on the fused
# path (linear in T; the GEMM path, chosen where its (B,H,T,T) buffers fit, is not); then the
# steady step time of d384 L6 at T=2048 (issue 13: context 2048 at d384 must train) on each.
LLM_STUDIO_ATTENTION=fused timeout "${MEM_S:-240}" python3 benchmarks/bench_attention.py \
    memory --device NVIDIA --d-model 384 --batch 8 --contexts 256,512,1024,2048 2>&1 \
    | tee "$OUT/gpu_memory.md"
for path in fused gemm; do
    echo "attention path: $path" | tee -a "$OUT/gpu_memory.md"
    LLM_STUDIO_ATTENTION=$path timeout "${LONG_S:-90}" python3 benchmarks/bench_attention.py \
        steps --device NVIDIA --configs T2048 --steps 5 2>&1 | tee -a "$OUT/gpu_memory.md"
done
fi
if [ "$PART" != tests ]; then
for mode in eager compile; do
    flag=$([ $mode = compile ] && echo --compile)
    timeout "${BENCH_S:-420}" python3 benchmarks/bench_train.py --device NVIDIA --torch-device cuda \
        --configs S,M,L,XL --steps 30 --block 5 --budget-s 30 $flag --no-profile \
        --out "$OUT/gpu_bench_$mode.md" 2>&1 | tee "$OUT/gpu_bench_${mode}_log.txt"
done
timeout "${KERNELS_S:-90}" python3 benchmarks/bench_kernels.py --device NVIDIA \
    --torch-device cuda --configs S,M,L --out "$OUT/gpu_kernels.md" > "$OUT/gpu_kernels_log.txt" 2>&1
tail -5 "$OUT/gpu_kernels_log.txt"
fi
exit 0
