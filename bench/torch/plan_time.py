"""Capture and planning times of remat.torch on the issue's large models:
GPT-2 small (12 layers, 768 wide, context 1024, batch 1) and ResNet-50 at
224x224 (batch 2), and HeavyModel (1000 x 100 scalar adds):

    PYTHONPATH=python python bench/torch/plan_time.py [--models gpt2,resnet50,heavy]

Planning is remat_plan_graph_json on the captured graph: store-all, the
floor (a budget of 1 byte), and a budget halfway between them.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests"))
import user_models as um  # noqa: E402

import remat.torch as rt  # noqa: E402


def model(name):
    g = torch.Generator().manual_seed(0)
    if name == "gpt2":
        m = um.GPT2()
        idx = torch.randint(0, 50257, (1, 1024), generator=g)
        return m, (idx,), um.gpt2_loss(torch.randint(0, 50257, (1, 1024), generator=g))
    if name == "resnet50":
        import torchvision
        y = torch.randint(0, 1000, (2,), generator=g)
        return torchvision.models.resnet50(), (torch.randn(2, 3, 224, 224, generator=g),), \
            (lambda o: F.cross_entropy(o, y))
    if name == "heavy":
        return um.HeavyModel(1000, 100), (torch.tensor(0.5, requires_grad=True),), (lambda y: y)
    raise SystemExit("unknown model " + name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gpt2,resnet50,heavy")
    a = ap.parse_args()
    print("%-9s %8s %9s %10s %10s %10s %10s" % ("model", "ops", "capture s", "all s", "floor s", "mid s", "mid MiB"))
    for name in a.models.split(","):
        m, inputs, lf = model(name)
        t0 = time.perf_counter()
        tr = rt.capture(m, inputs, lf, warmup=False)
        cap = time.perf_counter() - t0
        opt = torch.optim.AdamW(m.parameters())
        t0 = time.perf_counter()
        top = rt.plan_trace(tr, None, opt, "all")
        t1 = time.perf_counter()
        fl = rt.plan_trace(tr, 1, opt)
        t2 = time.perf_counter()
        mid = (fl.floor + rt.budget_for(top.peak_bytes)) // 2
        p = rt.plan_trace(tr, mid, opt)
        t3 = time.perf_counter()
        print("%-9s %8d %9.2f %10.2f %10.2f %10.2f %10.1f" % (name, len(tr.ops), cap, t1 - t0, t2 - t1, t3 - t2,
                                                               p.peak_bytes / 2 ** 20))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
