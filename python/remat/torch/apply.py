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
"""

import contextlib
import ctypes
import gc
import warnings

import torch

from . import compat, fsdp, nested, regions, windows
from .capture import (
    _META_ONLY,
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
from .trace import Slot
from .trace import leaves as _leaves
from .trace import map_i as _map_i


class _Ref:
    """A value by reference in a recipe: its id and the view of it."""
    __slots__ = ("v", "size", "stride", "offset")

    def __init__(self, v, t):
        self.v, self.size, self.stride, self.offset = v, tuple(t.size()), tuple(t.stride()), t.storage_offset()


class _Meta:
    """A contiguous tensor an op reads the shape and dtype of, not the data."""
    __slots__ = ("size", "dtype", "device")

    def __init__(self, t):
        self.size, self.dtype, self.device = tuple(t.size()), t.dtype, t.device

    @classmethod
    def of(cls, s):
        """From capture's Slot."""
        m = cls.__new__(cls)
        m.size, m.dtype, m.device = s.size, s.dtype, s.device
        return m

    def make(self):
        return torch.empty((), dtype=self.dtype, device=self.device).expand(self.size)


class _Empty(_Meta):
    """A tensor with no elements that capture knew no value of (a cache's
    empty start, which a concatenation reads): it holds no data, so its
    shape, dtype and device make it again."""
    __slots__ = ()

    def make(self):
        return torch.empty(self.size, dtype=self.dtype, device=self.device)


class _Gen:
    """A torch.Generator passed to a random op, as it was when the op drew
    from it: a replay draws from a copy in that state, the step's own
    generator left as it is."""
    __slots__ = ("device", "state")

    def __init__(self, g):
        self.device, self.state = g.device, g.get_state()

    def make(self):
        g = torch.Generator(device=self.device)
        g.set_state(self.state)
        return g


class _Handle(_Ref):
    """What a saved tensor of a recomputed value becomes."""


class _Named:
    """A parameter or buffer in a recipe made from capture's form of a call
    (windows.py): by its name in the model the step runs on, and the view
    of it the call read, from the parameter's own storage offset (it is
    the parameter itself where whole); base: the parameter's (size,
    strides, storage offset) at capture."""
    __slots__ = ("name", "size", "stride", "offset", "base", "whole")

    def __init__(self, name, s, base):
        self.name, self.size, self.stride, self.base = name, s.size, s.stride, base
        self.offset = s.offset - base[2]
        self.whole = (s.size, s.stride, s.offset) == base

    def make(self, p):
        """The view of p, the parameter the step's model holds by the name."""
        if self.whole and tuple(p.size()) == self.size:
            return p
        if (tuple(p.size()), tuple(p.stride())) != self.base[:2]:
            raise CaptureError("the model's %s is laid out otherwise (size %s, strides %s) than when the plan was made "
                               "(%s, %s), and a recomputation reads a view of it: plan again"
                               % (self.name, tuple(p.size()), tuple(p.stride()), self.base[0], self.base[1]))
        return p.as_strided(self.size, self.stride, p.storage_offset() + self.offset)


class _Input(_Ref):
    """A tensor of the model's inputs in a recipe made from capture's form
    (its view at capture's storage offset: the step's batch may lie
    elsewhere in its storage, Applier.shift)."""


def _slot_ref(v, s, cls=_Ref):
    r = cls.__new__(cls)
    r.v, r.size, r.stride, r.offset = v, s.size, s.stride, s.offset
    return r


class _RngAt:
    """The generator's state a random call replays from under a plan with
    windows: the one recorded in the step where its stretch of module code
    began (windows.draws; Applier._event), the event that began it."""
    __slots__ = ("event",)

    def __init__(self, event):
        self.event = event


class _StepFloat:
    """A float argument of a recomputed call in a recipe made from
    capture's form, read from the step's own call: the j-th float among
    call ci's arguments (Decisions.reads; _Reader)."""
    __slots__ = ("ci", "j")

    def __init__(self, ci, j):
        self.ci, self.j = ci, j


class _Stretch:
    """A stretch of module code the applier's reader is on in
    (windows.stretch; Decisions.reads): its first call and its end, the
    event that closes it, the calls whose floats the recipes read ({call:
    their number}), and those that make values recomputations start from
    and no save or module output gives ({call: [(place among its output's
    leaves, value)]})."""
    __slots__ = ("first", "end", "closing", "floats", "takes")

    def __init__(self, first, end, closing):
        self.first, self.end, self.closing, self.floats, self.takes = first, end, closing, {}, {}


