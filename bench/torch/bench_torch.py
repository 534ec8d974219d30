#!/usr/bin/python3
r"""PyTorch's side of the remat benchmark: one model, one batch, one
configuration per run, printing the columns `remat bench` prints.

    /usr/bin/python3 bench/torch/bench_torch.py --model cnn --batch 128 \
        [--checkpoint] [--threads 2] [--steps 5] [--warmup 2] \
        [--init-from W.safetensors] [--json]
    python3 bench/torch/bench_torch.py --device cuda --model resnet50 --batch 64 \
        [--tf32] [--checkpoint] [--steps 10] [--warmup 3] \
        [--init-from W.safetensors] [--json]

Models: cnn (remat's cnn: src/models/models.c), resnet18, resnet50,
densenet-bc, siamese-resnet50 (bench/torch/cnn_models.py), gpt2, gpt2-small
(bench/torch/gpt2_model.py). --checkpoint wraps every block the way remat's
models mark them in torch.utils.checkpoint.checkpoint(use_reentrant=False).
--compile runs the model through torch.compile (Inductor, its default
mode; the cross-entropy of the CNNs stays eager, GPT-2's is in its
forward): the warm-up steps compile it (--warmup must be at least 1), so
the timed steps are compiled ones.

A training step is zero_grad(set_to_none=False) (gradients stay allocated,
as remat's do), forward, backward and SGD(lr 1e-3, momentum 0.9), as in
`remat bench`, on one synthetic batch made on the CPU from --seed (the
same on both devices; --device cuda then moves the model, already loaded
from --init-from, and the batch to the GPU). Columns:
  median_step_seconds  median over --steps timed steps after --warmup
                       (on cuda each step between two torch.cuda.synchronize())
  peak_bytes           cpu: parameters + gradients + optimizer state + the
                       peak of the heap bytes a step holds on top of what
                       was live before it, counted by src/memtrack/memtrack.c
                       (preloaded; every block of 64 KiB or more through
                       glibc's allocator, which PyTorch's CPU tensors use):
                       remat's measured peak counts the same things (the
                       batch, bound by the caller, is left out of both)
                       cuda: torch.cuda.max_memory_allocated() over the
                       timed steps (reset after the warm-up steps): the
                       parameters, gradients, optimizer state, the batch
                       (batch_bytes) and every tensor a step makes (cuBLAS's
                       and cuDNN's workspaces too), not the CUDA context
  state_bytes          parameters + gradients + optimizer state
  process_peak_rss_bytes  ru_maxrss of this process
and with --device cuda (no memtrack preload there):
  reserved_peak_bytes  torch.cuda.max_memory_reserved() over the timed
                       steps: what the caching allocator held
  device_used_bytes    the drop in the GPU's free bytes (mem_get_info) from
                       just after the CUDA context was made to the end of the
                       timed steps: the allocator's reservation plus what
                       cuBLAS and cuDNN hold outside it and lazily loaded
                       kernels (the driver's view, the whole device's)
  batch_bytes          the batch's bytes (counted in peak_bytes)
  device, gpu_name, torch_version, cuda_version, cudnn_version, tf32,
  cudnn_benchmark, matmul_fp32_precision and conv_fp32_precision (the
  TF32 settings as PyTorch 2.9's newer API reads them; null before it)
On cuda TF32 is off (torch.backends.cuda.matmul.allow_tf32 and
torch.backends.cudnn.allow_tf32 False) unless --tf32 is given, and
torch.backends.cudnn.benchmark stays at PyTorch's default (False).
"""
import argparse
import ctypes
import json
import os
import resource
import statistics
import subprocess
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
    src = os.path.join(here, "..", "..", "src", "memtrack", "memtrack.c")
    if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(src):
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", so, src], check=True)
    env = dict(os.environ, LD_PRELOAD=so, REMAT_MEMTRACK_TRIED="1")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


class Host:
    """--device cpu: tensors stay where build() made them; the peak comes
    from memtrack's counters over one more, untimed step."""

    name = "cpu"

    def __init__(self, args):
        self.mt = memtrack()

    def put(self, t):
        return t

    def sync(self):
        pass

    def start_peak(self):
        pass

    def peaks(self, step, state):
        before = self.mt.memtrack_live()
        self.mt.memtrack_reset_peak()
        step()
        return {"peak_bytes": state + self.mt.memtrack_peak() - before}

    def fields(self):
        return {}


