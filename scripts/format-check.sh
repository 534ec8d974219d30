#!/bin/sh
# format-check.sh: every C and CUDA file the repository tracks is formatted
# as .clang-format says, none under src/ or cli/ is over 800 lines (a
# longer file holds more than one concern: split it by them), and no two
# there share a name (POSIX sh; the C suite needs no Python).
#
#   scripts/format-check.sh            (ctest: format; $CLANG_FORMAT: the binary)
#
# Prints each file that differs, with the first lines of its diff, and
# fails. Formats differ between clang-format's major versions, so the check
# runs with the version the tree was formatted with (REMAT_CLANG_FORMAT_MAJOR
# below: Debian bookworm's) and exits 77 (ctest: skipped), saying so, with
# any other or none. Reformat a file with `clang-format -i FILE`.
REMAT_CLANG_FORMAT_MAJOR=14
cf=${CLANG_FORMAT:-clang-format}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
if [ -d .git ] || git rev-parse --git-dir >/dev/null 2>&1; then
    files=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
else
    files=$(find src cli tests include bench python -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | LC_ALL=C sort)
fi
long=0
for f in $files; do
    case $f in src/* | cli/*) ;; *) continue ;; esac
    lines=$(wc -l <"$f")
    if [ "$lines" -gt 800 ]; then
        long=$((long + 1))
        echo "$f has $lines lines (at most 800 under src/ and cli/)"
    fi
done
# no two files with one name under src/ and cli/ (a name says what a file holds)
dups=$(for f in $files; do case $f in src/* | cli/*) basename "$f" ;; esac; done | sort | uniq -d)
for d in $dups; do
    long=$((long + 1))
    echo "two files are named $d under src/ and cli/"
done
if ! command -v "$cf" >/dev/null 2>&1; then
    echo "skipped: $cf is not installed (scripts/install-deps.sh installs it)"
    [ "$long" -eq 0 ] || exit 1
    exit 77
fi
major=$("$cf" --version | sed -n 's/.*version \([0-9][0-9]*\)\..*/\1/p' | head -n 1)
if [ "$major" != "$REMAT_CLANG_FORMAT_MAJOR" ]; then
    echo "skipped: $cf is version ${major:-unknown}; the tree is formatted with version $REMAT_CLANG_FORMAT_MAJOR"
    [ "$long" -eq 0 ] || exit 1
    exit 77
fi
bad=0
n=0
for f in $files; do
    n=$((n + 1))
    if ! "$cf" --style=file "$f" | diff -u "$f" - >/tmp/format-check.$$ 2>&1; then
        bad=$((bad + 1))
        echo "$f is not formatted as .clang-format says:"
        head -n 20 /tmp/format-check.$$
    fi
done
rm -f /tmp/format-check.$$
echo "format: $bad of $n files differ from .clang-format (clang-format $major); $long over 800 lines or named twice"
[ "$bad" -eq 0 ] && [ "$long" -eq 0 ]
