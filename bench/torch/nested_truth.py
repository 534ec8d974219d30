"""Nested plans at their floors, predicted against measured: library models
(python/tests/library_models.py, the sweep's sizes) captured once, planned
with nested=True at their nested floor plus 0.3% (split schedules among
the candidates), measured by the heap counter over 3 steps:

    python -m remat.torch run bench/torch/nested_truth.py [--models t5,gpt2,llama,bert]
"""
import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests"))
import library_models as lm  # noqa: E402

import remat.torch as rt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="t5,gpt2,llama,bert")
    a = ap.parse_args()
    print("| model | nested floor | plan's budget | predicted | measured | measured / predicted |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in a.models.split(","):
        case = lm.build(name)
        with lm.settings(case):
            opt = lm.optimizer(copy.deepcopy(case.model))
            trace = rt.capture(case.model, case.inputs, case.loss_fn)
            floor = rt.plan_trace(trace, 1, opt, nested=True).floor
            budget = int(floor * 1.003)
            plan = rt.plan_trace(trace, budget, opt, nested=True)
            m = copy.deepcopy(case.model)
            r = rt.measure(m, case.inputs, case.loss_fn, plan=plan, optimizer=lm.optimizer(m))
            print("| %s | %d | %d | %d | %d | %.4f |" % (name, floor, budget, plan.peak_bytes, r["peak_bytes"],
                                                        r["peak_bytes"] / plan.peak_bytes))


if __name__ == "__main__":
    main()
