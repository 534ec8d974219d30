"""In-place activations against none: torchvision models as shipped
(ReLU, ReLU6, SiLU, Hardswish with inplace=True) and the same models with
every module's `inplace` False, each captured and planned: remat's floor
(plan_trace(trace, 1, opt).floor), store-all's peak, and a plan midway
between the floor and store-all run for 3 steps under the plan and 3
without it (SGD with momentum, the same seed), compared bitwise and
measured with the heap counter.

    python -m remat.torch run bench/torch/inplace_floors.py [--models a,b] [--batch 4] [--size 96]

Prints a markdown table."""
import argparse
import copy
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))

import library_models as lm  # noqa: E402

import remat.torch as rt  # noqa: E402
from remat.torch import memtrack  # noqa: E402


def case(name, inplace, batch, size):
    import torchvision
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10)
    if not inplace:
        for m in model.modules():
            if hasattr(m, "inplace"):
                m.inplace = False
    model.train()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, size, size, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    return lm.Case(model, (x,), lambda out: F.cross_entropy(out, y))


def row(name, inplace, batch, size):
    c = case(name, inplace, batch, size)
    opt = lm.optimizer(copy.deepcopy(c.model))
    trace = rt.capture(c.model, c.inputs, c.loss_fn)
    budget, floor, top = lm.between(trace, opt)
    plan = rt.plan_trace(trace, budget, opt)
    ref = lm.run(copy.deepcopy(c.model), c, None)
    got = lm.run(copy.deepcopy(c.model), c, plan)
    measured = None
    if memtrack.counter() is not None:
        m = copy.deepcopy(c.model)
        measured = rt.measure(m, c.inputs, c.loss_fn, plan=plan, optimizer=lm.optimizer(m))["peak_bytes"]
    return {"model": name, "inplace": "as shipped" if inplace else "inplace=False", "ops": len(trace.ops),
            "written": sum(v.moved >= 0 for v in trace.values), "over": sum(v.overwritten >= 0 for v in trace.values),
            "floor": floor, "top": top, "ratio": floor / top, "budget": budget, "predicted": plan.peak_bytes,
            "measured": measured, "within": measured is not None and measured <= budget,
            "bitwise": "yes" if not lm.differences(ref, got) else "NO", "recomputed": len(plan.recompute_ops)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="efficientnet_b0,mobilenet_v2,mobilenet_v3_small,resnet18")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print("| model | activations | ops | clone+write ops | overwritten | floor | store-all | floor / store-all "
          "| budget | predicted | measured | within budget | bitwise | recomputed ops |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|")
    for name in a.models.split(","):
        for inplace in (True, False):
            r = row(name, inplace, a.batch, a.size)
            print("| %(model)s | %(inplace)s | %(ops)d | %(written)d | %(over)d | %(floor)d | %(top)d | %(ratio).3f "
                  "| %(budget)d | %(predicted)d | %(measured)s | %(within)s | %(bitwise)s | %(recomputed)d |" % r,
                  flush=True)


if __name__ == "__main__":
    main()
