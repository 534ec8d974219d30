#!/usr/bin/python3
"""Generate the PyTorch fixtures of remat's CNN models (tests/test_models.c).

    /usr/bin/python3 scripts/gen_fixtures_cnn.py            # writes tests/fixtures/cnn_models/
    /usr/bin/python3 scripts/gen_fixtures_cnn.py --out DIR  # writes elsewhere

For each model, at a tiny configuration (CONFIGS below), the directory
tests/fixtures/cnn_models/<model>/ holds:

  weights.safetensors  every parameter and buffer by state_dict name, F32
                       (num_batches_tracked skipped). Parameters from the
                       model's own initializers (torch.manual_seed(SEED)),
                       then every BatchNorm's weight, bias and running
                       statistics drawn at random so that they matter.
                       __metadata__ holds the remat_model_opts used, one key
                       each: model, batch, channels, height, width, classes,
                       base_channels, depth (all decimal strings).
  batch.safetensors    input (B,C,H,W) F32 ~ N(0, 1); target (B) I32 labels,
                       or for siamese-resnet50 view 2, (B,C,H,W) F32.
  grads.safetensors    loss (1) F32: the training loss at these weights;
                       grad.<name> F32 for every trainable parameter;
                       state.<buffer> F32: every BatchNorm running statistic
                       after that one training-mode forward (siamese: after
                       both branches, view 1's first);
                       f32err.<key> (1) F64 for each key above: max |x32 -
                       x64| over that tensor and over 3 float32 PyTorch
                       runs from the same weights and batch (VARIANTS32:
                       oneDNN on or off, channels_last or not): how close
                       float32 arithmetic gets on this tensor at all
                       (tests/test_models.c bases its tolerance on it).

Everything is computed in float64 PyTorch (model.double(), BatchNorm in
training mode) from the float32 weights and batch, and rounded to float32.
The bytes are deterministic (one thread, fixed seeds, sorted keys).
"""
import argparse
import copy
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench", "torch"))
import cnn_models  # noqa: E402
import st  # noqa: E402

SEED = 1234

# remat_model_opts of each fixture (0 = the model's default). Batch 4: at
# 32x32 the last stage is 1x1, and BatchNorm over 2 values per channel
# passes no gradient back at all (x-hat = +-1 cancels it exactly). Widths
# keep all fixtures together near 1 MB.
CONFIGS = {
    "resnet18": dict(batch=4, channels=3, height=32, width=32, classes=10, base_channels=4, depth=0),
    "resnet50": dict(batch=4, channels=3, height=32, width=32, classes=10, base_channels=2, depth=0),
    # 4 layers per dense block: the last concat joins 5 tensors
    "densenet-bc": dict(batch=4, channels=3, height=32, width=32, classes=10, base_channels=4, depth=28),
    "siamese-resnet50": dict(batch=4, channels=3, height=32, width=32, classes=10, base_channels=2, depth=0),
}


# float32 PyTorch variants (channels_last, oneDNN): each sums in another
# order. (channels_last with oneDNN on corrupts memory in Debian's torch
# 1.13 build, so that pair is left out.)
VARIANTS32 = ((False, True), (False, False), (True, False))


def float32_run(model, name, x, target, channels_last, onednn):
    """Loss, gradients and running statistics of one float32 PyTorch step."""
    model = copy.deepcopy(model).train()
    target = target if target.dtype == torch.float32 else target.long()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
        if target.dtype == torch.float32:
            target = target.contiguous(memory_format=torch.channels_last)
    with torch.backends.mkldnn.flags(enabled=onednn):
        loss = cnn_models.loss(model, name, x, target)
        loss.backward()
    out = {"loss": loss.detach().reshape(1)}
    out.update({"grad." + k: p.grad for k, p in model.named_parameters()})
    out.update({"state." + k: b for k, b in model.named_buffers() if not k.endswith("num_batches_tracked")})
    return out


def generate(name, cfg, out):
    torch.manual_seed(SEED)
    model = cnn_models.build(name, cfg["base_channels"], cfg["depth"], cfg["classes"])
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    weights = {k: v.float() for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    shape = (cfg["batch"], cfg["channels"], cfg["height"], cfg["width"])
    x = torch.randn(shape, dtype=torch.float32)
    if name == "siamese-resnet50":
        target = torch.randn(shape, dtype=torch.float32)
    else:
        target = torch.randint(0, cfg["classes"], (cfg["batch"],), dtype=torch.int32)

    runs32 = [float32_run(model, name, x, target, *v) for v in VARIANTS32]
    model = model.double().train()
    t = target.double() if target.dtype == torch.float32 else target.long()
    loss = cnn_models.loss(model, name, x.double(), t)
    loss.backward()
    grads = {"loss": loss.detach().float().reshape(1)}
    for k, p in model.named_parameters():
        grads["grad." + k] = p.grad.float()
    for k, b in model.named_buffers():
        if not k.endswith("num_batches_tracked"):
            grads["state." + k] = b.float()
    ref = {"loss": loss.detach().reshape(1)}
    ref.update({"grad." + k: p.grad for k, p in model.named_parameters()})
    ref.update({"state." + k: b for k, b in model.named_buffers() if not k.endswith("num_batches_tracked")})
    for k, r in ref.items():
        e = max((run[k].double() - r).abs().max().item() for run in runs32)
        grads["f32err." + k] = torch.tensor([e], dtype=torch.float64)

    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    meta = dict(model=name, **cfg)
    st.save(os.path.join(d, "weights.safetensors"), weights, meta)
    st.save(os.path.join(d, "batch.safetensors"), {"input": x, "target": target})
    st.save(os.path.join(d, "grads.safetensors"), grads)
    nparam = sum(p.numel() for p in model.parameters())
    print(f"{name}: {len(weights)} tensors, {nparam} parameters, loss {loss.item():.9g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "fixtures", "cnn_models"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    # at base 64 the narrow ResNet is torchvision's own: same names, shapes
    for name in ("resnet18", "resnet50"):
        ours = cnn_models._NarrowResNet(*((cnn_models.Bottleneck, [3, 4, 6, 3]) if name == "resnet50" else
                                          (cnn_models.BasicBlock, [2, 2, 2, 2])), 64, 1000)
        ref = cnn_models.build(name)
        assert {k: v.shape for k, v in ours.state_dict().items()} == \
            {k: v.shape for k, v in ref.state_dict().items()}, name
    for name, cfg in CONFIGS.items():
        generate(name, cfg, args.out)


if __name__ == "__main__":
    main()
