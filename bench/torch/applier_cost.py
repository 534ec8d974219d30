"""What applying a plan costs (issue 31): per model, forward+backward steps
without a plan, under a store-all plan and under a plan at the midpoint
between the floor and store-all, alternated step by step in one process
(so that the machine's drift hits all three alike), median of --rounds
each. Prints each plan's step over the step without a plan, and for the
midpoint plan what it recomputes: FLOPs, and the time its recomputed ops
took at capture (each op timed as it ran), against which the plan's extra
time over the step without a plan (the median of each midpoint step's
difference from the step without a plan just before it) is the
applier's cost ("extra / recomputed": 1.0 is recomputation alone), and
against the replays' own
time as they ran in the same steps ("extra / replays in the step": what
the applier adds to the recomputation, both measured in one run; the
capture's time is one run of each op, in another state of the caches).
Ops are timed by capture's clock for the device (remat.torch.clock: CUDA
events on a GPU).

    PYTHONPATH=python python bench/torch/applier_cost.py [--models resnet18,gpt2-dropout] [--rounds 5]
    PYTHONPATH=python python bench/torch/applier_cost.py --device cuda --models resnet50-b64,gpt2-small
    PYTHONPATH=python python bench/torch/applier_cost.py --breakdown --models resnet18,llama
    PYTHONPATH=python python bench/torch/applier_cost.py --processes 7 --rounds 15

--processes K measures each model in K processes of its own and prints
each ratio's median over them with its range: a ratio moves more from one
process to the next than within one.

--breakdown prints, per model and plan, where the time goes instead:
the forward's and the backward's medians apart, how many of the
forward's calls pass the applier's dispatch mode (where the plan runs
with windows, windows.py, only those of the stretches of module code
whose calls' floats it reads), how many module hooks of the applier's
run per step (its runs' first and last module calls, those of the
saved-tensor hooks' own regions or windows) and how many saved tensors
pass its pack hook, the midpoint plan's
replays as they ran in the step (against their time at capture), and
the garbage collections Python ran during each plan's steps (count and
time per generation: the applier's Python objects per step are what
starts them, and a full collection walks every object the process holds).
Its "mode" row is the step without a plan with a dispatch mode that only
runs each call on over the whole forward: what following a call costs.

On a CUDA device each step ends with torch.cuda.synchronize; the issue's
GPU sizes are resnet50-b64 (224x224) and gpt2-small (12 layers, 768 wide,
b8x1024).
"""
import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests"))
import user_models as um  # noqa: E402

import remat.torch as rt  # noqa: E402
from remat.torch.compat import TorchDispatchMode  # noqa: E402


def build(name, device="cpu"):
    m, inputs, lf = _build(name)
    return m.to(device), tuple(x.to(device) for x in inputs), lf


def _build(name):
    import torchvision
    g = torch.Generator().manual_seed(0)
    if name == "resnet50-b64":
        m = torchvision.models.resnet50()
        x, y = torch.randn(64, 3, 224, 224, generator=g), torch.randint(0, 1000, (64,), generator=g)
        return m, (x,), (lambda o: F.cross_entropy(o, y.to(o.device)))
    if name == "gpt2-small":
        m = um.GPT2(layers=12, embd=768, heads=12, context=1024, vocab=50257, dropout=0.0)
        idx, tgt = torch.randint(0, 50257, (8, 1024), generator=g), torch.randint(0, 50257, (8, 1024), generator=g)
        return m, (idx,), (lambda o: F.cross_entropy(o.reshape(-1, o.shape[-1]), tgt.to(o.device).reshape(-1)))
    if name in ("resnet18", "resnet50"):
        size = 64 if name == "resnet18" else 128
        m = getattr(torchvision.models, name)()
        x, y = torch.randn(8, 3, size, size, generator=g), torch.randint(0, 1000, (8,), generator=g)
        return m, (x,), (lambda o: F.cross_entropy(o, y.to(o.device)))
    if name in ("gpt2", "gpt2-dropout"):  # without dropout, and with GPT-2's own (0.1)
        m = um.GPT2(layers=4, embd=256, heads=4, context=256, vocab=8192, dropout=0.1 if "dropout" in name else 0.0)
        idx, tgt = torch.randint(0, 8192, (4, 256), generator=g), torch.randint(0, 8192, (4, 256), generator=g)
        return m, (idx,), (lambda o: F.cross_entropy(o.reshape(-1, o.shape[-1]), tgt.to(o.device).reshape(-1)))
    if name == "llama":
        m = um.Llama(layers=4, dim=256, heads=4, vocab=8192, context=256)
        idx, tgt = torch.randint(0, 8192, (4, 256), generator=g), torch.randint(0, 8192, (4, 256), generator=g)
        return m, (idx,), (lambda o: F.cross_entropy(o.reshape(-1, o.shape[-1]), tgt.to(o.device).reshape(-1)))
    raise SystemExit("unknown model %s" % name)


