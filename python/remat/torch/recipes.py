"""Recipes: what the applier runs again for a recomputed op (apply.py).

A recipe is an op and its arguments, with each tensor by reference and
never by tensor, so that it holds no activation: a value by id and the
view of it (_Ref), a parameter or buffer by name (_Named), the model's
input (_Input), a tensor whose data the op does not read (_Meta, _Empty),
a generator's state (_Gen, _RngAt), and a float the step's call passes
(_StepFloat). The applier records one per call it follows, or, for a plan
applied with windows (windows.py), makes it from capture's form of the
call (_form_recipe). This file also says which floats are configuration
(_config) and which the step's call must give (_reads_floats), and how a
stateful op replays without changing its state twice (_stateless).
"""

import torch

from . import compat
from .capture import _META_ONLY, CaptureError, per_overload
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


class _Recipe:
    __slots__ = ("func", "args", "kwargs", "new", "rng", "writes")

    def __init__(self, func, args, kwargs, new, rng, writes):
        self.func, self.args, self.kwargs, self.new, self.rng, self.writes = func, args, kwargs, new, rng, writes


def _map(f, x):
    return _map_i(lambda i, a: f(a), x, [0])


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


def _passes_floats(c):
    """Whether call c passes a float, or has an argument typed float that
    it may have left at its default (_float_typed)."""
    return _float_typed(c.func) or any(isinstance(a, float) for a in _leaves(c.form))


def _reads_floats(t, ci):
    """Whether a replay of call ci reads the step's call's floats
    (_StepFloat; Decisions.reads): floats that are not configuration, which
    capture's form could hold stale (a temperature the loop anneals)."""
    return not _config(t, ci) and _passes_floats(t.calls[ci])


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
    return _passes_floats(c)


def _device_of(form):
    """The device of a call's first tensor argument, or its device
    argument (a factory's), or the CPU."""
    args, kwargs = form
    s = next((a for a in _leaves((args, kwargs)) if isinstance(a, Slot)), None)
    if s is not None:
        return s.device
    d = kwargs.get("device") if isinstance(kwargs, dict) else None
    return torch.device(d) if d is not None else torch.device("cpu")


def _view(base, r):
    return base.as_strided(r.size, r.stride, r.offset)


def _private(t):
    """t as a view of a copy of its whole storage. An in-place op replayed
    on a value it must not change writes to this copy: when the op writes
    a view of the value (T5's shifted_input_ids[..., 1:] = ids[..., :-1]),
    the new version it makes is the whole storage, not the view."""
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(
        t.untyped_storage().clone(), t.storage_offset(), t.size(), t.stride())
