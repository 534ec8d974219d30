"""A transformers loop that keeps the model's output through the backward
(outputs = model(input_ids=x, labels=x); outputs.loss.backward()), as
custom HuggingFace loops do: its logits and, with use_cache (the
default), its cache of every layer's keys and values live until the step
ends. Per plan (store-all, and the midpoint between floor and store-all),
made without and with keep_output, the prediction against the peak
measured by the heap counter in such a loop (rt.measure(...,
keep_output=True)):

    python -m remat.torch run bench/torch/keep_output.py [--layers 4] [--width 128] [--seq 128] [--batch 4]
"""
import argparse
import copy

import torch
import transformers as tf

import remat.torch as rt


class Call(torch.nn.Module):
    """The user's call: the model's own loss from labels, its output returned whole."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(input_ids=x, labels=x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=2048)
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = tf.GPT2Config(vocab_size=a.vocab, n_positions=a.seq, n_embd=a.width, n_layer=a.layers, n_head=4,
                        bos_token_id=0, eos_token_id=0)
    model = Call(tf.GPT2LMHeadModel(cfg).train())
    ids = torch.randint(0, a.vocab, (a.batch, a.seq), generator=torch.Generator().manual_seed(1))

    def loss_fn(out):
        return out.loss
    trace = rt.capture(model, (ids,), loss_fn)
    held = sum(trace.values[v].bytes for v in trace.output_values)
    print("GPT-2 %d layers, %d wide, batch %d x %d: the output holds %d tensors, %d bytes" % (
        a.layers, a.width, a.batch, a.seq, len(trace.output_values), held))
    print("| plan | keep_output | budget | predicted | measured, output kept | measured / predicted |")
    print("|---|---|---:|---:|---:|---:|")
    for keep in (False, True):
        top = rt.plan_trace(trace, None, "adamw", "all", keep_output=keep).peak_bytes
        floor = rt.plan_trace(trace, 1, "adamw", keep_output=keep).floor
        for name, budget in (("store-all", None), ("midpoint", int((floor + rt.budget_for(top)) / 2))):
            plan = rt.plan_trace(trace, budget, "adamw", keep_output=keep)
            m = copy.deepcopy(model)
            r = rt.measure(m, (ids,), loss_fn, plan=plan, optimizer=torch.optim.AdamW(m.parameters()),
                           keep_output=True)
            print("| %s | %s | %s | %d | %d | %.4f |" % (name, keep, budget or "none", plan.peak_bytes,
                                                       r["peak_bytes"], r["peak_bytes"] / plan.peak_bytes))


if __name__ == "__main__":
    main()
