"""What deterministic convolutions cost on a GPU, in PyTorch: a ResNet-50
training step (forward and backward) under bf16 autocast and in float32,
with cuDNN's algorithms free and with deterministic algorithms only
(torch.use_deterministic_algorithms(warn_only=True): ops without a
deterministic kernel warn and run; cudnn.deterministic, as remat's bitwise promise needs),
and the same for each distinct 3x3 convolution's backward alone, its
tensors in NCHW (as remat stores them) and in channels-last. The
ratios say whether a fast deterministic bf16 convolution exists in cuDNN
for these shapes (issue 34), measured side by side in one run.

    python3 bench/torch/cudnn_determinism.py [--batch 64] [--steps 10] [--device cuda]
"""
import argparse
import os
import statistics
import time
import warnings

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def timed(fn, steps, sync):
    for _ in range(3):
        fn()
    sync()
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main():
    warnings.filterwarnings("ignore", message=".*deterministic.*")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--device", default="cuda", help="cuda (cpu: a smoke test of this script)")
    a = ap.parse_args()
    import torchvision
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    m = torchvision.models.resnet50().to(dev)
    x = torch.randn(a.batch, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (a.batch,), device=dev)
    convs = {}
    for mod in m.modules():
        if isinstance(mod, torch.nn.Conv2d) and mod.kernel_size == (3, 3):
            convs.setdefault((mod.in_channels, mod.out_channels, mod.stride[0]), mod)
    shapes = {}
    hooks = [c.register_forward_hook(lambda mod, i, o, k=k: shapes.setdefault(k, tuple(i[0].shape)) and None)
             for k, c in convs.items()]
    m(x[:1])
    for h in hooks:
        h.remove()

    def step(bf16):
        def run():
            m.zero_grad(set_to_none=True)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                loss = F.cross_entropy(m(x), y)
            loss.backward()
        return run

    print("ResNet-50 b%d step (forward and backward), median of %d:" % (a.batch, a.steps))
    res = {}
    for bf16 in (True, False):
        for det in (False, True):
            torch.use_deterministic_algorithms(det, warn_only=True)
            torch.backends.cudnn.deterministic = det
            res[bf16, det] = timed(step(bf16), a.steps, sync)
        print("  %-5s free %.4f s  deterministic %.4f s  (%.2fx)" % (
            "bf16" if bf16 else "fp32", res[bf16, False], res[bf16, True], res[bf16, True] / res[bf16, False]))
    print("3x3 convolutions' backward (input and weight gradients), bf16, ms, NCHW (as remat stores) and "
          "channels-last (NHWC):")
    for k, c in convs.items():
        n, ci, h, w = shapes[k]
        t = {}
        for fmt in (torch.contiguous_format, torch.channels_last):
            xi = torch.randn(a.batch, ci, h, w, device=dev, dtype=torch.bfloat16).to(memory_format=fmt)
            xi.requires_grad_(True)
            wt = c.weight.detach().to(torch.bfloat16).to(memory_format=fmt).requires_grad_(True)
            g = torch.randn_like(F.conv2d(xi, wt, stride=c.stride, padding=c.padding))

            def back(xi=xi, wt=wt, c=c, g=g):
                torch.autograd.grad(F.conv2d(xi, wt, stride=c.stride, padding=c.padding), (xi, wt), g)
            for det in (False, True):
                torch.use_deterministic_algorithms(det, warn_only=True)
                torch.backends.cudnn.deterministic = det
                t[fmt, det] = timed(back, a.steps, sync)
        nchw, nhwc = torch.contiguous_format, torch.channels_last
        print("  in %4d out %4d stride %d at %3dx%-3d  NCHW free %.3f deterministic %.3f (%.2fx)  NHWC free %.3f "
              "deterministic %.3f (%.2fx)" % (
                  ci, c.out_channels, c.stride[0], h, w, 1e3 * t[nchw, False], 1e3 * t[nchw, True],
                  t[nchw, True] / t[nchw, False], 1e3 * t[nhwc, False], 1e3 * t[nhwc, True],
                  t[nhwc, True] / t[nhwc, False]))
    torch.use_deterministic_algorithms(False)


if __name__ == "__main__":
    main()
