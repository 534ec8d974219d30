"""remat.torch against the alternatives a PyTorch user has, in one run
(issue 18): per model, in one process under the heap counter,

  store-all        eager PyTorch, nothing checkpointed
  per-block ckpt   torch.utils.checkpoint (non-reentrant) around every
                   block: ResNet-50's Bottlenecks in layer1..layer4,
                   GPT-2's transformer Blocks (a wrapper module, the user's
                   model unedited)
  remat            remat's plan with the peak per-block checkpointing
                   measured as its budget (rt.plan_trace, applied in eager)
  compile B        torch.compile of the model (Inductor, or aot_eager when
                   Inductor fails here, said so) with
                   torch._functorch.config.activation_memory_budget = B,
                   for B in --budgets (1.0, 0.5, 0)
  remat @ compile B   remat's plan with compile B's measured peak as its
                   budget (where that is above remat's floor; where the
                   per-block peak is below it, "remat @ its floor" is run)

and prints, per row, the median seconds of a training step's forward and
backward (rt.measure's figure, the optimizer step left out), the measured
peak (rt.measure's counting: parameters, optimizer state and the batch,
plus the heap growth over the step, the preloaded counter), the recomputed
FLOPs and the time over store-all's. Run it as

    python -m remat.torch run bench/torch/alternatives.py [--models resnet50,gpt2] [--json FILE]

Recomputed FLOPs come in two counts. "mm" is PyTorch's flop formulas
(torch.utils.flop_counter: matmuls, convolutions, attention), the part that
costs time: per-block checkpointing's are those of one forward of every
checkpointed block; remat's those of the ops its plan recomputes; compile's
the formula FLOPs of its partitioned forward and backward graphs (read from
the partitioner's output) less those of the eager step. "all" adds one per
output element of every other op, the cost remat's planner charges
(capture.py), so that plan.extra_flops and per-block checkpointing's can be
compared in one unit; for compile it is n/a.

Every row runs --rounds rounds, one after another within a round, each
round --warmup untimed steps then --steps timed ones; a row's time is the
median over all its timed steps and its peak the largest over them (the
machine is shared: rows side by side in one run, never against a
remembered time). Also "remat, no budget": remat's plan applied with no
budget, which recomputes nothing, so its time over store-all's is the cost
of the applier itself (a TorchDispatchMode and saved-tensor hooks in
Python). Each compile budget gets a backend object of its own, so Dynamo
keeps its compiled code apart (the backend-match guard), with the FX graph
and AOTAutograd caches off: every budget is partitioned afresh and the
rows can alternate. A compile row's first call (Dynamo, AOTAutograd,
Inductor's C++ build) is reported apart as first_call_s.
"""
import argparse
import copy
import datetime
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import flop_registry

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests"))
import user_models as um  # noqa: E402

import remat.torch as rt  # noqa: E402

# ---------------------------------------------------------------- models

def build(name):
    """(model, inputs, loss_fn, the block modules to checkpoint as [(parent, key)])."""
    g = torch.Generator().manual_seed(0)
    if name == "resnet50":
        import torchvision
        m = torchvision.models.resnet50()
        x, y = torch.randn(8, 3, 96, 96, generator=g), torch.randint(0, 1000, (8,), generator=g)
        blocks = [(getattr(m, "layer%d" % i), j) for i in range(1, 5) for j in range(len(getattr(m, "layer%d" % i)))]
        return m, (x,), (lambda o: F.cross_entropy(o, y)), blocks
    if name == "gpt2":
        m = um.GPT2(layers=6, embd=384, heads=6, context=256, vocab=8192)
        idx = torch.randint(0, 8192, (4, 256), generator=g)
        tgt = torch.randint(0, 8192, (4, 256), generator=g)
        return m, (idx,), um.gpt2_loss(tgt), [(m.h, j) for j in range(len(m.h))]
    raise SystemExit("unknown model %s (resnet50, gpt2)" % name)


class Checkpointed(nn.Module):
    """A block run under torch.utils.checkpoint (non-reentrant)."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, *a, **kw):
        return checkpoint(self.block, *a, use_reentrant=False, **kw)


def wrap_blocks(model, blocks_of):
    """A copy of model with each block (found again in the copy by its
    parent's path) wrapped in Checkpointed."""
    m = copy.deepcopy(model)
    names = {id(mod): n for n, mod in model.named_modules()}
    for parent, key in blocks_of:
        p = m.get_submodule(names[id(parent)])
        p[key] = Checkpointed(p[key])
    return m


# ---------------------------------------------------------------- FLOPs

def _is_view(func, args, out):
    ins = {t.untyped_storage().data_ptr() for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor)}
    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return bool(outs) and all(t.untyped_storage().data_ptr() in ins for t in outs) and func._schema.is_mutable is False


