"""The applier's two mechanisms side by side (windows.py against
regions.py): per model, steps without a plan, under its midpoint plan as
the applier runs it (windows: no dispatch mode; its replays' bits checked
in one step of apply.VERIFY_EVERY), the same with the check in every step
("checked"), and under the same plan with the applier following calls
(windows.place off), alternated in one process. Prints each plan's extra
time over the step without a plan (the median of each step's difference
from the one without a plan in its round), over the recomputed ops' time
at capture, and the median of the paired differences windows - follow
and checked - windows.

    PYTHONPATH=python python bench/torch/applier_windows.py resnet18 41
    PYTHONPATH=python python bench/torch/applier_windows.py resnet50 15
"""
import contextlib
import copy
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import applier_cost as ac  # noqa: E402

import remat.torch as rt  # noqa: E402
from remat.torch import apply as A  # noqa: E402
from remat.torch import windows as W  # noqa: E402
from remat.torch.decisions import Decisions  # noqa: E402

torch.set_num_threads(2)
name = sys.argv[1] if len(sys.argv) > 1 else "resnet18"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 21
torch.manual_seed(0)
m, inputs, lf = ac.build(name)
t = rt.capture(m, inputs, lf)
top = rt.plan_trace(t, None, "sgd", "all")
floor = rt.plan_trace(t, 1, "sgd").floor
mid = rt.plan_trace(t, (floor + rt.budget_for(top.peak_bytes)) // 2, "sgd")
midf, midc = copy.copy(mid), copy.copy(mid)
mid._decisions, midc._decisions = Decisions(mid), Decisions(midc)
place = W.place
W.place = lambda *a: None
midf._decisions = Decisions(midf)
W.place = place
assert mid._decisions.windows is not None and midf._decisions.windows is None
rec = sum(t.ops[i].seconds for grp in mid.recompute_groups for i in grp)
params = list(m.parameters())
every = A.VERIFY_EVERY


def one(plan):
    for p in params:
        p.grad = None
    A.VERIFY_EVERY = 1 if plan is midc else every
    t0 = time.perf_counter()
    with (plan.apply() if plan is not None else contextlib.nullcontext()):
        loss = lf(m(*inputs))
        t1 = time.perf_counter()
        loss.backward()
    return t1 - t0, time.perf_counter() - t0
plans = {"none": None, "windows": mid, "checked": midc, "follow": midf}
for p in plans.values():
    one(p)
res = {k: [] for k in plans}
for r in range(rounds):
    order = list(plans.items()) if r % 2 == 0 else [list(plans.items())[0]] + list(plans.items())[:0:-1]
    for k, p in order:
        res[k].append(one(p))
for k in ("windows", "checked", "follow"):
    df = [a[0] - b[0] for a, b in zip(res[k], res["none"])]
    ds = [a[1] - b[1] for a, b in zip(res[k], res["none"])]
    print("%s %-8s forward's extra %.3f ms, step's extra %.3f ms, extra / recomputed %.2f" % (
        name, k, statistics.median(df) * 1e3, statistics.median(ds) * 1e3, statistics.median(ds) / rec), flush=True)
for a_, b_ in (("windows", "follow"), ("checked", "windows")):
    dd = [a[1] - b[1] for a, b in zip(res[a_], res[b_])]
    print("%s %s - %s, step: median %.3f ms (recomputed ops at capture %.3f ms)" % (
        name, a_, b_, statistics.median(dd) * 1e3, rec * 1e3))
