"""Which library models' midpoint plans run with windows (no dispatch
mode, remat/torch/windows.py) and, for the rest, why the applier follows
calls: per model of python/tests/library_models.py (the library sweep's
small configs), captured, planned at the budget midway between its floor
and store-all, the plan's windows, random calls replayed from a recorded
state, values taken where a module returns them, and the stretches of
module code the applier's reader is on in (a dispatch mode there only)
with the calls whose floats it reads and the values it takes where their
calls make them, or the first reason
found (a recipe capture's form cannot give, a random call after another
in its stretch, or windows.place's refusal).

    PYTHONPATH=python python bench/torch/windows_sweep.py [names...]
"""
import copy
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests"))
import library_models as lm  # noqa: E402

import remat.torch as rt  # noqa: E402
from remat.torch.decisions import Decisions  # noqa: E402


def main():
    names = sys.argv[1:] or [n for n in lm.MODELS if n not in lm.REFUSED]
    print("| model | ops recomputed | windows | random calls replayed | values taken at module outputs | "
          "stretches the reader is on in: floats read, values taken | else |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name in names:
        case = lm.build(name)
        with lm.settings(case):
            opt = lm.optimizer(copy.deepcopy(case.model))
            t = rt.capture(case.model, case.inputs, case.loss_fn)
            budget, _, _ = lm.between(t, opt)
            plan = rt.plan_trace(t, budget, opt)
            d = Decisions(plan)
            if d.windows is not None:
                print("| %s | %d | %d | %d | %d | %d: %d, %d | |" % (
                    name, len(plan.recompute_ops), len(d.windows), len(d.draws), sum(len(x) for x in d.taken.values()),
                    len(d.reads), sum(len(r.floats) for r in d.reads.values()),
                    sum(len(x) for r in d.reads.values() for x in r.takes.values())))
            else:
                print("| %s | %d | - | - | - | - | follows calls: %s |" % (name, len(plan.recompute_ops), d.why))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
