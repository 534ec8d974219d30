"""remat against per-layer checkpointing, the one-liner users reach for
(issue 32): HuggingFace transformers models with their own
gradient_checkpointing_enable() (non-reentrant, every layer), and
torchvision models with torch.utils.checkpoint (non-reentrant) around
every block, side by side in one process under the heap counter:

  per-layer     the model checkpointed per layer, no plan
  remat         remat's plan of the unedited model with per-layer's
                measured peak as its budget (rt.plan_trace, applied in
                eager; optimal has per-layer checkpointing among its
                candidates: regions="auto"); where the margin refuses
                that budget, at that peak plus the margin
  remat nested  the same with nested=True (rotor's schedules, an op
                recomputed more than once)

and, per model, remat's floors (the smallest budget it plans, recomputing
each op once and nested) against per-layer's measured peak, and the least
any schedule of the step can hold (plan.bound: each op's operands, the
gradients live beside it, parameters and optimizer state), which no
schedule goes below. Recomputed FLOPs are in remat's unit (PyTorch's
formulas, one per output element for other ops): per-layer's are those of
remat's "manual" strategy on the same step, which is per-layer
checkpointing (docs/graph-format.md, 'region'). Every row runs --rounds
rounds, alternated, each --warmup untimed steps then --steps timed ones; a
row's time is the median of its timed steps' forward and backward
(rt.measure's figure), its peak the largest. Run it as

    python -m remat.torch run bench/torch/per_layer.py [--models gpt2,llama] [--json FILE]
"""
import argparse
import copy
import json
import platform
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from alternatives import Checkpointed  # noqa: E402 - beside this script: torch.utils.checkpoint per block

import remat.torch as rt


class Logits(nn.Module):
    """A causal LM's logits from input_ids (the loss is the user's)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


class Labels(nn.Module):
    """A model whose loss comes from (input_ids, labels)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, labels):
        return self.model(input_ids=input_ids, labels=labels).loss


def _tokens(vocab, *shape):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(2))


def _causal(model, vocab, batch, seq):
    ids = _tokens(vocab, batch, seq)

    def loss(logits):
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    return Logits(model), (ids,), loss


def build(name, a):
    """(model, inputs, loss_fn, how per-layer checkpointing is switched on:
    "hf" or the block class)."""
    torch.manual_seed(0)
    if name in ("gpt2", "llama", "bert"):
        import transformers as tf
        v, w, n = 2048, a.width, a.layers
        if name == "gpt2":
            cfg = tf.GPT2Config(vocab_size=v, n_embd=w, n_layer=n, n_head=4, n_positions=a.seq)
            return _causal(tf.GPT2LMHeadModel(cfg), v, a.batch, a.seq) + ("hf",)
        if name == "llama":
            cfg = tf.LlamaConfig(vocab_size=v, hidden_size=w, intermediate_size=int(w * 2.6875) // 8 * 8,
                                 num_hidden_layers=n, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=a.seq)
            return _causal(tf.LlamaForCausalLM(cfg), v, a.batch, a.seq) + ("hf",)
        cfg = tf.BertConfig(vocab_size=v, hidden_size=w, intermediate_size=4 * w, num_hidden_layers=n,
                            num_attention_heads=4, max_position_embeddings=a.seq)
        ids = _tokens(v, a.batch, a.seq)
        labels = ids.clone()
        labels[:, ::3] = -100
        return Labels(tf.BertForMaskedLM(cfg)), (ids, labels), (lambda loss: loss), "hf"
    import torchvision
    tv = torchvision.models
    ctor = {"resnet18": (tv.resnet18, tv.resnet.BasicBlock), "resnet50": (tv.resnet50, tv.resnet.Bottleneck),
            "efficientnet_b0": (tv.efficientnet_b0, tv.efficientnet.MBConv),
            "mobilenet_v3_small": (tv.mobilenet_v3_small, tv.mobilenetv3.InvertedResidual)}
    if name not in ctor:
        raise SystemExit("unknown model %s" % name)
    m = ctor[name][0](num_classes=10)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(a.images, 3, a.size, a.size, generator=g), torch.randint(0, 10, (a.images,), generator=g)
    return m, (x,), (lambda o: F.cross_entropy(o, y)), ctor[name][1]


def per_layer(model, how):
    """A copy of model checkpointed per layer."""
    m = copy.deepcopy(model)
    if how == "hf":
        m.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return m
    for parent in list(m.modules()):
        for key, child in list(parent.named_children()):
            if type(child) is how:
                setattr(parent, key, Checkpointed(child))
    return m


class Row:
    def __init__(self, label, model, plan=None):
        self.label, self.model, self.plan = label, model, plan
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.times, self.peaks = [], []

    def run(self, inputs, loss_fn, warmup, steps):
        r = rt.measure(self.model, inputs, loss_fn, plan=self.plan, optimizer=self.opt, steps=warmup + steps)
        self.times += [s["seconds"] for s in r["steps"][warmup:]]
        self.peaks += [s["peak_bytes"] for s in r["steps"][warmup:]]


