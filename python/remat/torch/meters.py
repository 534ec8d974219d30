"""Meters: the transient bytes of each op, measured while capture runs it.

Capture cuts the step into segments (one per forward call, one per
autograd node of the backward) and asks a meter for the most bytes each
segment held above what was live when it began. Three meters, one
interface, chosen by ``meter_for``:

- ``CounterMeter`` reads a live counter at each segment's edges: the heap
  counter (libremat-memtrack.so, preloaded: every aligned block, which is
  every tensor's and oneDNN's, and every malloc of 64 KiB or more) or a
  CUDA device's allocator statistics. Exact, and sees memory that kernel
  libraries take outside PyTorch's allocator.
- ``ProfilerMeter`` needs nothing preloaded, so it works in a plain
  ``python train.py``: PyTorch's profiler reports every allocation and free
  of its CPU allocator (``profile_memory``), and each segment is a
  ``record_function`` range; after the step, the allocations inside each
  range are summed in order and their highest running sum is its peak.
  Memory a kernel library takes from malloc itself, outside PyTorch's
  allocator, is not seen; the plan says so (``Plan.unmeasured``).
- ``NoMeter``: nothing measured (``transients="none"``); the plan says so.

Segments are opened with ``begin(tag)`` and closed with ``end()``; a
counter meter knows a segment's peak at ``end``, the profiler's after
``finish()``. ``peaks()`` gives {tag: bytes} for every closed segment.
"""

import os

import torch

from . import compat, memtrack
from .clock import Clock
from .compat import TorchDispatchMode

#: How each meter's measurement is named in a plan (Plan.transients).
HEAP_COUNTER = "heap counter"
CUDA_ALLOCATOR = "CUDA allocator"
PROFILER = "PyTorch profiler"
NONE = "none"


class CounterMeter:
    """Segments measured with a live counter (memtrack.Counter or CudaCounter)."""

    def __init__(self, counter, how):
        self.c, self.how = counter, how
        self.unmeasured = None
        self._peaks, self._tag, self._start = {}, None, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.end()
        return False

    def begin(self, tag):
        self.end()
        self._tag, self._start = tag, self.c.live()
        self.c.reset_peak()

    def end(self):
        if self._tag is not None:
            self._peaks[self._tag] = max(0, self.c.peak() - self._start)
            self._tag = None

    def finish(self):
        self.end()
        if not self.c.complete():
            self.unmeasured = "the heap counter's table was full: some blocks went uncounted"

    def peaks(self):
        return self._peaks


class ProfilerMeter:
    """Segments measured from the profiler's allocation events (no preload)."""

    how = PROFILER
    unmeasured = ("memory a kernel library allocates itself, outside PyTorch's CPU allocator (seen only with the "
                  "heap counter preloaded: python -m remat.torch run SCRIPT)")

    def __init__(self):
        self._prof = None
        self._rf = None
        self._tags = []
        self._peaks = {}

    def __enter__(self):
        self._prof = compat.memory_profiler()
        with compat.quiet_stderr():  # kineto prints its start and stop
            self._prof.__enter__()
        return self

    def __exit__(self, *exc):
        self.end()
        with compat.quiet_stderr():
            self._prof.__exit__(*exc)
        return False

    def begin(self, tag):
        self.end()
        self._rf = torch.autograd.profiler.record_function("remat#%d" % len(self._tags))
        self._rf.__enter__()
        self._tags.append(tag)

    def end(self):
        if self._rf is not None:
            self._rf.__exit__(None, None, None)
            self._rf = None

    def finish(self):
        """Sums the allocations inside each range, in order (after __exit__)."""
        ranges, allocs = [], []
        for name, start, end, nbytes in compat.profiler_events(self._prof):
            if name.startswith("remat#"):
                ranges.append((start, end, int(name[6:])))
            elif name == "[memory]":
                allocs.append((start, nbytes))
        ranges.sort()
        allocs.sort()
        j = 0
        for start, end, k in ranges:
            while j < len(allocs) and allocs[j][0] < start:
                j += 1
            run = top = 0
            while j < len(allocs) and allocs[j][0] <= end:
                run += allocs[j][1]
                top = max(top, run)
                j += 1
            self._peaks[self._tags[k]] = top

    def peaks(self):
        return self._peaks


class NoMeter:
    how = NONE
    unmeasured = "every op's transient bytes (capture was asked not to measure them)"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def begin(self, tag):
        pass

    def end(self):
        pass

    def finish(self):
        pass

    def peaks(self):
        return {}


