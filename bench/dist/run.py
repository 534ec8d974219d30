#!/usr/bin/python3
"""The data-parallel table of issue 11, measured in one run.

    /usr/bin/python3 bench/dist/run.py [--remat build/remat] [--model densenet-bc] [--batch 64]
        [--steps 3] [--warmup 1] [--rounds 3] [--python /work/venv-torch/bin/python] [--no-torch] [--json FILE]

For the model at the global batch, every method on every configuration:

  methods   all      no checkpointing
            manual   every block checkpointed, as PyTorch users do it
                     (the model's remat_checkpoint marks)
            optimal  a budget keeping about a quarter of `all`'s
                     activations: all's bytes held less 3/4 of its
                     activations, on that configuration
  configs   1 rank x 2 threads, 1 rank x 1 thread   remat bench
            2 ranks x 1 thread                       mpirun -np 2 remat bench
                     (micro-batches of batch/2, one per rank), with the
                     reductions overlapping the backward pass, and again
                     with --no-overlap

The three methods of a configuration run in one invocation (each one's
overhead is against the `all` run beside it), every configuration once
per round, in reversed order every other round; the table gives medians
over --rounds rounds (this machine's step times move by 10-20% between
runs).

It prints memory per rank (bytes held: arena, parameters, gradients,
optimizer state and communication buffers), the step time (median; the
slowest rank's under mpirun), the overhead against `all` on the same
configuration, then the ratios the issue asks for: optimal's overhead on 2
ranks against on 1 rank (percentage points), the throughput of 2 ranks x 1
thread over 1 rank x 1 thread, and the share of the reduction time hidden
behind the backward pass: 1 - exposed with overlap / exposed without,
where exposed is the time the reductions still take after the last rank's
backward pass has ended (remat_dist_info.exposed_seconds; the rest of a
rank's wait after its own backward pass is skew, waiting for the slowest
rank, which no overlap can hide).
Beside it, PyTorch DDP (gloo) on 2 processes x 1 thread, with and without
torch.utils.checkpoint, from remat's initial weights (bench/torch/
ddp_bench.py; --no-torch leaves it out).

Everything runs on this machine, one job at a time; on a small shared
machine, time varies from run to run: compare ratios measured in one run.
"""
import argparse
import json
import statistics
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(cmd, what):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not rows:
        sys.exit(f"{what} failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
    return rows


def remat_rows(a, ranks, threads, strategies, budget=None, extra=(), steps=None):
    """remat bench's JSON rows: the strategies, and optimal at the budget."""
    cmd = ([] if ranks == 1 else ["mpirun", "--oversubscribe", "-np", str(ranks)]) + [
        a.remat, "bench", "--model", a.model, "--batch", str(a.batch), "--threads", str(threads),
        "--steps", str(steps or a.steps), "--warmup", str(a.warmup if steps is None else 0), "--json",
        "--strategies", strategies]
    if budget:
        cmd += ["--budget", str(budget)]
    return run(cmd + list(extra), f"remat bench ({ranks} x {threads})")


def mib(b):
    return f"{b / 1048576:.1f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--remat", default=os.path.join(ROOT, "build", "remat"))
    ap.add_argument("--model", default="densenet-bc")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--python", default="/work/venv-torch/bin/python")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()

    configs = ((1, 2), (1, 1), (2, 1))
    name = lambda ranks, threads: (f"{ranks} rank{'s' if ranks > 1 else ''} x "
                                   f"{threads} thread{'s' if threads > 1 else ''}")
    # optimal's budget per configuration: all's bytes held less 3/4 of its
    # activations (one short store-all run)
    budgets = {}
    for ranks, threads in configs:
        r = remat_rows(a, ranks, threads, strategies="all", steps=1)[0]
        budgets[(ranks, threads)] = int(r["held_bytes"] - 0.75 * r["activation_bytes"])
    # rounds: every configuration once per round, all three methods in one
    # invocation (each row's overhead against the `all` beside it), the
    # configurations' order reversed every other round; medians over rounds
    runs = {}  # (config, method) -> [rows]
    for rnd in range(a.rounds):
        order = configs if rnd % 2 == 0 else configs[::-1]
        for ranks, threads in order:
            config = name(ranks, threads)
            print(f"[round {rnd + 1}/{a.rounds}] {config}", file=sys.stderr, flush=True)
            extras = [("", [])] + ([(", no overlap", ["--no-overlap"])] if ranks > 1 else [])
            for suffix, extra in extras:
                for r in remat_rows(a, ranks, threads, strategies="all,manual", budget=budgets[(ranks, threads)],
                                    extra=extra):
                    r["overhead_vs_all"] = r["time_ratio"] - 1
                    runs.setdefault((config + suffix, r["strategy"]), []).append(r)
    table = []  # (config, method, row): the median round's numbers
    for (config, m), rs in runs.items():
        row = dict(rs[0])
        for k in ("median_step_seconds", "overhead_vs_all", "reduce_seconds", "wait_seconds", "exposed_seconds",
                  "skew_seconds"):
            if k in rs[0]:
                row[k] = statistics.median(r[k] for r in rs)
        row["rounds_step_seconds"] = [r["median_step_seconds"] for r in rs]
        table.append((config, m, row))

    torch_rows = []
    if not a.no_torch:
        with tempfile.TemporaryDirectory() as d:
            init = os.path.join(d, "init.safetensors")
            run([a.remat, "bench", "--model", a.model, "--batch", str(a.batch), "--steps", "1", "--warmup", "0",
                 "--strategies", "all", "--threads", "1", "--save-init", init, "--json"], "remat bench --save-init")
            for ck in (False, True):
                cmd = [a.python, os.path.join(ROOT, "bench", "torch", "ddp_bench.py"), "--model", a.model,
                       "--batch", str(a.batch), "--processes", "2", "--threads", "1", "--steps", str(a.steps),
                       "--warmup", str(a.warmup), "--init-from", init, "--json"] + (["--checkpoint"] if ck else [])
                torch_rows += run(cmd, "ddp_bench.py")

    print(f"{a.model}, global batch {a.batch}; {a.warmup} warm-up + {a.steps} timed steps per row, medians over "
          f"{a.rounds} rounds, one job at a "
          f"time on this machine ({os.cpu_count()} cores, shared: times vary between runs)")
    print(f"{'method':10} {'configuration':28} {'held/rank':>11} {'activations':>12} {'step (s)':>9} "
          f"{'overhead':>9} {'reduce (s)':>10} {'wait (s)':>9} {'exposed (s)':>11}")
    for config, m, r in table:
        ov = r.get("overhead_vs_all")
        print(f"{m:10} {config:28} {mib(r['held_bytes']):>11} {mib(r['activation_bytes']):>12} "
              f"{r['median_step_seconds']:9.3f} {('%+.1f%%' % (100 * ov)) if ov is not None else '':>9} "
              f"{r.get('reduce_seconds', 0):10.4f} {r.get('wait_seconds', 0):9.4f} "
              f"{r.get('exposed_seconds', 0):11.4f}")
    get = {(c, m): r for c, m, r in table}
    one, two = get[("1 rank x 1 thread", "optimal")], get[("2 ranks x 1 thread", "optimal")]
    print(f"\noptimal's overhead over all: {100 * one['overhead_vs_all']:+.1f}% on 1 rank x 1 thread, "
          f"{100 * two['overhead_vs_all']:+.1f}% on 2 ranks x 1 thread: "
          f"{100 * (two['overhead_vs_all'] - one['overhead_vs_all']):+.1f} percentage points")
    for m in ("all", "optimal"):
        t1, t2 = get[("1 rank x 1 thread", m)], get[("2 ranks x 1 thread", m)]
        print(f"{m}: 2 ranks x 1 thread take {a.batch} samples in {t2['median_step_seconds']:.3f} s, 1 rank x 1 "
              f"thread in {t1['median_step_seconds']:.3f} s: {t1['median_step_seconds'] / t2['median_step_seconds']:.2f}x "
              f"the throughput")
        wo, wn = t2["exposed_seconds"], get[("2 ranks x 1 thread, no overlap", m)]["exposed_seconds"]
        print(f"{m}: reductions still running after the last rank's backward pass: {wn:.4f} s per step without "
              f"overlap, {wo:.4f} s with: {100 * (1 - wo / wn) if wn > 0 else 0:.0f}% hidden behind the backward "
              f"pass (the reductions' own work: {t2['reduce_seconds']:.4f} s)")
    for r in torch_rows:
        print(f"PyTorch DDP gloo, 2 processes x 1 thread{', torch.utils.checkpoint' if r['checkpoint'] else ''}: "
              f"{r['median_step_seconds']:.3f} s/step, peak {mib(r['peak_bytes'])} per rank")
    if len(torch_rows) == 2:
        nock, ck = torch_rows
        print(f"PyTorch DDP checkpointing overhead: {100 * (ck['median_step_seconds'] / nock['median_step_seconds'] - 1):+.1f}%"
              f"; remat 2 ranks optimal / DDP no checkpointing: "
              f"{two['median_step_seconds'] / nock['median_step_seconds']:.2f}x the time")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"remat": [dict(r, config=c, method=m) for c, m, r in table], "pytorch_ddp": torch_rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
