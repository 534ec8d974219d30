#!/usr/bin/env python3
"""PyTorch DistributedDataParallel (gloo) training steps, timed: the
reference beside `remat bench` under mpirun (bench/dist/run.py).

    /work/venv-torch/bin/python bench/torch/ddp_bench.py --model densenet-bc --batch 64
        [--processes 2] [--threads 1] [--checkpoint] [--init-from FILE]
        [--steps 3] [--warmup 1] [--json]

--batch is the global batch: each of the --processes ranks takes batch /
processes rows (synthetic, from the seed and the rank), as remat's
micro-batches. --checkpoint wraps every block in torch.utils.checkpoint
(use_reentrant=False), as bench_torch.py does. SGD with momentum 0.9,
lr 1e-3, as remat bench. Each step is timed on every rank; a row reports
the median over steps of the slowest rank's step, and the largest rank's
peak: the bytes it held (memtrack.c's counters under LD_PRELOAD, as
bench_torch.py: parameters, gradients, optimizer state, and the peak of
one more step over what was live before it, which holds DDP's gradient
buckets) and its process's peak RSS.
"""
import argparse
import json
import os
import resource
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_torch  # noqa: E402
import cnn_models  # noqa: E402


def build(args, rank):
    """(model, (x, y), loss) for this rank's share of the global batch."""
    g = torch.Generator().manual_seed(args.seed * 1000 + rank)
    rows = args.batch // args.processes
    if args.model == "cnn":
        m = bench_torch.CNN(use_checkpoint=args.checkpoint)
        x = torch.rand(rows, 1, 28, 28, generator=g) * 2 - 1
        y = torch.randint(0, 10, (rows,), generator=g)
        return m, (x, y), lambda model, x, y: F.cross_entropy(model(x), y)
    m = cnn_models.build(args.model, checkpoint=args.checkpoint)
    c, h, w, classes = cnn_models.DEFAULTS[args.model]
    x = torch.rand(rows, c, h, w, generator=g) * 2 - 1
    y = torch.randint(0, classes, (rows,), generator=g)
    return m, (x, y), lambda model, x, y: cnn_models.loss(model, args.model, x, y)


def worker(rank, args, port, queue):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.processes)
    mt = bench_torch.memtrack()
    model, (x, y), loss_fn = build(args, rank)
    if args.init_from:
        import st
        missing, unexpected = model.load_state_dict(st.load(args.init_from), strict=False)
        missing = [k for k in missing if not k.endswith("num_batches_tracked")]
        if missing or unexpected:
            sys.exit(f"{args.init_from}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=False)
        loss_fn(ddp, x, y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        dist.barrier()  # every rank starts the step together
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    # as bench_torch.py: the state (weights, gradients, momentum) and the
    # peak of one more step over what was live before it (DDP's buckets
    # are allocated by then, so they count in the state's place)
    params = list(model.parameters())
    state = sum(p.numel() * p.element_size() for p in params)
    state += sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    for s in opt.state.values():
        state += sum(t.numel() * t.element_size() for t in s.values() if torch.is_tensor(t))
    before = mt.memtrack_live()
    mt.memtrack_reset_peak()
    step()
    queue.put({"rank": rank, "times": times, "peak_bytes": state + mt.memtrack_peak() - before,
               "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="densenet-bc")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--checkpoint", action="store_true")
    ap.add_argument("--init-from")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.batch % args.processes:
        ap.error("--batch must be a multiple of --processes")
    bench_torch.memtrack()  # re-executes this script under LD_PRELOAD (the ranks inherit it)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(worker, args=(args, port, queue), nprocs=args.processes, join=True, start_method="spawn")
    ranks = sorted((queue.get() for _ in range(args.processes)), key=lambda r: r["rank"])
    slowest = [max(r["times"][i] for r in ranks) for i in range(args.steps)]
    row = {"framework": "pytorch-ddp", "backend": "gloo", "torch": torch.__version__, "model": args.model,
           "batch": args.batch, "processes": args.processes, "threads": args.threads, "checkpoint": args.checkpoint,
           "median_step_seconds": statistics.median(slowest), "step_seconds": slowest,
           "peak_bytes": max(r["peak_bytes"] for r in ranks),
           "process_peak_rss_bytes": max(r["rss"] for r in ranks)}
    if args.json:
        print(json.dumps(row))
    else:
        for k, v in row.items():
            print(f"{k:24} {v}")


if __name__ == "__main__":
    main()
