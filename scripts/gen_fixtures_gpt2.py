#!/usr/bin/python3
"""Generate the tiny GPT-2 fixture for tests/test_gpt2.c.

Run from the repository root with Debian's python (torch 1.13 + numpy):

    /usr/bin/python3 scripts/gen_fixtures_gpt2.py            # writes tests/fixtures/gpt2_tiny/
    /usr/bin/python3 scripts/gen_fixtures_gpt2.py --out DIR
    /usr/bin/python3 scripts/gen_fixtures_gpt2.py --fp32-check
        # writes nothing; reruns the step in float32 PyTorch and prints how
        # far it lands from the float64 reference, per tensor, as a
        # fraction of the test's bound (1e-5 * max|reference|)

The model is bench/torch/gpt2_model.py's GPT (remat's `gpt2`, same
state_dict names, tied head, GELU tanh) at a tiny size: CONFIG below,
batch BATCH, dropout off. The output is deterministic (seeded generator,
one thread, float64).

Files (safetensors, written by bench/torch/st.py):
    weights.safetensors  every parameter by state_dict name, F32 (no
                         lm_head: the head is tied to transformer.wte)
    batch.safetensors    input (B, T) I32 tokens, target (B*T) I32: the
                         next token of each input position
    grads.safetensors    loss [1] F32 and grad.<name> F32 for every
                         parameter: one forward and backward in float64
                         from the float32 weights and batch, rounded to F32

The weights are drawn wider than GPT-2's initialization so that every
part of the model matters to the gradients: linear and embedding weights
N(0, 0.1^2) (c_proj N(0, (0.1 / sqrt(2 layers))^2)), biases N(0, 0.05^2),
LayerNorm weights 1 + N(0, 0.1^2) and biases N(0, 0.1^2).
"""
import argparse
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench", "torch"))
import gpt2_model  # noqa: E402
import st  # noqa: E402

CONFIG = dict(layers=2, embd=24, heads=4, context=16, vocab=64)
BATCH = 2
SEED = 1234
RTOL = 1e-5  # the C test's bound: |remat - torch| <= RTOL * max|torch| per tensor


def make_weights(cfg):
    """{name: float32 tensor}, deterministic (see the module docstring)."""
    g = torch.Generator().manual_seed(SEED)
    model = gpt2_model.GPT(cfg)
    out = {}
    for name, p in model.named_parameters():
        n = torch.randn(p.shape, generator=g, dtype=torch.float64)
        if name.endswith("c_proj.weight"):
            v = n * (0.1 / math.sqrt(2 * cfg.layers))
        elif ".ln_" in name or name.startswith("transformer.ln_f"):
            v = 1.0 + 0.1 * n if name.endswith(".weight") else 0.1 * n
        elif name.endswith(".bias"):
            v = 0.05 * n
        else:
            v = 0.1 * n
        out[name] = v.float()
    return out


def make_batch(cfg):
    g = torch.Generator().manual_seed(SEED + 1)
    seq = torch.randint(0, cfg.vocab, (BATCH, cfg.context + 1), generator=g)
    return seq[:, :-1].to(torch.int32), seq[:, 1:].reshape(-1).to(torch.int32)


def step(cfg, weights, idx, target, dtype):
    """Loss and {name: gradient} of one forward and backward in dtype."""
    model = gpt2_model.GPT(cfg).to(dtype)
    gpt2_model.load_weights(model, weights)
    model.train()
    _, loss = model(idx.long(), target.long())
    loss.backward()
    return loss.detach(), {n: p.grad.detach() for n, p in model.named_parameters()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.normpath(os.path.join(HERE, "..", "tests", "fixtures", "gpt2_tiny")))
    ap.add_argument("--fp32-check", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = gpt2_model.GPTConfig(dropout=0.0, **CONFIG)
    weights = make_weights(cfg)
    idx, target = make_batch(cfg)
    loss, grads = step(cfg, weights, idx, target, torch.float64)

    if args.fp32_check:
        l32, g32 = step(cfg, weights, idx, target, torch.float32)
        print(f"loss: float64 {loss.item():.9g}, float32 {l32.item():.9g}, "
              f"relative error {abs(l32.item() - loss.item()) / abs(loss.item()):.3g} (bound {RTOL})")
        worst = 0.0
        for name, gr in grads.items():
            ref = gr.float().double()  # the stored reference
            S = ref.abs().max().item()
            err = (g32[name].double() - ref).abs().max().item()
            frac = err / (RTOL * S) if S > 0 else 0.0
            worst = max(worst, frac)
            print(f"  grad.{name}: max error {err:.3g} = {frac:.3f} of the bound")
        print(f"worst: {worst:.3f} of the bound")
        return

    os.makedirs(args.out, exist_ok=True)
    meta = dict(CONFIG, batch=BATCH, seed=SEED, dropout=0.0, generator="scripts/gen_fixtures_gpt2.py")
    st.save(os.path.join(args.out, "weights.safetensors"), weights, meta)
    st.save(os.path.join(args.out, "batch.safetensors"), {"input": idx, "target": target}, meta)
    out = {"loss": np.array([loss.item()], dtype=np.float32)}
    for name, gr in grads.items():
        out["grad." + name] = gr.float()
    st.save(os.path.join(args.out, "grads.safetensors"), out, meta)
    print(f"loss {loss.item():.9g}; wrote {len(weights)} weights and their gradients to {args.out}")


if __name__ == "__main__":
    main()
