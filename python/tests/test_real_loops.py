"""The budget where people really train: a plain script (no preload, no
launcher), gradient accumulation, inputs whose shapes change, and the
wrappers remat.torch does not plan (issue 31)."""
import contextlib
import copy
import os
import tempfile

import pytest
import torch
import torch.nn.functional as F
import user_models as um
from conftest import need_counter, run_plain

import remat
import remat.torch as rt


def unet(batch=4, size=32):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    m = um.UNet(ch=8)
    x, y = torch.randn(batch, 3, size, size, generator=g), torch.randint(0, 4, (batch, size, size), generator=g)
    return m, (x,), (lambda o: F.cross_entropy(o, y))


def llama(batch=2, seq=64):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    m = um.Llama(layers=2, dim=64, heads=4, vocab=512, context=128)
    idx, tgt = torch.randint(0, 512, (batch, seq), generator=g), torch.randint(0, 512, (batch, seq), generator=g)
    return m, (idx,), (lambda o: F.cross_entropy(o.reshape(-1, o.shape[-1]), tgt.reshape(-1)))


def mid_budget(trace, opt, **kw):
    top = rt.plan_trace(trace, None, opt, "all", **kw).peak_bytes
    floor = rt.plan_trace(trace, 1, opt, **kw).floor
    return (floor + rt.budget_for(top)) // 2


PLAIN = r"""
import sys, torch, torch.nn.functional as F
sys.path.insert(0, %(tests)r)
import remat.torch as rt, user_models as um
from remat.torch import memtrack
assert memtrack.counter() is None, "this script must run without the heap counter"
torch.set_num_threads(2)
torch.manual_seed(0)
m = um.UNet(ch=8)
x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 4, (4, 32, 32))
p = rt.plan(m, (x,), lambda o: F.cross_entropy(o, y), budget="1GiB", optimizer="sgd")
print("HOW", p.transients)
print("BYTES", sum(o.transient + o.transient_bwd for o in p.trace.ops))
print(repr(p))
"""


def test_a_plain_script_measures_transients():
    """python train.py, nothing preloaded: capture measures each op's
    transients with PyTorch's profiler, says so, and prints nothing of its own."""
    r = run_plain(PLAIN, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "HOW PyTorch profiler" in r.stdout
    assert int(r.stdout.split("BYTES ")[1].split()[0]) > 0
    assert "transients measured by PyTorch profiler; not seen: memory a kernel library allocates" in r.stdout
    assert "profiler_start" not in r.stderr and "USDT" not in r.stderr, r.stderr


def test_profiler_transients_match_the_heap_counter():
    """Per op, the profiler sees what the counter sees less what kernel code
    takes from malloc itself (PyTorch 2.1's BatchNorm backward: 128 KiB;
    oneDNN's own buffers): never more than the counter's bytes (+3%,
    +64 KiB), and over the step at least 90% of them (93% on PyTorch 2.15;
    the step's peak, which is what a plan holds, within 3%: below)."""
    need_counter()
    m, inputs, lf = unet()
    a = rt.capture(m, inputs, lf, transients="counter")
    b = rt.capture(m, inputs, lf, transients="profiler")
    assert a.transients == "heap counter" and b.transients == "PyTorch profiler"
    assert len(a.ops) == len(b.ops)
    seen = total = 0
    for x, y in zip(a.ops, b.ops):
        for u, v in ((x.transient, y.transient), (x.transient_bwd, y.transient_bwd)):
            assert v <= 1.03 * u + (64 << 10), (x.name, u, v)
            seen += v
            total += u
    assert total > 1 << 20  # the convolutions' columns, transposed ones included
    assert seen >= 0.90 * total, (seen, total)


@pytest.mark.parametrize("build", [unet, llama])
def test_memory_truth_with_transients_from_the_profiler(build):
    """Planned as a plain script plans (the profiler's transients), measured
    by the heap counter (every aligned block, every malloc of 64 KiB or
    more): within the budget and within 3% of the prediction."""
    need_counter()
    m, inputs, lf = build()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    t = rt.capture(m, inputs, lf, transients="profiler")
    b = mid_budget(t, opt)
    p = rt.plan_trace(t, b, opt)
    assert p.feasible and p.drop_ops
    r = rt.measure(m, inputs, lf, plan=p, optimizer=opt, steps=3)
    assert r["peak_bytes"] <= b, (r["peak_bytes"], b)
    assert abs(r["peak_bytes"] - p.peak_bytes) <= 0.03 * p.peak_bytes, (r["peak_bytes"], p.peak_bytes)


def test_the_concatenation_gradient_held_by_its_views():
    """PyTorch's cat backward returns its inputs' gradients as views into
    its output's gradient, so a U-Net's skip gradient, waiting for the
    encoder's max-pool, keeps the whole concatenation's gradient alive (the
    graph's grad_views). At this U-Net's floor the plan once held 1 MiB
    more than it predicted there (1.95% above the prediction, 0.9% above
    the budget; 10% above a capture whose transients measured lower)."""
    need_counter()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    m = um.UNet(ch=16)
    x, y = torch.randn(4, 3, 64, 64, generator=g), torch.randint(0, 4, (4, 64, 64), generator=g)
    lf = lambda o: F.cross_entropy(o, y)  # noqa: E731
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    t = rt.capture(m, (x,), lf, transients="profiler")
    assert any(op.name == "aten::cat" for op in t.ops)
    assert all(bool(op.get("grad_views")) == (op["name"] == "aten::cat") for op in t.graph()["ops"])
    floor = rt.plan_trace(t, 1, opt).floor
    p = rt.plan_trace(t, floor, opt)
    r = rt.measure(m, (x,), lf, plan=p, optimizer=opt, steps=3)
    assert r["peak_bytes"] <= floor, (r["peak_bytes"], floor)
    assert abs(r["peak_bytes"] - p.peak_bytes) <= 0.01 * p.peak_bytes, (r["peak_bytes"], p.peak_bytes)


def accumulate_loop(model, inputs, lf, plan, k, steps, set_to_none=True):
    torch.manual_seed(7)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=set_to_none)
        for _ in range(k):
            if plan is None:
                loss = lf(model(*inputs))
                (loss / k).backward()
            else:
                with plan.apply():
                    loss = lf(model(*inputs))
                    (loss / k).backward()
            losses.append(loss.detach().clone())
        opt.step()
    return losses, [p.detach().clone() for p in model.parameters()], [b.clone() for b in model.buffers()]


