"""Memory truth for remat's plans of PyTorch models (issue 18): per model,
the store-all peak and the smallest feasible budget (floor), then three
budgets between them; at each, remat's predicted peak against the peak the
heap counter measures over PyTorch's steps under the plan (never above the
budget, within 3% of the prediction), and the floor checked: it fits, and
1 MiB less is refused. Also the planning time. The capture measures
transients as a plain script does (--transients profiler, the default:
PyTorch's profiler, nothing preloaded needed); the measurement is the heap
counter's (every aligned block and every malloc of 64 KiB or more), so run
it with the counter preloaded:

    python -m remat.torch run bench/torch/remat_truth.py [--models resnet50,...] [--transients counter]
        [--device cuda] [--json FILE]

On a CUDA device the measured peak is the allocator's requested bytes
(each block at the bytes asked for, as the heap counter counts them), and
a last column gives max_memory_allocated's count over the prediction: the
caching allocator's blocks, with their rounding and unsplit slack.
"""
import argparse
import copy
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests"))
import user_models as um  # noqa: E402

import remat.torch as rt  # noqa: E402


def models(name, device="cpu"):
    import torchvision
    g = torch.Generator().manual_seed(0)
    d = lambda t: t.to(device)  # noqa: E731
    if name == "resnet50":
        m = torchvision.models.resnet50()
        x, y = d(torch.randn(4, 3, 96, 96, generator=g)), d(torch.randint(0, 1000, (4,), generator=g))
        return m, (x,), (lambda o: F.cross_entropy(o, y))
    if name == "densenet121":
        m = torchvision.models.densenet121()
        x, y = d(torch.randn(4, 3, 64, 64, generator=g)), d(torch.randint(0, 1000, (4,), generator=g))
        return m, (x,), (lambda o: F.cross_entropy(o, y))
    if name == "mobilenet_v2":
        m = torchvision.models.mobilenet_v2()
        x, y = d(torch.randn(8, 3, 96, 96, generator=g)), d(torch.randint(0, 1000, (8,), generator=g))
        return m, (x,), (lambda o: F.cross_entropy(o, y))
    if name == "gpt2":
        m = um.GPT2(layers=4, embd=256, heads=4, context=256, vocab=8192)
        idx = d(torch.randint(0, 8192, (4, 256), generator=g))
        return m, (idx,), um.gpt2_loss(d(torch.randint(0, 8192, (4, 256), generator=g)))
    if name == "siamese":
        m = um.Siamese()
        return m, (d(torch.randn(4, 2, 3, 64, 64, generator=g)),), um.siamese_loss
    if name == "shufflenet":  # grouped and depthwise convolutions, channel shuffles
        m = torchvision.models.shufflenet_v2_x1_0()
        x, y = d(torch.randn(8, 3, 96, 96, generator=g)), d(torch.randint(0, 1000, (8,), generator=g))
        return m, (x,), (lambda o: F.cross_entropy(o, y))
    if name == "unet":  # transposed convolutions, BatchNorm, concatenation, dropout
        m = um.UNet(ch=16)
        x, y = d(torch.randn(4, 3, 64, 64, generator=g)), d(torch.randint(0, 4, (4, 64, 64), generator=g))
        return m, (x,), (lambda o: F.cross_entropy(o, y))
    if name == "llama":  # RMSNorm, rotary tables, SwiGLU, SDPA, embeddings
        m = um.Llama(layers=4, dim=256, heads=4, vocab=8192, context=256)
        idx, tgt = d(torch.randint(0, 8192, (4, 256), generator=g)), d(torch.randint(0, 8192, (4, 256), generator=g))
        return m, (idx,), (lambda o: F.cross_entropy(o.reshape(-1, o.shape[-1]), tgt.reshape(-1)))
    if name == "cifar":
        m = um.CifarCNN()
        x, y = d(torch.randn(128, 3, 32, 32, generator=g)), d(torch.randint(0, 10, (128,), generator=g))
        return m, (x,), (lambda o: F.cross_entropy(o, y))
    raise SystemExit("unknown model %s" % name)


def row(name, steps, device, transients):
    torch.manual_seed(0)
    m0, inputs, lf = models(name, device)
    m0 = m0.to(device)
    t0 = time.perf_counter()
    tr = rt.capture(m0, inputs, lf, transients=transients)
    cap = time.perf_counter() - t0
    opt0 = torch.optim.SGD(m0.parameters(), lr=0.01, momentum=0.9)
    top = rt.plan_trace(tr, None, opt0, "all").peak_bytes
    t0 = time.perf_counter()
    floor = rt.plan_trace(tr, 1, opt0).floor
    tplan = time.perf_counter() - t0
    fits = rt.plan_trace(tr, floor, opt0).feasible
    below = rt.plan_trace(tr, floor - (1 << 20), opt0).feasible
    out = {"model": name, "ops": len(tr.ops), "transients": tr.transients, "capture_s": cap, "plan_s": tplan,
           "store_all": top, "floor": floor,
           "floor_fits": fits, "floor_minus_1MiB_refused": not below, "rows": []}
    for frac in (0.0, 0.5, 1.0):
        budget = int(floor + frac * max(0, rt.budget_for(top) - floor))
        m = copy.deepcopy(m0)
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        p = rt.plan_trace(tr, budget, opt)
        r = rt.measure(m, inputs, lf, plan=p, optimizer=opt, steps=steps)
        out["rows"].append({"budget": budget, "predicted": p.peak_bytes, "measured": r["peak_bytes"],
                            "ratio": r["peak_bytes"] / p.peak_bytes, "within_budget": r["peak_bytes"] <= budget,
                            "recomputed_ops": len(p.recompute_ops), "extra_flops_pct": 100 * p.extra_flops / p.flops,
                            "step_s": r["seconds"]})
        if "allocator_peak_bytes" in r:
            out["rows"][-1]["allocator_peak"] = r["allocator_peak_bytes"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet50,densenet121,mobilenet_v2,shufflenet,unet,gpt2,llama,cifar")
    ap.add_argument("--transients", default="profiler", help="how capture measures transients: profiler (as a plain "
                    "script does), counter, auto or none")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (the measured peak: torch.cuda's)")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(min(2, os.cpu_count()))
    if a.device == "cpu" and rt.memtrack.counter() is None:
        raise SystemExit("the heap counter measures: run python -m remat.torch run bench/torch/remat_truth.py ...")
    res = []
    print("%-13s %12s %12s %12s %7s %6s %5s %8s%s" % ("model", "budget", "predicted", "measured", "meas/pr", "<=bud",
                                                    "recmp", "extra%", "  alloc/pr" if a.device == "cuda" else ""))
    for name in a.models.split(","):
        r = row(name, a.steps, torch.device(a.device), a.transients if a.device == "cpu" else "auto")
        res.append(r)
        for x in r["rows"]:
            alloc = "  %8.4f" % (x["allocator_peak"] / x["predicted"]) if "allocator_peak" in x else ""
            print("%-13s %12d %12d %12d %7.4f %6s %5d %8.2f%s" % (name, x["budget"], x["predicted"], x["measured"],
                                                               x["ratio"], x["within_budget"], x["recomputed_ops"],
                                                               x["extra_flops_pct"], alloc))
        print("%-13s floor %d fits %s, 1 MiB less refused %s; store-all %d; %d ops captured in %.2f s, floor found in "
              "%.2f s" % (name, r["floor"], r["floor_fits"], r["floor_minus_1MiB_refused"], r["store_all"], r["ops"],
                          r["capture_s"], r["plan_s"]))
        sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
