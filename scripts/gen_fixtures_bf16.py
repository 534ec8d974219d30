#!/usr/bin/env python3
"""Generate PyTorch CPU autocast (bf16) references for tests/test_bf16.c.

Run from the repository root with PyTorch 2.x (the test command's virtual
environment, scripts/python-env.sh):

    "$(scripts/python-env.sh)/bin/python" scripts/gen_fixtures_bf16.py

For each model, one training-mode forward and backward from float32
weights (master weights) under torch.autocast("cpu", dtype=torch.bfloat16),
as a PyTorch user trains in bf16, on one thread:

  cnn       remat's cnn (bench/torch/bench_torch.py's CNN), dropout off,
            batch 8 of 1x8x8 (a small file): tests/fixtures/bf16_cnn/ gets its
            weights.safetensors (seeded initialization; __metadata__ has
            remat_model_opts: model, batch, channels, height, width,
            classes) and batch.safetensors (input F32 ~ N(0, 1), target
            I32), made here.
  resnet18  the weights and batch of tests/fixtures/cnn_models/resnet18/
            (scripts/gen_fixtures_cnn.py).
  gpt2      the weights and batch of tests/fixtures/gpt2_tiny/
            (scripts/gen_fixtures_gpt2.py; dropout off).

Each directory gets autocast.safetensors:
  loss (1) F32               the autocast loss
  grad.<name> F32            every parameter's gradient (float32, as
                             autocast leaves it in .grad)
  f32dist.<key> (1) F64      max |float32 PyTorch - autocast| over the
                             tensor: how far plain float32 is from this
                             reference (the test prints remat's distance
                             beside it)
The bytes are deterministic (seeded, one thread, sorted keys).
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench", "torch"))
import bench_torch  # noqa: E402
import cnn_models  # noqa: E402
import gpt2_model  # noqa: E402
import st  # noqa: E402

FIX = os.path.join(HERE, "..", "tests", "fixtures")
SEED = 1234


def run(model, loss_of, autocast):
    """Loss and {name: gradient} of one training-mode step."""
    model.zero_grad(set_to_none=True)
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = loss_of(model)
    loss.float().backward()
    return loss.detach().float().reshape(1), {n: p.grad.detach().float() for n, p in model.named_parameters()}


def write(d, model, loss_of, snapshot):
    """autocast.safetensors in d; snapshot() restores the weights and
    buffers between the two runs (BatchNorm's running statistics move)."""
    snapshot()
    l16, g16 = run(model, loss_of, True)
    snapshot()
    l32, g32 = run(model, loss_of, False)
    out = {"loss": l16, "f32dist.loss": (l32.double() - l16.double()).abs().reshape(1)}
    for n, g in g16.items():
        out["grad." + n] = g
        out["f32dist.grad." + n] = (g32[n].double() - g.double()).abs().max().reshape(1)
    st.save(os.path.join(d, "autocast.safetensors"), out, dict(generator="scripts/gen_fixtures_bf16.py",
                                                                torch=torch.__version__))
    worst = max(out[k].item() / max(out[k[8:]].abs().max().item(), 1e-30) for k in out if k.startswith("f32dist."))
    print(f"{d}: autocast loss {l16.item():.6g} (float32 {l32.item():.6g}); float32 is up to {worst:.3g} of a "
          f"tensor's largest magnitude from autocast")


def saver(model):
    state = {k: v.clone() for k, v in model.state_dict().items()}
    return lambda: model.load_state_dict(state)


def cnn():
    torch.manual_seed(SEED)
    model = bench_torch.CNN(channels=1, size=8, classes=10)
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    g = torch.Generator().manual_seed(SEED + 1)
    x = torch.randn((8, 1, 8, 8), generator=g)
    t = torch.randint(0, 10, (8,), generator=g, dtype=torch.int32)
    d = os.path.join(FIX, "bf16_cnn")
    os.makedirs(d, exist_ok=True)
    meta = dict(model="cnn", batch=8, channels=1, height=8, width=8, classes=10)
    st.save(os.path.join(d, "weights.safetensors"), {k: v.float() for k, v in model.state_dict().items()}, meta)
    st.save(os.path.join(d, "batch.safetensors"), {"input": x, "target": t})
    write(d, model, lambda m: torch.nn.functional.cross_entropy(m(x), t.long()), saver(model))


def resnet18():
    d = os.path.join(FIX, "cnn_models", "resnet18")
    w, b = st.load(os.path.join(d, "weights.safetensors")), st.load(os.path.join(d, "batch.safetensors"))
    classes = 10
    model = cnn_models.build("resnet18", 4, 0, classes)
    model.load_state_dict(w, strict=False)
    x, t = b["input"], b["target"].long()
    write(d, model, lambda m: cnn_models.loss(m, "resnet18", x, t), saver(model))


def gpt2():
    d = os.path.join(FIX, "gpt2_tiny")
    sys.path.insert(0, HERE)
    import gen_fixtures_gpt2 as g2  # noqa: E402
    cfg = gpt2_model.GPTConfig(dropout=0.0, **g2.CONFIG)
    model = gpt2_model.GPT(cfg)
    gpt2_model.load_weights(model, st.load(os.path.join(d, "weights.safetensors")))
    b = st.load(os.path.join(d, "batch.safetensors"))
    idx, t = b["input"].long(), b["target"].long()
    write(d, model, lambda m: m(idx, t)[1], saver(model))


def main():
    torch.set_num_threads(1)
    cnn()
    resnet18()
    gpt2()


if __name__ == "__main__":
    main()
