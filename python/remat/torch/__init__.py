"""remat for PyTorch: plan your own model's training step under a budget in
bytes, run the plan in eager PyTorch, and measure it.

    import remat.torch as rt
    plan = rt.plan(model, (x,), lambda out: loss_fn(out, y), budget="6GiB", optimizer=opt)
    print(plan)                       # peak per category, what is recomputed
    for x, y in batches:
        with plan.apply():
            loss = loss_fn(model(x), y)
            loss.backward()
        opt.step(); opt.zero_grad()

capture (capture.py) traces one step with PyTorch's own dispatch and
saved-tensor machinery into a graph file; libremat plans it (the same
planners as remat's own models, through remat_plan_graph_json); apply
(apply.py) runs the plan through saved-tensor hooks. docs/pytorch.md says
what each guarantees.
"""
from .._lib import RematError
from . import compat, memtrack  # noqa: F401 - remat.torch.compat and .memtrack, as before
from .capture import CaptureError, Trace, capture
from .measuring import measure
from .partition import Compiled, compile
from .planning import MARGIN, MARGIN_BYTES, Plan, Planner, budget_for, max_batch, parse_bytes, plan, plan_trace

__all__ = ["MARGIN", "MARGIN_BYTES", "CaptureError", "Compiled", "Plan", "Planner", "RematError", "Trace", "budget_for",
           "capture", "compile", "max_batch", "measure", "parse_bytes", "plan", "plan_trace"]
