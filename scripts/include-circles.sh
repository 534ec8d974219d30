#!/bin/sh
# include-circles.sh: the circles between the files of src/ and cli/
# (POSIX sh + awk + nm: the C suite needs no Python).
#
#   scripts/include-circles.sh [BUILD_DIR]     ($NM: the nm to use)
#
# Two graphs, each node named folder/basename (src/ dropped):
#
# - includes: a node is a module, a .c and the .h of the same basename in
#   one folder (src/plan/memplan.c and src/plan/memplan.h are plan/memplan:
#   a header is the promise its .c keeps), with its private -impl.h
#   (plan/dtr-impl.h is plan/dtr's). An edge is an `#include "..."`,
#   resolved as the compiler does: beside the including file, then under
#   src/, then under include/.
# - calls (when BUILD_DIR is given): a node is a .c file, and an edge a -> b
#   says a's object uses a symbol b's object defines (`nm`, on the objects
#   of the library and the CLI under BUILD_DIR/CMakeFiles). A header shared
#   by several .c files hides these from the include graph: files that call
#   each other through session.h are a circle here.
#
# Every strongly connected component of more than one node is a circle; the
# script prints each on one line and fails when a graph has more circles
# than allowed below, or any circle whose files lie in more than one
# folder.
#
# Known circles (2026-11-28, CUDA, MPI and oneDNN on), none in the folders
# this check was written to keep clean (plan/, exec/, session/, cli/,
# models/, dist/; each had one or two, broken by moving code to where it
# belongs; exec/ was split by role into exec/, session/, cpu/, dist/'s
# dp_*.c and api/ on 2026-11-28 with no new circle):
#   includes: none
#   calls:    the op table and the ops (ops/optable, ops/<op>): the table
#             names each op's entry, and an op's messages name its node
#             with remat__node_label, which reads the op's name from the
#             table; one folder.
# Broken on 2026-11-28: the op table's circle across src/ops, src/graph and
# src/cuda (25 files: the builders moved to graph/, the shape's words to
# core/format.c, a kernel's context carries its op, so the CUDA kernels
# call neither the graph nor the table), cuda/'s backend and its kernels
# (their shared checks moved to cuda/kernel_common.cu) and oneDNN's context
# and its primitives (ops/dnnl_prim.c).
ALLOWED_INCLUDES=0
ALLOWED_CALLS=1

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-}
cd "$root" || exit 2

# circles NAME ALLOWED: reads "from to" edge lines, prints the circles
circles() {
    awk -v graph="$1" -v allowed="$2" '
    { nodes[$1] = 1; nodes[$2] = 1; if ($1 != $2) edge[$1, $2] = 1 }
    END {
        n = 0
        for (v in nodes) name[++n] = v
        for (i = 2; i <= n; i++) {  # sort the names
            t = name[i]
            for (j = i - 1; j >= 1 && name[j] > t; j--) name[j + 1] = name[j]
            name[j + 1] = t
        }
        for (i = 1; i <= n; i++) id[name[i]] = i
        for (key in edge) {
            split(key, ab, SUBSEP)
            reach[id[ab[1]], id[ab[2]]] = 1
        }
        # transitive closure (Warshall): i and j share a circle when each
        # reaches the other
        for (k = 1; k <= n; k++)
            for (i = 1; i <= n; i++) {
                if (!((i, k) in reach)) continue
                for (j = 1; j <= n; j++)
                    if ((k, j) in reach) reach[i, j] = 1
            }
        count = 0; across = 0
        for (i = 1; i <= n; i++) {
            if (i in done || !((i, i) in reach)) continue
            line = name[i]
            size = 1
            done[i] = 1
            for (j = i + 1; j <= n; j++)
                if (!(j in done) && (i, j) in reach && (j, i) in reach) {
                    line = line " " name[j]
                    size++
                    done[j] = 1
                }
            count++
            # the folders it spans (a node is folder/basename)
            split(line, members, " ")
            nf = 0
            delete seen
            for (m in members) {
                f = members[m]
                sub(/\/.*/, "", f)
                if (!(f in seen)) { seen[f] = 1; nf++ }
            }
            if (nf > 1) across++
            printf "%s circle %d (%d files%s): %s\n", graph, count, size, (nf > 1 ? ", ACROSS FOLDERS" : ""), line
        }
        printf "%s: %d circle(s), %d allowed; %d across folders, none allowed\n", graph, count, allowed, across
        exit (count > allowed || across > 0) ? 1 : 0
    }'
}

files=$(find src cli -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | LC_ALL=C sort)
[ -n "$files" ] || { echo "include-circles: no sources under $root/src, $root/cli" >&2; exit 2; }

# shellcheck disable=SC2086
awk '
function node(path,   n) {
    n = path
    sub(/^src\//, "", n)
    sub(/\.(c|h|cu|cuh)$/, "", n)
    sub(/-impl$/, "", n)
    return n
}
function exists(p,   line, r) {
    if (p in known) return known[p]
    r = (getline line < p) >= 0
    close(p)
    known[p] = r
    return r
}
function normal(p,   parts, n, i, k, out, stack) {  # a/b/../c -> a/c
    n = split(p, parts, "/")
    k = 0
    for (i = 1; i <= n; i++) {
        if (parts[i] == "." || parts[i] == "") continue
        if (parts[i] == ".." && k > 0 && stack[k] != "..") { k--; continue }
        stack[++k] = parts[i]
    }
    out = ""
    for (i = 1; i <= k; i++) out = out (i > 1 ? "/" : "") stack[i]
    return out
}
FNR == 1 {
    dir = FILENAME
    sub(/\/[^\/]*$/, "", dir)
    from = node(FILENAME)
}
/^[ \t]*#[ \t]*include[ \t]*"/ {
    inc = $0
    sub(/^[^"]*"/, "", inc)
    sub(/".*$/, "", inc)
    if (exists(normal(dir "/" inc))) target = normal(dir "/" inc)
    else if (exists("src/" inc)) target = "src/" inc
    else if (exists("include/" inc)) target = "include/" inc
    else next
    print from, node(target)
}' $files | circles includes $ALLOWED_INCLUDES
rc=$?

if [ -n "$build" ]; then
    objdir=$build/CMakeFiles
    objs=$(find "$objdir/remat_objects.dir" "$objdir/remat-cli.dir" -name '*.o' 2>/dev/null | LC_ALL=C sort)
    if [ -z "$objs" ]; then
        echo "include-circles: no objects under $objdir/remat_objects.dir, remat-cli.dir (build first)" >&2
        exit 2
    fi
    for o in $objs; do
        src=${o#"$objdir"/*.dir/}
        src=${src%.o}
        # an object left by a source since moved or removed is not the library's
        [ -f "$src" ] || continue
        n=${o#"$objdir"/*.dir/}
        n=${n#src/}
        n=${n%.o}
        n=${n%.*}
        ${NM:-nm} "$o" | awk -v n="$n" '$1 == "U" { print "U", n, $2 } NF == 3 && $2 ~ /^[TDBRVW]$/ { print "D", n, $3 }'
    done | awk '
        $1 == "D" { def[$3] = $2 }
        $1 == "U" { use[$2, $3] = 1 }
        END { for (k in use) { split(k, a, SUBSEP); if (a[2] in def) print a[1], def[a[2]] } }' |
        circles calls $ALLOWED_CALLS || rc=1
fi
exit $rc
