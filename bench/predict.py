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
manual's (median of the rounds' ratios). The last lines count the rows
whose median ratio is within 10% of 1 and name the worst.

A second figure, "plan vs all", takes the machine's speed out: per round,
a plan's predicted time over store-all's predicted time, divided by the
same ratio measured (1: the model prices the plan's extra work exactly).
It is what the planner's choices depend on, and it needs no calibration
taken at the bench's moment.

On a shared machine the same step moves by 10-80% between minutes (a
convolution's forward measured 1.68 s and 1.00 s in two calibrations two
minutes apart), and a calibration taken in a slow minute predicts high
for a fast one: one round's ratio is not a measurement of the model's
accuracy; the median over rounds is, when the rounds sample the machine's
states evenly. `--from FILE` prints the table again from a run's --json.
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
    ap.add_argument("--from", dest="src", help="print the table of an earlier run's --json file; run nothing")
    a = ap.parse_args()
    if a.src:
        with open(a.src) as f:
            res = json.load(f)
        names = list(res)
    else:
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
    print("%-18s %-9s %10s %10s %7s %13s %9s %13s %9s" % ("row", "strategy", "predicted", "measured", "ratio",
                                                        "range", "plan/all", "range", "vs manual"), flush=True)
    worst, worst_row, within, total = 0.0, "", 0, 0
    rworst, rworst_row, rwithin, rtotal = 0.0, "", 0, 0
    for n in names:
        for s in res[n][0]:
            pr = [r[s][0] for r in res[n]]
            me = [r[s][1] for r in res[n]]
            ratios = [p / m for p, m in zip(pr, me)]
            med = statistics.median(ratios)
            rel, rrange, vs = "", "", ""
            if s != "all" and "all" in res[n][0]:
                rr = [(r[s][0] / r["all"][0]) / (r[s][1] / r["all"][1]) for r in res[n]]
                rmed = statistics.median(rr)
                rel, rrange = "%.3f" % rmed, "%.3f-%.3f" % (min(rr), max(rr))
                rtotal += 1
                rwithin += abs(rmed - 1) <= 0.10
                if abs(rmed - 1) > rworst:
                    rworst, rworst_row = abs(rmed - 1), "%s %s" % (n, s.split("@")[0])
            if s.startswith("optimal") and "manual" in res[n][0]:
                vs = "%.3f" % statistics.median(r[s][1] / r["manual"][1] for r in res[n])
            print("%-18s %-9s %10.4f %10.4f %7.3f %13s %9s %13s %9s" % (
                n, s.split("@")[0], statistics.median(pr), statistics.median(me), med,
                "%.3f-%.3f" % (min(ratios), max(ratios)), rel, rrange, vs))
            total += 1
            within += abs(med - 1) <= 0.10
            if abs(med - 1) > worst:
                worst, worst_row = abs(med - 1), "%s %s" % (n, s.split("@")[0])
    rounds = len(res[names[0]])
    print("median ratio within 10%%: %d of %d rows; worst %.1f%% (%s); %d rounds" % (within, total, 100 * worst,
                                                                                  worst_row, rounds))
    if rtotal:
        print("plan vs all within 10%%: %d of %d rows; worst %.1f%% (%s)" % (rwithin, rtotal, 100 * rworst,
                                                                           rworst_row))


if __name__ == "__main__":
    main()
