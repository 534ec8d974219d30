"""remat.torch under DistributedDataParallel (CPU, gloo, 2 processes): every
rank captures the DDP-wrapped model on its own batch and plans it at the
same budget; the plans are identical on every rank (the planner sees only
shapes, sizes and costs, never data), and 5 steps under the plan give the
losses, gradients and weights of 5 steps without it, on every rank."""
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

    import remat.torch as rt
    import user_models as um
    from torch.nn.parallel import DistributedDataParallel as DDP

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