class _Recipe:
    __slots__ = ("func", "args", "kwargs", "new", "rng", "writes")

    def __init__(self, func, args, kwargs, new, rng, writes):
        self.func, self.args, self.kwargs, self.new, self.rng, self.writes = func, args, kwargs, new, rng, writes


def _map(f, x):
    return _map_i(lambda i, a: f(a), x, [0])


_skip = per_overload(_ignored)  # capture._ignored, per overload
_meta_only = per_overload(lambda func: compat.schema_name(func) in _META_ONLY)  # reads only its inputs' metadata


def _stateless(func, raw, writes):
    """The arguments (args, kwargs) of a replay of a stateful op, which must
    leave the state as the step's first run left it, and the leaves it
    writes: BatchNorm in training mode without its running statistics (its
    outputs do not read them, so the bits are the same, and it writes
    nothing), any other op on copies of the model's tensors it was given
    (values are _Refs here)."""
    args, kwargs = raw
    if _bn_training(func, args, kwargs):
        return (tuple(args[:3]) + (None, None) + tuple(args[5:]), kwargs), ()
    return _map(lambda a: a.clone() if isinstance(a, torch.Tensor) and not a.requires_grad else a, raw), writes


def _bn_training(func, args, kwargs):
    return func is torch.ops.aten.native_batch_norm.default and not kwargs and len(args) >= 6 and args[5] is True


# ops whose float arguments are their module's configuration (a norm's eps and
# momentum), not a number the model's code may change from step to step
_CONFIG_FLOATS = frozenset({"aten::native_batch_norm", "aten::_native_batch_norm_legit",
                            "aten::_native_batch_norm_legit_no_training", "aten::native_layer_norm",
                            "aten::native_group_norm"})


def _no_dropout(func, args, kwargs):
    """A random op that draws only for its dropout (scaled dot-product
    attention's kernels) called with none: it draws nothing."""
    if func is None or not compat.is_random(func):
        return False
    names = [a.name for a in compat.schema_arguments(func)]
    if "dropout_p" not in names:
        return False
    i = names.index("dropout_p")
    p = args[i] if i < len(args) else kwargs.get("dropout_p", 0.0)
    return p == 0.0


def _draws(c):
    """Whether call c draws from a generator (a random op, but attention
    called with no dropout)."""
    return c.func is not None and compat.is_random(c.func) and not (c.form is not None and _no_dropout(c.func, *c.form))


def _config(t, ci):
    """Whether call ci's floats are configuration: a norm's eps and
    momentum, or those a module of PyTorch's own passes, which follow from
    its attributes (the applier checks them when the step begins:
    Decisions.configs)."""
    return compat.schema_name(t.calls[ci].func) in _CONFIG_FLOATS or t.call_module[ci] in t.configs


# ops with an argument typed float: one the captured call left at its default (attention's dropout_p
# of 0) is not in its form, and the step's call may pass another
_float_typed = per_overload(lambda func: any(str(a.type) in ("float", "Optional[float]")
                                             for a in compat.schema_arguments(func)))


def _reads_floats(t, ci):
    """Whether a replay of call ci reads the step's call's floats
    (_StepFloat; Decisions.reads): a float that is not configuration, which
    capture's form could hold stale (a temperature the loop anneals), or an
    argument typed float that capture's call left at its default."""
    c = t.calls[ci]
    return not _config(t, ci) and (_float_typed(c.func) or any(isinstance(a, float) for a in _leaves(c.form)))


