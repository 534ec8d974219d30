"""Capture's clocks (clock.py): each op's forward and backward time, charged
when the step has run. On a CUDA device they are CUDA events; here a
stand-in event that ticks once per record stands in for them, so that
every span's length is known exactly: one tick per call in the forward,
one per backward segment (an op's node's calls, from the first to the
next op's node)."""
import importlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import user_models as um

import remat.torch as rt
from remat.torch.clock import Clock, CudaClock, clock_for


class Tick:
    """A CUDA event's stand-in: record() takes the next tick; a tick is a millisecond."""
    now = 0

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.at = None

    def record(self):
        Tick.now += 1
        self.at = Tick.now

    def synchronize(self):
        assert self.at is not None

    def elapsed_time(self, end):
        return float(end.at - self.at)


class Block(nn.Module):
    """A convolution, BatchNorm and an in-place SiLU (whose input autograd
    clones: capture makes the clone and the write one op of two calls)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn, self.act, self.conv2 = nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.SiLU(True), \
            nn.Conv2d(8, 4, 3)

    def forward(self, x):
        return self.conv2(self.act(self.bn(self.conv1(x)))).square().sum()


@pytest.mark.parametrize("model", ["block", "cnn"])
def test_each_op_is_charged_its_calls_and_its_backward(monkeypatch, model):
    torch.manual_seed(0)
    if model == "block":
        m, x, lf = Block(), torch.randn(2, 3, 12, 12), (lambda o: o)
    else:
        m, x, y = um.CifarCNN(), torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
        lf = lambda o: F.cross_entropy(o, y)  # noqa: E731
    monkeypatch.setattr(importlib.import_module("remat.torch.capture"), "clock_for",
                        lambda device: CudaClock(event=Tick))
    t = rt.capture(m, (x,), lf)
    assert t.ops
    for o in t.ops:  # one tick from before each call to after it
        assert o.seconds == pytest.approx(1e-3 * len(o.calls)), (o.id, o.name, o.calls)
        ticks = round(o.seconds_bwd * 1e3)  # a tick per backward segment of its node (none: no aten call)
        assert o.seconds_bwd == pytest.approx(1e-3 * ticks) and (ticks == 0 or o.has_node), (o.id, o.name)
    if model == "block":
        merged = [o for o in t.ops if any(t.values[v].moved == o.id for v in o.inputs)]
        assert merged and len(merged[0].calls) == 2 and merged[0].seconds == pytest.approx(2e-3)
    assert sum(o.has_node and o.seconds_bwd > 0 for o in t.ops) > len(t.ops) // 2


def test_the_cpu_clock_times_the_calls():
    m, x = Block(), torch.randn(2, 3, 12, 12)
    t = rt.capture(m, (x,), lambda o: o)
    assert all(o.seconds > 0 for o in t.ops)
    assert sum(o.seconds + o.seconds_bwd for o in t.ops) < t.capture_seconds
    assert isinstance(clock_for(torch.device("cpu")), Clock) and not isinstance(clock_for("cpu"), CudaClock)
    assert isinstance(clock_for(torch.device("cuda", 0)), CudaClock)
