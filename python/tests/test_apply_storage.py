"""The applier's storage rules, each on a step whose plan is set by hand
(the ops named below recomputed for the backward), against the same step
without a plan:

- a recomputed op that writes a view of a value in place (T5's
  _shift_right: shifted[..., 1:] = ids[..., :-1]) makes the whole value
  again, not the view: its replay writes to a copy of the whole storage
  (once a RuntimeError inside loss.backward(): setStorage ... out of
  bounds, the value restored onto a copy of the slice)."""
import copy

import torch
import torch.nn as nn

import remat.torch as rt


def force(plan, ops):
    """plan, changed to drop ops' outputs and recompute them at once."""
    plan.recompute_ops = sorted(ops)
    plan.drop_ops = sorted(set(plan.drop_ops) | set(ops))
    plan.recompute_groups = [sorted(ops)]
    plan._decisions = None
    return plan


def grads(model, inputs, plan):
    m = copy.deepcopy(model)
    if plan is None:
        loss = m(*inputs)
        loss.backward()
    else:
        with plan.apply():
            loss = m(*inputs)
            loss.backward()
    return [loss.detach()] + [p.grad for p in m.parameters()]


def check(model, inputs, pick):
    t = rt.capture(model, inputs, lambda o: o)
    plan = force(rt.plan_trace(t, None), pick(t))
    assert plan.recompute_ops
    ref, got = grads(model, inputs, None), grads(model, inputs, plan)
    assert all(a is not None and torch.equal(a, b) for a, b in zip(ref, got))
    return t, plan


class ShiftRight(nn.Module):
    """transformers' T5 _shift_right, then an embedding (which saves the int64 ids)."""

    def __init__(self):
        super().__init__()
        self.emb, self.lin = nn.Embedding(64, 32), nn.Linear(32, 32)

    def forward(self, ids):
        shifted = ids.new_zeros(ids.shape)
        shifted[..., 1:] = ids[..., :-1].clone()
        shifted[..., 0] = 0
        shifted.masked_fill_(shifted == -100, 0)
        return self.lin(self.emb(shifted)).sum()


def test_replayed_write_into_a_view_makes_the_whole_value():
    torch.manual_seed(0)
    ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))

    def before_embedding(t):
        e = next(o.id for o in t.ops if o.name == "aten::embedding")
        return [o.id for o in t.ops[:e]]

    t, plan = check(ShiftRight(), (ids,), before_embedding)
    assert "aten::copy_" in plan.recomputed  # the write into shifted[..., 1:]