class Cuda:
    """--device cuda: the model, the batch and the optimizer state on the
    current GPU; the peaks from the caching allocator's statistics over the
    timed steps. Every torch.cuda call of this script is in this class
    (test_bench_torch.py runs everything else on the CPU with them faked)."""

    name = "cuda"
    target = "cuda"  # where put() moves modules and tensors

    def __init__(self, args):
        if not torch.cuda.is_available():
            sys.exit(f"bench_torch.py: --device cuda: torch {torch.__version__} (CUDA {torch.version.cuda}) "
                     "sees no GPU")
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
        self.tf32 = args.tf32
        self.device = torch.device(self.target)
        self.free0 = torch.cuda.mem_get_info()[0]  # this makes the context

    def put(self, t):
        return t.to(self.device)

    def sync(self):
        torch.cuda.synchronize()

    def start_peak(self):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def peaks(self, step, state):
        torch.cuda.synchronize()
        return {"peak_bytes": torch.cuda.max_memory_allocated(),
                "reserved_peak_bytes": torch.cuda.max_memory_reserved(),
                "device_used_bytes": self.free0 - torch.cuda.mem_get_info()[0]}

    def fields(self):
        return {"device": "cuda", "gpu_name": torch.cuda.get_device_name(), "torch_version": torch.__version__,
                "cuda_version": torch.version.cuda, "cudnn_version": torch.backends.cudnn.version(),
                "tf32": self.tf32, "cudnn_benchmark": torch.backends.cudnn.benchmark,
                # what the legacy flags set in PyTorch's newer API (2.9 on; None before it)
                "matmul_fp32_precision": _new_api(lambda: torch.backends.cuda.matmul.fp32_precision),
                "conv_fp32_precision": _new_api(lambda: torch.backends.cudnn.conv.fp32_precision)}


def _new_api(get):
    try:
        return get()
    except Exception:  # older PyTorch has no fp32_precision (1.13 raises AssertionError)
        return None


DEVICES = {"cpu": Host, "cuda": Cuda}


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--device", choices=sorted(DEVICES), default="cpu")
    ap.add_argument("--tf32", action="store_true", help="cuda: TF32 in matmuls and cuDNN (off by default)")
    ap.add_argument("--checkpoint", action="store_true")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (Inductor; the warm-up compiles)")
    ap.add_argument("--autocast", action="store_true",
                    help="forward and loss under torch.autocast(dtype=torch.bfloat16), as remat --precision bf16")
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
    args = ap.parse_args(argv)
    if args.tf32 and args.device != "cuda":
        ap.error("--tf32 is for --device cuda")
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be at least 1 and --warmup at least 0")
    if args.compile and args.warmup < 1:
        ap.error("--compile needs --warmup 1 or more: the first step compiles")
    return args


def main(argv=None):
    args = parse(argv)
    dev = DEVICES[args.device](args)  # cpu: re-executes under memtrack.so first
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
    model = dev.put(model)
    x, y = dev.put(x), dev.put(y)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    net = torch.compile(model) if args.compile else model  # the same parameters

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.autocast):
            loss = loss_fn(net, x, y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    dev.start_peak()
    times = []
    for _ in range(args.steps):
        dev.sync()
        t0 = time.perf_counter()
        step()
        dev.sync()
        times.append(time.perf_counter() - t0)
    # cpu: the peak of one more (untimed) step over what was live before it;
    # cuda: the allocator's peaks over the timed steps.
    params = {id(p): p for p in model.parameters()}.values()
    state = sum(p.numel() * p.element_size() for p in params)
    state += sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    for s in opt.state.values():
        state += sum(t.numel() * t.element_size() for t in s.values() if torch.is_tensor(t))
    peaks = dev.peaks(step, state)
    row = {
        "framework": "pytorch",
        "torch": torch.__version__,
        "model": args.model,
        "batch": args.batch,
        "checkpoint": args.checkpoint,
        "compile": args.compile,
        "autocast": args.autocast,
        "threads": args.threads,
        "median_step_seconds": statistics.median(times),
        "step_seconds": times,
        "peak_bytes": peaks.pop("peak_bytes"),
        "state_bytes": state,
        "process_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    if args.device != "cpu":
        row.update(peaks)
        row["batch_bytes"] = x.numel() * x.element_size() + y.numel() * y.element_size()
        row.update(dev.fields())
    if args.json:
        print(json.dumps(row))
    else:
        for k, v in row.items():
            print(f"{k:24} {v}")


if __name__ == "__main__":
    main()