def _form_recipe(t, ci, rng=None):
    """The recipe of call ci of a recomputed op from capture's form of it
    (Call.form), or None where it needs what the step's call reads: a
    tensor that is no value (windows.py), or, for a call that draws, the
    generator's state (rng: the _RngAt it replays from, or None). A float
    that is not configuration (_config) is read from the step's call
    (_StepFloat). Its ints are shapes, dims and a kernel's geometry, which
    the step's input shapes fix; an argument typed Scalar that the captured
    call left at its default (add's alpha) is taken as that default."""
    c = t.calls[ci]
    op = t.ops[c.op]
    if c.form is None or c.func is None or (rng is None and _draws(c)):
        return None
    meta, bad, floats = _meta_only(c.func), [], [0]
    config = _config(t, ci)

    def leaf(a):
        if not isinstance(a, Slot):
            if isinstance(a, float) and not config:  # the step's: a scale the code may change from step to step
                j = floats[0]
                floats[0] = j + 1
                return _StepFloat(ci, j)
            return a
        if meta and a.contiguous:
            return _Meta.of(a)
        if a.v < 0 and 0 in a.size:
            return _Empty.of(a)
        val = t.values[a.v] if a.v >= 0 else None
        if val is not None and val.kind in ("parameter", "buffer") and val.name is not None and a.v in t.leaf_layouts:
            return _Named(val.name, a, t.leaf_layouts[a.v])
        if val is None or val.kind not in ("activation", "input") or (
                val.kind == "input" and a.v not in t.input_values):
            bad.append(a)  # a tensor capture knew no value of, or one the model's call was not given
            return None
        return _slot_ref(a.v, a, _Input if val.kind == "input" else _Ref)

    args, kwargs = _map(leaf, c.form)
    if bad or (op.stateful and not _bn_training(c.func, args, kwargs) and any(
            isinstance(a, _Named) for a in _leaves((args, kwargs)))):
        return None
    return _Recipe(c.func, args, kwargs, c.new, rng if _draws(c) else None, list(c.written))


def _module_floats(c):
    """Whether call c passes a float that only its module's configuration
    vouches for (_form_recipe), or has an argument typed float that it may
    have left at its default (_float_typed): the applier checks that
    module's attributes in each step (Decisions.configs)."""
    if c.form is None or c.func is None or compat.schema_name(c.func) in _CONFIG_FLOATS:
        return False
    return _float_typed(c.func) or any(isinstance(a, float) for a in _leaves(c.form))


def _device_of(form):
    """The device of a call's first tensor argument, or its device
    argument (a factory's), or the CPU."""
    args, kwargs = form
    s = next((a for a in _leaves((args, kwargs)) if isinstance(a, Slot)), None)
    if s is not None:
        return s.device
    d = kwargs.get("device") if isinstance(kwargs, dict) else None
    return torch.device(d) if d is not None else torch.device("cpu")


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


def _view(base, r):
    return base.as_strided(r.size, r.stride, r.offset)


def _private(t):
    """t as a view of a copy of its whole storage. An in-place op replayed
    on a value it must not change writes to this copy: when the op writes
    a view of the value (T5's shifted_input_ids[..., 1:] = ids[..., :-1]),
    the new version it makes is the whole storage, not the view."""
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(
        t.untyped_storage().clone(), t.storage_offset(), t.size(), t.stride())


