#!/usr/bin/env bash
# Runs the commands a Markdown page shows, so that the docs stay true.
#
# usage: doc_test.sh PAGE.md BUILD_DIR SOURCE_DIR WORK_DIR
#
# Every fenced block tagged ```sh runs, in order, in WORK_DIR (fresh for
# the page), where `build` is BUILD_DIR, `tests`, `scripts` and `bench` are
# the source tree's, and `remat` on the PATH is the build's. In a block
# whose lines start with "$ ", those lines are the commands (a line ending
# in "\" continues on the next) and the others are the output shown; in a
# block without them, every line is a command. Each command must exit 0.
# Comments just above a block steer its test (GitHub does not show them):
#   <!-- test: skip WHY -->    not run (needs several hosts, a GPU, hours)
#   <!-- test: args ARGS -->   ARGS appended to each command that runs remat
#                              (reduced sizes; the page says so)
#   <!-- test: expect ERE -->  a line of the block's output must match ERE
#                              (grep -E); one comment per line that matters
#   <!-- test: rc N -->        the block's last command must exit N
#   <!-- test: setup CMD -->   CMD runs before the block (a file it reads)
# Other fences (```c, ```json, ```text, indented blocks) are not run.
set -uo pipefail
page=$1 build=$2 src=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
ln -s "$build" "$work/build"
for d in tests scripts bench; do ln -s "$src/$d" "$work/$d"; done
mkdir -p "$work/.bin" && ln -s "$build/remat" "$work/.bin/remat"
export PATH="$work/.bin:$PATH" OPENBLAS_NUM_THREADS=1
# mpirun as root (containers) and more ranks than cores, as tests/dist.cmake
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

failures=0 blocks=0 skipped=0
skip="" args="" rc_want="" setup=() expects=()
in_block=0 lineno=0 block_start=0 block=()

fail() { echo "FAIL ($page:$block_start): $*"; failures=$((failures + 1)); }

run_block() {
  local cmds=() has_prompt=0 cur="" l
  for l in "${block[@]}"; do [[ $l == '$ '* ]] && has_prompt=1; done
  local cont=0
  for l in "${block[@]}"; do
    if ((cont)); then cur+=" ${l#"${l%%[![:space:]]*}"}";
    elif ((has_prompt)); then [[ $l == '$ '* ]] || continue; cur=${l#'$ '};
    else [[ -n ${l//[[:space:]]/} ]] || continue; cur=$l; fi
    if [[ $cur == *'\' ]]; then cur=${cur%'\'}; cont=1; continue; fi
    cont=0; cmds+=("$cur")
  done
  if [[ -n $skip ]]; then
    echo "-- $page:$block_start skipped: $skip"; skipped=$((skipped + 1)); return
  fi
  blocks=$((blocks + 1))
  local out="$work/.block-$block_start.log" s rc=0 i=0 n=${#cmds[@]}
  : > "$out"
  for s in "${setup[@]}"; do (cd "$work" && bash -c "$s") >> "$out" 2>&1 || fail "setup failed: $s"; done
  for s in "${cmds[@]}"; do
    i=$((i + 1))
    [[ -n $args && $s =~ (^|[[:space:]/])remat[[:space:]] ]] && s="$s $args"
    echo "\$ $s" >> "$out"
    (cd "$work" && timeout 900 bash -c "$s") >> "$out" 2>&1
    rc=$?
    if ((i < n)) && ((rc != 0)); then fail "exit status $rc: $s"; fi
  done
  if ((rc != ${rc_want:-0})); then fail "exit status $rc, not ${rc_want:-0}: ${cmds[n-1]}"; fi
  local e
  for e in "${expects[@]}"; do
    grep -Eq -- "$e" "$out" || fail "no output line matches: $e"
  done
  echo "-- $page:$block_start"; cat "$out"
}

while IFS= read -r line || [[ -n $line ]]; do
  lineno=$((lineno + 1))
  if ((in_block)); then
    if [[ $line == '```'* ]]; then
      in_block=0; run_block
      skip="" args="" rc_want="" setup=() expects=()
    else block+=("$line"); fi
    continue
  fi
  if [[ $line =~ ^\<!--\ test:\ ([a-z]+)\ ?(.*)\ --\>$ ]]; then
    v=${BASH_REMATCH[2]}
    case ${BASH_REMATCH[1]} in
      skip) skip=${v:-skipped} ;;
      args) args=$v ;;
      expect) expects+=("$v") ;;
      rc) rc_want=$v ;;
      setup) setup+=("$v") ;;
      *) echo "FAIL ($page:$lineno): unknown test comment: $line"; failures=$((failures + 1)) ;;
    esac
  elif [[ $line == '```sh' ]]; then
    in_block=1 block=() block_start=$lineno
  elif [[ $line == '```'* ]]; then
    # another language: not run; what steered a test must not leak to the next block
    skip="" args="" rc_want="" setup=() expects=()
    while IFS= read -r line && [[ $line != '```'* ]]; do lineno=$((lineno + 1)); done
    lineno=$((lineno + 1))
  fi
done < "$page"

echo "$page: $blocks blocks run, $skipped skipped, $failures failures"
((failures == 0))