def step(m, inputs, lf, plan, sync=lambda: None):
    for p in m.parameters():
        p.grad = None
    sync()
    t0 = time.perf_counter()
    if plan is None:
        lf(m(*inputs)).backward()
    else:
        with plan.apply():
            lf(m(*inputs)).backward()
    sync()
    return time.perf_counter() - t0


class PassThrough(TorchDispatchMode):
    """A dispatch mode that only runs each call: what following a call
    costs, with no bookkeeping of the applier's."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def breakdown(name, m, inputs, lf, t, plans, rounds, sync):
    """The forward, the backward, the replays and the collections, per plan."""
    from remat.torch import apply as A
    from remat.torch import regions as R
    from remat.torch.decisions import Decisions
    acc = {"hooks": 0, "packs": 0}
    replays = Replays(next(m.parameters()).device).__enter__()  # the replays as they run in the step
    enter, exit_ = R.Regions._enter, R.Regions._exit
    pack, window_pack = A.Applier.pack, A.Applier.window_pack

    def counted(f, key):  # the module hooks, the saved tensors through the pack hook, in a step
        def hook(self, *x):
            acc[key] += 1
            return f(self, *x)
        return hook
    R.Regions._enter, R.Regions._exit = counted(enter, "hooks"), counted(exit_, "hooks")
    A.Applier.pack, A.Applier.window_pack = counted(pack, "packs"), counted(window_pack, "packs")
    gcs, start = {}, [0.0]

    def collected(phase, info):
        if phase == "start":
            start[0] = time.perf_counter()
        else:
            n, s = gcs.get(info["generation"], (0, 0.0))
            gcs[info["generation"]] = (n + 1, s + time.perf_counter() - start[0])

    def one(plan):
        for p in m.parameters():
            p.grad = None
        replays.seconds, acc["hooks"], acc["packs"] = 0.0, 0, 0
        sync()
        t0 = time.perf_counter()
        with (plan.apply() if plan not in (None, "mode") else contextlib.nullcontext()):
            with (PassThrough() if plan == "mode" else contextlib.nullcontext()):
                loss = lf(m(*inputs))
            sync()
            t1 = time.perf_counter()
            loss.backward()
        sync()
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1, replays.read(), acc["hooks"], acc["packs"]

    res = {k: [] for k in plans}
    col = {k: {} for k in plans}
    for p in plans.values():
        one(p)
    gc.callbacks.append(collected)
    try:
        for _ in range(rounds):
            for k, p in plans.items():
                gcs.clear()
                res[k].append(one(p))
                for g, (n, s) in gcs.items():
                    c = col[k].get(g, (0, 0.0))
                    col[k][g] = (c[0] + n, c[1] + s)
    finally:
        gc.callbacks.remove(collected)
        replays.__exit__()
        R.Regions._enter, R.Regions._exit = enter, exit_
        A.Applier.pack, A.Applier.window_pack = pack, window_pack
    rec = sum(t.ops[i].seconds for grp in plans["mid"].recompute_groups for i in grp)
    d = Decisions(plans["mid"])
    if d.full:
        followed = "%d (all)" % len(t.calls)
    elif d.windows is not None:
        followed = "none: %d windows (windows.py)" % len(d.windows)
        if d.reads:
            followed = "%d through the reader (floats read, values taken), in %d stretches; %d windows (windows.py)" % (
                sum(r.end - r.first for r in d.reads.values()), len(d.reads), len(d.windows))
    else:
        followed = "%d in %d runs" % (sum(v[1] - v[0] for v in d.regions.values()) + (
            len(t.calls) - d.tail if d.tail is not None else 0), len(d.regions) + (d.tail is not None))
    if not d.full:
        followed += ", %d module hooks, %d of %d saved tensors through the hooks" % (
            res["mid"][-1][3], res["mid"][-1][4], len(t.pack_values))
    through = {"none": "0", "all": "0", "mid": followed, "mode": "%d (all)" % len(t.calls)}
    for k in plans:
        fwd, bwd, rep = (statistics.median(x[i] for x in res[k]) * 1e3 for i in range(3))
        gcs_txt = ", ".join("gen %d: %d in %.1f ms" % (g, n, s * 1e3) for g, (n, s) in sorted(col[k].items()))
        print("| %s | %s | %s | %.2f | %.2f | %s | %s |" % (
            name, k, through[k], fwd, bwd, "%.2f (capture: %.2f)" % (rep, rec * 1e3) if k == "mid" else "",
            gcs_txt or "none"))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18,resnet50,gpt2,gpt2-dropout,llama")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--breakdown", action="store_true", help="where each plan's time goes (forward, backward, "
                    "replays, garbage collections) instead of the ratios")
    ap.add_argument("--processes", type=int, default=1, help="measure each model in this many processes and "
                    "print each ratio's median over them, with its range")
    ap.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)  # one process's ratios, for --processes
    a = ap.parse_args()
    if a.processes > 1 and not a.breakdown:
        return processes(a)
    torch.set_num_threads(a.threads)
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    if a.breakdown and not a.raw:
        print("| model | plan | forward calls through the dispatch mode | forward ms | backward ms | replays in the "
              "step ms | garbage collections over %d steps |" % a.rounds)
        print("|---|---|---:|---:|---:|---:|---|")
    elif not a.raw:
        print("| model | store-all / no plan | midpoint / no plan | midpoint recomputes (ops, extra FLOPs) | "
              "recomputed ops' time / step | extra / recomputed | extra / replays in the step |")
        print("|---|---:|---:|---:|---:|---:|---:|")
    for name in a.models.split(","):
        torch.manual_seed(0)
        m, inputs, lf = build(name, a.device)
        t = rt.capture(m, inputs, lf)
        top = rt.plan_trace(t, None, "sgd", "all")
        floor = rt.plan_trace(t, 1, "sgd").floor
        mid = rt.plan_trace(t, (floor + rt.budget_for(top.peak_bytes)) // 2, "sgd")
        plans = {"none": None, "all": top, "mid": mid}
        if a.breakdown:
            breakdown(name, m, inputs, lf, t, dict(plans, mode="mode"), a.rounds, sync)
            continue
        times = {k: [] for k in plans}
        replays = []  # the midpoint's replays as they ran in each step
        for p in plans.values():  # one warm step each
            step(m, inputs, lf, p, sync)
        with Replays(torch.device(a.device)) as r:
            for _ in range(a.rounds):
                for k, p in plans.items():
                    times[k].append(step(m, inputs, lf, p, sync))
                    if k == "mid":
                        replays.append(r.read())
        med = {k: statistics.median(v) for k, v in times.items()}
        rec = sum(t.ops[i].seconds for grp in mid.recompute_groups for i in grp)
        ran = statistics.median(replays)
        # the midpoint's extra time: the median of its steps' differences from the step without a
        # plan run just before it, which a drift over the rounds moves less than the medians' difference
        extra = statistics.median(b - a for a, b in zip(times["none"], times["mid"]))
        row = [med["all"] / med["none"], med["mid"] / med["none"], rec / med["none"],
               extra / rec if rec else 0.0, extra / ran if ran else 0.0]
        if a.raw:
            print("raw", json.dumps(row))
        else:
            print("| %s | %.3f | %.3f | %d, +%.2f%% | %.3f | %.2f | %s |" % (
                name, row[0], row[1], len(mid.recompute_ops), 100 * mid.extra_flops / mid.flops, row[2], row[3],
                "%.2f" % row[4] if ran else "-"))
        sys.stdout.flush()


class Replays:
    """Times the applier's replays as they run in a step: a mark of capture's
    clock for the device before and after each recomputed op (the wall
    clock on the CPU, CUDA events on a GPU: the kernels' time, not the
    launches'); read() after the step's end gives their sum and starts
    the next step's."""

    def __init__(self, device):
        from remat.torch.clock import clock_for
        self.clock, self.seconds = clock_for(device), 0.0

    def read(self):
        self.clock.resolve()  # adds each replay's span to self.seconds
        s, self.seconds = self.seconds, 0.0
        return s

    def __enter__(self):
        from remat.torch import apply as A
        self._replay = A.Applier._replay

        def timed(applier, o, replay=self._replay):
            t0 = self.clock.mark()
            try:
                return replay(applier, o)
            finally:
                self.clock.charge(self, "seconds", t0)
        A.Applier._replay = timed
        return self

    def __exit__(self, *exc):
        from remat.torch import apply as A
        A.Applier._replay = self._replay
        return False


def processes(a):
    """--processes K: each model measured in K processes of its own, one
    after the other, and each column's median over them with its range. A
    process's ratios carry its own allocation history and code layout (one
    process's step without a plan ran 10% slow throughout), which more
    rounds in it do not average out; more processes do."""
    print("| model | store-all / no plan | midpoint / no plan | recomputed ops' time / step | extra / recomputed "
          "(target 1.5) | extra / replays in the step |")
    print("|---|---|---|---|---|---|")
    for name in a.models.split(","):
        rows = []
        for _ in range(a.processes):
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--models", name, "--rounds",
                                  str(a.rounds), "--threads", str(a.threads), "--device", a.device, "--raw"],
                                 check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(next(x for x in out.splitlines() if x.startswith("raw "))[4:]))
        cols = list(zip(*rows))
        print("| %s | %s |" % (name, " | ".join("%.3f (%.3f-%.3f)" % (statistics.median(c), min(c), max(c)) if i < 3
                                                else "%.2f (%.2f to %.2f)" % (statistics.median(c), min(c), max(c))
                                                for i, c in enumerate(cols))))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
