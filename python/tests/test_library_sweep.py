"""Library models (torchvision and transformers, from small configs: see
library_models.py) as a user trains them: each is captured, planned at the
budget midway between its floor and store-all, and run for 3 steps under
plan.apply() and 3 without (the same initial model and seed, SGD with
momentum): losses, every parameter gradient, weights and buffers equal
(torch.equal), the plan feasible with its predicted peak within budget,
and, with the heap counter preloaded, the measured peak within budget too.
Then the same under a nested plan (an op may be recomputed more than
once) at its floor, from the same capture and against the same steps
without a plan (with PyTorch 2.15's node_creation_hook; before it, nested
plans are refused and that part is left out). A model remat refuses is
refused when planned, with the message REFUSED gives for it (the op and
the reason)."""
import copy

import library_models as lm
import pytest
import torch
import torch.nn as nn

import remat.torch as rt
from remat.torch import compat, memtrack


@pytest.mark.parametrize("name", list(lm.MODELS))
def test_library_model(name):
    pytest.importorskip("transformers" if name in lm.TRANSFORMERS else "torchvision")
    case = lm.build(name)
    with lm.settings(case):
        opt = lm.optimizer(copy.deepcopy(case.model))
        if name in lm.REFUSED:
            with pytest.raises((rt.CaptureError, rt.RematError), match=lm.REFUSED[name]):
                rt.plan(case.model, case.inputs, case.loss_fn, budget="1GiB", optimizer=opt)
            return
        trace = rt.capture(case.model, case.inputs, case.loss_fn)
        budget, floor, top = lm.between(trace, opt)
        plan = rt.plan_trace(trace, budget, opt)
        assert plan.feasible and plan.peak_bytes <= budget
        ref = lm.run(copy.deepcopy(case.model), case, None)
        assert all(torch.isfinite(x) for x in ref[0]), "the model's own losses are not finite: a size to change"
        _runs_as_planned(case, plan, budget, ref, "the plan")
        if compat.node_creation_hook() is None:
            return
        nested_floor = rt.plan_trace(trace, 1, opt, nested=True).floor
        assert nested_floor <= floor
        budget = int(nested_floor * 1.003)
        plan = rt.plan_trace(trace, budget, opt, nested=True)
        assert plan.feasible and plan.peak_bytes <= budget
        _runs_as_planned(case, plan, budget, ref, "the nested plan at its floor")


def _runs_as_planned(case, plan, budget, ref, what):
    """3 steps under plan bitwise equal to ref (the steps without one) and,
    with the heap counter preloaded, measured within budget."""
    got = lm.run(copy.deepcopy(case.model), case, plan)
    diff = lm.differences(ref, got)
    assert not diff, "%s differ under %s (%d ops recomputed)" % (", ".join(diff), what, len(plan.recompute_ops))
    if memtrack.counter() is not None:
        m = copy.deepcopy(case.model)
        peak = rt.measure(m, case.inputs, case.loss_fn, plan=plan, optimizer=lm.optimizer(m))["peak_bytes"]
        assert peak <= budget, "%s: measured %d bytes, budget %d (predicted %d)" % (what, peak, budget, plan.peak_bytes)


class _Positions(nn.Module):
    """What transformers' masks do in training (find_packed_sequence_indices):
    position ids from an arange, checked with .all() in Python."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        pos = torch.arange(x.shape[1]).unsqueeze(0).expand(x.shape[0], -1)
        if (torch.diff(pos, dim=-1) == 1).all():  # made from shapes alone: the same every step
            x = x * 2
        return self.lin(x).sum()


class _Branch(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        if (self.lin(x) > 0).all():  # reads the data
            x = x * 2
        return self.lin(x).sum()


class _Filled(nn.Module):
    """A value made from shapes, then written with data in place (the write
    folded into the op that made it): data."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        s = self.lin(x).sum((0, 2)).detach()
        m = torch.zeros(x.shape[1])
        m.add_(s)
        if (m > 0).all():
            x = x * 2
        return self.lin(x).sum()


def test_values_made_from_shapes_are_not_data():
    x = torch.randn(2, 8, 8)
    t = rt.capture(_Positions(), (x,), lambda o: o)
    assert any(c.name == "aten._local_scalar_dense.default" for c in t.calls)
    with pytest.raises(rt.CaptureError, match="depend on the data: _local_scalar_dense"):
        rt.capture(_Branch(), (x,), lambda o: o)
    with pytest.raises(rt.CaptureError, match="depend on the data: _local_scalar_dense"):
        rt.capture(_Filled(), (x,), lambda o: o)


class _WritesItsInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        h = torch.tanh(x)
        x.add_(1.0)  # the batch, written after tanh read it
        return (self.lin(h) * x).sum()


def test_input_written_in_place_is_refused_naming_the_op():
    """Once refused by the library's graph reader ("value 1: only an
    activation is 'overwritten_by' an op"), naming neither the op nor the line."""
    with pytest.raises(rt.CaptureError, match=r"writes in place a tensor it did not make: add_\.Tensor writes "
                                              r"input\.0 .* at .*test_library_sweep\.py:\d+ in forward"):
        rt.plan(_WritesItsInput(), (torch.randn(2, 8),), lambda o: o, budget="1GiB")
