"""Floats read in the step against calls followed (apply._Reader against
regions.py): per model, steps without a plan, under its midpoint plan as
the applier runs it (windows, each recomputed call's floats that are not
configuration read by a dispatch mode on only in its stretch of module
code), under the same plan with the applier following calls
(windows.place off), and, as a measurement only, with every float taken
as capture's ("trusted": what reading costs; unsound where the model's
code changes a float from step to step), alternated in one process.
Prints each plan's extra time over the step without a plan (the median
of each step's difference from the one without a plan in its round),
over the recomputed ops' time at capture, the calls each passes through
a dispatch mode, and the median of the paired differences reads -
follow and reads - trusted.

    PYTHONPATH=python python bench/torch/applier_reads.py hf-gpt2 25
    PYTHONPATH=python python bench/torch/applier_reads.py hf-t5 25
    PYTHONPATH=python python bench/torch/applier_reads.py llama 25

hf-gpt2: transformers' GPT-2, 4 layers 256 wide, b4x256 (its GELU's
constants are Python floats, its attention's dropout functional); hf-t5:
transformers' T5, 4+4 layers 256 wide, b4x128 into b4x64, without its
cache (functional dropout, the relative position buckets' floats); other
names are applier_cost.py's models.
"""
import contextlib
import copy
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import applier_cost as ac  # noqa: E402

import remat.torch as rt  # noqa: E402
from remat.torch import recipes  # noqa: E402
from remat.torch import windows as W  # noqa: E402
from remat.torch.decisions import Decisions  # noqa: E402


class _Call(torch.nn.Module):
    def __init__(self, model, call):
        super().__init__()
        self.model, self.call = model, call

    def forward(self, *args):
        return self.call(self.model, *args)


def build(name):
    g = torch.Generator().manual_seed(2)
    if name == "hf-gpt2":
        import transformers as tf
        cfg = tf.GPT2Config(vocab_size=4096, n_embd=256, n_layer=4, n_head=4, n_positions=256)
        ids = torch.randint(0, 4096, (4, 256), generator=g)
        m = _Call(tf.GPT2LMHeadModel(cfg), lambda mod, x: mod(input_ids=x, use_cache=False).logits)
        return m, (ids,), lambda o: F.cross_entropy(o[:, :-1].reshape(-1, o.shape[-1]), ids[:, 1:].reshape(-1))
    if name == "hf-t5":
        import transformers as tf
        cfg = tf.T5Config(vocab_size=4096, d_model=256, d_kv=32, d_ff=1024, num_layers=4, num_decoder_layers=4,
                          num_heads=8, dropout_rate=0.1, decoder_start_token_id=0, pad_token_id=0)
        x, y = torch.randint(0, 4096, (4, 128), generator=g), torch.randint(0, 4096, (4, 64), generator=g)
        m = _Call(tf.T5ForConditionalGeneration(cfg),
                  lambda mod, a, b: mod(input_ids=a, labels=b, use_cache=False).loss)
        return m, (x, y), lambda loss: loss
    return ac.build(name)


class _Trusted:
    def __contains__(self, name):
        return True


def main():
    torch.set_num_threads(2)
    name = sys.argv[1] if len(sys.argv) > 1 else "hf-gpt2"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 21
    torch.manual_seed(0)
    m, inputs, lf = build(name)
    m.train()
    t = rt.capture(m, inputs, lf)
    top = rt.plan_trace(t, None, "sgd", "all")
    floor = rt.plan_trace(t, 1, "sgd").floor
    mid = rt.plan_trace(t, (floor + rt.budget_for(top.peak_bytes)) // 2, "sgd")
    follow, trusted = copy.copy(mid), copy.copy(mid)
    mid._decisions = Decisions(mid)
    place = W.place
    W.place = lambda *a: None
    follow._decisions = Decisions(follow)
    W.place = place
    config = recipes._CONFIG_FLOATS
    recipes._CONFIG_FLOATS = _Trusted()
    trusted._decisions = Decisions(trusted)
    recipes._CONFIG_FLOATS = config
    d, f = mid._decisions, follow._decisions
    if d.windows is None:
        sys.exit("%s: the midpoint plan follows calls (%s)" % (name, d.why))
    through = {"reads": sum(r.end - r.first for r in d.reads.values()),
               "follow": len(t.calls) if f.full else sum(e - s for s, e, _ in f.regions.values()) + (
                   len(t.calls) - f.tail if f.tail is not None else 0),
               "trusted": 0}
    print("%s: %d calls; %d stretches read, %d windows" % (name, len(t.calls), len(d.reads), len(d.windows)))
    rec = sum(t.ops[i].seconds for grp in mid.recompute_groups for i in grp)
    params = list(m.parameters())

    def one(plan):
        for p in params:
            p.grad = None
        torch.manual_seed(1)
        t0 = time.perf_counter()
        with (plan.apply() if plan is not None else contextlib.nullcontext()):
            lf(m(*inputs)).backward()
        return time.perf_counter() - t0

    plans = {"none": None, "reads": mid, "follow": follow, "trusted": trusted}
    for p in plans.values():
        one(p)
    res = {k: [] for k in plans}
    for r in range(rounds):
        for k, p in (list(plans.items()) if r % 2 == 0 else list(plans.items())[::-1]):
            res[k].append(one(p))
    print("step without a plan %.1f ms; recomputed ops at capture %.2f ms" % (
        statistics.median(res["none"]) * 1e3, rec * 1e3))
    for k in ("reads", "follow", "trusted"):
        dd = [a - b for a, b in zip(res[k], res["none"])]
        print("%s %-7s calls through a mode %4d, extra %.2f ms, extra / recomputed %.2f" % (
            name, k, through[k], statistics.median(dd) * 1e3, statistics.median(dd) / rec), flush=True)
    for k in ("follow", "trusted"):
        dd = [a - b for a, b in zip(res["reads"], res[k])]
        print("%s reads - %s, step: median %.2f ms" % (name, k, statistics.median(dd) * 1e3))


if __name__ == "__main__":
    main()
