"""remat.torch under DistributedDataParallel (CPU, gloo, 2 processes): every
rank captures the DDP-wrapped model on its own batch and plans it at the
same budget; the plans are identical on every rank (the planner sees only
shapes, sizes and costs, never data), and 5 steps under the plan give the
losses, gradients and weights of 5 steps without it, on every rank.

DDP's own memory is in the plan: its gradient buckets (held for the
model's life; with gradient_as_bucket_view they are the gradients), and,
with several buckets, what a bucket's all-reduce takes while the backward
runs. With the heap counter preloaded (python -m remat.torch run -m
pytest), what DDP's construction holds is the buckets' bytes, and each
rank's measured peak is within its budget and 3% of the prediction."""
import json
import os
import socket
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _steps(ddp, opt, x, y, plan, n):
    losses, grads = [], None
    for _ in range(n):
        opt.zero_grad()
        if plan is None:
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()
        else:
            with plan.apply():
                loss = F.cross_entropy(ddp(x), y)
                loss.backward()
        losses.append(loss.detach().clone())
        grads = [p.grad.clone() for p in ddp.parameters()]
        opt.step()
    return losses, grads, [p.detach().clone() for p in ddp.parameters()]


def _worker(rank, world, port, out):
    sys.path.insert(0, HERE)
    import copy

    import user_models as um
    from torch.nn.parallel import DistributedDataParallel as DDP

    import remat.torch as rt

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        torch.manual_seed(0)  # the same weights on every rank
        model = um.CifarCNN()
        g = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
        x, y = torch.randn(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g)
        lf = lambda o: F.cross_entropy(o, y)  # noqa: E731
        ddp = DDP(copy.deepcopy(model))
        trace = rt.capture(ddp, (x,), lf)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        top = rt.plan_trace(trace, None, opt, "all").peak_bytes
        floor = rt.plan_trace(trace, 1, opt).floor
        budget = (floor + rt.budget_for(top)) // 2
        plan = rt.plan_trace(trace, budget, opt)
        mine = json.dumps({"graph": trace.graph(), "plan": plan.result}, sort_keys=True)
        every = [None] * world
        dist.all_gather_object(every, mine)
        torch.manual_seed(7)
        a = DDP(copy.deepcopy(model))
        ref = _steps(a, torch.optim.SGD(a.parameters(), lr=0.01, momentum=0.9), x, y, None, 5)
        torch.manual_seed(7)
        b = DDP(copy.deepcopy(model))
        got = _steps(b, torch.optim.SGD(b.parameters(), lr=0.01, momentum=0.9), x, y, plan, 5)
        same = all(all(torch.equal(u, v) for u, v in zip(r, s)) for r, s in zip(ref, got))
        with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
            json.dump({"plans_equal": all(e == mine for e in every), "feasible": plan.feasible,
                       "recomputed": len(plan.recompute_ops), "dropped": len(plan.drop_ops),
                       "bitwise": same, "losses": [float(v) for v in got[0]]}, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo")
def test_plan_identical_on_every_rank_under_ddp(tmp_path):
    world = 2
    mp.spawn(_worker, args=(world, _free_port(), str(tmp_path)), nprocs=world, join=True)
    res = [json.load(open(tmp_path / ("rank%d.json" % r))) for r in range(world)]
    for r in res:
        assert r["feasible"]
        assert r["plans_equal"], "the ranks planned differently"
        assert r["dropped"] > 0, "a budget below store-all drops something"
        assert r["bitwise"], "DDP steps under the plan differ from those without it"
    # the gradients are averaged: every rank trains the same weights on different batches
    assert res[0]["losses"] != res[1]["losses"]


def _settled(c, every=0.01, most=2.0):
    """The counter's live bytes once three readings `every` seconds apart
    agree (at most `most` seconds). DDP's construction broadcasts the
    parameters as one flattened tensor, and gloo's worker thread may let
    that tensor go a moment after the broadcast returned: read at once, the
    construction once held twice its buckets (a CI run of 2026-11-28)."""
    import time
    last, same, waited = c.live(), 0, 0.0
    while same < 2 and waited < most:
        time.sleep(every)
        waited += every
        now = c.live()
        same = same + 1 if now == last else 0
        last = now
    return last


def _truth_worker(rank, world, port, out, cap, views):
    sys.path.insert(0, HERE)
    import copy

    import user_models as um
    from torch.nn.parallel import DistributedDataParallel as DDP

    import remat.torch as rt
    from remat.torch import compat, memtrack

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        torch.manual_seed(0)
        model = um.CifarCNN()
        g = torch.Generator().manual_seed(100 + rank)
        x, y = torch.randn(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g)
        lf = lambda o: F.cross_entropy(o, y)  # noqa: E731
        c = memtrack.counter()

        def wrap():
            """A DDP model, and the bytes its construction held by the counter
            (None without it). The process's first construction also holds
            gloo's own buffers for good (3.4 MB on PyTorch 2.15, whatever the
            model: docs/pytorch.md); each after it, its buckets alone."""
            m = copy.deepcopy(model)
            dist.barrier()
            pre = c.live() if c is not None else 0
            d = DDP(m, bucket_cap_mb=cap, gradient_as_bucket_view=views)
            dist.barrier()
            return d, (_settled(c) - pre if c is not None else None)

        ddp, _ = wrap()
        held = None
        trace = rt.capture(ddp, (x,), lf)
        buckets = sum(compat.ddp_buckets(ddp)[0])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        top = rt.plan_trace(trace, None, opt, "all")
        floor = rt.plan_trace(trace, 1, opt).floor
        rows = []
        for frac in (0.25, 0.75):
            budget = int(floor + frac * (rt.budget_for(top.peak_bytes) - floor))
            plan = rt.plan_trace(trace, budget, opt)
            row = {"budget": budget, "predicted": plan.peak_bytes, "feasible": plan.feasible,
                   "communication": plan.predicted.get("communication", 0), "grads_held": plan.grads_held,
                   "measured": None, "bitwise": None}
            if frac == 0.25:
                torch.manual_seed(7)
                a = DDP(copy.deepcopy(model), bucket_cap_mb=cap, gradient_as_bucket_view=views)
                ref = _steps(a, torch.optim.SGD(a.parameters(), lr=0.01, momentum=0.9), x, y, None, 3)
                torch.manual_seed(7)
                b = DDP(copy.deepcopy(model), bucket_cap_mb=cap, gradient_as_bucket_view=views)
                got = _steps(b, torch.optim.SGD(b.parameters(), lr=0.01, momentum=0.9), x, y, plan, 3)
                row["bitwise"] = all(all(torch.equal(u, v) for u, v in zip(r, s)) for r, s in zip(ref, got))
            if c is not None:
                d2, held = wrap()
                o2 = torch.optim.SGD(d2.parameters(), lr=0.01, momentum=0.9)
                for _ in range(2):  # DDP rebuilds its buckets in its second step: not the steps measured
                    lf(d2(x)).backward()
                    o2.zero_grad()
                r = rt.measure(d2, (x,), lf, plan=plan, optimizer=o2, steps=4)
                row["measured"] = r["peak_bytes"]
                print("ddp truth rank %d cap %s views %s: budget %d predicted %d measured %d (%.3f) buckets %d "
                      "all-reduce %d" % (rank, cap, views, budget, plan.peak_bytes, r["peak_bytes"],
                                         r["peak_bytes"] / plan.peak_bytes, sum(compat.ddp_buckets(d2)[0]),
                                         trace.comm_transient), flush=True)
            rows.append(row)
        with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
            json.dump({"held": held, "buckets": buckets, "all_reduce": trace.comm_transient, "rows": rows,
                       "floor": floor,
                       "store_all": top.peak_bytes}, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo")
@pytest.mark.parametrize("cap,views", [(25.0, False), (1.0, False), (25.0, True)],
                         ids=["buckets", "small-buckets", "grads-as-bucket-views"])
def test_ddp_buckets_in_the_plan(tmp_path, cap, views):
    """DDP's gradient buckets are in the plan (category communication, or,
    with gradient_as_bucket_view, the gradients held from the step's start);
    what DDP's construction held by the heap counter is that many bytes;
    and, with the counter preloaded, each rank's measured peak is within
    its budget and within 3% of the prediction."""
    world = 2
    mp.spawn(_truth_worker, args=(world, _free_port(), str(tmp_path), cap, views), nprocs=world, join=True)
    for rank in range(world):
        r = json.load(open(tmp_path / ("rank%d.json" % rank)))
        assert r["buckets"] > 0
        if r["held"] is not None:
            assert r["held"] == r["buckets"], "DDP's construction held %d bytes of tensors, its buckets report %d" % (
                r["held"], r["buckets"])
        for row in r["rows"]:
            assert row["feasible"], row
            assert row["grads_held"] == views, row
            assert row["communication"] == (0 if views else r["buckets"]) + r["all_reduce"], row
            if row["bitwise"] is not None:
                assert row["bitwise"], "DDP steps under the plan differ from those without it"
            if row["measured"] is not None:
                assert row["measured"] <= row["budget"], row
                # conservative where it is not exact: with gradient_as_bucket_view
                # the plan at the lower budget (0.958 of its prediction measured),
                # and with several buckets where gloo's all-reduce buffers, counted
                # for the whole backward, missed the step's peak (0.962 once in
                # about 5 runs): docs/pytorch.md
                low = 0.95 if views or cap < 25 else 0.97
                assert low * row["predicted"] <= row["measured"] <= 1.03 * row["predicted"], row
