#!/usr/bin/env bash
# benchmarks/quality.py split into runs pinned to their own CPUs, several at a time, on a machine
# with many idle cores (the lent GPU machine's host): each run gets THREADS logical CPUs of its
# own (distinct physical cores when the machine has SMT siblings numbered i and i + N/2), so every
# side sees a quiet 2-core machine. Usage: OUT=dir TEXTS="code prose shakespeare=PATH"
# [THREADS=2] [JOBS=4] [ENGINE_S=60] [SCRIPT_S=60,120] [SIDES="engine-char script-bpe"]
# bash benchmarks/quality_parallel.sh
set -u
OUT=${OUT:-/tmp/quality}; THREADS=${THREADS:-2}; JOBS=${JOBS:-4}
ENGINE_S=${ENGINE_S:-60}; SCRIPT_S=${SCRIPT_S:-60,120}
mkdir -p "$OUT"
lscpu > "$OUT/lscpu.txt"
specs=()
for t in ${TEXTS:-code prose}; do
    for side in ${SIDES:-engine-char engine-bpe script-char script-bpe}; do specs+=("$t|$side"); done
done
slot=0; i=0
for spec in "${specs[@]}"; do
    text=${spec%%|*}; side=${spec##*|}; name=${text%%=*}
    first=$((slot * THREADS)); cpus=$(seq -s, "$first" $((first + THREADS - 1)))
    extra=(); [ "$name" != "$text" ] && extra=(--text "$text")
    taskset -c "$cpus" python3 benchmarks/quality.py --only "$name" --sides "$side" \
        --engine-seconds "$ENGINE_S" --script-seconds "$SCRIPT_S" --threads "$THREADS" \
        "${extra[@]}" --out "$OUT/q-$name-$side.md" > "$OUT/log-$name-$side.txt" 2>&1 &
    i=$((i + 1)); slot=$(((slot + 1) % JOBS))
    [ $((i % JOBS)) -eq 0 ] && wait
done
wait
cat "$OUT"/q-*.md | grep -E '^\| [a-z]' | sort -u > "$OUT/rows.txt"
cat "$OUT/rows.txt"