class Decisions:
    """What a plan means for the applier, worked out once per plan (a step
    pays only for following it)."""

    def __init__(self, plan, use_windows=True):
        t = plan.trace
        self.plan = plan
        self.params = t.params
        # dropped in the forward and recomputed for the backward (an op whose
        # output nothing in the backward reads is dropped and never recomputed;
        # one recomputed while its first output lives is simply kept)
        rec = set(plan.recompute_ops)
        dropped = {o for o in plan.drop_ops if o in rec}
        # FSDP2's all-gathers (fsdp.py): FSDP runs them; the plan says whether
        # a unit's gathered parameters are kept for its backward or gathered
        # again, and a recomputation of a unit's ops gathers them first
        gathers = {u.op: i for i, u in enumerate(t.fsdp) if u.op >= 0}
        self.reshard = [u.op in dropped for u in t.fsdp]
        gathered = {v: i for o, i in gathers.items() for v in t.ops[o].outputs if t.values[v].producer == o}
        rec -= set(gathers)
        dropped -= set(gathers)
        self.rec_ops = set(dropped)
        # recomputed with its first output kept: for the later outputs the
        # backward reads (pooling's indices), which the plan frees in the
        # forward; the replay's first output is a transient copy
        saved = {v for op in t.ops for v in op.saves}
        later = {v for o in rec - dropped for v in t.ops[o].outputs[1:] if v in saved}
        self.rec_ops |= {t.values[v].producer for v in later}
        # under a nested plan such an op is followed too: the schedule may
        # free its value in the backward after its last read before the
        # step's peak and make it again for the reads after (a split), so
        # the backward gets handles for it, and the forward's tensor of each
        # value the plan holds into the backward (kept_values) is held by the
        # applier for the reads before (nested.py's first window)
        if plan.nested:
            self.rec_ops |= rec - dropped
            kept, self.fwd_held = set(), set(plan.kept_values)
        else:
            kept, self.fwd_held = {t.ops[o].outputs[0] for o in rec - dropped}, set()
        self.rec_vals = {v for o in self.rec_ops for v in t.ops[o].outputs if v not in kept}
        self.consumers = {}  # value -> recomputed ops that read it
        self.unshard = {}    # recomputed op -> the FSDP2 units whose gathered parameters it reads
        for o in self.rec_ops:
            for v in set(t.ops[o].inputs):
                if v in gathered:
                    if gathered[v] not in self.unshard.get(o, ()):
                        self.unshard.setdefault(o, []).append(gathered[v])
                elif t.values[v].kind == "activation":
                    self.consumers[v] = self.consumers.get(v, 0) + 1
        # what the step must follow: the values recomputations make and read
        self.tracked = self.rec_vals | set(self.consumers)
        self.group = {o: grp for grp in plan.recompute_groups for o in grp}
        # per call: whether it is recorded as a recipe, and the tracked values it makes that the step
        # must follow: a value a recomputation starts from is learnt where a recorded call reads it
        # (Applier._record), so the call that makes it is followed only under a nested plan, which
        # holds some in the forward (fwd_held)
        self.recorded = [c.op in self.rec_ops for c in t.calls]
        self.news = [[(i, v) for i, v in c.new if i >= 0 and v in self.tracked and (
            plan.nested or self.recorded[ci] or v in self.rec_vals)] for ci, c in enumerate(t.calls)]
        # an op that writes a value in place makes its new version in the old one's storage: where
        # that version is not followed, the storage no longer holds the old one
        # (only where the old version is followed: else nothing holds it)
        # (or, for a value autograd saved a copy of before the write, capture's `moved`, in the copy's)
        writers = {w for v in self.tracked for w in (t.values[v].overwritten, t.values[v].moved) if w >= 0}
        self.stale = [[i for i, v in c.new if i >= 0 and v not in self.tracked] if c.op in writers else []
                      for c in t.calls]
        # a value the plan keeps for a recomputation after an op overwrote it: a copy made just
        # before the write (the plan counts it from there, as the out-of-place op's output)
        self.copy_at = {}
        for v in set(self.consumers) - self.rec_vals:
            if t.values[v].overwritten >= 0:
                self.copy_at.setdefault(t.values[v].over_call, []).append(v)
        # a plan whose recipes capture's forms give and whose values its saved tensors tell runs
        # with no dispatch mode: the saved-tensor hooks on around a few module calls (windows.py)
        self.windows, self.at, self.recipes, self.input_src, self.draws, self.configs = None, {}, {}, [], {}, {}
        self.taken = {}  # a module call's end event -> [(place among its output's tensors, value)] (windows.place)
        # the stretches of module code the reader is on in: {opening event: _Stretch} (windows.stretch)
        self.reads = {}
        self.steps = 0   # steps applied (VERIFY_EVERY)
        # the dropped values whose bits the check compares: each op's first output, its result (the
        # others may be placeholders a kernel leaves as they are: flash attention's random seed and
        # offset, on the CPU in PyTorch 2.1)
        self.verified = {v for v in self.rec_vals if t.values[v].producer >= 0 and
                         t.ops[t.values[v].producer].outputs[:1] == [v]}
        self._followed = None  # the same plan's decisions without windows (followed())
        self.why = None  # where windows are refused, why (_windows)
        if use_windows and not plan.nested and not t.fsdp and not self.copy_at and self.rec_ops:
            self._windows(t)
        if self.windows is not None:
            self.regions, self.hook_regions, self.hook_gaps, self.closing = {}, set(), set(), {}
            self.tail, self.full, self.hooks_everywhere = None, False, False
        else:
            self._regions(t, plan.nested)
        # the captured inputs when they are tensors only: (shape, dtype) each, checked per step without
        # signature()'s walk (Applied._check_inputs)
        sig = t.input_sig
        self.inputs = list(sig) if all(isinstance(e, tuple) for e in sig) else None
        self._of = None  # the model the plan last ran on: (weak reference, of(model))
        # a nested plan (an op recomputed more than once): its groups, in order (nested.py)
        self.schedule = nested.Schedule(plan, self.rec_ops, self.tracked) if plan.nested else None

    def _windows(self, t):
        """Sets windows (windows.place), at and the recipes of every
        recomputed op, where capture's forms give them all; else why (what
        keeps the applier following calls: bench/torch/windows_sweep.py)."""
        recipes, reads = {}, {}
        configs = {}  # the modules of PyTorch's own whose floats the recipes hold: {name: their attributes}
        calls = [ci for ci, r in enumerate(self.recorded) if r]
        at = windows.draws(t, [ci for ci in calls if _draws(t.calls[ci])], lambda j: _draws(t.calls[j]))
        if at is None:
            self.why = "a random call after another in its stretch of module code"
            return
        for ci in calls:
            c, i = t.calls[ci], t.call_module[ci]
            r = _form_recipe(t, ci, _RngAt(at[ci]) if ci in at else None)
            if r is None:
                self.why = "no recipe from capture's form for %s in %s" % (
                    c.name, t.modules[i][3] if i >= 0 else "code outside the model")
                return
            if _reads_floats(t, ci):  # floats the step's call passes: read in its stretch of module code
                s = windows.stretch(t, ci)
                if s is None or s[2] is None:
                    self.why = "%s passes floats in module code that no hook of a named module call bounds (%s)" % (
                        c.name, t.modules[i][3] if i >= 0 else "code outside the model")
                    return
                reads.setdefault(s[0], _Stretch(s[1], s[3], s[2])).floats[ci] = sum(
                    1 for a in _leaves(c.form) if isinstance(a, float))
            recipes.setdefault(c.op, []).append(r)
            if i in t.configs and _module_floats(c):
                name = t.modules[i][3]
                if name is None or configs.setdefault(name, t.configs[i]) != t.configs[i]:
                    self.why = "a module of PyTorch's own without a name, or changed during the step"
                    return
        got = windows.place(t, self.rec_vals, {v for v in self.consumers if v not in self.rec_vals})
        if got is None:
            self.why = ("windows.place refused: a value started from that its storage holds no longer (written in "
                        "place later), or saves of a window split")
            return
        # a value a recomputation starts from that no save or module output gives: taken where its call
        # makes it, by the reader on in that call's stretch
        made = set(got[3])
        for ci, c in enumerate(t.calls) if made else ():
            for i, v in c.new:
                if v in made and i >= 0:
                    made.discard(v)
                    s = windows.stretch(t, ci)
                    if s is None or s[2] is None:
                        self.why = ("value %d, which a recomputation starts from, is made by %s in module code that no "
                                    "hook of a named module call bounds, and saved nowhere" % (v, c.name))
                        return
                    reads.setdefault(s[0], _Stretch(s[1], s[3], s[2])).takes.setdefault(ci, []).append((i, v))
        if made:
            self.why = "a value a recomputation starts from that no call of the step makes"
            return
        (self.windows, self.at, self.taken, _), self.recipes, self.configs, self.reads = got, recipes, configs, reads
        # where the step's generator state is recorded: {event: the random call's device}
        self.draws = {e: _device_of(t.calls[ci].form) for ci, e in at.items()}
        # the model's inputs its recipes read (the batch an embedding reads): taken at its call
        read = {a.v for rs in recipes.values() for r in rs for a in _leaves((r.args, r.kwargs))
                if isinstance(a, _Input)}
        self.input_src = [(i, v, t.input_layouts[i]) for i, v in enumerate(t.input_values) if v in read]

    def configs_hold(self, model):
        """Whether model's modules whose floats the recipes hold have the
        attributes they had at capture (windows.module_config)."""
        mods = self.of(model)[0]
        return all(windows.module_config(mods.get(n)) == c for n, c in self.configs.items())

    def followed(self):
        """The plan's decisions with the applier following calls
        (regions.py), for a step where a module's attributes changed since
        capture (configs_hold): made once per plan."""
        if self._followed is None:
            self._followed = Decisions(self.plan, use_windows=False)
        return self._followed

    def of(self, model):
        """model's modules by name and where its parameters that the plan
        trains are, (name, module, its attribute name there): looked up once
        for each model the plan runs on, not in every step; a parameter is
        read from its module's own table in the step (a loop may assign
        another: load_state_dict(..., assign=True))."""
        if self._of is None or self._of[0]() is not model:
            import weakref
            mods = dict(model.named_modules())
            params = [(n, mods[n.rpartition(".")[0]], n.rpartition(".")[2]) for n, _ in model.named_parameters()
                      if n in self.params]
            self._of = (weakref.ref(model), (mods, params))
        return self._of[1]

    def _regions(self, t, nested):
        """Where the applier's dispatch mode and its saved-tensor hooks must
        be on. The mode: over the runs of module calls that cover the calls
        it follows (a recipe to record, a tracked value made or made stale;
        capture's ModuleCalls names them) at the least cost (regions.cover),
        and after the model's call when the calls there (the loss) hold one.
        The hooks: only where autograd saves a value the plan drops, so that
        every other saved tensor is packed and unpacked with no Python. A
        save while the mode is on is placed between two calls (capture's
        pack_calls): the mode turns the hooks on after the call before it
        and off after the call after it (hook_gaps, the number of calls run
        when it is saved). Saves just after a run's end: the hooks stay on
        from there until the last of them (closing, {the run's first module
        call: their number}; the pack hook counts them down). Any other
        save: brought inside a run by following a call next to it, or the
        hooks on around the outermost of the innermost module calls that
        hold those saves (capture's pack_modules: the module call running
        when autograd saved it, which is not always its maker's nor its
        reader's). Elsewhere the forward runs as PyTorch runs it. regions:
        the mode's, {(module name, its call): (first call, end, (the last
        module call's name, its call))}; hook_regions: the hooks', {(module
        name, its call)}; tail: the first call after the model, or None (the
        mode on from there); full: the mode on over the whole forward (a
        call it follows outside the model and before its end, or in a
        module that is not the model's); hooks_everywhere: the hooks on over
        the whole step (full, a nested plan, which counts every saved
        tensor, FSDP2, or a trace that does not say where each tensor was
        saved)."""
        follow = [ci for ci in range(len(t.calls)) if self.recorded[ci] or self.news[ci] or self.stale[ci]
                  or ci in self.copy_at]
        self.regions, self.hook_regions, self.hook_gaps, self.tail, self.full = {}, set(), set(), None, False
        self.closing = {}
        self.hooks_everywhere = nested or bool(t.fsdp) or len(t.pack_modules) != len(t.pack_ops)
        if not follow:
            return
        if not t.modules or t.modules[0][3] != "" or len(t.call_module) != len(t.calls):
            self.full = self.hooks_everywhere = True
            return
        saves = [] if self.hooks_everywhere else [
            (k, t.pack_modules[k], t.pack_calls[k]) for k, v in enumerate(t.pack_values) if v in self.rec_vals]
        mods = t.modules
        start, end = mods[0][0], mods[0][1]  # the model's call
        # a save the mode does not reach (regions.place): where none is reached after a run's end,
        # in the module call of the call just after it (its input) or just before it (its output),
        # the mode reaches it by following that call (one call followed, where hooks of its own
        # would cost two module hooks and every other tensor that module call saves); else the
        # hooks are on around its module call (hook_regions)
        near, dropped = set(), [v in self.rec_vals for v in t.pack_values]
        for _ in range(4):
            fl = sorted(set(follow) | near)
            inner = [ci for ci in fl if start <= ci < end]
            after = [ci for ci in fl if ci >= end]
            runs = regions.cover(t, inner)
            hooks = regions.outermost(t, [(t.call_module[ci], ci) for ci in fl] + [s[1:] for s in saves])
            if runs is None or hooks is None or len(inner) + len(after) != len(fl) or any(
                    t.call_module[ci] >= 0 and mods[t.call_module[ci]][3] is not None for ci in after):
                self.regions, self.hook_regions, self.tail, self.full, self.hooks_everywhere = \
                    {}, set(), None, True, True
                return
            tail = end if after or hooks[1] else None
            gaps, closing, rest = regions.place(t, runs, tail, saves, dropped)
            more = set()
            for i, g in rest:
                if g < len(t.calls) and t.call_module[g] == i and g not in near:
                    more.add(g)
                elif g > 0 and t.call_module[g - 1] == i and g - 1 not in near:
                    more.add(g - 1)
            if not more:
                break
            near |= more
        key = [(m[3], m[4]) for m in mods]
        self.regions = {key[a]: (mods[a][0], mods[b][1], key[b]) for a, b in runs}
        self.tail, self.hook_gaps, self.closing = tail, gaps, closing
        spans = [(mods[a][0], mods[b][1]) for a, b in runs]
        self.hook_regions = {key[i] for i in regions.outermost(t, rest)[0] if not any(
            f <= mods[i][0] < mods[i][1] <= e for f, e in spans)}


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
