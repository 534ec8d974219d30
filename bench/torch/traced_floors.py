"""remat's floors and plans on bench/torch/per_layer.py's HuggingFace
models, predicted only (no step runs): quick to compare two builds of the
planner. Per model: per-layer checkpointing's predicted peak (strategy
"manual") and what it recomputes; remat's floor (recomputing each op once)
and its nested floor, over that peak, with the seconds each planning
took; the plans at that peak (once, nested) and what they recompute; the
bound (no schedule of the step holds less) over that peak.

    PYTHONPATH=python python bench/torch/traced_floors.py [--models gpt2,llama,bert] [--layers 8 --seq 512]
"""
import argparse
import copy
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import per_layer as pl  # noqa: E402 - beside this script: the models and their sizes

import remat.torch as rt  # noqa: E402


def timed(f, *args, **kwargs):
    t0 = time.perf_counter()
    r = f(*args, **kwargs)
    return r, time.perf_counter() - t0


def pct(p, store):
    """What plan p recomputes, in percent of the step's FLOPs."""
    return "+%.1f%%" % (100 * p.extra_flops / store.flops) if p.feasible else "none fits"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt2,llama,bert")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    a = ap.parse_args()
    torch.set_num_threads(2)
    print("| model | per-layer predicted MiB, +FLOPs | floor / per-layer (s) | nested floor / per-layer (s) | "
          "at per-layer's peak: +FLOPs, nested | bound / per-layer |")
    print("|---|---|---|---|---|---|")
    for name in a.models.split(","):
        m0, inputs, loss_fn, _ = pl.build(name, a)
        m0.train()
        t = rt.capture(copy.deepcopy(m0), inputs, loss_fn)
        opt = torch.optim.AdamW(m0.parameters(), lr=1e-4)
        store = rt.plan_trace(t, None, opt, "all")
        manual = rt.plan_trace(t, None, opt, "manual")
        top = manual.peak_bytes
        floor, tf = timed(rt.plan_trace, t, 1, opt)
        nfloor, tn = timed(rt.plan_trace, t, 1, opt, nested=True)
        floor, nfloor = floor.floor, nfloor.floor
        once = rt.plan_trace(t, top, opt)
        nest = rt.plan_trace(t, top, opt, nested=True)
        print("| %s | %.2f, %s | %.4f (%.1f) | %.4f (%.1f) | %s, %s | %.4f |" % (
            name, top / 2 ** 20, pct(manual, store), floor / top, tf, nfloor / top, tn, pct(once, store),
            pct(nest, store), store.bound / top), flush=True)


if __name__ == "__main__":
    main()