@pytest.mark.parametrize("k,set_to_none", [(2, True), (4, True), (1, False)])
def test_gradient_accumulation_within_budget_and_bitwise(k, set_to_none):
    m0, inputs, lf = unet()
    opt = torch.optim.SGD(m0.parameters(), lr=0.01, momentum=0.9)
    t = rt.capture(m0, inputs, lf)
    kw = {"accumulate": k} if k > 1 else {"grads_held": True}
    b = mid_budget(t, opt, **kw)
    p = rt.plan_trace(t, b, opt, **kw)
    assert p.feasible and p.grads_held and p.drop_ops
    assert p.predicted["gradients"] >= sum(q.numel() * 4 for q in m0.parameters())
    ref = accumulate_loop(copy.deepcopy(m0), inputs, lf, None, k, 3, set_to_none)
    got = accumulate_loop(copy.deepcopy(m0), inputs, lf, p, k, 3, set_to_none)
    for a, c in zip(ref, got):
        assert all(torch.equal(x, y) for x, y in zip(a, c))
    need_counter()
    m = copy.deepcopy(m0)
    r = rt.measure(m, inputs, lf, plan=p, optimizer=torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9),
                   steps=2, accumulate=k, set_to_none=set_to_none)
    assert r["peak_bytes"] <= b, (r["peak_bytes"], b)
    assert abs(r["peak_bytes"] - p.peak_bytes) <= 0.03 * p.peak_bytes, (r["peak_bytes"], p.peak_bytes)


def test_gradients_the_plan_did_not_count_are_refused():
    m, inputs, lf = unet()
    p = rt.plan(m, inputs, lf, budget=None, optimizer="sgd")
    lf(m(*inputs)).backward()  # a first micro-step: gradients held
    with pytest.raises(remat.RematError, match=r"hold a gradient at the step's start .*accumulate=k.*grads_held"):
        with p.apply():
            lf(m(*inputs)).backward()
    m.zero_grad(set_to_none=True)
    with p.apply():
        lf(m(*inputs)).backward()
    # the model a plan is applied to is the one checked: a copy of the model, called
    # under a plan of the original, is checked when named
    other = copy.deepcopy(m)
    with p.apply(other):
        lf(other(*inputs)).backward()
    with pytest.raises(remat.RematError, match="hold a gradient"):
        with p.apply(other):
            lf(other(*inputs)).backward()


