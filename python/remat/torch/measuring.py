"""What a training step really holds: measure() runs steps (under a plan
or not) and counts their peak bytes like the prediction, by the heap
counter on the CPU (memtrack.py) or the device's statistics."""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterable, Optional

import torch

from .._lib import RematError
from . import compat, memtrack
from .capture import device_of
from .planning import Inputs, LossFn, Plan


def _bytes_of(tensors: Iterable[Any]) -> int:
    seen, n = set(), 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            s = compat.local(t).untyped_storage()  # an FSDP2 parameter, gradient or state: this rank's shard
            if s.data_ptr() not in seen:
                seen.add(s.data_ptr())
                n += s.nbytes()
    return n


def measure(model: torch.nn.Module, inputs: Inputs, loss_fn: LossFn, plan: Optional[Plan] = None,
            optimizer: Optional[torch.optim.Optimizer] = None, steps: int = 3, accumulate: int = 1,
            set_to_none: bool = True, keep_output: Optional[bool] = None) -> dict:
    """Runs `steps` training steps (under plan when given) and measures each:
    the peak bytes the process holds during forward and backward (on the
    CPU the heap counter, which must be preloaded: python -m remat.torch run
    SCRIPT; on a CUDA device the allocator's requested bytes, each block at
    the bytes asked for, as the heap counter counts them), counted like
    the prediction (parameters, gradients held, optimizer state, the batch,
    and everything the step allocates), and its seconds. On a CUDA device
    each step also has "allocator_peak_bytes", the same count by
    max_memory_allocated: the caching allocator's blocks, with their
    rounding and the unsplit slack of reused blocks (memtrack.py). A step is
    `accumulate` forward and backward passes, then the optimizer's; it
    starts with zero_grad(set_to_none=set_to_none). Returns a dict with the
    per-step figures (the peak over the step's passes, the seconds of its
    passes) and, with a plan, the prediction. keep_output: the step keeps
    the model's output through the backward (default: as the plan was made
    for, plan.keep_output; else dropped once the loss is made)."""
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    device = device_of(model, inputs)
    c = memtrack.counter(device)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if c is None:
        raise RematError("measure needs the heap counter preloaded: run the script as "
                         "python -m remat.torch run SCRIPT [ARGS] (or LD_PRELOAD=%s)" % (memtrack.path() or
                                                                                          "libremat-memtrack.so"))
    params = list(model.parameters())
    keep = keep_output if keep_output is not None else plan is not None and plan.keep_output
    rows = []
    for _ in range(steps):
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=set_to_none)
        else:
            for p in params:
                if set_to_none or p.grad is None:
                    p.grad = None
                else:
                    p.grad.zero_()
        peak, alloc, seconds = 0, 0, 0.0
        for _ in range(accumulate):
            grads = _bytes_of(p.grad for p in params)
            state = (_bytes_of(params) + _bytes_of(_optim_tensors(optimizer)) + _bytes_of(inputs) + grads
                     + _held_by_wrapper(model, grads))
            sync()
            live0 = c.live()
            alloc0 = c.allocated() if cuda else 0
            c.reset_peak()
            t0 = time.perf_counter()
            ctx = plan.apply(model) if plan is not None else contextlib.nullcontext()
            with ctx:
                out = model(*inputs)
                loss = loss_fn(out)
                if not keep:
                    del out
                loss.backward()
                out = None
            sync()
            seconds += time.perf_counter() - t0
            peak = max(peak, state + c.peak() - live0)
            if cuda:
                alloc = max(alloc, state + c.allocated_peak() - alloc0)
        if optimizer is not None:
            optimizer.step()
        rows.append({"peak_bytes": peak, "seconds": seconds, "loss": float(loss.detach())})
        if cuda:
            rows[-1]["allocator_peak_bytes"] = alloc
    if not c.complete():
        raise RematError("the heap counter's table is full (over 2^21 blocks live at once): it cannot measure")
    out = {"steps": rows, "peak_bytes": max(r["peak_bytes"] for r in rows[1:] or rows),
           "seconds": sorted(r["seconds"] for r in rows)[len(rows) // 2]}
    if cuda:
        out["allocator_peak_bytes"] = max(r["allocator_peak_bytes"] for r in rows[1:] or rows)
    if plan is not None:
        out["predicted_bytes"] = plan.peak_bytes
        out["budget"] = plan.budget
    return out


def _held_by_wrapper(model: torch.nn.Module, grads: int) -> int:
    """What a data-parallel wrapper holds beside the parameters, gradients
    and optimizer state: a DistributedDataParallel model's gradient buckets
    (where the gradients are views into them, the buckets less the
    gradients already counted)."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return 0
    sizes, views = compat.ddp_buckets(model)
    return max(0, sum(sizes) - grads) if views else sum(sizes)


def _optim_tensors(optimizer: Optional[torch.optim.Optimizer]) -> list:
    if optimizer is None:
        return []
    out = []
    for st in optimizer.state.values():
        for v in st.values():
            out.append(v)
    return out
