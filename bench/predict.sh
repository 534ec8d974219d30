#!/bin/sh
# predict.sh: the cost model's predicted step time against the measured
# one, on the bench table's models at their sizes.
#
#   bench/predict.sh [REMAT] [THREADS]     (default build/remat, 2)
#
# For each row it calibrates the model's shape classes (remat calibrate
# --model ..., into a temporary file) and right after, so that both see
# the same machine load, runs remat bench with that cost model: store-all,
# manual (per-block checkpointing) and optimal at manual's held bytes, so
# each row also shows optimal against manual. Prints one line per
# strategy: predicted seconds (forward, backward, recomputation, update),
# measured median, and their ratio; the last line, the worst ratio's
# distance from 1.
set -eu
REMAT=${1:-build/remat}
THREADS=${2:-2}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
CM="$TMP/cost-model.json"

printf '%-34s %-20s %10s %10s %7s\n' "model" "strategy" "predicted" "measured" "ratio"
for row in "cnn --batch 128" "resnet18 --batch 32" "resnet50 --batch 16" "densenet-bc --batch 64" \
           "gpt2 --batch 4 --context 256" "siamese-resnet50 --batch 8"; do
    # shellcheck disable=SC2086
    set -- $row
    "$REMAT" calibrate --threads "$THREADS" --out "$CM" --model $row >/dev/null 2>&1
    held=$("$REMAT" plan --model $row --strategy manual --optim sgd --threads "$THREADS" --json |
           sed -n 's/.*"held_bytes":\([0-9]*\).*/\1/p')
    "$REMAT" bench --model $row --threads "$THREADS" --cost-model "$CM" --strategies all,manual --budget "$held" \
        --steps 3 --warmup 1 --json |
    while read -r line; do
        s=$(echo "$line" | sed -n 's/.*"strategy":"\([^"]*\)".*/\1/p')
        p=$(echo "$line" | sed -n 's/.*"predicted_step_seconds":\([0-9.e+-]*\).*/\1/p')
        m=$(echo "$line" | sed -n 's/.*"median_step_seconds":\([0-9.e+-]*\).*/\1/p')
        r=$(echo "$line" | sed -n 's/.*"predicted_over_measured":\([0-9.e+-]*\).*/\1/p')
        printf '%-34s %-20s %10.4f %10.4f %7.3f\n' "$row" "$s" "$p" "$m" "$r"
        echo "$r" >> "$TMP/ratios"
    done
done
awk '{d = $1 > 1 ? $1 - 1 : 1 - $1; if (d > w) w = d} END {printf "worst |predicted / measured - 1|: %.1f%%\n", 100 * w}' \
    "$TMP/ratios"
