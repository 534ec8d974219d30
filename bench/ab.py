#!/usr/bin/python3
"""Two remat binaries side by side: is a change slower?

    /usr/bin/python3 bench/ab.py BEFORE/remat AFTER/remat [--rounds 2] [--threads 2]
        [--rows cnn,resnet50,densenet-bc,gpt2] [--strategies all,sqrt]

Runs `remat bench` of each binary on the bench table's rows (cnn b128,
resnet50 b16, densenet-bc b64, gpt2 context 256 b4), alternating the two
round by round (before first in odd rounds, after first in even ones), and
prints per row and strategy the median over rounds of each binary's median
step time and their ratio after/before, with every round's figure. On a
shared machine the same binary moves by 10-30% between minutes: use
several rounds, and read ratios, not absolute times.
"""
import argparse
import json
import statistics
import subprocess
import sys

ROWS = {"cnn": ("cnn", 128, 5, []), "resnet50": ("resnet50", 16, 3, []), "densenet-bc": ("densenet-bc", 64, 3, []),
        "gpt2": ("gpt2", 4, 3, ["--context", "256"])}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--strategies", default="all,sqrt")
    a = ap.parse_args()
    res = {}
    rows = a.rows.split(",")
    for name in rows:
        model, batch, steps, extra = ROWS[name]
        for rnd in range(a.rounds):
            pair = (("before", a.before), ("after", a.after))
            for tag, binary in pair if rnd % 2 == 0 else pair[::-1]:
                print(f"[{name}] round {rnd + 1}/{a.rounds}: {tag}", file=sys.stderr, flush=True)
                cmd = [binary, "bench", "--model", model, "--batch", str(batch), *extra, "--threads", str(a.threads),
                       "--steps", str(steps), "--warmup", "1", "--strategies", a.strategies, "--json"]
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode:
                    sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
                for line in p.stdout.splitlines():
                    if line.startswith("{"):
                        r = json.loads(line)
                        res.setdefault((name, r["strategy"], tag), []).append(r["median_step_seconds"])
    print(f"{'row':12} {'strategy':8} {'before s':>9} {'after s':>9} {'after/before':>12}  rounds (before; after)")
    for name in rows:
        for s in a.strategies.split(","):
            b, n = res.get((name, s, "before")), res.get((name, s, "after"))
            if b and n:
                mb, mn = statistics.median(b), statistics.median(n)
                print(f"{name:12} {s:8} {mb:9.3f} {mn:9.3f} {mn / mb:12.3f}  "
                      f"{', '.join('%.3f' % x for x in b)}; {', '.join('%.3f' % x for x in n)}")


if __name__ == "__main__":
    main()
