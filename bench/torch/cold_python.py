"""What a piece of the applier's Python costs in a training step, against
the same piece in a loop (issue 31): on a CPU a step's ops stream through
more memory than the caches hold, so Python that runs between them (a
hook, a check, the dispatch mode's entry) finds its code and objects
evicted and pays for fetching them again. Probes, each timed right after
ResNet-18's forward, right after its backward, and alone in a loop: the
input signature by PyTorch's pytree walk, the applier's check of the
inputs (Applied._check_inputs: a tuple of tensors is compared without that
walk), every parameter's .grad (the applier's gradients check), a module
hook registered and removed, and the first probe once more just after.

    PYTHONPATH=python python bench/torch/cold_python.py [--rounds 30] [--threads 2]
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import applier_cost as ac  # noqa: E402

import remat.torch as rt  # noqa: E402
from remat.torch.trace import signature  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m, inputs, lf = ac.build("resnet18")
    params = list(m.parameters())
    plan = rt.plan(m, inputs, lf, budget=None)  # store-all: only for its checks
    applied = plan.apply()
    probes = [("signature of the inputs (pytree)", lambda: signature(inputs)),
              ("the applier's check of the inputs", lambda: applied._check_inputs(inputs, {})),
              ("every parameter's .grad", lambda: [p for p in params if p.grad is not None]),
              ("a module hook registered and removed",
               lambda: m.fc.register_forward_pre_hook(lambda *x: None).remove())]

    def timed():
        out = []
        for _, f in probes + probes[:1]:
            t0 = time.perf_counter()
            f()
            out.append(time.perf_counter() - t0)
        return out

    where = {"after the forward": [], "after the backward": [], "in a loop": []}
    for _ in range(a.rounds):
        for p in params:
            p.grad = None
        out = m(*inputs)
        where["after the forward"].append(timed())
        lf(out).backward()
        where["after the backward"].append(timed())
    for _ in range(a.rounds):
        where["in a loop"].append(timed())
    names = [n for n, _ in probes] + ["the signature again, just after"]
    print("| probe, us (median of %d) | %s |" % (a.rounds, " | ".join(where)))
    print("|---|%s" % ("---:|" * len(where)))
    for i, n in enumerate(names):
        us = ["%.1f" % (statistics.median(x[i] for x in v) * 1e6) for v in where.values()]
        print("| %s | %s |" % (n, " | ".join(us)))


if __name__ == "__main__":
    main()