def meter_for(device, transients="auto"):
    """The meter capture measures transients with on device. transients:
    "auto" (the counter where there is one: a CUDA device's statistics, or
    the heap counter when preloaded; else the profiler), "counter",
    "profiler" or "none". REMAT_TRANSIENTS in the environment overrides
    "auto"."""
    if transients == "auto":
        transients = os.environ.get("REMAT_TRANSIENTS", "auto") or "auto"
    if transients not in ("auto", "counter", "profiler", "none"):
        raise ValueError("transients must be auto, counter, profiler or none, not %r" % (transients,))
    if transients == "none":
        return NoMeter()
    cuda = device.type == "cuda"
    if transients in ("auto", "counter"):
        c = memtrack.counter(device)
        if c is not None:
            return CounterMeter(c, CUDA_ALLOCATOR if cuda else HEAP_COUNTER)
        if transients == "counter":
            raise ValueError("transients='counter' needs the heap counter preloaded (python -m remat.torch run "
                             "SCRIPT) on the CPU")
    if cuda:
        raise ValueError("on a CUDA device transients are measured by its allocator's statistics "
                         "(transients='auto' or 'counter')")
    return ProfilerMeter()


class BackwardMeter(TorchDispatchMode):
    """Measures each op's backward transient bytes: over the calls of its
    autograd node (or of its nodes that run one after the other, where an
    in-place op was folded into the op), the peak above what was live when
    the first started, less the gradients of its inputs (which the plan
    counts as values)."""

    def __init__(self, trace, meter, clock=None):
        super().__init__()
        self.t, self.m = trace, meter
        self.clock = clock if clock is not None else Clock()  # each op's backward time (clock.py)
        self.node = None
        self.segs = []  # (segment, op id) in the order the nodes ran
        self.t0 = None  # when the running segment began (a clock mark)
        self.seen = set()
        self.last_reader = {}  # value -> its last reader in the forward
        self.first_grad = {}   # value -> the op whose backward makes its gradient first (its last reader with a node)
        for o in trace.ops:
            o.transient_bwd = 0
            for v in o.inputs:
                self.last_reader[v] = o.id
                if o.has_node:
                    self.first_grad[v] = o.id

    def resolve(self, peaks):
        """Each op's backward transient: the peak of each run of its node
        above what was live when it started, less the gradients of its
        inputs whose gradient it makes first (values the plan counts) and of
        the parameters whose gradient it makes (the plan counts them from
        there to the step's end). A value's gradient is made in the backward
        of its last reader, the first in the backward; a later backward's
        contribution is a tensor of its own, added into it and freed (a
        transient of that backward: GPT-2's pow makes three)."""
        vals = self.t.values
        for k, op in self.segs:
            if op < 0:
                continue
            o = self.t.ops[op]
            gin = sum(vals[v].gbytes for v in set(o.inputs) if vals[v].kind == "activation"
                      and self.first_grad.get(v) == o.id)
            made = sum(vals[v].bytes for v in set(o.inputs) if vals[v].kind == "parameter"
                       and self.last_reader.get(v) == o.id)
            o.transient_bwd = max(o.transient_bwd, peaks.get(("b", k), 0) - gin - made)
            self.seen.add(o.id)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        node = compat.current_autograd_node()
        if node is not self.node:
            op = node.metadata.get("remat.op", -1) if node is not None else -1
            self.node = node
            if op < 0 or not self.segs or self.segs[-1][1] != op:
                self._timed()
                self.segs.append((len(self.segs), op))
                self.m.begin(("b", len(self.segs) - 1))
                self.t0 = self.clock.mark()
            # else the same op's next autograd node (an in-place op folded
            # into its maker: relu_'s node, then BatchNorm's): one segment
            # from the first node's start, so that what the first node
            # freed (the in-place op's saved result, the gradient it
            # consumed) lowers what the second is charged, as the plan
            # frees them only after the op's whole backward
        return func(*args, **(kwargs or {}))

    def _timed(self):
        """The running segment's seconds, to its op's backward."""
        if self.segs and self.segs[-1][1] >= 0:
            self.clock.charge(self.t.ops[self.segs[-1][1]], "seconds_bwd", self.t0)

    def __exit__(self, *a):
        self._timed()
        self.m.end()
        return super().__exit__(*a)
