"""Which library models' midpoint plans run with windows (no dispatch
mode, remat/torch/windows.py) and, for the rest, why the applier follows
calls: per model of python/tests/library_models.py (the library sweep's
small configs), captured, planned at the budget midway between its floor
and store-all, the plan's windows, random calls replayed from a recorded
state, values taken where a module returns them, or the first reason
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
from remat.torch import apply as A  # noqa: E402
from remat.torch import windows as W  # noqa: E402


def why(t, d):
    """The first reason a plan with these decisions has no windows."""
    calls = [ci for ci, r in enumerate(d.recorded) if r]
    at = W.draws(t, [ci for ci in calls if A._draws(t.calls[ci])], lambda j: A._draws(t.calls[j]))
    if at is None:
        return "a random call after another in its stretch of module code"
    for ci in calls:
        if A._form_recipe(t, ci, A._RngAt(at[ci]) if ci in at else None) is None:
            c = t.calls[ci]
            inv = t.call_module[ci]
            where = t.modules[inv][3] if inv >= 0 else "outside the model"
            return "no recipe from capture's form for %s in %s" % (c.name, where)
    return "windows.place refused (a value started from that no window or module output gives, or saves split)"


def main():
    names = sys.argv[1:] or [n for n in lm.MODELS if n not in lm.REFUSED]
    print("| model | ops recomputed | windows | random calls replayed | values taken at module outputs | else |")
    print("|---|---:|---:|---:|---:|---|")
    for name in names:
        case = lm.build(name)
        with lm.settings(case):
            opt = lm.optimizer(copy.deepcopy(case.model))
            t = rt.capture(case.model, case.inputs, case.loss_fn)
            budget, _, _ = lm.between(t, opt)
            plan = rt.plan_trace(t, budget, opt)
            d = A.Decisions(plan)
            if d.windows is not None:
                print("| %s | %d | %d | %d | %d | |" % (name, len(plan.recompute_ops), len(d.windows), len(d.draws),
                                                      sum(len(x) for x in d.taken.values())))
            else:
                print("| %s | %d | - | - | - | follows calls: %s |" % (name, len(plan.recompute_ops), why(t, d)))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
