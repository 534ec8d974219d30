#!/usr/bin/python3
"""The cost model's predicted step time against the measured one.

    /usr/bin/python3 bench/predict.py [--remat build/remat] [--threads 2]
        [--rounds 3] [--rows cnn,resnet18,...] [--json FILE]

For each of the bench table's rows (cnn b128, resnet18 b32, resnet50 b16,
densenet-bc b64, gpt2 context 256 b4, siamese-resnet50 b8) and in each
round: `remat calibrate --model ...` into a fresh file, then right after
(so that both see the same machine) `remat bench` with that cost model:
store-all, manual (per-block checkpointing) and optimal at manual's held
bytes. Per row and strategy it prints the median over rounds of the
predicted and of the measured step time, the median of the rounds'
predicted/measured ratios with their range, and optimal's time over
manual's (median of the rounds' ratios). The last line counts the rows
whose median ratio is within 10% of 1 and names the worst.

On a shared machine the same step moves by 10-30% between minutes, and a
calibration taken in a slow minute predicts high for a fast one: one
round's ratio is not a measurement of the model's accuracy; the median
over rounds is.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROWS = {  # the model's options; cnn's step is short: more steps
    "cnn": ["--model", "cnn", "--batch", "128"],
    "resnet18": ["--model", "resnet18", "--batch", "32"],
    "resnet50": ["--model", "resnet50", "--batch", "16"],
    "densenet-bc": ["--model", "densenet-bc", "--batch", "64"],
    "gpt2": ["--model", "gpt2", "--batch", "4", "--context", "256"],
    "siamese-resnet50": ["--model", "siamese-resnet50", "--batch", "8"],
}


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode:
        sys.exit("failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr[-2000:]))
    return p.stdout


def one_round(a, name, model, cm):
    th = ["--threads", str(a.threads)]
    run([a.remat, "calibrate", "--out", cm] + th + model)
    plan = json.loads(run([a.remat, "plan", "--strategy", "manual", "--optim", "sgd", "--json"] + th + model))
    held = str(plan["held_bytes"])
    steps = a.steps * 3 if name == "cnn" else a.steps
    out = run([a.remat, "bench", "--cost-model", cm, "--strategies", "all,manual", "--budget", held, "--steps",
               str(steps), "--warmup", "1", "--json"] + th + model)
    rows = {}
    for line in out.splitlines():
        r = json.loads(line)
        rows[r["strategy"]] = (r["predicted_step_seconds"], r["median_step_seconds"])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--remat", default="build/remat")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per bench row (cnn: 3x)")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--json", help="also write every round's figures here")
    a = ap.parse_args()
    names = a.rows.split(",")
    for n in names:
        if n not in ROWS:
            sys.exit("unknown row '%s' (known: %s)" % (n, ", ".join(ROWS)))
    res = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            for n in names:
                cm = os.path.join(tmp, "cost-model-%s-%d.json" % (n, rnd))
                res[n].append(one_round(a, n, ROWS[n], cm))
                print("round %d/%d: %s done" % (rnd + 1, a.rounds, n), file=sys.stderr, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    print("%-18s %-10s %10s %10s %7s %15s %9s" % ("row", "strategy", "predicted", "measured", "ratio", "rounds' range",
                                                 "vs manual"), flush=True)
    worst, worst_row, within, total = 0.0, "", 0, 0
    for n in names:
        for s in res[n][0]:
            pr = [r[s][0] for r in res[n]]
            me = [r[s][1] for r in res[n]]
            ratios = [p / m for p, m in zip(pr, me)]
            med = statistics.median(ratios)
            vs = ""
            if s.startswith("optimal") and "manual" in res[n][0]:
                vs = "%.3f" % statistics.median(r[s][1] / r["manual"][1] for r in res[n])
            print("%-18s %-10s %10.4f %10.4f %7.3f %7.3f-%.3f %9s" % (n, s.split("@")[0], statistics.median(pr),
                                                                     statistics.median(me), med, min(ratios),
                                                                     max(ratios), vs))
            total += 1
            within += abs(med - 1) <= 0.10
            if abs(med - 1) > worst:
                worst, worst_row = abs(med - 1), "%s %s" % (n, s.split("@")[0])
    print("median ratio within 10%%: %d of %d rows; worst %.1f%% (%s); %d rounds" % (within, total, 100 * worst,
                                                                                  worst_row, a.rounds))


if __name__ == "__main__":
    main()
