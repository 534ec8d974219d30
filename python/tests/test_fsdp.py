"""remat.torch under FSDP2 (torch.distributed.fsdp.fully_shard; CPU, gloo,
2 processes): every rank captures its shards' step and plans it (the
graph each rank plans is the same: fsdp.py), at two budgets between the
floor and store-all; 5 steps under each plan give the losses and sharded
weights of 5 FSDP steps without it, on every rank; and where the heap
counter is preloaded (python -m remat.torch run -m pytest), each rank's
measured peak is within its budget and within 3% above the prediction
(docs/pytorch.md, FSDP2).

A transformer (GPT-2 with dropout, every block a unit) and a CNN
(torchvision's ResNet-18 with BatchNorm, every residual block a unit)."""
import copy
import json
import os
import socket
import sys
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def _fully_shard():
    try:
        from torch.distributed.fsdp import fully_shard
        return fully_shard
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import fully_shard
            return fully_shard
        except ImportError:
            return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model(kind, rank):
    """The model (the same weights on every rank), its blocks, its batch
    (each rank its own) and loss."""
    import user_models as um
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(100 + rank)
    if kind == "gpt2":
        m = um.GPT2(layers=4, embd=128, heads=4, context=64, vocab=512, dropout=0.1)
        x = torch.randint(0, 512, (4, 64), generator=g)
        y = torch.randint(0, 512, (4, 64), generator=g)
        return m, list(m.h), x, um.gpt2_loss(y)
    import torchvision
    m = torchvision.models.resnet18(num_classes=10)
    x = torch.randn(8, 3, 96, 96, generator=g)
    y = torch.randint(0, 10, (8,), generator=g)
    blocks = [b for layer in (m.layer1, m.layer2, m.layer3, m.layer4) for b in layer]
    return m, blocks, x, (lambda o: F.cross_entropy(o, y))


def _sharded(base, kind):
    m = copy.deepcopy(base)
    blocks = list(m.h) if kind == "gpt2" else [b for layer in (m.layer1, m.layer2, m.layer3, m.layer4) for b in layer]
    fs = _fully_shard()
    for b in blocks:
        fs(b)
    fs(m)
    return m


def _steps(m, x, lf, plan, n):
    from remat.torch import compat
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    losses = []
    for _ in range(n):
        opt.zero_grad()
        if plan is None:
            loss = lf(m(x))
            loss.backward()
        else:
            with plan.apply(m):
                loss = lf(m(x))
                loss.backward()
        losses.append(loss.detach().clone())
        opt.step()
    return losses, [compat.local(p).detach().clone() for p in m.parameters()]


def _worker(rank, world, port, out, kind):
    sys.path.insert(0, HERE)
    import remat.torch as rt
    from remat.torch import memtrack

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        base, _, x, lf = _model(kind, rank)
        m = _sharded(base, kind)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trace = rt.capture(m, (x,), lf)
        probed = not any("second time" in str(w.message) for w in caught)
        held = sum(1 for v in trace.graph()["values"] if "held_until" in v)
        top = rt.plan_trace(trace, None, opt, "all").peak_bytes
        floor = rt.plan_trace(trace, 1, opt).floor
        rows = []
        for frac in (0.25, 0.75):
            budget = int(floor + frac * (rt.budget_for(top) - floor))
            plan = rt.plan_trace(trace, budget, opt)
            every = [None] * world
            dist.all_gather_object(every, json.dumps(plan.result, sort_keys=True))
            torch.manual_seed(7)
            ref = _steps(_sharded(base, kind), x, lf, None, 5)
            torch.manual_seed(7)
            got = _steps(_sharded(base, kind), x, lf, plan, 5)
            same = all(torch.equal(u, v) for u, v in zip(ref[0] + ref[1], got[0] + got[1]))
            row = {"budget": budget, "predicted": plan.peak_bytes, "feasible": plan.feasible,
                   "plans_equal": len(set(every)) == 1, "bitwise": same,
                   "gathers": sum(1 for o in trace.ops if o.name.startswith("fsdp.all_gather")),
                   "regathered": sum(1 for o in plan.drop_ops if trace.ops[o].name.startswith("fsdp.all_gather")),
                   "recomputed": len(plan.recompute_ops), "measured": None}
            if memtrack.counter() is not None:
                m2 = _sharded(base, kind)
                o2 = torch.optim.AdamW(m2.parameters(), lr=1e-3)
                r = rt.measure(m2, (x,), lf, plan=plan, optimizer=o2, steps=3)
                row["measured"], row["steps"] = r["peak_bytes"], [s["peak_bytes"] for s in r["steps"]]
            rows.append(row)
        with open(os.path.join(out, "%s-rank%d.json" % (kind, rank)), "w") as f:
            json.dump({"floor": floor, "store_all": top, "rows": rows, "probed": probed, "held": held}, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available() or _fully_shard() is None,
                    reason="torch.distributed with gloo and FSDP2's fully_shard")
@pytest.mark.parametrize("kind", ["gpt2", "resnet18"])
def test_fsdp2_per_rank_plans_bitwise_and_within_budget(tmp_path, kind):
    if kind == "resnet18":
        pytest.importorskip("torchvision")
    world = 2
    mp.spawn(_worker, args=(world, _free_port(), str(tmp_path), kind), nprocs=world, join=True)
    res = [json.load(open(tmp_path / ("%s-rank%d.json" % (kind, r)))) for r in range(world)]
    for r in res:
        assert r["probed"], "capture's second forward (holds.py) ran other calls than the first"
        assert r["held"] > 0, "no value is held past its last read: the probe saw nothing"
        assert r["floor"] < r["store_all"]
        for row in r["rows"]:
            assert row["feasible"] and row["plans_equal"], row
            assert row["gathers"] >= 5, "an all-gather per unit"
            assert row["recomputed"] > 0, row
            assert row["bitwise"], "FSDP2 steps under the plan differ from those without it: %s" % row
            if row["measured"] is not None:
                # within the budget and 3% of the prediction in every measured
                # step: gloo's collectives return once gloo has let go of their
                # buffers (compat.fsdp_gloo_comms; before, in about 1 step in
                # 10 a buffer outlived its call, up to 7% above the others and
                # 2% over the budget)
                assert row["measured"] <= row["budget"], row
                assert 0.85 <= row["measured"] / row["predicted"] <= 1.03, row
    # the lower budget gathers some unit again in its backward; the higher keeps more gathered
    assert res[0]["rows"][0]["regathered"] >= res[0]["rows"][1]["regathered"]
