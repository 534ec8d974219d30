#!/bin/sh
# heap_gap.sh: what a `remat train` run holds beyond the step peak it
# reports, measured from outside by the heap counter
# (src/memtrack/memtrack.c, preloaded: every aligned block, which is how
# oneDNN takes all its memory, and every malloc of 64 KiB or more).
#
#   bench/heap_gap.sh [--max MIB] -- remat train options...
#
# prints "counter C reported R gap G (G/2^20 MiB)", bytes: C the counter's
# peak over the whole process, R the largest per-step peak_bytes of
# --json, G = C - R: the input staging, the program's own tables, and
# whatever a library allocates outside the plan. With --max, exits 1 when
# G is over MIB MiB (the suite's heap_gap_gpt2). The binaries: $REMAT
# (default build/remat) and $REMAT_MEMTRACK (default
# build/libremat-memtrack.so); REMAT names an older build for a
# before/after comparison.
set -eu
max=
if [ "${1:-}" = "--max" ]; then max=$2; shift 2; fi
[ "${1:-}" = "--" ] && shift
remat=${REMAT:-build/remat}
memtrack=${REMAT_MEMTRACK:-build/libremat-memtrack.so}
out=$(REMAT_MEMTRACK_REPORT=1 LD_PRELOAD="$memtrack" "$remat" train --json "$@" 2>&1) || {
    printf '%s\n' "$out" >&2
    exit 1
}
printf '%s\n' "$out" | awk -v max="$max" '
    /"event":"step"/ { if (match($0, /"peak_bytes":[0-9]+/)) { v = substr($0, RSTART + 13, RLENGTH - 13) + 0; if (v > r) r = v } }
    /^memtrack: peak/ { c = $3 + 0; d = $7 }
    END {
        if (!c || !r) { print "heap_gap: no counter report or no step peak (is the counter preloaded?)"; exit 1 }
        if (d != 0) { print "heap_gap: the counter dropped blocks"; exit 1 }
        printf "counter %.0f reported %.0f gap %.0f (%.1f MiB)\n", c, r, c - r, (c - r) / 1048576
        if (max != "" && c - r > max * 1048576) {
            printf "heap_gap: the process held %.1f MiB more than its reported step peak (allowed %s MiB)\n", (c - r) / 1048576, max
            exit 1
        }
    }'