def test_a_plan_for_other_shapes_is_refused():
    m, inputs, lf = unet(batch=4)
    p = rt.plan(m, inputs, lf, budget=None, optimizer="sgd")
    big = torch.randn(8, 3, 32, 32)
    with pytest.raises(remat.RematError, match=r"made for inputs \(4, 3, 32, 32\) float32, and the model was called "
                                               r"with \(8, 3, 32, 32\) float32"):
        with p.apply():
            m(big)
    with pytest.raises(remat.RematError, match="float64"):
        with p.apply():
            m(inputs[0].double())
    assert all(q.grad is None for q in m.parameters())


def test_the_planner_plans_each_shape_once():
    m, _, _ = llama()
    opt = torch.optim.AdamW(m.parameters())
    g = torch.Generator().manual_seed(1)
    lengths = [32, 64, 48, 32, 64, 48]
    data = [(torch.randint(0, 512, (2, n), generator=g), torch.randint(0, 512, (2, n), generator=g)) for n in lengths]
    loss_of = lambda tgt: (lambda o: F.cross_entropy(o.reshape(-1, o.shape[-1]), tgt.reshape(-1)))  # noqa: E731
    # a budget between the floor and store-all of the longest sequence
    t = rt.capture(m, (data[1][0],), loss_of(data[1][1]))
    budget = mid_budget(t, opt)
    planner = rt.Planner(m, budget, optimizer=opt)
    counter = None
    try:
        from remat.torch import memtrack
        counter = memtrack.counter()
    except Exception:
        pass
    for idx, tgt in data:
        with planner.apply((idx,), loss_of(tgt)):
            loss_of(tgt)(m(idx)).backward()
        opt.step()
        opt.zero_grad()
        if counter is not None:
            r = rt.measure(m, (idx,), loss_of(tgt), plan=planner.plan_for((idx,)), optimizer=opt, steps=1)
            assert r["peak_bytes"] <= budget, (idx.shape, r["peak_bytes"], budget)
            opt.zero_grad()
    assert len(planner) == 3
    assert "3 plans" in repr(planner) and "(2, 48) int64" in repr(planner)
    with pytest.raises(remat.RematError, match="no plan fits 1000 bytes for inputs"):
        rt.Planner(m, 1000, optimizer=opt).plan_for((data[0][0],), loss_of(data[0][1]))


def test_fsdp2_one_rank_planned_and_grouped_units_refused():
    """FSDP2 on one rank (world size 1, FSDP's path without collectives) is
    planned and bitwise; fully_shard over several modules at once
    (fully_shard([a, b]), one state for a group) is refused, naming it.
    test_fsdp.py runs 2 ranks."""
    dist = pytest.importorskip("torch.distributed")
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import fully_shard
        except ImportError:
            pytest.skip("this PyTorch has no fully_shard")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("no gloo")
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(d, "pg"), rank=0, world_size=1)
        try:
            torch.manual_seed(0)
            base = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.GELU(), torch.nn.Linear(64, 64),
                                       torch.nn.GELU(), torch.nn.Linear(64, 2))
            x = torch.randn(16, 8)

            def sharded():
                m = copy.deepcopy(base)
                fully_shard(m[0])
                fully_shard(m[2])
                fully_shard(m)
                return m

            def run(m, plan):
                opt = torch.optim.SGD(m.parameters(), lr=0.1)
                out = []
                for _ in range(3):
                    opt.zero_grad()
                    with plan.apply(m) if plan is not None else contextlib.nullcontext():
                        loss = m(x).square().mean()
                        loss.backward()
                    opt.step()
                    out.append(loss.detach())
                return out + [p.to_local().detach().clone() for p in m.parameters()]

            m = sharded()
            t = rt.capture(m, (x,), lambda o: o.square().mean())
            assert sum(o.name.startswith("fsdp.all_gather") for o in t.ops) == 3
            plan = rt.plan_trace(t, rt.plan_trace(t, 1).floor)
            assert plan.feasible and plan.recompute_ops
            a, b = run(sharded(), None), run(sharded(), plan)
            assert all(torch.equal(u, v) for u, v in zip(a, b))
            g = copy.deepcopy(base)
            fully_shard([g[0], g[2]])
            with pytest.raises(rt.CaptureError, match=r"fully_shard over several modules at once"):
                rt.plan(g, (x,), lambda o: o.sum(), budget="1GiB")
        finally:
            dist.destroy_process_group()