class Flops(TorchDispatchMode):
    """FLOPs of the calls it sees, as remat's capture counts them: PyTorch's
    formula where it has one ("mm"), else one per output element ("other");
    views count nothing. `inside` > 0 adds them to the `block` totals too."""

    def __init__(self):
        super().__init__()
        self.total = {"mm": 0.0, "other": 0.0}
        self.block = {"mm": 0.0, "other": 0.0}
        self.inside = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = getattr(func, "_overloadpacket", None)
        kind, f = "mm", 0.0
        if packet in flop_registry:
            try:
                f = float(flop_registry[packet](*args, **kwargs, out_val=out))
            except Exception:
                f = 0.0
        if f == 0.0:
            kind = "other"
            if not _is_view(func, args, out):
                f = float(sum(t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)))
        self.total[kind] += f
        if self.inside:
            self.block[kind] += f
        return out


def block_flops(model, inputs, blocks_of):
    """The FLOPs of one forward of the checkpointed blocks (what per-block
    checkpointing recomputes in the backward)."""
    mode = Flops()
    m = copy.deepcopy(model)  # BatchNorm's running statistics of the model measured stay as they are
    names = {id(mod): n for n, mod in model.named_modules()}
    for parent, key in blocks_of:
        b = m.get_submodule(names[id(parent)])[key]
        b.register_forward_pre_hook(lambda *_: setattr(mode, "inside", mode.inside + 1))
        b.register_forward_hook(lambda *_: setattr(mode, "inside", mode.inside - 1))
    with torch.no_grad(), mode:
        m(*inputs)
    return mode.block


def step_mm_flops(model, inputs, loss_fn):
    """Formula FLOPs of one eager forward and backward (the model's part)."""
    m = copy.deepcopy(model)
    mode = Flops()
    with mode:
        loss = loss_fn(m(*inputs))
        loss.backward()
    return mode.total["mm"]


def plan_mm_flops(plan):
    """Formula FLOPs of the ops remat's plan recomputes (an op's pointwise
    in-place followers, folded into it by capture, are counted as 'other')."""
    names = {str(p) for p in flop_registry}  # "aten.addmm"
    mm = 0.0
    for i in plan.recompute_ops:
        op = plan.trace.ops[i]  # op.name: "aten::addmm" (or "aten.addmm.default")
        if ".".join(op.name.replace("::", ".").split(".")[:2]) in names:
            mm += op.flops
    return mm


def graph_mm_flops(gm):
    """Formula FLOPs of an FX graph from its nodes' fake values."""
    tot = 0.0
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        packet = getattr(n.target, "_overloadpacket", None)
        if packet not in flop_registry:
            continue
        val = (lambda a: a.meta.get("val") if isinstance(a, torch.fx.Node) else a)
        args, kwargs = tree_map(val, (n.args, n.kwargs))
        try:
            tot += float(flop_registry[packet](*args, **kwargs, out_val=n.meta.get("val")))
        except Exception:
            pass
    return tot


PARTITIONS = []  # where the partitions of the compile in progress are recorded (fw/bw formula FLOPs)


def _record(fw, bw):
    try:
        PARTITIONS.append({"fw_mm": graph_mm_flops(fw), "bw_mm": graph_mm_flops(bw)})
    except Exception as e:  # the probe never breaks compilation
        PARTITIONS.append({"error": repr(e)})


def hook_partitioner():
    """Wraps the min-cut partitioner Inductor calls so that each partition's
    forward and backward FLOPs are recorded; the result is unchanged."""
    import torch._inductor.compile_fx as cfx
    orig = cfx.min_cut_rematerialization_partition

    def wrapped(*a, **kw):
        fw, bw = orig(*a, **kw)
        _record(fw, bw)
        return fw, bw
    cfx.min_cut_rematerialization_partition = wrapped


def compile_backend(kind, budget, record):
    """A torch.compile backend of its own for one memory budget: the
    partitioner runs with activation_memory_budget = budget and records its
    partitions in `record`. A distinct backend object per budget keeps each
    budget's compiled code apart in Dynamo's cache (its backend-match
    guard), so the budgets' rows can run round by round in one process."""
    import torch._functorch.config as fconfig
    if kind == "inductor":
        from torch._inductor.compile_fx import compile_fx as inner
    else:
        from functorch.compile import min_cut_rematerialization_partition
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch.aot_autograd import make_boxed_compiler

        def part(*a, **kw):
            fw, bw = min_cut_rematerialization_partition(*a, **kw)
            _record(fw, bw)
            return fw, bw
        nop = make_boxed_compiler(lambda gm, _: gm)
        inner = aot_autograd(fw_compiler=nop, bw_compiler=nop, partition_fn=part)

    def backend(gm, example_inputs):
        global PARTITIONS
        PARTITIONS = record
        with fconfig.patch(activation_memory_budget=budget):
            return inner(gm, example_inputs)
    return backend


