#!/usr/bin/env bash
# A second OpenCL implementation in the test matrix (issue 13): Intel's CPU OpenCL runtime.
#
#   bash benchmarks/intel_cpu_opencl.sh [all|install|devices|tests|speed]    (default: all)
#
# install  pip-installs intel-opencl-rt + intel-cmplr-lib-rt (PyPI) into their own prefix,
#          $INTEL_OCL_PREFIX (default ~/.cache/llm-studio/intel-opencl, ~0.8 GB), never into the
#          project's environment, and writes $INTEL_OCL_PREFIX/icd/intel-cpu.icd naming its
#          libintelocl.so. `pip install --prefix`, not `--target`: the wheels put the libraries
#          in the prefix's lib/ as data files, which --target drops.
# devices  checks that `python -m opencl_llm_studio.studio.cli devices` lists Intel's device.
# tests    runs the kernel tests of benchmarks/device_tests.txt (kernels, attention, GEMM variants
#          and tuner, output head, model, decode, device limits) on Intel's device
#          (LLM_STUDIO_TEST_DEVICE, tests/conftest.py); pytest arguments after `tests` are passed on.
# speed    trains config S (d128 L4 H4 T64 B12 V512) through `llm-studio train` on Intel's
#          runtime and on PoCL, alternately, ROUNDS times each, and prints the median of the
#          per-step tokens_per_s of metrics.jsonl (the first WARMUP steps left out), per device.
#
# The ICD loader: OCL_ICD_VENDORS=$INTEL_OCL_PREFIX/icd. The loader bundled with pyopencl's
# wheel still lists PoCL (it also reads pyopencl's own .libs folder), so BOTH devices stay
# visible: Intel's is listed first (and so becomes the default device in this shell), and the
# speed step compares the two in one environment. Devices are always picked by name below.
#
# Environment: PYTHON (default: python3 on PATH; run from the project's venv), INTEL_OCL_PREFIX,
# STEPS (training steps per speed run, 80), WARMUP (10), ROUNDS (2).
# Results: benchmarks/RESULTS.md, "Intel's CPU OpenCL runtime".
set -euo pipefail

cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-python3}
PREFIX=${INTEL_OCL_PREFIX:-$HOME/.cache/llm-studio/intel-opencl}
INTEL="Intel(R) OpenCL"          # Intel's CPU platform (its GPU platforms add " Graphics")
POCL="Portable Computing Language"
STEPS=${STEPS:-80}
WARMUP=${WARMUP:-10}
ROUNDS=${ROUNDS:-2}
MODE=${1:-all}
shift || true

install() {
    if [ ! -e "$PREFIX/lib/libintelocl.so" ]; then
        "$PYTHON" -m pip install --quiet --prefix "$PREFIX" intel-opencl-rt intel-cmplr-lib-rt
    fi
    mkdir -p "$PREFIX/icd"
    echo "$PREFIX/lib/libintelocl.so" > "$PREFIX/icd/intel-cpu.icd"
    echo "Intel CPU OpenCL runtime in $PREFIX:" \
        $(cd "$PREFIX"/lib/python*/site-packages && ls -d intel_*.dist-info | sed 's/.dist-info//')
}

use_intel() {
    [ -e "$PREFIX/icd/intel-cpu.icd" ] || install
    export OCL_ICD_VENDORS="$PREFIX/icd"
}

devices() {
    use_intel
    local listing
    listing=$("$PYTHON" -m opencl_llm_studio.studio.cli devices)
    echo "$listing"
    grep -q "$INTEL" <<<"$listing" \
        || { echo "Intel's CPU device is not listed: see $PREFIX/icd/intel-cpu.icd" >&2; exit 1; }
}

tests() {
    use_intel
    LLM_STUDIO_TEST_DEVICE="$INTEL" QT_QPA_PLATFORM=offscreen "$PYTHON" -m pytest -q \
        -p no:cacheprovider -W ignore::UserWarning \
        $(grep -v '^#' benchmarks/device_tests.txt) "$@"
}

# Median tokens_per_s of one run folder's metrics.jsonl, the first WARMUP steps left out.
median_tps() {
    "$PYTHON" - "$1" "$WARMUP" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1] + "/metrics.jsonl")]
tps = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r][int(sys.argv[2]):]
print(f"{statistics.median(tps):.0f}")
EOF
}

speed() {
    use_intel
    local out
    out=$(mktemp -d)
    declare -A all=()
    for round in $(seq "$ROUNDS"); do
        for dev in "$INTEL" "$POCL"; do
            rm -rf "$out/run"
            "$PYTHON" -m opencl_llm_studio.studio.cli train --out "$out/run" --device "$dev" --no-tune \
                --steps "$STEPS" --d-model 128 --n-layer 4 --n-head 4 --context-length 64 \
                --batch-size 12 --vocab-size 512 --checkpoint-every 0 --quiet 2>/dev/null >/dev/null
            tps=$(median_tps "$out/run")
            echo "round $round  $dev: $tps tok/s"
            all[$dev]="${all[$dev]:-} $tps"
        done
    done
    rm -rf "$out"
    "$PYTHON" - "${all[$INTEL]}" "${all[$POCL]}" <<'EOF'
import statistics, sys
intel, pocl = (statistics.median(map(float, a.split())) for a in sys.argv[1:3])
print(f"S (d128 L4 T64 B12 V512): Intel {intel:.0f} tok/s, PoCL {pocl:.0f} tok/s, "
      f"Intel/PoCL {intel / pocl:.2f}")
EOF
}

case "$MODE" in
    install) install ;;
    devices) devices ;;
    tests) tests "$@" ;;
    speed) speed ;;
    all) install; devices; tests; speed ;;
    *) echo "usage: $0 [all|install|devices|tests|speed]" >&2; exit 2 ;;
esac
