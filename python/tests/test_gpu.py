"""remat.torch on a CUDA device (skipped where there is none): the CIFAR CNN
with dropout under the optimal plan at its floor and under sqrt's plan
(which replays two dropouts) gives, over 20 steps, the losses,
gradients and weights of the same script without a plan (dropout replayed
from the CUDA generator's state; deterministic algorithms, as bitwise
equality needs on a GPU), and ResNet-18's measured peak (the CUDA
allocator's requested bytes, rt.measure's) is within 1% of the prediction
and within the budget at three budgets from the floor to store-all, and
max_memory_allocated's (the caching allocator's blocks, with their
rounding and unsplit slack) within 5%; capture times each op on the
device (CUDA events), not its launch; and transformers' GPT-2 and T5 run
their midpoint plans with windows on the device (the reader reading
their floats and taking T5's position buckets, every step's replays'
bits checked by the device's fingerprints), bitwise over 3 steps."""
import contextlib
import copy
import os

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before its first use

import user_models as um  # noqa: E402
from library_models import _Labels  # noqa: E402
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



def _hf(name, dev):
    """transformers' GPT-2 or T5 at the library sweep's small sizes (with
    dropout), on dev, its own loss from (input_ids, labels): (model,
    inputs)."""
    import transformers as tf
    g = torch.Generator().manual_seed(2)
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = tf.GPT2Config(vocab_size=512, n_embd=64, n_layer=2, n_head=4, n_positions=128, resid_pdrop=0.1,
                            embd_pdrop=0.1, attn_pdrop=0.1)
        ids = torch.randint(0, 512, (2, 32), generator=g).to(dev)
        return _Labels(tf.GPT2LMHeadModel(cfg)).to(dev), (ids, ids)
    cfg = tf.T5Config(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
                      dropout_rate=0.1, decoder_start_token_id=0, pad_token_id=0)
    x, y = torch.randint(0, 512, (4, 64), generator=g).to(dev), torch.randint(0, 512, (4, 32), generator=g).to(dev)
    return _Labels(tf.T5ForConditionalGeneration(cfg)).to(dev), (x, y)


def library_windows(name, dev):
    """name's midpoint plan runs with windows and the reader, every step's
    replays' bits checked, 3 SGD steps bitwise equal to no plan."""
    from remat.torch import apply, decisions
    model, inputs = _hf(name, dev)
    model.train()
    trace = rt.capture(model, inputs, lambda loss: loss)
    opt = torch.optim.SGD(copy.deepcopy(model).parameters(), lr=0.01, momentum=0.9)
    plan = rt.plan_trace(trace, between(trace, opt, 0.5), opt)
    d = decisions.Decisions(plan)
    assert d.windows is not None and d.reads, (d.why, d.reads)

    def steps(p):
        m = copy.deepcopy(model)
        o = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        torch.manual_seed(1234)
        out = []
        for _ in range(3):
            o.zero_grad(set_to_none=True)
            with (p.apply(m) if p is not None else contextlib.nullcontext()):
                loss = m(*inputs)
                loss.backward()
            out.append([loss.detach().clone()] + [q.grad.clone() for q in m.parameters() if q.grad is not None])
            o.step()
        return out
    every = apply.VERIFY_EVERY
    apply.VERIFY_EVERY = 1  # every step's replays checked (on a device: its fingerprints, one synchronization)
    try:
        ref, got = steps(None), steps(plan)
    finally:
        apply.VERIFY_EVERY = every
    assert all(same(a, b) for a, b in zip(ref, got))


@pytest.mark.parametrize("name", ["gpt2", "t5"])
def test_library_models_run_with_windows_on_cuda(deterministic, name):
    library_windows(name, torch.device("cuda"))