# ---------------------------------------------------------------- measure

class Row:
    def __init__(self, label, model, plan=None):
        self.label, self.model, self.plan = label, model, plan
        self.opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        self.times, self.peaks, self.warm = [], [], []
        self.info = {}

    def run(self, inputs, loss_fn, warmup, steps):
        r = rt.measure(self.model, inputs, loss_fn, plan=self.plan, optimizer=self.opt, steps=warmup + steps)
        self.warm += [s["seconds"] for s in r["steps"][:warmup]]
        self.times += [s["seconds"] for s in r["steps"][warmup:]]
        self.peaks += [s["peak_bytes"] for s in r["steps"][warmup:]]
        self.info["last_loss"] = r["steps"][-1]["loss"]

    @property
    def seconds(self):
        return statistics.median(self.times)

    @property
    def peak(self):
        return max(self.peaks)


def run_model(name, a, log):
    torch.manual_seed(0)
    m0, inputs, loss_fn, blocks_of = build(name)
    m0.train()
    out = {"model": name, "rows": []}

    # FLOPs: what per-block checkpointing recomputes, and the eager step's formula FLOPs
    bf = block_flops(m0, inputs, blocks_of)
    eager_mm = step_mm_flops(m0, inputs, loss_fn)
    out["eager_step_mm_flops"] = eager_mm

    t0 = time.perf_counter()
    trace = rt.capture(copy.deepcopy(m0), inputs, loss_fn)
    out["capture_s"] = time.perf_counter() - t0
    opt_probe = torch.optim.SGD(m0.parameters(), lr=0.01, momentum=0.9)
    floor = out["remat_floor"] = rt.plan_trace(trace, 1, opt_probe).floor
    out["remat_store_all_predicted"] = rt.plan_trace(trace, None, opt_probe, "all").peak_bytes

    store = Row("store-all", copy.deepcopy(m0))
    store.info.update(recomputed_mm=0.0, recomputed_all=0.0)
    block = Row("per-block ckpt", wrap_blocks(m0, blocks_of))
    block.info.update(recomputed_mm=bf["mm"], recomputed_all=bf["mm"] + bf["other"], blocks=len(blocks_of))

    def remat_row(label, budget):
        p = rt.plan_trace(trace, budget, opt_probe)
        if not p.feasible:
            log("  %s: budget %.1f MiB is below remat's floor %.1f MiB" % (label, budget / 2 ** 20, p.floor / 2 ** 20))
            out.setdefault("infeasible", []).append({"row": label, "budget": budget, "floor": p.floor})
            return None
        r = Row(label, copy.deepcopy(m0), plan=p)
        r.info.update(budget=budget, predicted=p.peak_bytes, recomputed_mm=plan_mm_flops(p),
                      recomputed_all=p.extra_flops, recomputed_ops=len(p.recompute_ops), plan_flops=p.flops)
        return r

    def go(rows, rnd):
        for r in rows:
            n = len(r.times)
            r.run(inputs, loss_fn, a.warmup, a.steps)
            extra = ""
            if "compiled" in r.info and rnd == 1:
                extra = "  (first call %.1f s)" % r.warm[0]
            log("  %-26s %.3f s  peak %.1f MiB%s" % (r.label, statistics.median(r.times[n:]),
                                                     max(r.peaks[n:]) / 2 ** 20, extra))

    compiled = []
    for b in a.budgets:
        rec = []
        r = Row("compile %g%s" % (b, "" if a.backend == "inductor" else " (aot_eager)"),
                torch.compile(copy.deepcopy(m0), backend=compile_backend(a.backend, b, rec)))
        r.info.update(compiled=a.backend, memory_budget=b, recomputed_all=None)
        r.record = rec
        compiled.append(r)

    log("[%s] round 1" % name)
    go([store, block], 1)
    remat = remat_row("remat @ per-block peak", block.peak)
    if remat is None:  # the nearest remat reaches: its floor
        remat = remat_row("remat @ its floor", floor)
    free = remat_row("remat, no budget", None)  # recomputes nothing: the applier's own cost
    rows = [store, free, block] + ([remat] if remat is not None else [])
    go(rows[3:] + [free], 1)
    for i, r in enumerate(list(compiled)):
        try:
            go([r], 1)
        except Exception as e:  # noqa: BLE001 - said; Inductor falls back to aot_eager
            log("  %s failed: %s" % (r.label, repr(e)[:400]))
            out.setdefault("failed", []).append({"row": r.label, "error": repr(e)[:2000]})
            if r.info["compiled"] != "inductor":
                compiled[i] = None
                continue
            b, rec = r.info["memory_budget"], []
            r = Row(r.label + " (aot_eager: Inductor failed)",
                    torch.compile(copy.deepcopy(m0), backend=compile_backend("aot_eager", b, rec)))
            r.info.update(compiled="aot_eager", memory_budget=b, recomputed_all=None)
            r.record = rec
            compiled[i] = r
            go([r], 1)
        r.info["first_call_s"] = r.warm[0]
        parts = r.record
        r.info["partitions"] = len(parts)
        if parts and all("error" not in p for p in parts):
            tot = sum(p["fw_mm"] + p["bw_mm"] for p in parts)
            r.info["compiled_mm_flops"] = tot
            r.info["recomputed_mm"] = tot - eager_mm
    compiled = [r for r in compiled if r is not None]
    at_compile = []
    for c in compiled:
        r = remat_row("remat @ %s peak" % c.label, c.peak)
        if r is not None:
            at_compile.append(r)
    go(at_compile, 1)
    rows += compiled + at_compile
    for k in range(2, a.rounds + 1):
        log("[%s] round %d" % (name, k))
        go(rows, k)

    base = store.seconds
    for r in rows:
        d = {"row": r.label, "seconds": r.seconds, "peak_bytes": r.peak, "time_vs_store_all": r.seconds / base,
             "step_seconds": r.times, "warmup_seconds": r.warm}
        d.update(r.info)
        out["rows"].append(d)
    return out


