#!/bin/sh
# The bundle's `ld`, for PoCL's final link of a compiled kernel into a shared object on a
# machine without a C toolchain (no binutils, libc6-dev or gcc). It runs the GNU ld copied from
# the build machine (beside this script's lib/ folder) without the C runtime libraries the
# compiler driver names (-lc, -lgcc, -lgcc_s and their -L folders): a kernel's .so needs none of
# them at link time, and what it calls (memcpy, memset) resolves when PoCL loads it, from the
# process, which has them loaded already (-shared allows undefined symbols).
here=$(dirname "$(readlink -f "$0")")
for a do
    shift
    case $a in
        -lc|-lgcc|-lgcc_s|--as-needed|--no-as-needed|-L*) ;;
        *) set -- "$@" "$a" ;;
    esac
done
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/../lib/ld.bfd" "$@"