def run_model(name, a, log):
    m0, inputs, loss_fn, how = build(name, a)
    m0.train()
    trace = rt.capture(copy.deepcopy(m0), inputs, loss_fn)
    opt = torch.optim.AdamW(m0.parameters(), lr=1e-4)
    floor = rt.plan_trace(trace, 1, opt).floor
    store = rt.plan_trace(trace, None, opt, "all")  # its bound: no schedule of the step holds less
    manual = rt.plan_trace(trace, None, opt, "manual")
    out = {"model": name, "regions": manual.compare() and manual.compare()["regions"], "floor": floor,
           "store_all_predicted": store.peak_bytes, "per_layer_predicted": manual.peak_bytes,
           "step_flops": store.flops, "per_layer_extra_flops": manual.extra_flops, "bound": store.bound}
    pl = Row("per-layer", per_layer(m0, how))
    pl.run(inputs, loss_fn, a.warmup, a.steps)
    budget = max(pl.peaks)
    out["per_layer_peak"] = budget
    rows = [pl]
    plan = rt.plan_trace(trace, budget, opt)
    out["remat_feasible"] = plan.feasible
    if not plan.feasible:  # refused by the margin (a plan for B holds B less 1%): at equal peak, margin on top
        out["remat_budget"] = rt.budget_for(budget)
        plan = rt.plan_trace(trace, out["remat_budget"], opt)
    # nested recomputation (rotor's schedules, an op recomputed as often as they say): its floor, and its
    # plan at per-layer's peak
    nfloor = rt.plan_trace(trace, 1, opt, nested=True).floor
    out["nested_floor"] = nfloor
    out["nested_floor_peak"] = rt.plan_trace(trace, nfloor, opt, nested=True).peak_bytes
    nplan = rt.plan_trace(trace, budget, opt, nested=True)
    if plan.feasible:
        out.update(remat_predicted=plan.peak_bytes, remat_extra_flops=plan.extra_flops,
                   remat_candidate=plan.result.get("candidate"), remat_recomputed_ops=len(plan.recompute_ops))
        rows.append(Row("remat", copy.deepcopy(m0), plan))
    if nplan.feasible:
        out.update(nested_predicted=nplan.peak_bytes, nested_extra_flops=nplan.extra_flops,
                   nested_candidate=nplan.result.get("candidate"))
        rows.append(Row("remat nested", copy.deepcopy(m0), nplan))
    for rnd in range(a.rounds):
        for r in (rows if rnd % 2 == 0 else rows[::-1]):
            r.run(inputs, loss_fn, a.warmup, a.steps)
    out["per_layer_seconds"] = statistics.median(pl.times)
    out["per_layer_peak"] = max(pl.peaks)
    by = {r.label: r for r in rows}
    if "remat" in by:
        r = by["remat"]
        out.update(remat_seconds=statistics.median(r.times), remat_peak=max(r.peaks), budget=budget)
    if "remat nested" in by:
        r = by["remat nested"]
        out.update(nested_seconds=statistics.median(r.times), nested_peak=max(r.peaks))
    out["floor_peak"] = rt.plan_trace(trace, floor, opt).peak_bytes
    log("%-18s per-layer (%s) peak %.2f MiB (remat predicted %.4f of it), %.4f s, +%.1f%% FLOPs | remat floor "
        "%.2f MiB, its plan holds %.4f of per-layer's peak; nested's %.3f | remat at %s: %s" % (
            name, out["regions"], out["per_layer_peak"] / 2 ** 20, manual.peak_bytes / out["per_layer_peak"],
            out["per_layer_seconds"], 100 * manual.extra_flops / store.flops, floor / 2 ** 20,
            out["floor_peak"] / out["per_layer_peak"], (out["nested_floor_peak"] or 0) / out["per_layer_peak"],
            "that peak" if out["remat_feasible"] else "that peak plus the margin",
            "measured %.2f MiB (%.4f of per-layer's), %.4f s (%.3fx per-layer's), +%.1f%% FLOPs, %s" % (
                out["remat_peak"] / 2 ** 20, out["remat_peak"] / out["per_layer_peak"], out["remat_seconds"],
                out["remat_seconds"] / out["per_layer_seconds"], 100 * plan.extra_flops / store.flops,
                plan.result.get("candidate")) if plan.feasible else "infeasible"))
    if nplan.feasible:
        log("%-18s   nested at per-layer's peak: predicted %.4f, measured %.4f of per-layer's, %.4f s (%.3fx "
            "per-layer's), +%.1f%% FLOPs; nested floor %.2f MiB" % (
                "", nplan.peak_bytes / out["per_layer_peak"], out["nested_peak"] / out["per_layer_peak"],
                out["nested_seconds"], out["nested_seconds"] / out["per_layer_seconds"],
                100 * nplan.extra_flops / store.flops, nfloor / 2 ** 20))
    log("%-18s   no schedule holds less than %.2f MiB: %.4f of per-layer's peak (the floor plans hold %.4fx and "
        "%.4fx it)" % ("", store.bound / 2 ** 20, store.bound / out["per_layer_peak"], out["floor_peak"] / store.bound,
                       (out["nested_floor_peak"] or 0) / store.bound))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt2,llama,bert,resnet18,efficientnet_b0,mobilenet_v3_small")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    from remat.torch import memtrack
    if memtrack.counter() is None:
        raise SystemExit("run it under the heap counter: python -m remat.torch run bench/torch/per_layer.py")
    torch.set_num_threads(a.threads)
    print("per_layer.py: torch %s, %s, %d threads" % (torch.__version__, platform.processor() or platform.machine(),
                                                       a.threads), flush=True)
    res = [run_model(n, a, lambda s: print(s, flush=True)) for n in a.models.split(",")]
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "torch": torch.__version__, "models": res}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
