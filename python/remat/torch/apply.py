"""Apply: a remat plan run by PyTorch in eager mode, value by value.

The plan names the ops whose outputs the backward gets by recomputation.
Inside ``plan.apply()``:

- a TorchDispatchMode follows the forward call by call against the
  captured sequence where the plan needs it (regions.py; a different
  sequence there is refused: the step changed), learns which tensor holds
  which value, keeps a recipe for each call of an op it may replay (the
  op and its arguments, with values by reference and never by tensor, so
  a recipe holds no activation) and the RNG state before each random call;
- saved-tensor hooks (the mechanism under torch.utils.checkpoint), on
  only where a dropped value is saved, give the backward a small handle
  instead of every saved tensor of a recomputed value, so its memory is
  freed after its last forward use, as the plan says;
- when the backward unpacks a handle, the value is recomputed from the
  values the plan keeps, with the rest of its recomputation group (the
  ops the plan's schedule recomputes together, a segment just before its
  backward): the missing ops run again in order, under no_grad, each
  once; what they make is held until its last read by the backward or by
  another recomputation, then dropped. This is the schedule remat's
  memory plan predicts.

What it guarantees: the same ops on the same inputs, so the same bits
(gradients, loss) as the step without a plan, on the same threads (a plan
applied with no dispatch mode, windows.py, replays the captured data
flow, with the step's own floats where they are not configuration, read
in their stretches of module code by _Reader, and checks its replays'
bits in some steps: Applier.verify); a
random op (dropout) is replayed from the RNG state it first drew from;
an op that writes a buffer (BatchNorm's running statistics) is replayed on
a copy of the buffer, so state changes once per step; every parameter
gets its gradient whatever requires grad, because nothing about autograd's
graph changes (only where saved tensors live). Parameter gradients are
PyTorch's own, made by the backward that first writes them; the plan
counts them so.

This file is the step (Applier, its reader, and Applied: the context
plan.apply() returns); what a plan means for it is worked out once per
plan in decisions.py, and what a replay runs is recipes.py's.
"""

import contextlib
import ctypes
import gc
import warnings

import torch

from . import compat, fsdp, nested, regions, windows
from .capture import (
    CaptureError,
    _ignored,
    _same,
    _skey,
    _weak,
    _writes,
    _written_args,
    per_overload,
    rng_state,
    set_rng_state,
)
from .compat import TorchDispatchMode
from .holds import tensors_in
from .recipes import (
    _draws,
    _Gen,
    _Handle,
    _Input,
    _leaves,
    _map,
    _map_i,
    _Meta,
    _meta_only,
    _Named,
    _no_dropout,
    _private,
    _Recipe,
    _Ref,
    _RngAt,
    _stateless,
    _StepFloat,
    _view,
)

_skip = per_overload(_ignored)  # capture._ignored, per overload


