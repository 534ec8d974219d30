#!/bin/sh
# heap_gap_table.sh: bench/heap_gap.sh over the table of
# docs/benchmarks.md "Heap beyond the plan" (issue 34): gpt2, resnet18 and
# densenet-bc, fp32 and bf16, store-all and two budgets each, with the
# products on oneDNN (the default) and on OpenBLAS (REMAT_PRODUCTS=blas).
# Prints one markdown row per case: the reported step peak (bytes) and the
# gap (the heap counter's peak over the process minus that peak) in MiB,
# per products. A case a build cannot plan prints its error instead of a
# gap. Memory only: the machine's load does not change what it prints.
#
#   bench/heap_gap_table.sh [--rows gpt2,resnet18,densenet-bc]
#
# REMAT and REMAT_MEMTRACK as for bench/heap_gap.sh (an older build's
# binaries give its column). About 15 minutes on 2 cores.
set -eu
here=$(dirname "$0")
rows=gpt2,resnet18,densenet-bc
if [ "${1:-}" = "--rows" ]; then rows=$2; shift 2; fi
common="--data synthetic --steps 2 --optim sgd --threads 2"

# model options, then per precision its two budgets (between the floor and
# store-all of `remat plan --sweep --optim sgd`)
cases() {
    case $1 in
    gpt2) echo "--model gpt2 --context 128 --batch 4|fp32 1750MiB 1850MiB|bf16 1750MiB 1850MiB" ;;
    resnet18) echo "--model resnet18 --batch 8|fp32 250MiB 300MiB|bf16 220MiB 240MiB" ;;
    densenet-bc) echo "--model densenet-bc --batch 8|fp32 110MiB 200MiB|bf16 60MiB 110MiB" ;;
    *) echo "heap_gap_table: unknown row $1" >&2; exit 2 ;;
    esac
}

# the reported peak and the gap in MiB, or remat's refusal (a budget
# below that build's floor) in both cells
one() {
    out=$("$here/heap_gap.sh" -- "$@" 2>&1) || {
        printf '%s | -' "$(printf '%s\n' "$out" | grep -m 1 '^remat' | sed 's/.*smallest feasible budget is [0-9]* bytes (\([^)]*\)).*/(floor \1)/')"
        return 0
    }
    printf '%s\n' "$out" | awk '/^counter/ { printf "%s | %.1f", $4, $6 / 1048576 }'
}

echo "| model | precision | plan | reported step peak (B) | gap, oneDNN (MiB) | reported, blas (B) | gap, blas (MiB) |"
echo "|---|---|---|---|---|---|---|"
for r in $(echo "$rows" | tr , ' '); do
    spec=$(cases "$r")
    model=$(echo "$spec" | cut -d'|' -f1)
    for p in 2 3; do
        set -- $(echo "$spec" | cut -d'|' -f$p)
        prec=$1
        for plan in store-all "$2" "$3"; do
            if [ "$plan" = store-all ]; then opt=""; else opt="--budget $plan"; fi
            # shellcheck disable=SC2086
            dnnl=$(one $model --precision "$prec" $common $opt)
            # shellcheck disable=SC2086
            blas=$(REMAT_PRODUCTS=blas one $model --precision "$prec" $common $opt)
            echo "| $model | $prec | ${opt:-store-all} | $dnnl | $blas |"
        done
    done
done
