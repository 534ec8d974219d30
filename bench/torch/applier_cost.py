"""What applying a plan costs (issue 31): per model, forward+backward steps
without a plan, under a store-all plan and under a plan at the midpoint
between the floor and store-all, alternated step by step in one process
(so that the machine's drift hits all three alike), median of --rounds
each. Prints each plan's step over the step without a plan, and for the
midpoint plan what it recomputes: FLOPs, and the time its recomputed ops
took at capture (each op timed as it ran), against which the plan's extra
time over the step without a plan is the applier's cost ("extra /
recomputed": 1.0 is recomputation alone).

    PYTHONPATH=python python bench/torch/applier_cost.py [--models resnet18,resnet50,gpt2,llama] [--rounds 5]
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests"))
import remat.torch as rt  # noqa: E402
import user_models as um  # noqa: E402


def build(name):
    import torchvision
    g = torch.Generator().manual_seed(0)
    if name in ("resnet18", "resnet50"):
        size = 64 if name == "resnet18" else 128
        m = getattr(torchvision.models, name)()
        x, y = torch.randn(8, 3, size, size, generator=g), torch.randint(0, 1000, (8,), generator=g)
        return m, (x,), (lambda o: F.cross_entropy(o, y))
    if name == "gpt2":
        m = um.GPT2(layers=4, embd=256, heads=4, context=256, vocab=8192, dropout=0.0)
        idx, tgt = torch.randint(0, 8192, (4, 256), generator=g), torch.randint(0, 8192, (4, 256), generator=g)
        return m, (idx,), um.gpt2_loss(tgt)
    if name == "llama":
        m = um.Llama(layers=4, dim=256, heads=4, vocab=8192, context=256)
        idx, tgt = torch.randint(0, 8192, (4, 256), generator=g), torch.randint(0, 8192, (4, 256), generator=g)
        return m, (idx,), (lambda o: F.cross_entropy(o.reshape(-1, o.shape[-1]), tgt.reshape(-1)))
    raise SystemExit("unknown model %s" % name)


def step(m, inputs, lf, plan):
    for p in m.parameters():
        p.grad = None
    t0 = time.perf_counter()
    if plan is None:
        lf(m(*inputs)).backward()
    else:
        with plan.apply():
            lf(m(*inputs)).backward()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18,resnet50,gpt2,llama")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print("| model | store-all / no plan | midpoint / no plan | midpoint recomputes (ops, extra FLOPs) | "
          "recomputed ops' time / step | extra / recomputed |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in a.models.split(","):
        torch.manual_seed(0)
        m, inputs, lf = build(name)
        t = rt.capture(m, inputs, lf)
        top = rt.plan_trace(t, None, "sgd", "all")
        floor = rt.plan_trace(t, 1, "sgd").floor
        mid = rt.plan_trace(t, (floor + rt.budget_for(top.peak_bytes)) // 2, "sgd")
        plans = {"none": None, "all": top, "mid": mid}
        times = {k: [] for k in plans}
        for k, p in plans.items():  # one warm step each
            step(m, inputs, lf, p)
        for _ in range(a.rounds):
            for k, p in plans.items():
                times[k].append(step(m, inputs, lf, p))
        med = {k: statistics.median(v) for k, v in times.items()}
        rec = sum(t.ops[i].seconds for grp in mid.recompute_groups for i in grp)
        print("| %s | %.3f | %.3f | %d, +%.2f%% | %.3f | %.2f |" % (
            name, med["all"] / med["none"], med["mid"] / med["none"], len(mid.recompute_ops),
            100 * mid.extra_flops / mid.flops, rec / med["none"], (med["mid"] - med["none"]) / rec if rec else 0.0))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
