#!/usr/bin/python3
"""PyTorch's side of the remat benchmark: one model, one batch, one
configuration per run, printing the columns `remat bench` prints.

    /usr/bin/python3 bench/torch/bench_torch.py --model cnn --batch 128 \
        [--checkpoint] [--threads 2] [--steps 5] [--warmup 2] \
        [--init-from W.safetensors] [--json]

Models: cnn (remat's cnn: src/models/models.c), resnet18, resnet50,
densenet-bc, siamese-resnet50 (bench/torch/cnn_models.py), gpt2, gpt2-small
(bench/torch/gpt2_model.py). --checkpoint wraps every block the way remat's
models mark them in torch.utils.checkpoint.checkpoint(use_reentrant=False).

A training step is zero_grad(set_to_none=False) (gradients stay allocated,
as remat's do), forward, backward and SGD(lr 1e-3, momentum 0.9), as in
`remat bench`. Columns:
  median_step_seconds  median over --steps timed steps after --warmup
  peak_bytes           parameters + gradients + optimizer state + the peak
                       of the heap bytes a step holds on top of what was
                       live before it, counted by bench/torch/memtrack.c
                       (preloaded; every block of 64 KiB or more through
                       glibc's allocator, which PyTorch's CPU tensors use):
                       remat's measured peak counts the same things (the
                       batch, bound by the caller, is left out of both)
  state_bytes          parameters + gradients + optimizer state
  process_peak_rss_bytes  ru_maxrss of this process
"""
import argparse
import ctypes
import json
import subprocess
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class CNN(nn.Module):
    """remat's cnn (src/models/models.c), with the same state_dict names."""

    def __init__(self, channels=1, size=28, classes=10, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.features = nn.Sequential(
            nn.Conv2d(channels, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25))
        flat = 64 * (size // 4) * (size // 4)
        self.classifier = nn.Sequential(nn.Linear(flat, 512), nn.ReLU(), nn.Dropout(0.5), nn.Linear(512, classes))

    def forward(self, x):
        blocks = (self.features[0:6], self.features[6:12])
        for b in blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.use_checkpoint else b(x)
        return self.classifier(torch.flatten(x, 1))


def build(args):
    """Returns (module, (input, target), loss(model, input, target))."""
    g = torch.Generator().manual_seed(args.seed)
    if args.model == "cnn":
        m = CNN(channels=args.channels, size=args.size, classes=args.classes, use_checkpoint=args.checkpoint)
        x = torch.rand(args.batch, args.channels, args.size, args.size, generator=g) * 2 - 1
        y = torch.randint(0, args.classes, (args.batch,), generator=g)
        return m, (x, y), lambda model, x, y: F.cross_entropy(model(x), y)
    if args.model.startswith("gpt2"):
        import gpt2_model
        if args.model == "gpt2-small":
            args.layers, args.embd, args.heads, args.vocab = 12, 768, 12, 50257
        cfg = gpt2_model.GPTConfig(layers=args.layers, embd=args.embd, heads=args.heads, context=args.context,
                                   vocab=args.vocab, use_checkpoint=args.checkpoint)
        m = gpt2_model.GPT(cfg)
        x = torch.randint(0, cfg.vocab, (args.batch, cfg.context), generator=g)
        y = torch.randint(0, cfg.vocab, (args.batch * cfg.context,), generator=g)
        return m, (x, y), lambda model, x, y: model(x, y)[1]
    import cnn_models
    m = cnn_models.build(args.model, checkpoint=args.checkpoint)
    c, h, w, classes = cnn_models.DEFAULTS[args.model]
    x = torch.rand(args.batch, c, h, w, generator=g) * 2 - 1
    if args.model.startswith("siamese"):
        y = torch.rand(args.batch, c, h, w, generator=g) * 2 - 1
    else:
        y = torch.randint(0, classes, (args.batch,), generator=g)
    return m, (x, y), lambda model, x, y: cnn_models.loss(model, args.model, x, y)


def memtrack():
    """The preloaded counters, re-executing this script under LD_PRELOAD
    with a freshly built memtrack.so when they are not there yet."""
    try:
        lib = ctypes.CDLL(None)
        lib.memtrack_live.restype = ctypes.c_int64
        lib.memtrack_peak.restype = ctypes.c_int64
        return lib
    except AttributeError:
        pass
    if os.environ.get("REMAT_MEMTRACK_TRIED"):
        sys.exit("bench_torch.py: memtrack.so did not load under LD_PRELOAD")
    here = os.path.dirname(os.path.abspath(__file__))
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "remat")
    os.makedirs(cache, exist_ok=True)
    so = os.path.join(cache, "memtrack.so")
    src = os.path.join(here, "memtrack.c")
    if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(src):
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", so, src], check=True)
    env = dict(os.environ, LD_PRELOAD=so, REMAT_MEMTRACK_TRIED="1")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def main():
    mt = memtrack()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--checkpoint", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--init-from")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--channels", type=int, default=1)
    ap.add_argument("--size", type=int, default=28)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model, (x, y), loss_fn = build(args)
    if args.init_from:
        import st
        w = st.load(args.init_from)
        missing, unexpected = model.load_state_dict(w, strict=False)
        missing = [k for k in missing if not k.endswith("num_batches_tracked") and k != "lm_head.weight"]
        if missing or unexpected:
            sys.exit(f"{args.init_from}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model, x, y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    # The peak of one more (untimed) step over what was live before it.
    before = mt.memtrack_live()
    mt.memtrack_reset_peak()
    step()
    peak = mt.memtrack_peak() - before
    params = {id(p): p for p in model.parameters()}.values()
    state = sum(p.numel() * p.element_size() for p in params)
    state += sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    for s in opt.state.values():
        state += sum(t.numel() * t.element_size() for t in s.values() if torch.is_tensor(t))
    row = {
        "framework": "pytorch",
        "torch": torch.__version__,
        "model": args.model,
        "batch": args.batch,
        "checkpoint": args.checkpoint,
        "threads": args.threads,
        "median_step_seconds": statistics.median(times),
        "step_seconds": times,
        "peak_bytes": state + peak,
        "state_bytes": state,
        "process_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    if args.json:
        print(json.dumps(row))
    else:
        for k, v in row.items():
            print(f"{k:24} {v}")


if __name__ == "__main__":
    main()
