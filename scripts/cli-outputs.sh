#!/usr/bin/env bash
# cli-outputs.sh: the README's commands (at the reduced sizes its doc test
# uses) run by two builds of `remat`, and their outputs compared with the
# times masked (img/s, seconds): what a refactoring must leave unchanged.
#
#   scripts/cli-outputs.sh OLD_REMAT NEW_REMAT     (e.g. ../old/build/remat build/remat)
#
# Prints each command's differing lines, and a last line with how many of
# the commands differ; exits 1 if any does. Then trains three small runs
# with each build and compares the weights they save, byte for byte
# (safetensors: the bits of every trained parameter).
set -uo pipefail
old=$(realpath "$1") new=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cmds=(
    "train --model cnn --data fashion-mnist --epochs 1 --budget 64MiB --train-limit 512 --test-limit 200"
    "plan --model resnet50 --batch 16 --budget 1GiB"
    "plan --model resnet50 --budget 1GiB --max-batch"
    "plan --model resnet50 --batch 16 --precision bf16"
    "train --model cnn --train-limit 1024 --test-limit 500 --batch 32 --state-dir run1 --save-every 10"
    "train --model cnn --train-limit 1024 --test-limit 500 --batch 32 --resume run1 --epochs 2 --budget 45MiB"
    "MPI train --model cnn --batch 64 --micro-batch 16 --threads 1 --train-limit 256 --test-limit 100"
    "plan --model gpt2 --batch 4 --budget 100MiB"
    "info"
)
# runs whose saved weights must be the same bits
weights=(
    "train --model cnn --train-limit 512 --test-limit 100 --batch 32 --budget 46MiB"
    "train --model cnn --train-limit 512 --test-limit 100 --batch 32 --budget 38MiB --precision bf16"
    "train --model gpt2 --layers 2 --embd 64 --heads 4 --context 32 --vocab 256 --data synthetic --steps 4 --batch 4 --budget 4MiB"
    "train --model densenet-bc --data synthetic --steps 3 --batch 8 --precision bf16 --budget 40MiB"
)
mask() { sed -E 's/[0-9]+ img\/s/N img\/s/g; s/[0-9]+(\.[0-9]+)? s\b/T s/g'; }
run() { # run BIN DIR
    mkdir -p "$2" && cd "$2" || exit 2
    for i in "${!cmds[@]}"; do
        c=${cmds[$i]}
        if [[ $c == MPI* ]]; then
            # shellcheck disable=SC2086
            mpirun --oversubscribe -np 2 "$1" ${c#MPI } >"$i.txt" 2>&1
        else
            # shellcheck disable=SC2086
            "$1" $c >"$i.txt" 2>&1
        fi
        echo "exit status $?" >>"$i.txt"
    done
    for i in "${!weights[@]}"; do
        # shellcheck disable=SC2086
        "$1" ${weights[$i]} --save "w$i.safetensors" >"w$i.txt" 2>&1 || echo "exit status $?" >>"w$i.txt"
    done
}
(run "$old" "$work/old")
(run "$new" "$work/new")
differ=0
for i in "${!cmds[@]}"; do
    if ! d=$(diff <(mask <"$work/old/$i.txt") <(mask <"$work/new/$i.txt")); then
        differ=$((differ + 1))
        echo "== remat ${cmds[$i]#MPI }: differs"
        echo "$d" | head -n 20
    fi
done
bits=0
for i in "${!weights[@]}"; do
    if ! cmp -s "$work/old/w$i.safetensors" "$work/new/w$i.safetensors"; then
        bits=$((bits + 1))
        echo "== remat ${weights[$i]}: the saved weights differ (or one is missing)"
        tail -n 3 "$work/old/w$i.txt" "$work/new/w$i.txt"
    fi
done
echo "cli-outputs: $differ of ${#cmds[@]} commands differ (times masked); $bits of ${#weights[@]} trained weights differ in a bit"
[ "$differ" -eq 0 ] && [ "$bits" -eq 0 ]
