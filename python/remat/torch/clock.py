"""Clocks: how capture times each op, where the op runs.

Capture times each op's forward and backward as it runs them (the planner
weighs recomputation in seconds with them, ``cost="seconds"``). On the CPU
an op's time is the wall clock's around its call. On a CUDA device the
call returns once its kernels are queued, so the wall clock would time
the launch: there each op is timed by CUDA events recorded on the current
stream before and after its call, read once the step has run, so that
timing adds no wait to the step. What the events time is the stream's
span between them: the op's kernels, and the launch where the device
waited for it (capture's own Python leaves the device idle between ops,
so a small kernel's span is about its launch's time).

A clock charges spans to an attribute of an object (an op's ``seconds`` or
``seconds_bwd``) and adds them when resolved: ``mark()`` before and after,
``charge(op, "seconds", start, end)``, ``resolve()`` after the step.
"""

import time

import torch


class Clock:
    """The wall clock (CPU ops)."""

    def __init__(self):
        self._spans = []  # (object, attribute, start mark, end mark)

    def mark(self):
        return time.perf_counter()

    def charge(self, obj, attr, start, end=None):
        """Adds the span from start to end (default: now) to obj.attr when resolved."""
        self._spans.append((obj, attr, start, self.mark() if end is None else end))

    def move(self, old, new):
        """Spans charged to old go to new (capture made two ops one)."""
        self._spans = [(new if o is old else o, a, s, e) for o, a, s, e in self._spans]

    def resolve(self):
        for obj, attr, start, end in self._spans:
            setattr(obj, attr, getattr(obj, attr) + max(0.0, self._seconds(start, end)))
        self._spans = []

    def _seconds(self, start, end):
        return end - start


class CudaClock(Clock):
    """CUDA events on the current stream (ops on a CUDA device). event: the
    event class (torch.cuda.Event; a test passes a stand-in)."""

    def __init__(self, event=None):
        super().__init__()
        self.event = event if event is not None else torch.cuda.Event

    def mark(self):
        e = self.event(enable_timing=True)
        e.record()
        return e

    def _seconds(self, start, end):
        end.synchronize()  # and start with it, recorded before it on the same stream
        return start.elapsed_time(end) / 1e3  # milliseconds


def clock_for(device):
    """The clock for ops on device."""
    return CudaClock() if device is not None and torch.device(device).type == "cuda" else Clock()