def fmt_g(x):
    return "n/a" if x is None else "%.2f" % (x / 1e9)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet50,gpt2")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per row and round")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps before them (compile: at least 1)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the eager rows (compile rows: one)")
    ap.add_argument("--budgets", default="1.0,0.5,0", help="activation_memory_budget values for torch.compile")
    ap.add_argument("--backend", default="inductor", choices=["inductor", "aot_eager"],
                    help="torch.compile backend (inductor falls back to aot_eager when it fails)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    a.budgets = [float(b) for b in a.budgets.split(",")]
    a.warmup = max(1, a.warmup)
    torch.set_num_threads(a.threads)
    if rt.memtrack.counter() is None:
        raise SystemExit("run it with the heap counter: python -m remat.torch run %s" % " ".join(sys.argv))
    hook_partitioner()
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig
    iconfig.fx_graph_cache = False  # every budget partitioned and compiled afresh
    fconfig.enable_autograd_cache = False

    def log(s):
        print(s, file=sys.stderr, flush=True)

    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import torchvision
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "cpu": cpu, "cores": os.cpu_count(),
            "threads": a.threads, "torch": torch.__version__, "torchvision": torchvision.__version__,
            "python": platform.python_version(), "steps": a.steps, "warmup": a.warmup, "rounds": a.rounds,
            "command": " ".join([os.path.basename(sys.executable), "-m", "remat.torch", "run"] + sys.argv)}
    res = {"meta": meta, "models": []}
    print("%s, %d cores (shared; other jobs may run), %d threads, torch %s; ratios are of this one run" % (
        cpu, os.cpu_count(), a.threads, torch.__version__))
    for name in a.models.split(","):
        o = run_model(name, a, log)
        res["models"].append(o)
        print()
        print("%s  (remat floor %.1f MiB, store-all predicted %.1f MiB, eager step %.2f GFLOP by formula)" % (
            name, o["remat_floor"] / 2 ** 20, o["remat_store_all_predicted"] / 2 ** 20,
            o["eager_step_mm_flops"] / 1e9))
        print("%-34s %9s %10s %12s %12s %8s" % ("row", "step s", "peak MiB", "recomp mm G", "recomp all G",
                                               "time/all"))
        for r in o["rows"]:
            print("%-34s %9.3f %10.1f %12s %12s %8.2f" % (r["row"], r["seconds"], r["peak_bytes"] / 2 ** 20,
                                                           fmt_g(r.get("recomputed_mm")),
                                                           fmt_g(r.get("recomputed_all")), r["time_vs_store_all"]))
        blk = next(r for r in o["rows"] if r["row"] == "per-block ckpt")
        rem = next((r for r in o["rows"] if r["row"] in ("remat @ per-block peak", "remat @ its floor")), None)
        for inf in o.get("infeasible", []):
            print("%s: infeasible, the budget %.1f MiB is below remat's floor %.1f MiB" % (
                inf["row"], inf["budget"] / 2 ** 20, inf["floor"] / 2 ** 20))
        if rem is not None:
            print("%s against per-block: recomputed FLOPs %.3f (mm) %.3f (all), time %.3f, peak %.3f" % (
                rem["row"],
                rem["recomputed_mm"] / blk["recomputed_mm"] if blk["recomputed_mm"] else float("nan"),
                rem["recomputed_all"] / blk["recomputed_all"] if blk["recomputed_all"] else float("nan"),
                rem["seconds"] / blk["seconds"], rem["peak_bytes"] / blk["peak_bytes"]))
        sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
