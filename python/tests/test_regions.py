"""Per-layer checkpointing as one of optimal's candidates (plan_trace's
regions): the layers found from the module tree, strategy "manual" as
torch.utils.checkpoint around each layer would run it, optimal never
costlier than it at its peak (plan.compare()), and both run bitwise equal
to no plan and within budget."""
import loops
import pytest
import torch
import torch.nn.functional as F
import user_models as um

import remat.torch as rt


def _gpt2():
    torch.manual_seed(0)
    m = um.GPT2(layers=4, embd=64, heads=4, context=32, vocab=256, dropout=0.1)
    g = torch.Generator().manual_seed(5)
    x, y = torch.randint(0, 256, (2, 32), generator=g), torch.randint(0, 256, (2, 32), generator=g)
    return m, x, um.gpt2_loss(y)


def _opt(m):
    return torch.optim.AdamW(m.parameters(), lr=1e-3)


def test_layers_found_and_optimal_never_costlier_than_per_layer():
    m, x, lf = _gpt2()
    t = rt.capture(m, (x,), lf)
    assert t.region_class() is um.Block
    per_layer = rt.plan_trace(t, None, _opt(m), "manual")
    assert per_layer.feasible and per_layer.recompute_ops, "per-layer checkpointing recomputes each layer"
    top = rt.plan_trace(t, None, _opt(m), "all")
    assert per_layer.peak_bytes < top.peak_bytes
    # every recomputed op ran inside a layer; none outside
    inside = t.regions(um.Block)
    assert all(inside[i] >= 0 for i in per_layer.recompute_ops)
    p = rt.plan_trace(t, rt.budget_for(per_layer.peak_bytes), _opt(m))
    c = p.compare()
    assert c["regions"] == "Block" and c["calls"] == 4
    assert c["per_layer"]["peak_bytes"] == per_layer.peak_bytes
    assert c["plan"]["peak_bytes"] <= c["per_layer"]["peak_bytes"]
    assert c["plan"]["extra_flops"] <= c["per_layer"]["extra_flops"]
    # without the candidate the plan is never cheaper
    q = rt.plan_trace(t, rt.budget_for(per_layer.peak_bytes), _opt(m), regions=None)
    assert q.compare() is None
    assert p.extra_flops <= q.extra_flops


def test_regions_named_by_class_and_refused_when_absent():
    m, x, lf = _gpt2()
    t = rt.capture(m, (x,), lf)
    a = rt.plan_trace(t, None, _opt(m), "manual", regions=um.Block)
    b = rt.plan_trace(t, None, _opt(m), "manual")
    assert a.result == b.result
    with pytest.raises(ValueError, match="Conv2d"):
        rt.plan_trace(t, None, _opt(m), "manual", regions=torch.nn.Conv2d)
    with pytest.raises(ValueError, match="regions"):
        rt.plan_trace(t, None, _opt(m), "manual", regions="Block")
    # no regions: manual on a traced step keeps everything, as documented
    none = rt.plan_trace(t, None, _opt(m), "manual", regions=None)
    assert not none.recompute_ops


@pytest.mark.parametrize("strategy", ["manual", "optimal"])
def test_per_layer_plans_run_bitwise_and_within_budget(strategy):
    from remat.torch import memtrack
    m, x, lf = _gpt2()
    t = rt.capture(m, (x,), lf)
    per_layer = rt.plan_trace(t, None, _opt(m), "manual")
    budget = rt.budget_for(per_layer.peak_bytes)
    plan = per_layer if strategy == "manual" else rt.plan_trace(t, budget, _opt(m))
    got = loops.run(m, lambda i: (x,), lf, _opt, plan, 3)  # the captured model, trained under the plan
    ref = loops.run(_gpt2()[0], lambda i: (x,), lf, _opt, None, 3)  # the same weights, without one
    assert all(loops.same(r, g) for r, g in zip(ref, got)), "steps under the plan differ from those without it"
    if memtrack.counter() is not None:
        m, _, _ = _gpt2()
        t2 = rt.capture(m, (x,), lf)
        plan = (rt.plan_trace(t2, None, _opt(m), "manual") if strategy == "manual"
                else rt.plan_trace(t2, budget, _opt(m)))
        r = rt.measure(m, (x,), lf, plan=plan, optimizer=_opt(m), steps=3)
        assert r["peak_bytes"] <= budget, r
        assert 0.97 * plan.peak_bytes <= r["peak_bytes"] <= 1.03 * plan.peak_bytes, (r, plan.peak_bytes)


def test_torchvision_blocks_found():
    tv = pytest.importorskip("torchvision")
    m = tv.models.resnet18(num_classes=10)
    x, y = torch.randn(2, 3, 64, 64), torch.randint(0, 10, (2,))
    t = rt.capture(m, (x,), lambda o: F.cross_entropy(o, y))
    assert t.region_class() is tv.models.resnet.BasicBlock
    c = rt.plan_trace(t, None, _opt(m), "manual")
    assert c.feasible and c.recompute_ops


def test_the_outermost_of_classes_called_as_often():
    """EfficientNet: every MBConv holds a SqueezeExcitation, each called 16
    times: the layer is the MBConv."""
    tv = pytest.importorskip("torchvision")
    m = tv.models.efficientnet_b0(num_classes=10)
    x, y = torch.randn(2, 3, 64, 64), torch.randint(0, 10, (2,))
    t = rt.capture(m, (x,), lambda o: F.cross_entropy(o, y))
    assert t.region_class() is tv.models.efficientnet.MBConv
