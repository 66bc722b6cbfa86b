#!/usr/bin/env bash
# Launch to a usable window: `llm-studio --screenshot PNG` opens the window offscreen and exits
# as soon as the event loop is first idle with it shown (studio.ui.app.run_app), so its wall time
# is the start-up a person waits for (plus a few ms to write the PNG and close).
#   bash benchmarks/startup.sh [BUNDLE]   the venv's llm-studio (PATH), and BUNDLE/llm-studio
# Cold: the page cache dropped first (needs root; said when not possible). Warm: 3 runs after.
set -euo pipefail
export QT_QPA_PLATFORM=offscreen
shot=$(mktemp --suffix=.png)
trap 'rm -f "$shot"' EXIT

drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; }
once() { local t0 t1; t0=$(date +%s.%N); "$@" --screenshot "$shot" >/dev/null 2>&1; t1=$(date +%s.%N)
         printf "%.2f" "$(echo "$t1 - $t0" | bc)"; }

measure() {
    local name=$1; shift
    local cold="not measured (cannot drop the page cache here)"
    if drop; then cold="$(once "$@") s"; fi
    local warm=()
    for _ in 1 2 3; do warm+=("$(once "$@")"); done
    printf '%-8s cold %s; warm %s s\n' "$name" "$cold" "$(IFS=/; echo "${warm[*]}")"
}

measure venv llm-studio
if [ $# -ge 1 ]; then measure bundle env -i HOME="$HOME" QT_QPA_PLATFORM=offscreen "$1/llm-studio"; fi
