"""The library sweep as a table: each model of python/tests/library_models.py
captured, planned at the budget midway between its floor and store-all,
run for 3 steps under the plan and 3 without it (SGD with momentum, the
same seed), compared bitwise, and measured with the heap counter.

    python -m remat.torch run bench/torch/sweep.py [--models a,b] [--threads 2]

Prints a markdown table: model, ops captured, floor, store-all, budget,
predicted and measured peak (bytes), within budget, bitwise, ops
recomputed, extra FLOPs, or the reason remat refused the model."""
import argparse
import copy
import os
import sys
import time
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))

import library_models as lm  # noqa: E402

import remat.torch as rt  # noqa: E402
from remat.torch import memtrack  # noqa: E402


def one(name):
    case = lm.build(name)
    with lm.settings(case):
        return _one(name, case)


def _one(name, case):
    row = {"model": name}
    opt = lm.optimizer(copy.deepcopy(case.model))
    try:
        trace = rt.capture(case.model, case.inputs, case.loss_fn)
        row["ops"] = len(trace.ops)
        budget, floor, top = lm.between(trace, opt)
        plan = rt.plan_trace(trace, budget, opt)
    except (rt.CaptureError, rt.RematError) as e:
        row["refused"] = str(e)
        return row
    row.update(floor=floor, top=top, budget=budget, predicted=plan.peak_bytes, feasible=plan.feasible,
               recomputed=len(plan.recompute_ops),
               extra=100.0 * plan.extra_flops / plan.flops if plan.flops else 0.0)
    try:
        ref = lm.run(copy.deepcopy(case.model), case, None)
        got = lm.run(copy.deepcopy(case.model), case, plan)
        diff = lm.differences(ref, got)
        row["bitwise"] = "yes" if not diff else "no: " + ", ".join(diff)
        if memtrack.counter() is not None:
            m = copy.deepcopy(case.model)
            row["measured"] = rt.measure(m, case.inputs, case.loss_fn, plan=plan,
                                         optimizer=lm.optimizer(m))["peak_bytes"]
    except Exception as e:  # a failure under the plan is the table's to show
        row["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:160])
        traceback.print_exc()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(lm.MODELS))
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print("| model | ops | floor | store-all | budget | predicted | measured | within budget | bitwise "
          "| recomputed ops | extra FLOPs | seconds |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|")
    for name in a.models.split(","):
        t0 = time.perf_counter()
        r = one(name)
        sec = time.perf_counter() - t0
        if "refused" in r:
            print("| %s | %s | refused: %s |||||||| %.1f |" % (name, r.get("ops", "-"), r["refused"].replace("|", "/"),
                                                             sec))
        else:
            meas = r.get("measured")
            within = (r["predicted"] <= r["budget"] and (meas is None or meas <= r["budget"]) and r["feasible"])
            print("| %s | %d | %d | %d | %d | %d | %s | %s | %s | %d | %.2f%% | %.1f |" % (
                name, r["ops"], r["floor"], r["top"], r["budget"], r["predicted"],
                "%d" % meas if meas is not None else "-", within, r.get("error") or r.get("bitwise"),
                r["recomputed"], r["extra"], sec))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
