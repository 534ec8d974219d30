"""remat.torch on a CUDA device (skipped where there is none): the CIFAR CNN
with dropout under the optimal plan at its floor and under sqrt's plan
(which replays two dropouts) gives, over 20 steps, the losses,
gradients and weights of the same script without a plan (dropout replayed
from the CUDA generator's state; deterministic algorithms, as bitwise
equality needs on a GPU), and ResNet-18's measured peak (the CUDA
allocator's requested bytes, rt.measure's) is within 1% of the prediction
and within the budget at three budgets from the floor to store-all, and
max_memory_allocated's (the caching allocator's blocks, with their
rounding and unsplit slack) within 5%; and capture times each op on the
device (CUDA events), not its launch."""
import copy
import os

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before its first use

import user_models as um  # noqa: E402
from test_user_scripts import between, same  # noqa: E402

import remat.torch as rt  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.fixture
def deterministic():
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(old)


def _steps(model, data, lf, plan, n):
    torch.manual_seed(1234)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for i in range(n):
        opt.zero_grad()
        x, y = data[i % len(data)]
        if plan is None:
            loss = lf(model(x), y)
            loss.backward()
        else:
            with plan.apply():
                loss = lf(model(x), y)
                loss.backward()
        losses.append(loss.detach().clone())
        grads = [p.grad.clone() for p in model.parameters()]
        opt.step()
    return losses, grads, [p.detach().clone() for p in model.parameters()]


def test_cifar_cnn_with_dropout_on_cuda(deterministic):
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = um.CifarCNN().to(dev)
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(32, 3, 32, 32, generator=g).to(dev), torch.randint(0, 10, (32,), generator=g).to(dev))
            for _ in range(4)]
    lf = F.cross_entropy
    trace = rt.capture(model, (data[0][0],), lambda o: lf(o, data[0][1]))
    opt = torch.optim.SGD(copy.deepcopy(model).parameters(), lr=0.01, momentum=0.9)
    # The optimal plan at the floor keeps every dropout's output (with
    # PyTorch 2.11: on the CPU it recomputes the first convolution and its
    # ReLU alone; on an H200 no budget up to 70% of the way to store-all
    # replays a dropout); sqrt's segments replay two.
    floor = rt.plan_trace(trace, between(trace, opt, 0.0), opt)
    sqrt = rt.plan_trace(trace, None, opt, "sqrt")
    assert floor.feasible and floor.drop_ops and sqrt.feasible
    assert any(trace.ops[o].random for o in sqrt.recompute_ops), "sqrt replays a dropout"
    ref = _steps(copy.deepcopy(model), data, lf, None, 20)
    for plan in (floor, sqrt):
        got = _steps(copy.deepcopy(model), data, lf, plan, 20)
        assert same(ref[0], got[0]) and same(ref[1], got[1]) and same(ref[2], got[2])


def test_memory_truth_on_cuda():
    import torchvision
    dev = torch.device("cuda")
    torch.manual_seed(0)
    m0 = torchvision.models.resnet18().to(dev)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 3, 64, 64, generator=g).to(dev), torch.randint(0, 1000, (16,), generator=g).to(dev)
    lf = lambda o: F.cross_entropy(o, y)  # noqa: E731
    trace = rt.capture(m0, (x,), lf)
    opt0 = torch.optim.SGD(m0.parameters(), lr=0.01, momentum=0.9)
    top = rt.plan_trace(trace, None, opt0, "all").peak_bytes
    floor = rt.plan_trace(trace, 1, opt0).floor
    assert rt.plan_trace(trace, floor, opt0).feasible and not rt.plan_trace(trace, floor - (1 << 20), opt0).feasible
    for frac in (0.0, 0.5, 1.0):
        budget = int(floor + frac * max(0, rt.budget_for(top) - floor))
        m = copy.deepcopy(m0)
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        p = rt.plan_trace(trace, budget, opt)
        r = rt.measure(m, (x,), lf, plan=p, optimizer=opt, steps=3)
        assert r["peak_bytes"] <= budget, (frac, r["peak_bytes"], budget)
        assert abs(r["peak_bytes"] - p.peak_bytes) <= 0.01 * p.peak_bytes, (frac, r["peak_bytes"], p.peak_bytes)
        assert r["allocator_peak_bytes"] <= 1.05 * p.peak_bytes, (frac, r["allocator_peak_bytes"], p.peak_bytes)


def test_capture_times_each_op_on_the_device():
    """Capture's op times on a CUDA device are the device's (CUDA events,
    clock.py), not the launches': their sum is of the order of a
    synchronized step's time (a small kernel's span is its launch's, as
    capture keeps the device waiting), and the op that takes longest is a
    convolution."""
    import time

    import torchvision
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = torchvision.models.resnet18().to(dev)
    x, y = torch.randn(32, 3, 128, 128, device=dev), torch.randint(0, 1000, (32,), device=dev)
    lf = lambda o: F.cross_entropy(o, y)  # noqa: E731
    t = rt.capture(model, (x,), lf)
    times = []
    for _ in range(5):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        lf(model(x)).backward()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    step = sorted(times)[2]
    timed = sum(o.seconds + o.seconds_bwd for o in t.ops)
    assert 0.3 * step < timed < 3.0 * step, (timed, step)
    longest = max(t.ops, key=lambda o: o.seconds)
    assert longest.family == "conv", (longest.name, longest.seconds)