def _fingerprint(x, nbytes):
    """FINGERPRINT_RUNS runs of 16 words spread evenly over the first
    nbytes of x's storage (all of it where shorter): the same bits give the
    same fingerprint (Applier.verify). On the CPU their bytes, read with
    no op (a step pays 20-25 times an op's cost in a loop for each); on a
    device, their sum as an int64 tensor, compared at the step's end with
    one synchronization. Runs of contiguous words read few cache lines."""
    if x.device.type == "cpu":
        p = x.untyped_storage().data_ptr()
        if nbytes <= 64 * FINGERPRINT_RUNS:
            return ctypes.string_at(p, nbytes)
        step = (nbytes - 64) // (FINGERPRINT_RUNS - 1)
        return b"".join([ctypes.string_at(p + i * step, 64) for i in range(FINGERPRINT_RUNS)])
    dt, n = (torch.int32, nbytes // 4) if nbytes % 4 == 0 else (torch.uint8, nbytes)
    w = torch.empty(0, dtype=dt, device=x.device).set_(x.untyped_storage(), 0, (n,), (1,))
    if n > 16 * FINGERPRINT_RUNS:
        w = w.as_strided((FINGERPRINT_RUNS, 16), ((n - 16) // (FINGERPRINT_RUNS - 1), 1))
    return w.sum(dtype=torch.int64)


# the runs of words of a dropped value's memory that its fingerprint sums, in the forward and after its replay
FINGERPRINT_RUNS = 16

# a plan applied with windows checks its replays' bits (Applier.verify) in its first step and then in
# one step of this many: in a step on a CPU its Python cost 0.2-0.35 ms on ResNet-18's midpoint, a
# tenth of what it recomputes, and 0.8 ms side by side (docs/pytorch.md, Apply). 1: every step
VERIFY_EVERY = 16


class Applier(TorchDispatchMode):
    """One training step under a plan (Plan.apply makes one per step)."""

    def __init__(self, plan, decisions):
        super().__init__()
        self.t = plan.trace
        d = decisions
        self.rec_ops, self.rec_vals, self.consumers, self.tracked, self.group = \
            d.rec_ops, d.rec_vals, d.consumers, d.tracked, d.group
        self.recorded, self.news, self.stale, self.n_calls = d.recorded, d.news, d.stale, len(self.t.calls)
        self.copy_at = d.copy_at
        self.fwd_held = d.fwd_held
        self.unshard = d.unshard
        self.units = []  # the model's FSDP2 units (fsdp.Bound), as the trace lists them
        self.suspended = False  # inside FSDP's own hooks (fsdp.Hooks): its calls are not the step's
        self.call = 0
        self.before = 0    # calls let through before the step's first op
        self.regions, self.hook_regions, self.tail, self.full = d.regions, d.hook_regions, d.tail, d.full
        self.decisions = d
        self.active = False  # the dispatch mode is on (a region, or the whole forward)
        self.span = None   # the region the mode is on for: (first call, end, last module call, first module call)
        self.entered = 0   # regions entered so far (the tail counts as one)
        self.n_regions = len(self.regions) + (self.tail is not None)
        self.vmap = {}     # storage address -> (value id, weak reference to the storage): activations of this step
        self.src = {}      # kept values recomputations start from
        self.recipes = {}  # op id -> [recipe]
        self.packs = {}    # value -> saved tensors of it handed out as handles
        self.uses = {}     # value -> reads still to come (unpacks, recomputations)
        self.counted = False  # forward_done ran
        self.cache = {}    # recomputed values held for their reads
        self.replays = 0   # ops run again (a check: at most once each, but under a nested plan)
        self.nested = nested.Run(self, d.schedule) if d.schedule is not None else None
        self.window_of = {}  # nested: value -> the group whose window the held tensor is
        self.handles = []    # nested: every handle handed out
        self.n_packs = 0     # tensors autograd saved so far
        # the saved-tensor hooks: over the whole step (Decisions.hooks_everywhere), else in the
        # gaps between calls the mode follows (Decisions.hook_gaps) and in the hooks' regions
        # a plan applied with no dispatch mode (windows.py): its recipes made, its hooks' regions
        # windows whose saved tensors are told by their order
        self.windows, self.at = d.windows, d.at
        self.wk = self.wend = 0  # in a window: the next saved tensor's index, and the window's end
        self.wclose = None       # the event that closes the window the hooks are on for
        self.wopen = None        # the event that opened it
        self.done = 0            # windows passed
        self.model = None        # the model the step runs (Regions._bind)
        self.named = {}          # its parameters and buffers that replays read, by name (_named)
        self.shift = {}          # a model input's storage offset in the step less capture's (_Input)
        self.draws = d.draws     # events where the generator's state is recorded (windows.draws)
        self.checked = None      # the model whose modules' attributes were checked (Decisions.configs_hold)
        self.rng_at = {}         # event -> the generator's state recorded there in this step (_RngAt)
        self.drawn = 0           # those events passed
        self.taken = d.taken     # events where a value a recomputation starts from is returned (windows.place)
        self.took = 0            # those events passed
        self.reads = d.reads     # stretches whose calls' floats the recipes read (Decisions.reads)
        self.reader = _Reader(self) if self.reads else None
        self.reading = None      # the stretch the reader is on for, and its next call
        self.rcall = 0
        self.read_done = 0       # those stretches passed
        self.floats = {}         # a call -> the floats the step's call passed (_StepFloat)
        self.verifying = False   # this step checks its replays' bits (VERIFY_EVERY)
        self.fp = {}             # a dropped value -> its fingerprint in the forward (window_pack)
        self.checks = []         # (value, its fingerprint in the forward, after its replay): verify()
        if self.windows is not None:
            self.recipes = d.recipes
        self.hooks = torch.autograd.graph.saved_tensors_hooks(
            self.pack if self.windows is None else self.window_pack, self.unpack)
        self.everywhere, self.gaps = d.hooks_everywhere, d.hook_gaps
        self.hooked = False     # they are on
        self.gap_on = False     # on for the gap the mode is in
        self.closing = d.closing
        self.left = 0           # dropped values' saves still to come after a run's end (Decisions.closing)
        self.hook_span = None   # the hooks' region they are on for: (module name, its call)

    # ---------------------------------------------------------- forward
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        ci = self.call
        if ci >= self.n_calls or self.suspended or compat.current_autograd_node() is not None or _skip(func):
            return func(*args, **kwargs)  # the backward, past the captured forward, or FSDP's
        c = self.t.calls[ci]
        if c.func is not func and c.name != str(func):
            if ci == 0:
                # before the step's first op, nothing of the step exists to read: a
                # call there is the framework's own (DistributedDataParallel
                # rebuilding its buckets in its second forward), not the step's
                self.before += 1
                return func(*args, **kwargs)
            raise CaptureError("the step's op %d is %s where the captured step had %s: the model ran other ops "
                               "than when it was planned (data-dependent control flow, or other input shapes); "
                               "plan it again" % (ci, func, c.name))
        self.call = ci + 1
        if self.recorded[ci]:
            self._record(c, func, args, kwargs)
        for v in self.copy_at.get(ci, ()):  # kept past this write: the plan holds a copy of it
            if v in self.src:
                self.src[v] = _private(self.src[v])
        out = func(*args, **kwargs)
        if self.gaps and (ci + 1 in self.gaps) is not self.gap_on:  # autograd saves a dropped value next
            self.gap_on = not self.gap_on
            self.hooks_sync()
        news, stale = self.news[ci], self.stale[ci]
        if news or stale:
            flat = _leaves(out)
            for i in stale:
                self.vmap.pop(_skey(flat[i]), None)
            for i, v in news:
                self.vmap[_skey(flat[i])] = (v, _weak(flat[i]))
                if (v in self.consumers and v not in self.rec_vals) or v in self.fwd_held:
                    self.src[v] = flat[i]
        return out

    # FSDP2 (fsdp.Hooks): FSDP's calls in its hooks are let through
    def fsdp_enter(self, unit, gathering):
        self.suspended = True

    def fsdp_gathered(self, unit, args, kwargs):
        self.suspended = False
        fsdp.gathered(unit, args, kwargs)

    def fsdp_exit(self, unit):
        self.suspended = False

    # regions (Decisions.regions): the mode on around the module calls that hold what it follows
    def on(self):
        if not self.active:
            self.active = True
            self.__enter__()

    def off(self):
        if self.active:
            self.active = False
            self.__exit__(None, None, None)

    def hooks_on(self):
        if not self.hooked:
            self.hooked = True
            self.hooks.__enter__()

    def hooks_off(self):
        if self.hooked:
            self.hooked = False
            self.hooks.__exit__(None, None, None)

    def hooks_sync(self):
        if self.everywhere or self.gap_on or self.hook_span is not None:
            self.hooks_on()
        else:
            self.hooks_off()

    def module_enter(self, name, k):
        if self.windows is not None:
            self._event(("pre", name, k))
            return
        if self.hook_span is None and (name, k) in self.hook_regions:
            self.hook_span = (name, k)
            self.hooks_on()
        span = self.regions.get((name, k))
        if span is not None and not self.active:
            self.call, self.span = span[0], span + ((name, k),)
            self.entered += 1
            self.left = 0
            self.gap_on = span[0] in self.gaps
            self.hooks_sync()
            self.on()

    def module_exit(self, name, k, out=None):
        if self.windows is not None:
            self._event(("post", name, k), out)
            if name == "":
                self.windows_done()
            return
        if self.hook_span == (name, k):
            self.hook_span = None
            self.hooks_sync()
        if self.span is not None and self.span[2] == (name, k):
            first, end, _, (enter, entered) = self.span
            if self.call != end:
                where = "module %r" % (name or "(the model)",) if enter == name else "modules %r to %r" % (enter, name)
                raise CaptureError("%s ran %d ops where the captured step ran %d: the model runs other ops than "
                                   "when it was planned; plan it again" % (where, self.call - first, end - first))
            self.span = None
            self.off()
            self.left = self.closing.get((enter, entered), 0)  # the pack hook turns them off after the last
            self.gap_on = self.left > 0
            self.hooks_sync()
        if name == "" and self.tail is not None:  # the loss after the model
            self.call = self.tail
            self.entered += 1
            self.gap_on = self.tail in self.gaps
            self.hooks_sync()
            self.on()

    def _record(self, c, func, args, kwargs):
        """The recipe of a call of an op the plan recomputes: how to run it again."""
        rng, writes, reads, n = None, [], c.reads, [0]
        random, mutable = self.t.ops[c.op].random, _writes(func)
        leaves = _leaves((args, kwargs)) if random or mutable else ()  # most ops: neither
        if random:  # the state it draws from, on its tensors' device
            rng = rng_state(next((a.device for a in leaves if isinstance(a, torch.Tensor)), torch.device("cpu")))
        if mutable:
            written = {id(w) for w in _written_args(func, args, kwargs)}
            writes = [i for i, a in enumerate(leaves) if id(a) in written]
        meta = _meta_only(func)

        def ref(a):
            if isinstance(a, torch.Generator):
                return _Gen(a)
            if not isinstance(a, torch.Tensor):
                return a
            j = n[0]  # its place among the call's tensors (Call.reads)
            n[0] = j + 1
            if meta and a.is_contiguous():
                return _Meta(a)
            v = self.value_of(a)
            if v is None and j < len(reads):
                v = self._learn(a, reads[j], c)
            return a if v is None else _Ref(v, a)

        rargs, rkwargs = _map(ref, (args, kwargs))
        self.recipes.setdefault(c.op, []).append(_Recipe(func, rargs, rkwargs, c.new, rng, writes))

    def _learn(self, x, v, c):
        """x, an argument of a recorded call that the step has not followed
        to its maker: the value capture saw there (Call.reads), when it is
        one a recomputation starts from, held from here as that value;
        else None. The replay reads the tensor the call read, whatever
        capture saw; a second tensor taken for the same value is another
        step's data flow, refused."""
        if v not in self.consumers or v in self.rec_vals:
            return None
        if v in self.src:
            raise CaptureError("the step's %s reads another tensor as value %d than the step's earlier ops did: the "
                               "model's data flow differs from when it was planned; plan it again" % (c.name, v))
        self.src[v] = x
        self.vmap[_skey(x)] = (v, _weak(x))
        return v

    def value_of(self, x):
        """The tracked value tensor x's memory holds, or None. Its address
        alone does not say: a value's storage freed in the forward (the plan
        drops it) can give its address to a tensor made where no captured
        call makes it (torch.tensor(...) builds its tensor below the
        dispatch modes), which pack would otherwise hand out as a handle
        for the dropped value."""
        e = self.vmap.get(_skey(x))
        return e[0] if e is not None and _same(e[1], x) else None

    def pack(self, x):
        k = self.n_packs  # its place among the step's saved tensors (Trace.pack_ops)
        self.n_packs = k + 1
        v = self.value_of(x)
        if v is None or v not in self.rec_vals:
            return x
        self.packs[v] = self.packs.get(v, 0) + 1
        h = _Handle(v, x)
        if self.left:  # after a run's end: off after the gap's last save of a dropped value
            self.left -= 1
            if not self.left:
                self.gap_on = False
                self.hooks_sync()
        if self.nested is not None:
            ops = self.t.pack_ops
            h.op = ops[k] if k < len(ops) else -1
            self.handles.append(h)
        return h

    def window_pack(self, x):
        """pack in a window (windows.py): the k-th tensor autograd saves is
        the one capture saw saved k-th (Trace.pack_values), and its storage
        has that value's bytes."""
        k = self.wk
        self.wk = k + 1
        if k >= self.wend:
            raise CaptureError(self._saves_differ(k + 1))
        v = self.at.get(k)
        if v is None:
            return x
        if x.untyped_storage().nbytes() != self.t.values[v].bytes:
            raise CaptureError("the step's tensor saved for the backward as value %d holds %d bytes where the captured "
                               "step's held %d: the model runs other ops than when it was planned; plan it again"
                               % (v, x.untyped_storage().nbytes(), self.t.values[v].bytes))
        if v in self.rec_vals:
            self.packs[v] = self.packs.get(v, 0) + 1
            if self.verifying and v not in self.fp and v in self.decisions.verified:
                self.fp[v] = _fingerprint(x, self.t.values[v].bytes)
            return _Handle(v, x)
        held = self.src.get(v)  # a value a recomputation starts from: held from its first save
        if held is None:
            self.src[v] = x
        elif _skey(held) != _skey(x):
            raise CaptureError("the step saves another tensor as value %d than it saved before: the model's data flow "
                               "differs from when it was planned; plan it again" % v)
        return x

    def _event(self, e, out=None):
        """A module call begins or ends (windows.place's events): the window
        the hooks are on for closes, another opens."""
        if self.wclose == e:
            self.wclose = None
            self.hooks_off()
            if self.wk != self.wend:
                raise CaptureError(self._saves_differ(self.wk))
            self.done += 1
        w = self.windows.get(e)
        if w is not None:
            self.wk, self.wend, self.wclose = w
            self.wopen = e
            self.hooks_on()
        if self.reading is not None and self.reading.closing == e:
            self.read_off(True)
        r = self.reads.get(e)
        if r is not None:  # a stretch of module code begins whose calls pass floats a recipe reads
            self.reading, self.rcall = r, r.first
            self.reader.__enter__()
        if e in self.draws:  # a stretch of module code begins whose random call the plan recomputes
            self.drawn += 1
            self.rng_at[e] = rng_state(self.draws[e])
        if e in self.taken:
            self._take(self.taken[e], out)

    def read_off(self, closing=False):
        """The reader's stretch ends (closing: at its closing event, where
        it must have run every call capture saw there)."""
        r = self.reading
        if r is None:
            return
        self.reading = None
        self.reader.__exit__(None, None, None)
        if closing:
            if self.rcall != r.end:
                raise CaptureError("the model's code ran %d ops where the captured step ran %d, between %s: the model "
                                   "runs other ops than when it was planned; plan it again"
                                   % (self.rcall - r.first, r.end - r.first, _between(self.reads, r)))
            self.read_done += 1

    def read(self, ci, func, args, kwargs):
        """Call ci of the step, whose floats a recipe reads (_StepFloat)."""
        c = self.t.calls[ci]
        floats = [a for a in _leaves((args, kwargs)) if isinstance(a, float)]
        if len(floats) != self.reading.floats[ci]:
            raise CaptureError("the step's %s passes %d floats where the captured step's passed %d: the model runs "
                               "other ops than when it was planned; plan it again"
                               % (c.name, len(floats), self.reading.floats[ci]))
        if compat.is_random(func) and not _draws(c) and not _no_dropout(func, args, kwargs):
            raise CaptureError("the step's %s draws for its dropout (p %s) where the captured step's drew nothing: "
                               "plan the model in the mode it trains in (model.train()), or plan again"
                               % (c.name, floats))
        self.floats[ci] = floats

    def take_made(self, ci, got, out):
        """Call ci made values recomputations start from that no save nor
        module output gives (_Stretch.takes): each held from here."""
        flat = _leaves(out)
        for i, v in got:
            x = flat[i] if i < len(flat) else None
            if not isinstance(x, torch.Tensor) or x.untyped_storage().nbytes() != self.t.values[v].bytes:
                raise CaptureError("the step's %s made %s where the captured step's made value %d (%d bytes): the "
                                   "model runs other ops than when it was planned; plan it again"
                                   % (self.t.calls[ci].name, "no tensor" if not isinstance(x, torch.Tensor) else
                                      "%d bytes" % x.untyped_storage().nbytes(), v, self.t.values[v].bytes))
            self.src.setdefault(v, x)

    def _take(self, got, out):
        """A module call ends that returns values recomputations start from
        (windows.place): each is held from here, its tensor by its place
        among the output's."""
        self.took += 1
        xs = windows.output_tensors(out)
        for j, v in got:
            x = xs[j] if j < len(xs) else None
            if x is None or x.untyped_storage().nbytes() != self.t.values[v].bytes:
                raise CaptureError("a module call returned %s where the captured step's returned value %d (%d bytes): "
                                   "the model runs other ops than when it was planned; plan it again"
                                   % ("no tensor" if x is None else "%d bytes" % x.untyped_storage().nbytes(), v,
                                      self.t.values[v].bytes))
            self.src.setdefault(v, x)

    def _saves_differ(self, n):
        kind, name, k = self.wopen
        first, end, _ = self.windows[self.wopen]
        return ("%s %r (its call %d), the model's code saved %s tensors for the backward where the captured step saved "
                "%d: the model runs other ops than when it was planned; plan it again"
                % ("after module" if kind == "post" else "in module", name or "(the model)", k,
                   "more" if n > end else n - first, end - first))

    def model_inputs(self, args):
        """At the model's call: the inputs its replays read (Decisions.input_src),
        by their place among the call's leaves as captured."""
        if not self.decisions.input_src:
            return
        leaves = args if all(isinstance(a, torch.Tensor) for a in args) else compat.tree_flatten(args)[0]
        for i, v, (stride, offset) in self.decisions.input_src:
            x = leaves[i] if i < len(leaves) else None
            if not isinstance(x, torch.Tensor) or tuple(x.stride()) != stride:
                got = "strides %s" % (tuple(x.stride()),) if isinstance(x, torch.Tensor) else "no tensor"
                raise CaptureError("the plan's recomputations read the model's input %d as laid out when it was "
                                   "planned (strides %s), and the model was called with %s: pass it laid out the same "
                                   "(.contiguous()), or plan again" % (i, stride, got))
            self.src[v] = x
            self.shift[v] = x.storage_offset() - offset

    def windows_done(self):
        """At the model's return: every window passed (else a value a
        recomputation starts from was never seen, and the backward could
        not run it)."""
        if self.done != len(self.windows) or self.drawn != len(self.draws) or self.took != len(self.taken) or \
                self.read_done != len(self.reads):
            raise CaptureError("the model's forward ran %d of the %d module calls whose saved tensors, random state, "
                               "floats or outputs the plan follows: the model runs other modules than when it was "
                               "planned; plan it again" % (
                                   self.done + self.drawn + self.took + self.read_done,
                                   len(self.windows) + len(self.draws) + len(self.taken) + len(self.reads)))

    def forward_done(self):
        """Counts every recomputed value's reads (called before the backward's
        first unpack, which also turns a region's mode off: the backward runs
        with no mode, but for a plan that follows the whole forward)."""
        if self.counted:
            return
        self.counted = True
        if self.nested is not None:
            self.nested.forward_done(self.handles, self.src)
            return
        for v in self.rec_vals:
            self.uses[v] = self.packs.get(v, 0) + self.consumers.get(v, 0)
        for v in self.src:
            self.uses[v] = self.consumers.get(v, 0)
        # a recomputed op whose outputs nothing will read (the backward saved
        # none of them, and no recomputation that runs reads them: a dropout's
        # product before a residual add) never runs again, so its reads of
        # its inputs never come: else a recomputed mask and its input, or a
        # kept value it starts from, would be held to the step's end
        t, idle, more = self.t, set(), True
        while more:
            more = False
            for o in self.rec_ops:
                outs = [v for v in t.ops[o].outputs if v in self.uses]
                if o in idle or not outs or any(self.uses[v] > 0 for v in outs):
                    continue
                idle.add(o)
                more = True
                for v in set(t.ops[o].inputs):  # released where this was its last read
                    if v in self.uses and v not in t.ops[o].outputs and v in self.consumers:
                        self._used(v)

    def verify(self):
        """At the step's end: each dropped value its replays made again has
        the forward's bits, by their fingerprints (one comparison, one
        synchronization on a device). A plan applied with windows replays
        the calls as captured: a model whose code changed what an op reads
        would have made other bits."""
        if not self.checks:
            return
        on = [c for c in self.checks if isinstance(c[1], torch.Tensor)]  # a device's: one comparison
        dev = on[0][1].device if on else torch.device("cpu")
        same = (torch.stack([f.to(dev) for _, f, _ in on]) == torch.stack([r.to(dev) for _, _, r in on])).tolist() \
            if on else []
        bad = [v for (v, _, _), ok in zip(on, same) if not ok] + [
            v for v, f, r in self.checks if not isinstance(f, torch.Tensor) and f != r]
        self.checks = []
        if not bad:
            return
        t = self.t
        msg = ("the step's %s made again for the backward differ%s in bits from the forward's (%s): the model's "
               "data flow, or an int its code passes, differs from the captured step's, and this step's gradients "
               "are not the model's. Run such a model under plan.apply(follow=True), or plan again; a kernel that is "
               "not deterministic does the same (torch.use_deterministic_algorithms(True))"
               % ("value" if len(bad) == 1 else "%d values" % len(bad), "s" if len(bad) == 1 else "",
                  ", ".join("%d, made by %s" % (v, t.ops[t.values[v].producer].name) for v in bad[:3])))
        if dev.type == "cpu" or torch.are_deterministic_algorithms_enabled():
            raise CaptureError(msg)
        warnings.warn(msg, stacklevel=3)

    # ---------------------------------------------------------- backward
    def unpack(self, h):
        if not isinstance(h, _Handle):
            return h
        if self.active and not self.full:
            self.off()  # the backward runs with no Python per call
        self.forward_done()
        if self.nested is not None:
            return _view(self.nested.value(h), h)
        base = self._value(h.v)
        out = _view(base, h)
        self._used(h.v)
        return out

    def _used(self, v):
        n = self.uses.get(v, 0) - 1
        self.uses[v] = n
        if n <= 0:
            self.cache.pop(v, None)
            self.src.pop(v, None)

    def _named(self, name):
        """The model's parameter or buffer name, looked up in the step that
        replays it (a loop may have assigned another: load_state_dict(...,
        assign=True))."""
        t = self.named.get(name)
        if t is None:
            try:
                t = self.model.get_parameter(name)
            except AttributeError:
                t = self.model.get_buffer(name)
            self.named[name] = t
        return t

    def _have(self, v):
        return v in self.cache or v in self.src

    def _get(self, v):
        return self.cache[v] if v in self.cache else self.src[v]

    def _value(self, v):
        if not self._have(v):
            self._recompute(v)
        return self._get(v)

    def _recompute(self, v):
        """Runs again, in order, v's recomputation group and every op that
        they need and that is not held."""
        t = self.t
        p = t.values[v].producer
        need, stack = set(), [p] + [o for o in self.group.get(p, ()) if o in self.rec_ops and any(
            self.uses.get(u, 0) > 0 and not self._have(u) for u in t.ops[o].outputs)]
        while stack:
            o = stack.pop()
            if o in need:
                continue
            if o not in self.recipes:
                raise CaptureError("internal: op %d (%s) must be recomputed but was not recorded" % (o, t.ops[o].name))
            need.add(o)
            for r in self.recipes[o]:
                for a in _leaves((r.args, r.kwargs)):
                    if isinstance(a, _Ref) and not self._have(a.v) and a.v not in t.ops[o].outputs:
                        stack.append(t.values[a.v].producer)
        with torch.no_grad():
            for o in sorted(need):
                self._replay(o)

    def _last_write(self, o, v):
        """Whether op o, which overwrites value v in place, is v's last read
        in the step: the plan gives v's memory to o's output then, so the
        replay writes v itself, as the forward did (under a nested plan: the
        last read of the window the held v is in)."""
        if self.t.values[v].overwritten != o:
            return False
        if self.nested is not None:
            return self.nested.left.get((v, self.window_of.get(v, -1)), 0) <= 1
        return self.uses.get(v, 0) <= 1

    def _replay(self, o):
        t = self.t
        made = self._run(o)
        for v, x in made.items() if self.fp else ():  # the forward's value made again: checked at the step's end
            f = self.fp.pop(v, None)
            if f is not None and x.untyped_storage().nbytes() >= t.values[v].bytes:
                self.checks.append((v, f, _fingerprint(x, t.values[v].bytes)))
        for v in t.ops[o].outputs:
            if v in made and self.uses.get(v, 0) > 0:
                self.cache[v] = made[v]
        for v in set(t.ops[o].inputs):
            if v in self.uses and v not in t.ops[o].outputs and v in self.consumers:
                self._used(v)

    def _run(self, o):
        """Runs op o again from its recipes, its inputs from what is held;
        returns {value: tensor} of what it made."""
        t = self.t
        made = {}
        self.replays += 1
        for i in self.unshard.get(o, ()):  # a no-op where FSDP has them gathered
            self.units[i].module.unshard()

        def arg(a):
            if isinstance(a, (_Meta, _Gen)):
                return a.make()
            if isinstance(a, _StepFloat):
                return self.floats[a.ci][a.j]
            if isinstance(a, _Named):
                return a.make(self._named(a.name))
            if isinstance(a, _Input):
                return self._get(a.v).as_strided(a.size, a.stride, a.offset + self.shift[a.v])
            if not isinstance(a, _Ref):
                return a
            base = made[a.v] if a.v in made else self._get(a.v)
            return _view(base, a)

        for r in self.recipes[o]:
            raw, writes = (r.args, r.kwargs), r.writes
            if t.ops[o].stateful:  # state (BatchNorm's statistics) changes once per step
                raw, writes = _stateless(r.func, raw, writes)
            args, kwargs = _map(arg, raw)
            if writes:  # writes go to copies of what the op does not make itself
                orig, writes = _leaves((r.args, r.kwargs)), set(writes)
                args, kwargs = _map_i(lambda i, a, orig=orig, writes=writes: _private(a) if i in writes and not (
                    isinstance(orig[i], _Ref) and (orig[i].v in made or self._last_write(o, orig[i].v))) else a,
                    (args, kwargs), [0])
            if r.rng is not None:  # the state it first drew from, the step's own left as it is
                state = self.rng_at[r.rng.event] if isinstance(r.rng, _RngAt) else r.rng
                dev = state[1]
                with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else [], device_type=dev.type):
                    set_rng_state(state)
                    out = r.func(*args, **kwargs)
            else:
                out = r.func(*args, **kwargs)
            flat_out = _leaves(out)
            for i, v in r.new:
                if i >= 0:
                    made[v] = flat_out[i]
        return made


class _Reader(TorchDispatchMode):
    """The applier's dispatch mode in a stretch of module code whose calls
    pass floats that recipes read, or make values that recomputations start
    from and no save gives (Decisions.reads): it counts the calls, each the
    op capture saw there, and hands the applier those calls' floats and
    outputs; every other call of the forward runs with no Python."""

    def __init__(self, applier):
        super().__init__()
        self.a = applier

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _skip(func) or compat.current_autograd_node() is not None:
            return func(*args, **kwargs)
        a = self.a
        ci, r = a.rcall, a.reading
        a.rcall = ci + 1
        c = a.t.calls[ci] if ci < r.end else None
        if c is None or (c.func is not func and c.name != str(func)):
            raise CaptureError("the step's op %d is %s where the captured step had %s, between %s: the model runs "
                               "other ops than when it was planned; plan it again"
                               % (ci, func, c.name if c is not None else "none", _between(a.reads, a.reading)))
        if ci in r.floats:
            a.read(ci, func, args, kwargs)
        out = func(*args, **kwargs)
        if ci in r.takes:
            a.take_made(ci, r.takes[ci], out)
        return out


def _between(reads, r):
    """Where stretch r of reads lies, in words."""
    opening = next(e for e, x in reads.items() if x is r)

    def say(e):
        kind, name, k = e
        return "%s of %r (its call %d)" % ("the beginning" if kind == "pre" else "the end", name or "(the model)", k)
    return "%s and %s" % (say(opening), say(r.closing))


class Applied(contextlib.AbstractContextManager):
    """The context of one step under a plan: what it checks when the model
    is called (the inputs' shapes, the gradients held), and the dispatch mode and the
    saved-tensor hooks, which a plan that drops nothing does without: its
    step runs as PyTorch runs it, with no Python per op."""

    def __init__(self, plan, decisions, model=None):
        self.plan = plan
        self.decisions = decisions
        self.model = model  # the model whose call is checked (None: the captured one)
        self.applier = None
        self._pre = None
        self._fsdp = None
        self._regions = None
        self._gc = False  # the garbage collector was on at the step's start
        self._post = None  # the model's forward hook: what its output holds
        self._outputs = []  # (weak reference to a storage, bytes) the model's output held when it returned

    def __enter__(self):
        t = self.plan.trace
        model = self.model if self.model is not None else t.model() if t.model is not None else None
        # a module of PyTorch's own whose floats the windows' recipes hold, changed since capture (a
        # dropout's p the loop schedules): this step's calls are followed, and its floats replayed
        # (checked before the hooks below: a module with hooks has no configuration)
        if self.decisions.configs and (model is None or not self.decisions.configs_hold(model)):
            self.decisions = self.decisions.followed()
        if model is not None:  # first among the model's pre-hooks: refused before anything runs
            self._pre = model.register_forward_pre_hook(self._check_call, with_kwargs=True, prepend=True)
            if not self.plan.keep_output:
                self._post = model.register_forward_hook(self._note_output)
        bound = []
        if t.fsdp:
            if model is None:
                raise CaptureError("the FSDP2 model this plan was made for is gone: plan.apply(model)")
            try:
                bound = fsdp.bind(t.fsdp, model)
            except ValueError as e:
                raise CaptureError(str(e)) from None
            self._fsdp = contextlib.ExitStack()
            self._fsdp.enter_context(fsdp.Settings(bound, self.decisions.reshard))
        if not self.decisions.rec_ops:
            if bound:
                self._fsdp.enter_context(fsdp.Hooks(bound, fsdp.Releaser()))
            return self
        # Python's cyclic garbage collector waits for the step's end: the
        # applier's objects (recipes, handles) live for the step and go by
        # reference count when it ends, so a collection during the step would
        # only walk them, and promote them to the old generation, whose growth
        # starts full collections of every object the process holds
        self._gc = gc.isenabled()
        gc.disable()
        a = self.applier = Applier(self.plan, self.decisions)
        a.checked = model
        if a.windows is not None:
            a.verifying = self.decisions.steps % VERIFY_EVERY == 0
            self.decisions.steps += 1
        a.units = bound
        if t.fsdp:
            self._fsdp.enter_context(fsdp.Hooks(bound, a))
        self._regions = None
        if not a.full:  # the mode on around the module calls that hold what the applier follows
            self._regions = regions.Regions(a)
            self._regions.__enter__()

        # the saved tensors pass pack (a recomputed value's become handles), by
        # their storage: the calls that save them need no mode. Over the whole
        # step, or only in the regions where one of them is saved
        if self.decisions.hooks_everywhere:
            a.hooks_on()

        if a.full:
            a.on()
        return self

    def _check_call(self, module, args, kwargs):
        """When the model is called, before it runs: its inputs are those the
        plan was made for, and it holds no gradient the plan did not count."""
        self._check_inputs(args, kwargs)
        self._check_grads(module)
        self._pre.remove()  # once per step: the model's own calls inside it (DDP's module) are its business
        self._pre = None
        return None

    def _note_output(self, module, args, out):
        """What the model's output holds when it returns (once per step): a
        caller that keeps it through the backward holds it above the plan."""
        seen = {}
        given = {_skey(t) for t in tensors_in(args)}  # the batch: held by the caller in any case
        for t in tensors_in(out):
            if not isinstance(t, torch.nn.Parameter) and t.untyped_storage().nbytes() > 0 and _skey(t) not in given:
                ref = _weak(t)
                seen.setdefault(ref.cdata, (ref, t.untyped_storage().nbytes()))
        self._outputs = list(seen.values())
        self._post.remove()
        self._post = None
        return None

    def _check_output(self):
        """At the step's end (the backward done): the model's output still
        held means the loop kept it through the backward, holding bytes the
        plan freed after the loss; warned of where they pass 1% of the
        plan's peak."""
        alive = sum(n for ref, n in self._outputs if not ref.expired())
        self._outputs = []
        if alive > 0.01 * self.plan.peak_bytes:
            warnings.warn(
                "the model's output was still held when the step ended (%d bytes: logits, a cache): kept through the "
                "backward, it puts the step above the plan's prediction of %d bytes, which frees it once the loss is "
                "made. Take the loss and drop the output (loss = loss_fn(model(x)), or model(**batch).loss), or plan "
                "with keep_output=True" % (alive, self.plan.peak_bytes), RuntimeWarning, stacklevel=3)

    def _check_grads(self, model):
        """A gradient held at the step's start that the plan did not count
        (accumulation, zero_grad(set_to_none=False)) would put the step
        above its budget: refused before anything runs."""
        if self.plan.grads_held:
            return
        held = [n for n, mod, k in self.decisions.of(model)[1]
                if getattr(mod._parameters.get(k), "grad", None) is not None]
        if held:
            from .._lib import RematError
            raise RematError(
                "%d of the %d parameters hold a gradient at the step's start (%s%s), which this plan did not count: "
                "it counts each gradient from the backward that makes it, as after optimizer.zero_grad() (set to "
                "None). For gradient accumulation plan with rt.plan(..., accumulate=k) (k micro-steps per optimizer "
                "step); for zero_grad(set_to_none=False), rt.plan(..., grads_held=True)"
                % (len(held), len(self.plan.trace.params), ", ".join(held[:3]), ", ..." if len(held) > 3 else ""))

    def _check_inputs(self, args, kwargs):
        fast = self.decisions.inputs
        if not kwargs and fast is not None and len(args) == len(fast) and all(
                isinstance(a, torch.Tensor) and a.dtype is d and a.shape == s for a, (s, d) in zip(args, fast)):
            return  # tensors only, as captured: signature() would say the same
        from .capture import describe, signature
        sig = signature((args, kwargs) if kwargs else args)
        want = self.plan.trace.input_sig
        if sig != want:
            from .._lib import RematError
            raise RematError(
                "this plan was made for inputs %s, and the model was called with %s: its bytes are another step's. "
                "Plan again for these inputs, or let rt.Planner plan each new shape once"
                % (describe(want), describe(sig)))

    def __exit__(self, *exc):
        if self._pre is not None:
            self._pre.remove()
            self._pre = None
        if self._post is not None:
            self._post.remove()
            self._post = None
        if exc[0] is None:
            self._check_output()
        if self._fsdp is not None:
            self._fsdp.close()
            self._fsdp = None
        a = self.applier
        if a is None:
            return False
        try:
            a.off()
            a.read_off()
            a.hooks_off()
            a.hooks = None  # its hooks are a's bound methods: no cycle keeps the step's tensors past the step
            a.reader = None  # nor its reader, which holds it
            ran = False  # the model was called
            if self._regions is not None:
                self._regions.__exit__(*exc)
                ran, self._regions = self._regions.ran, None
            calls = self.plan.trace.calls
            if exc[0] is None and not a.full and a.entered != a.n_regions and ran:
                if a.entered == 0:
                    raise CaptureError("the step ran the model and none of the module calls the plan follows: the "
                                       "model runs other ops than when it was planned (or another model ran); plan "
                                       "it again")
                raise CaptureError("the step ran %d of the %d parts of the forward that the plan follows: run the "
                                   "whole forward (model and loss) inside plan.apply()" % (a.entered, a.n_regions))
            if exc[0] is None and a.full and a.call == 0 and a.before:
                raise CaptureError("the step ran %d ops and none was the captured step's first (%s): the model runs "
                                   "other ops than when it was planned; plan it again" % (a.before, calls[0].name))
            if exc[0] is None and a.full and a.call not in (0, len(calls)):
                raise CaptureError("the step ran %d of the %d captured ops: run the whole forward (model and loss) "
                                   "inside plan.apply()" % (a.call, len(calls)))
            if exc[0] is None:
                a.verify()
            a.src.clear()
            a.cache.clear()
            if a.nested is not None:  # no cycle: the step's recipes go with the step
                a.nested.a = None
        finally:
            if self._gc:  # on again as the step's objects go (with this context, by reference count)
                self._gc = False
                gc.enable()
        return False
