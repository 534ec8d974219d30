"""A captured training step (capture.py makes one): its values, its ops,
the aten calls that made them, and the graph file it is planned as
(docs/graph-format.md)."""

from __future__ import annotations

from typing import Any, Optional, Union

import torch

from . import meters
from .compat import tree_flatten

#: What the applier adds to an op's time when it replays it: the dispatch of
#: a recipe in Python (measured 20-60 us a call on the CPU here; docs/pytorch.md).
REPLAY_SECONDS = 40e-6


class Value:
    __slots__ = ("id", "kind", "bytes", "name", "producer", "overwritten", "over_call", "moved", "readers", "const",
                 "grad_bytes", "held_until")

    def __init__(self, id, kind, nbytes, name=None, producer=-1):
        self.id, self.kind, self.bytes, self.name, self.producer = id, kind, nbytes, name, producer
        self.overwritten = -1  # the op that writes it in place, making a new version
        self.over_call = -1    # the call of that op that writes it
        # the op that writes its first storage in place after autograd saved a copy of it (a clone
        # that op's backward reads): it lives on in that copy (capture.py, _saved_copy)
        self.moved = -1
        self.readers = 0  # ops that read it so far
        self.const = False  # made from shapes alone (arange, zeros): the same in every step, whatever the batch
        self.grad_bytes = None  # its gradient's bytes where they are not its own (fsdp.py: an FSDP2 parameter's)
        self.held_until = -1  # the last op after which the model's code held it in the forward (holds.py)

    @property
    def gbytes(self):
        """The bytes of its gradient."""
        return self.bytes if self.grad_bytes is None else self.grad_bytes


class Op:
    __slots__ = ("id", "name", "calls", "inputs", "outputs", "saves", "flops", "transient", "transient_bwd",
                 "stateful", "random", "family", "has_node", "seconds", "seconds_bwd")

    def __init__(self, id, name):
        self.id, self.name = id, name
        self.calls = []
        self.inputs, self.outputs, self.saves = [], [], []
        self.flops = 0.0
        self.transient = 0
        self.transient_bwd = 0
        self.stateful = self.random = False
        self.has_node = False  # a call of it made an autograd node: its backward runs
        self.seconds = self.seconds_bwd = 0.0  # its forward's and its backward's time at capture
        self.family = "pointwise"


class Call:
    """One aten call of the forward, as the plan's applier must see it again."""
    __slots__ = ("name", "op", "new", "func", "reads", "form", "written")

    def __init__(self, name, op, new, func=None, reads=(), form=None, written=()):
        self.name = name  # the overload's name, to check the replayed sequence
        self.op = op      # op id, or -1 for a view
        self.new = new    # [(flat output index, value id)] the call makes
        self.func = func  # the overload itself (compared by identity first: a step pays no str())
        self.reads = reads  # per tensor among its arguments, in order: the value it held, or -1
        # its arguments (args, kwargs) with each tensor a Slot (form_of), from which the applier
        # builds its recipe without following the call; None where one cannot be kept (a Generator)
        self.form = form
        self.written = written  # the leaves (map_i's indices) it writes in place


class Slot:
    """A tensor argument of a call, as capture saw it: the value it held
    (-1: none), the geometry of the view the call read, its dtype and
    device, and whether it was contiguous."""
    __slots__ = ("v", "size", "stride", "offset", "dtype", "device", "contiguous")

    def __init__(self, v, t):
        self.v, self.size, self.stride, self.offset = v, tuple(t.size()), tuple(t.stride()), t.storage_offset()
        self.dtype, self.device, self.contiguous = t.dtype, t.device, t.is_contiguous()


def map_i(f, x, k):
    """x with each leaf a replaced by f(i, a), i its index among the leaves
    (an aten call's arguments or outputs: tuples, lists, dicts and leaves;
    None is no leaf, as for PyTorch's pytree, whose order this keeps). A
    step pays this per call it follows, so it is not pytree's general walk."""
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        ys = [map_i(f, y, k) for y in x]
        return ys if isinstance(x, list) else tuple(ys)
    if isinstance(x, dict):
        return {key: map_i(f, y, k) for key, y in x.items()}
    i = k[0]
    k[0] = i + 1
    return f(i, x)


def leaves(x, out=None):
    """The leaves of x in map_i's order."""
    if out is None:
        out = []
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            leaves(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            leaves(y, out)
    elif x is not None:
        out.append(x)
    return out


def form_of(args, kwargs, reads, written):
    """A call's (args, kwargs) as Call.form keeps them (each tensor a Slot
    with the value reads gives it, in order), and the indices of the leaves
    it writes (written: the tensors, by identity); (None, ()) where an
    argument cannot be kept past the call (a Generator's state moves)."""
    n, ids, out = [0], {id(w) for w in written}, []

    def slot(i, a):
        if isinstance(a, torch.Generator):
            raise _NoForm
        if not isinstance(a, torch.Tensor):
            return a
        j = n[0]
        n[0] = j + 1
        if id(a) in ids:
            out.append(i)
        return Slot(reads[j] if j < len(reads) else -1, a)
    try:
        return map_i(slot, (args, kwargs), [0]), tuple(out)
    except _NoForm:
        return None, ()


class _NoForm(Exception):
    pass


class Trace:
    """A captured training step: values, ops, the calls that made them, the loss."""

    def __init__(self) -> None:
        self.values: list[Value] = []
        self.ops: list[Op] = []
        self.calls: list[Call] = []
        self.loss = -1
        self.capture_seconds = 0.0
        self.model: Any = None         # a weak reference to the captured model
        self.input_sig: tuple = ()     # signature() of the captured inputs
        self.params: frozenset = frozenset()  # the names of the parameters that train
        self.transients = meters.NONE  # how transients were measured (meters.py)
        self.unmeasured: Optional[str] = None  # what the measurement could not see, or None
        self.fsdp: list = []           # the model's FSDP2 units (fsdp.py), whose all-gathers are ops
        self.comm_bytes = 0            # what a DDP model's gradient buckets hold, the whole step
        self.grads_in_buckets = False  # its gradients are views into them (gradient_as_bucket_view)
        self.comm_transient = 0        # what a bucket's all-reduce takes while the backward runs (capture.py)
        self.modules: list = []        # each module call of the forward, in order:
        #                                [first call, end, parent, name in the first one's module or None, occurrence]
        self.call_module: list[int] = []  # per call: the innermost module call it ran in (an index), or -1
        self.module_types: list[type] = []  # per module call: the module's class
        self.module_outputs: dict = {}  # module call -> [(place among its output's tensors, activation)]
        self.configs: dict = {}        # module call -> the plain attributes of a module of PyTorch's own,
        #                                from which the floats its code passes follow (windows.module_config)
        self.layer_kinds: frozenset = frozenset()  # the classes that may be layers (layer_kinds_of)
        self.pack_ops: list[int] = []  # per tensor autograd saved in the forward, in order: the op whose
        #                                backward reads it, or -1 (capture.py's saved)
        self.pack_values: list[int] = []   # per saved tensor: the value it is, or -1 (not an activation, FSDP's)
        self.pack_modules: list[int] = []  # per saved tensor: the innermost module call it was saved in, or -1
        self.pack_calls: list[int] = []    # per saved tensor: how many calls had run when it was saved
        self.output_values: list[int] = []  # the activations the model's output holds (holds.py)
        self.input_values: list[int] = []  # per leaf of the model's inputs (tree_flatten): its value, or -1
        self.input_layouts: list = []      # per leaf: a tensor's (strides, storage offset), or None
        self.leaf_layouts: dict = {}       # parameter or buffer value -> its tensor's (size, strides, storage offset)
        self.source = ""

    @property
    def transient_measured(self) -> bool:
        """Whether each op's transient bytes were measured (by any meter)."""
        return self.transients != meters.NONE

    # ------------------------------------------------------------ graph file
    def regions(self, classes: Union[type, tuple]) -> list:
        """Per op, the checkpoint region it ran in: the index of the
        outermost call of a module of one of classes (a class or a tuple)
        around its first call, as per-layer checkpointing wraps each call;
        -1 outside them."""
        out = []
        for o in self.ops:
            m = self.call_module[o.calls[0]] if o.calls else -1
            region = -1
            while m >= 0:
                if issubclass(self.module_types[m], classes):
                    region = m
                m = self.modules[m][2]
            out.append(region)
        return out

    def region_class(self) -> Optional[type]:
        """The class of the model's layers, as per-layer checkpointing picks
        them (HuggingFace's gradient_checkpointing_enable checkpoints each
        layer of the model's ModuleList): of the modules held in a
        ModuleList or Sequential that have parameters and modules of their
        own, the class with the most calls in the step, at least 2; None
        when the model has none."""
        kinds = {k: 0 for k in self.layer_kinds}
        for k in self.module_types:
            if k in kinds:
                kinds[k] += 1
        most = max(kinds.values(), default=0)
        if most < 2:
            return None
        tied = {k for k, n in kinds.items() if n == most}
        # of classes called as often (EfficientNet's MBConv and the
        # SqueezeExcitation inside each), the outermost: a layer is what
        # holds the others
        inner = set()
        for i, k in enumerate(self.module_types):
            if k in tied:
                m = self.modules[i][2]
                while m >= 0:
                    if self.module_types[m] in tied and self.module_types[m] is not k:
                        inner.add(k)
                        break
                    m = self.modules[m][2]
        outer = sorted(tied - inner, key=lambda k: k.__qualname__) or sorted(tied, key=lambda k: k.__qualname__)
        return outer[0]

    def held_past_last_read(self) -> list:
        """The activations the model's code held past their last read in
        the forward (Value.held_until, holds.py), before any op overwrote
        them in place."""
        last = {}  # value -> the last op that reads it in the forward
        for o in self.ops:
            for v in o.inputs:
                last[v] = o.id
            for v in o.saves:
                if v not in o.outputs:
                    last[v] = max(last.get(v, -1), o.id)
        return [v.id for v in self.values if v.kind == "activation"
                and v.held_until > max(last.get(v.id, -1), v.producer)
                and (v.overwritten < 0 or v.held_until < v.overwritten)]

    def graph(self, cost: str = "flops", regions: Optional[list] = None, keep_output: bool = False) -> dict:
        """The step as a remat graph file (docs/graph-format.md), a dict.
        cost: "flops" (PyTorch's formulas) or "seconds" (each op's time at
        capture, forward and backward; a recomputation costs its forward's
        time and the applier's dispatch of it, REPLAY_SECONDS). regions:
        per op its checkpoint region (Trace.regions) or -1, or None.
        keep_output: the caller keeps the model's output through the
        backward (its activations are marked caller_holds)."""
        if cost not in ("flops", "seconds"):
            raise ValueError("cost is flops or seconds, not %r" % (cost,))
        values = []
        held = set(self.held_past_last_read())
        kept = set(self.output_values) if keep_output else set()
        for v in self.values:
            d = {"id": v.id, "kind": v.kind, "bytes": int(v.bytes)}
            if v.id in kept:
                d["caller_holds"] = True
            if v.name:
                d["name"] = v.name
            if v.overwritten >= 0:
                d["overwritten_by"] = v.overwritten
            if v.id in held:
                d["held_until"] = v.held_until
            if v.grad_bytes is not None:
                d["grad_bytes"] = int(v.grad_bytes)
            values.append(d)
        ops = []
        for o in self.ops:
            fw = float(o.flops) if cost == "flops" else max(o.seconds, 1e-9)
            bw = 2.0 * fw if cost == "flops" else o.seconds_bwd
            rc = fw if cost == "flops" else fw + REPLAY_SECONDS
            # a value the op's backward reads that it neither reads nor makes
            # (in-place hardtanh_ saves a clone of its input made by an op
            # before it) is a read of the op all the same
            extra = [v for v in dict.fromkeys(o.saves) if v not in o.inputs and v not in o.outputs]
            ops.append({
                "id": o.id, "name": o.name, "inputs": o.inputs + extra, "outputs": o.outputs,
                "saves": sorted(set(o.saves)), "forward": fw, "backward": bw,
                "recompute": rc, "transient": {"forward": int(o.transient), "backward": int(o.transient_bwd)},
                "stateful": o.stateful, "random": o.random, "family": o.family,
            })
            if o.name in GRAD_VIEWS:
                ops[-1]["grad_views"] = True
            if regions is not None and regions[o.id] >= 0:
                ops[-1]["region"] = regions[o.id]
        return {"format": "remat-graph", "version": 1, "cost_unit": cost, "source": self.source,
                "values": values, "ops": ops, "loss": self.loss}


# ops whose backward returns their inputs' gradients as views into their
# output's gradient (cat: narrow, stack: unbind), so that gradient's memory
# lives until the last of them is consumed (the graph's grad_views)
GRAD_VIEWS = frozenset({"aten::cat", "aten::stack"})


def layer_kinds_of(model):
    """The classes of the modules held in a ModuleList or Sequential (a
    model's layers) that have parameters and modules of their own."""
    kinds = set()
    for mod in model.modules():
        if not isinstance(mod, (torch.nn.ModuleList, torch.nn.Sequential)):
            continue
        for child in mod.children():
            if isinstance(child, (torch.nn.ModuleList, torch.nn.Sequential)):
                continue
            if next(child.children(), None) is not None and next(child.parameters(), None) is not None:
                kinds.add(type(child))
    return frozenset(kinds)


def signature(inputs):
    """What a plan is made for in its inputs: each tensor's shape and dtype
    (other arguments: their type), in the order the model takes them."""
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else type(a).__name__
                 for a in tree_flatten(inputs)[0])


def describe(sig):
    return ", ".join("%s %s" % (tuple(s[0]), str(s[1]).replace("torch.", "")) if isinstance(s, tuple) else s
                     for s in sig) or "no tensors"


class ModuleCalls:
    """Global module hooks (torch.nn.modules.module's, before each module's
    own pre-hooks and forward hooks) numbering the module calls of a step in
    the order they begin, and calling owner.module_enter(i, module) and
    owner.module_exit(i, module, output). Capture records where each module call
    begins and ends in the call sequence, and its name in the model (the
    first module called); the applier enters its dispatch mode only around
    the module calls that hold what it must follow (decisions.Decisions.regions,
    apply.Regions)."""

    def __init__(self, owner):
        self.owner = owner
        self._handles = []
        self.n, self.stack = 0, []

    def __enter__(self):
        from torch.nn.modules import module as nn_module
        o = self.owner

        def pre(mod, args):
            i = self.n
            self.n = i + 1
            self.stack.append(i)
            o.module_enter(i, mod)

        def post(mod, args, out):
            o.module_exit(self.stack.pop(), mod, out)

        self._handles = [nn_module.register_module_forward_pre_hook(pre), nn_module.register_module_forward_hook(post)]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        return False
