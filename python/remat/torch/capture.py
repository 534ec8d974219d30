"""Capture: a PyTorch model's whole training step as a remat graph file.

One forward pass and the loss run in eager mode under a TorchDispatchMode
that sees every aten op below autograd, in execution order, and under
saved-tensor hooks that see every tensor autograd saves for the backward
(the same two mechanisms PyTorch's own non-reentrant checkpointing and its
selective checkpointing are built on). From them:

- values are storages: an op's output that is a new storage is a new value
  (its bytes are the storage's); views and aliases are not values; model
  parameters and buffers are leaves by their state_dict names, and any
  other tensor the step reads (the batch, constants) is an input leaf;
- an op that writes a value in place (``relu_``, ``+=``) is folded into the
  op that made the value when nothing has read the value since (the
  common case: the value's memory and its maker's are the same); otherwise
  it makes a new version of it, and the old version is marked overwritten;
- an op that writes a parameter or a buffer (BatchNorm's running
  statistics) is stateful; one tagged ``nondeterministic_seeded`` (dropout)
  is random;
- a saved tensor is a read by the backward of the op whose autograd node
  saved it (inputs are saved just before the op runs, outputs just after);
- costs are FLOPs (PyTorch's own flop formulas, torch.utils.flop_counter;
  an op without one costs its output's element count); transient bytes (what
  an op holds while it runs beyond what it makes: oneDNN's scratch, im2col
  columns, cuDNN's workspaces) are measured per forward call and per
  autograd node of the backward by a meter (meters.py): the preloaded heap
  counter or a CUDA device's allocator statistics where there is one, else
  PyTorch's profiler, so that a plain ``python train.py`` measures them too.

Every op is captured; none is dropped or refused for being unknown. What
cannot be planned is refused with the reason and the place in the user's
code: a step whose ops depend on the data (``.item()``, ``if tensor:``,
``nonzero``), which a static plan cannot follow.

The capture leaves the model as it found it: gradients, buffers (BatchNorm
statistics) and the random number generator are restored afterwards.
"""

import contextlib
import time
import traceback
import warnings
import weakref
from typing import Any, Callable

import torch

from . import compat, fsdp, holds, memtrack, meters, windows
from .clock import Clock, clock_for
from .compat import StorageWeakRef, TorchDispatchMode, schema_name, tree_flatten
from .meters import BackwardMeter
from .trace import (  # noqa: F401
    REPLAY_SECONDS,
    Call,
    ModuleCalls,
    Op,
    Slot,
    Trace,
    Value,
    describe,
    form_of,
    layer_kinds_of,
    signature,
)
from .trace import leaves as form_leaves

aten = torch.ops.aten

# Ops whose result depends on the values of a tensor in a way that changes
# the following ops (control flow or shapes).
_DATA_DEPENDENT = {
    "aten::_local_scalar_dense", "aten::is_nonzero", "aten::nonzero", "aten::nonzero_static", "aten::equal",
    "aten::masked_select", "aten::unique", "aten::_unique2", "aten::unique_consecutive", "aten::unique_dim",
    "aten::item", "aten::repeat_interleave",
}

# Calls that never make or write memory and that autograd itself may add or
# leave out between runs (saving a tensor detaches it): not part of the
# sequence a plan is applied against.
_IGNORED = {"aten::detach", "aten::alias", "aten::lift_fresh"}


def _ignored(func):
    """A call outside the step's sequence: one of _IGNORED, or the profiler's
    record_function markers (DistributedDataParallel's forward opens one;
    whether a step passes through them depends on the profiler's state)."""
    return schema_name(func) in _IGNORED or func.namespace == "profiler"

# Ops that read only their input's shape, dtype and strides (dropout's mask
# is empty_like(x).bernoulli_()): the value is not an input of the op, so a
# plan neither keeps nor recomputes it for them.
_META_ONLY = {"aten::empty_like", "aten::zeros_like", "aten::ones_like", "aten::full_like", "aten::rand_like",
              "aten::randn_like", "aten::randint_like", "aten::new_empty", "aten::new_zeros", "aten::new_ones",
              "aten::new_full", "aten::new_empty_strided"}

_FLOPS = compat.FLOPS  # PyTorch's flop formulas, keyed by op packet

_PRODUCTS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"}
_CONVS = {"aten::convolution", "aten::_convolution", "aten::conv2d", "aten::cudnn_convolution",
          "aten::mkldnn_convolution", "aten::_slow_conv2d_forward", "aten::thnn_conv2d"}
_NORMS = {"aten::native_batch_norm", "aten::_native_batch_norm_legit", "aten::native_layer_norm",
          "aten::_native_batch_norm_legit_no_training", "aten::native_group_norm"}
_POOLS = {"aten::max_pool2d_with_indices", "aten::avg_pool2d", "aten::adaptive_avg_pool2d",
          "aten::_adaptive_avg_pool2d", "aten::mean"}
_LOSSES = {"aten::nll_loss_forward", "aten::_log_softmax", "aten::mse_loss", "aten::cross_entropy_loss"}


class CaptureError(RuntimeError):
    """The step cannot be captured as a static graph; the message says why and where."""


def _skey(t):
    """The identity of a tensor's memory: its storage's address (0: none)."""
    try:
        s = t.untyped_storage()
    except Exception:  # sparse or otherwise storage-less
        return 0
    return s.data_ptr() if s.nbytes() > 0 else 0


def _weak(t):
    """A weak reference to tensor t's storage: while it is held, no other
    storage is the one it names, even at the same address."""
    return StorageWeakRef(t.untyped_storage())


def _same(ref, t):
    """Whether t's storage is the one ref names (None names any: a leaf)."""
    return ref is None or ref.cdata == compat.storage_id(t)


def _user_frame():
    """'file:line in function' of the innermost frame outside torch and remat."""
    for fr in reversed(traceback.extract_stack()[:-2]):
        f = fr.filename.replace("\\", "/")
        if "/torch/" in f or "/remat/torch/" in f or "/contextlib.py" in f:
            continue
        return "%s:%d in %s" % (fr.filename, fr.lineno, fr.name)
    return "an unknown place"


def _family(name):
    if name in _PRODUCTS:
        return "linear"
    if name in _CONVS:
        return "conv"
    if name in _NORMS:
        return "norm"
    if name in _POOLS:
        return "pool"
    if name in _LOSSES:
        return "loss"
    return "pointwise"


def per_overload(f):
    """f(func), computed once per aten overload (its schema is read once)."""
    cache: dict = {}

    def memo(func):
        r = cache.get(func)
        if r is None:
            r = cache[func] = f(func)
        return r
    return memo


@per_overload
def _writes(func):
    """An overload's mutable arguments: ((position, name), ...)."""
    return tuple((i, a.name) for i, a in enumerate(compat.schema_arguments(func))
                 if a.alias_info is not None and a.alias_info.is_write)


def _written_args(func, args, kwargs):
    """The tensors an op writes (its schema's mutable arguments)."""
    out = []
    for i, name in _writes(func):
        v = args[i] if i < len(args) else kwargs.get(name)
        for t in tree_flatten(v)[0]:
            if isinstance(t, torch.Tensor):
                out.append(t)
    return out


class _Recorder(TorchDispatchMode):
    """Records every aten call of the forward pass into a Trace."""

    def __init__(self, trace, leaves, meter, clock=None):
        super().__init__()
        self.t = trace
        self.clock = clock if clock is not None else Clock()  # times each call (clock.py)
        self.live = dict(leaves)  # storage address -> value id
        self.refs = {}            # storage address -> _weak(storage), but for leaves (the model holds them)
        self.pending = []         # values saved since the last call
        self.pending_at = []      # their places in t.pack_ops (exact attribution)
        self.meter = meter        # measures each call's transient bytes (meters.py)
        self.measured = []        # (call index, op, bytes the call made): resolve() sets transients
        self.n_inputs = 0
        self.last = None          # the op of the latest call that made or wrote a value
        self.last_out = {}        # its values -> (weak reference to the tensor, output index)
        self.exact = compat.node_creation_hook() is not None
        self.last_clone = None    # the latest call, when it is a clone: (weak reference to its tensor, its value)
        self.after = None         # exact: the op that ran and whose node is not made yet
        self.suspended = False    # inside FSDP's own hooks: its calls are not the step's ops
        self.gathers = []         # FSDP2: (all-gather op, bytes it made, meter tag): resolve() sets their transients
        self.shards = {}          # FSDP2: parameter name -> its shard's value
        self.grad_of = {}         # FSDP2: a gathered parameter's storage -> the value its gradient belongs to
        self.open = []            # the module calls running now, innermost last (indices into t.modules)
        self.names = None         # id(module) -> its name in the first module called (the model)
        self.seen = {}            # module name -> its calls so far
        self._t0 = None           # FSDP2: when a unit's all-gather began (a clock mark)

    # -- values
    def _value_of(self, t):
        """The value that tensor t's memory holds (an input leaf if unseen)."""
        k = _skey(t)
        if k == 0:
            return -1
        v = self.known(t)
        if v is None:
            v = len(self.t.values)
            self.t.values.append(Value(v, "input", t.untyped_storage().nbytes(), "input.%d" % self.n_inputs))
            self.n_inputs += 1
            self.live[k], self.refs[k] = v, _weak(t)
        return v

    def known(self, t):
        """The value t's memory holds, or None. Its address alone does not
        say: a value's storage freed in the step can give its address to a
        tensor made where no recorded call makes it (torch.tensor(...)
        builds its tensor below the dispatch modes), which is not that value."""
        k = _skey(t)
        v = self.live.get(k)
        return v if v is not None and _same(self.refs.get(k), t) else None

    def _new_value(self, t, op):
        v = len(self.t.values)
        self.t.values.append(Value(v, "activation", t.untyped_storage().nbytes(), None, op))
        self.live[_skey(t)], self.refs[_skey(t)] = v, _weak(t)
        return v

    # -- saved tensors: attributed when the next call is recorded
    def saved(self, t):
        # every saved tensor's op, in the order autograd saves them (t.pack_ops:
        # which backward reads each, for the applier's nested schedules); -1
        # where not known (FSDP's own, a leaf's, before PyTorch 2.15)
        at = len(self.t.pack_ops)
        self.t.pack_ops.append(-1)
        self.t.pack_values.append(-1)
        self.t.pack_modules.append(self.open[-1] if self.open else -1)
        self.t.pack_calls.append(len(self.t.calls))
        if self.suspended:
            return
        v = self._value_of(t)
        if v < 0:
            return
        self.t.pack_values[at] = v
        if self.exact and self.after is not None:  # after an op ran, before its node: its outputs
            self.t.pack_ops[at] = self.after.id
            if v not in self.after.saves:
                self.after.saves.append(v)
            return
        self.pending.append(v)
        self.pending_at.append(at)

    def node_made(self, node):
        """An autograd node is complete (torch.autograd.graph.node_creation_hook):
        it belongs to the op that just ran; later saves are the next op's."""
        if self.suspended:
            return
        node.metadata["remat.op"] = self.after.id if self.after is not None else -1
        self.after = None

    def _tag_node(self, t):
        """Without node_creation_hook (PyTorch before 2.15): tags the autograd
        node of a tensor an op reads with the op that made its value, when
        the first op reads it (by then its node is complete), so that the
        backward meter can attribute the node's memory; capture tags the
        loss's node after the forward. A view's node is left as it is, and
        the node of the tensor it views is tagged: the view's backward (a
        reshape of an expanded gradient copies it) makes the gradient of the
        value, which the plan counts as such, not the op's."""
        base = compat.view_base(t)
        fn = (base if base is not None else t).grad_fn
        if fn is None or "remat.op" in fn.metadata:
            return
        v = self.known(t)
        v = -1 if v is None else v
        producer = self.t.values[v].producer if v >= 0 else None
        if producer is not None and producer >= 0:
            fn.metadata["remat.op"] = producer

    def flush(self, next_inputs=()):
        if self.exact:  # saved before the next op runs: its inputs
            later, self.pending = self.pending, []
            return later
        return self._flush_guess(next_inputs)

    def _flush_guess(self, next_inputs):
        """Attributes the values saved since the last call. Between two
        calls autograd saves the outputs of the one before (after it ran)
        and then the inputs of the one after (before it runs); a value that
        is both is the first's when its autograd node keeps that output
        (the node has a _saved_result attribute for it: relu, softmax,
        BatchNorm's statistics, pooling's indices), else the next op's.
        Anything else is read by the latest op that read or made it."""
        if not self.pending:
            return []
        later = []
        prev = self.last
        for v in self.pending:
            if prev is not None and v in prev.outputs and v not in prev.saves and self._kept_by_maker(v):
                prev.saves.append(v)
                continue
            if v in next_inputs:
                later.append(v)
                continue
            for o in reversed(self.t.ops[-16:]):
                if v in o.inputs or v in o.outputs:
                    o.saves.append(v)
                    break
            else:
                if self.t.ops:  # made long ago and saved now (a custom Function): a read of the latest op
                    o = self.t.ops[-1]
                    o.inputs.append(v)
                    o.saves.append(v)
        self.pending = []
        return later

    def _kept_by_maker(self, v):
        """Whether the latest call's autograd node saves its output v (by
        the node's saved-result attributes: _saved_result for its only
        output, _saved_resultN for output N)."""
        ref, i = self.last_out.get(v, (None, 0))
        t = ref() if ref is not None else None
        fn = t.grad_fn if t is not None else None
        if fn is None:
            return False  # no node: an op on tensors that need no gradient (dropout's mask)
        return compat.node_saves_output(fn, i)

    # -- the dispatch
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.suspended:
            return func(*args, **kwargs)
        name = schema_name(func)
        if _ignored(func):
            return func(*args, **kwargs)
        flat_in = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        in_vals, reads = [], [-1] * len(flat_in)
        for j, a in enumerate(() if name in _META_ONLY else flat_in):
            v = reads[j] = self._value_of(a)
            if v >= 0 and v not in in_vals:
                in_vals.append(v)
            g = self.grad_of.get(_skey(a)) if self.grad_of and name not in _META_ONLY else None
            if g is not None and g not in in_vals:  # an FSDP2 parameter: its gradient's value (fsdp_gathered)
                in_vals.append(g)
        # a value made from no leaf (transformers' position_ids, an arange)
        # is the same in every step: reading it (.all(), .item()) is no data
        const = not compat.is_random(func) and all(self.t.values[v].const for v in in_vals)
        if name in _DATA_DEPENDENT and any(self.t.values[v].kind == "activation" and not self.t.values[v].const
                                           for v in in_vals):
            raise CaptureError(
                "the step's ops depend on the data: %s reads a value computed in the step (at %s). remat plans "
                "a step whose ops are the same for every batch; move data-dependent control flow (.item(), "
                "if tensor:, nonzero, unique) out of the step or make it depend on shapes only"
                % (func.__name__ if hasattr(func, "__name__") else name, _user_frame()))
        if not self.exact:
            for a in flat_in:
                self._tag_node(a)
        later = self.flush(set(in_vals))
        self.after = None
        written = {_skey(w) for w in _written_args(func, args, kwargs)}
        needs_node = torch.is_grad_enabled() and any(a.requires_grad for a in flat_in)
        # buffers written in place, by their contents (some schemas, such as
        # native_batch_norm's for the running statistics, do not declare the
        # write, and kernels do not bump version counters)
        bufs_in = [a for a in flat_in if _skey(a) in self.live and self.t.values[self.live[_skey(a)]].kind == "buffer"]
        before = [a.clone() for a in bufs_in]
        in_keys = {_skey(a) for a in flat_in}
        form, wrote = form_of(args, kwargs, reads, _written_args(func, args, kwargs))  # as the call reads them
        ci = len(self.t.calls)
        self.meter.begin(("f", ci))
        t0 = self.clock.mark()
        try:
            out = func(*args, **kwargs)
        finally:
            t1 = self.clock.mark()
            self.meter.end()
        flat_out = tree_flatten(out)[0]
        op = Op(len(self.t.ops), name)
        new, fold_into, seen, moved = [], None, set(), None
        for i, t in enumerate(flat_out):
            if not isinstance(t, torch.Tensor):
                continue
            k = _skey(t)
            if k == 0 or k in seen:
                continue
            seen.add(k)
            if k in in_keys:
                if k not in written:
                    continue  # a view or an alias of an input
                v = self.live[k]
                val = self.t.values[v]
                if val.kind in ("parameter", "buffer"):
                    continue  # state written in place: see `stateful` below
                prod = self.t.ops[val.producer] if val.producer >= 0 else None
                early = all(self.t.values[u].producer < (prod.id if prod is not None else 0) for u in in_vals
                            if u != v)
                if (prod is not None and val.readers == 0 and prod.outputs and prod.outputs[0] == v
                        and fold_into in (None, prod) and early):
                    fold_into = prod  # nothing read it since: the same memory, the same op
                    continue
                if val.kind == "input":
                    raise CaptureError(
                        "the step writes in place a tensor it did not make: %s writes %s (the batch, or a tensor made "
                        "where no aten call makes it) at %s. A plan could neither keep its old contents nor recompute "
                        "from them; write to a copy instead (x = x + 1, not x += 1)"
                        % (func.__name__ if hasattr(func, "__name__") else name, val.name, _user_frame()))
                if moved is None and not new:
                    moved = self._saved_copy(v, t, later, in_vals)
                    if moved is not None:  # autograd saved a copy of it: the old version lives on there
                        self._merge_copy(op, moved)
                if moved is None or moved[1] != v:
                    val.overwritten, val.over_call = op.id, len(self.t.calls)
                new.append((i, self._new_value(t, op.id)))  # a new version, read by this op
            else:
                new.append((i, self._new_value(t, op.id)))
        for _, v in new:
            self.t.values[v].const = const
        for v in (fold_into.outputs if fold_into is not None else ()):  # written in place: no longer const
            self.t.values[v].const &= const
        state = any(self.t.values[self.live[k]].kind in ("parameter", "buffer") for k in written if k in self.live) \
            or any(not torch.equal(a, b) for a, b in zip(bufs_in, before))
        flops = 0.0
        packet = compat.overload_packet(func)
        if packet in _FLOPS:
            try:
                flops = float(_FLOPS[packet](*args, **kwargs, out_val=out))
            except Exception:
                flops = 0.0
        if flops == 0.0:
            flops = float(sum(t.numel() for t in flat_out if isinstance(t, torch.Tensor)))
        made = sum(self.t.values[v].bytes for _, v in new)
        random = compat.is_random(func)
        if moved is not None:
            later = [moved[1] if v == moved[2] else v for v in later]
        if fold_into is not None and not new:
            target = fold_into
        elif new or state:
            target = op
            if not new:  # state written, nothing made: a 0-byte value keeps the op in the graph
                v = len(self.t.values)
                self.t.values.append(Value(v, "activation", 0, None, op.id))
                new.append((-1, v))
            op.outputs = [v for _, v in new]
            op.family = _family(name)
            self.t.ops.append(op)
        else:
            target = None  # a view: no op
        if target is not None:
            for v in in_vals:
                if v not in target.inputs and v not in target.outputs:
                    target.inputs.append(v)
                    self.t.values[v].readers += 1
            target.calls.append(len(self.t.calls))
            target.flops += flops
            self.clock.charge(target, "seconds", t0, t1)
            self.measured.append((ci, target, made))
            target.stateful |= state
            target.random |= random
        if target is None:
            form, wrote = None, ()
        self.t.calls.append(Call(str(func), target.id if target is not None else -1, new, func, reads, form, wrote))
        self.last_clone = (weakref.ref(flat_out[0]), new[0][1]) if name == "aten::clone" and len(new) == 1 else None
        self.t.call_module.append(self.open[-1] if self.open else -1)
        if target is not None:
            self.last = target
            if not self.exact:  # which of its outputs its node keeps is known after it returns
                self.last_out = {}
                for i, t in enumerate(flat_out):
                    k = _skey(t) if isinstance(t, torch.Tensor) else 0
                    if k and k in self.live and self.live[k] not in self.last_out:
                        self.last_out[self.live[k]] = (weakref.ref(t), i)
        # the saves that follow are this op's outputs until its node is made;
        # an op on tensors that need no gradient makes no node
        if target is not None:
            target.has_node |= needs_node
        self.after = target if needs_node else None
        if target is None:
            self.pending = later  # a view: the op after it reads them
        else:
            for v in later:  # saved before this op ran: its inputs
                if v not in target.saves:
                    target.saves.append(v)
            if self.exact:
                for at in self.pending_at:
                    self.t.pack_ops[at] = target.id
            self.pending, self.pending_at = [], []
        return out

    # -- an in-place write after autograd saved a copy of what it overwrites
    def _saved_copy(self, v, t, later, in_vals):
        """When the call that writes value v in place (making tensor t, all
        of v's storage) comes right after a clone of v that the write's
        autograd node saves (autograd clones the input of silu_, hardtanh_,
        hardswish_ ... whose backward reads it): (the clone's op, v, the
        clone's value), else None. Then v is not overwritten: it lives on in
        the clone, which the graph does not list (the write and the clone are
        one op that reads v and makes its new version, as an out-of-place op
        would), and a replay of that op clones v and writes the clone."""
        ops, vals = self.t.ops, self.t.values
        p = ops[-1] if ops else None
        if p is None or p.name != "aten::clone" or p.inputs != [v] or len(p.outputs) != 1 or len(p.calls) != 1:
            return None
        c = p.outputs[0]
        call = self.t.calls[p.calls[0]]
        if (p.calls[0] != len(self.t.calls) - 1 or c != len(vals) - 1 or vals[c].readers
                or vals[c].bytes != vals[v].bytes):
            return None  # not the call just before, or the clone is read, or not all of v
        if c in in_vals or (c not in later and c not in p.saves):
            return None  # a clone of the user's, which no backward reads
        ref = self.last_clone
        cs = ref[0]() if ref is not None and ref[1] == c else None
        if (cs is None or t.storage_offset() != 0 or cs.storage_offset() != 0 or t.stride() != cs.stride()
                or t.size() != cs.size() or t.untyped_storage().nbytes() != vals[v].bytes
                or call.new != [(0, c)]):
            return None  # not the same layout: a replay could not write the clone as the step wrote v
        return p, v, c

    def _merge_copy(self, op, moved):
        """Makes op (the write, before it makes anything) one op with the
        clone before it (see _saved_copy)."""
        p, v, c = moved
        vals = self.t.values
        self.live[_skey(self.last_clone[0]())] = v  # the clone's storage holds v, with the same weak reference
        vals.pop()  # the clone's value: it is v
        pv = self.t.pack_values  # autograd saved the clone before the write ran: that save is v's
        for k in range(len(pv) - 1, -1, -1):
            if pv[k] == c:
                pv[k] = v
        vals[v].readers -= 1
        self.t.ops.pop()
        op.id = p.id
        vals[v].moved = op.id
        op.calls = list(p.calls)
        # its FLOPs are the write's, as the out-of-place op's (a clone computes nothing: what it
        # costs, the copy, is the out-of-place op's output); its time is both calls'
        op.flops = 0.0
        self.clock.move(p, op)
        op.saves = [v if x == c else x for x in p.saves]
        op.has_node = p.has_node
        self.t.calls[p.calls[0]].new = [(0, v)]
        self.t.calls[p.calls[0]].op = p.id
        self.measured = [(ci, op if o is p else o, made) for ci, o, made in self.measured]

    # -- module calls (ModuleCalls): where the applier can enter and leave its mode
    def module_enter(self, i, module):
        if self.names is None:
            self.names = {id(m): n for n, m in module.named_modules()}
        name = self.names.get(id(module))
        k = self.seen.get(name, 0)
        self.seen[name] = k + 1
        self.open.append(i)
        self.t.modules.append([len(self.t.calls), -1, self.open[-2] if len(self.open) > 1 else -1, name, k])
        self.t.module_types.append(type(module))
        config = windows.module_config(module)
        if config is not None:
            self.t.configs[len(self.t.modules) - 1] = config

    def module_exit(self, i, module, out=None):
        self.open.pop()
        self.t.modules[i][1] = len(self.t.calls)
        # the activations its output holds: a recomputation may start from one there (windows.place)
        got = [(j, v) for j, v in enumerate(self.known(x) for x in windows.output_tensors(out))
               if v is not None and self.t.values[v].kind == "activation"]
        if got:
            self.t.module_outputs[i] = got

    # -- FSDP2 (fsdp.Hooks)
    def fsdp_enter(self, unit, gathering):
        self.suspended = True
        if gathering and unit.unit.params:
            self.meter.begin(("g", unit.unit.name))
            self._t0 = self.clock.mark()

    def fsdp_gathered(self, unit, args, kwargs):
        """A unit's parameters are gathered: the all-gather is an op that
        reads their shards and makes the value every gathered parameter's
        memory holds (FSDP keeps or frees them together), and, per
        parameter, a 0-byte value whose gradient is the parameter's
        unsharded gradient, which the ops that read the parameter read too:
        each gradient is made by the first backward that writes it and held
        until the unit's reduce-scatter (fsdp.py)."""
        self.suspended = False
        u = unit.unit
        if not u.params:
            return
        fsdp.gathered(unit, args, kwargs)  # as under a plan
        t1 = self.clock.mark()
        self.meter.end()
        op = Op(len(self.t.ops), "fsdp.all_gather(%s)" % u.label)
        op.inputs = [self.shards[n] for n, _, _ in u.params if n in self.shards]
        for v in op.inputs:
            self.t.values[v].readers += 1
        tensors = unit.tensors()
        storages = {_skey(p): p for p in tensors if _skey(p)}
        v = self._fsdp_value(op, sum(p.untyped_storage().nbytes() for p in storages.values()), 0)
        for k, p in storages.items():
            self.live[k], self.refs[k] = v, _weak(p)
        keys = list(storages)
        groups = [keys[i * len(keys) // 14:(i + 1) * len(keys) // 14] for i in range(14)] if len(keys) > 14 else \
            [[k] for k in keys]  # an op makes at most 16 values: the gathered ones and 14 gradient groups
        op.outputs = [v]
        for grp in groups:
            if grp:
                g = self._fsdp_value(op, 0, sum(storages[k].untyped_storage().nbytes() for k in grp))
                op.outputs.append(g)
                for k in grp:
                    self.grad_of[k] = g
        op.saves = [v]  # FSDP holds the gathered parameters until the reduce-scatter
        op.flops = float(sum(p.numel() for p in tensors))
        if self._t0 is not None:
            self.clock.charge(op, "seconds", self._t0, t1)
            self._t0 = None
        op.family = "copy"
        op.has_node = True
        self.t.ops.append(op)
        self.gathers.append((op, self.t.values[v].bytes, ("g", u.name)))
        u.op = op.id
        for node in fsdp.post_backward_nodes(args, kwargs):  # its backward: the reduce-scatter
            node.metadata["remat.op"] = op.id

    def _fsdp_value(self, op, nbytes, grad_bytes):
        v = len(self.t.values)
        self.t.values.append(Value(v, "activation", nbytes, None, op.id))
        self.t.values[v].grad_bytes = grad_bytes
        return v

    def fsdp_exit(self, unit):
        self.suspended = False

    def resolve(self, peaks):
        """Each op's forward transient: its calls' peaks less what they made."""
        for ci, op, made in self.measured:
            op.transient = max(op.transient, peaks.get(("f", ci), 0) - made)
        for op, made, tag in self.gathers:
            op.transient = max(op.transient, peaks.get(tag, 0) - made)


def _node_hook(rec):
    if rec.exact:
        return compat.node_creation_hook()(rec.node_made)
    import contextlib
    return contextlib.nullcontext()


def device_of(model, inputs):
    """The one device the step runs on: the CPU or a CUDA device (refused:
    another device, or several)."""
    wrapper = compat.unplannable_wrapper(model)
    if wrapper is not None:
        raise CaptureError("remat.torch cannot plan a step of a model wrapped in %s: it gathers, shards and frees "
                           "parameters inside the step where a capture does not see it. remat.torch plans a model "
                           "on one device, DistributedDataParallel, and FSDP2 (fully_shard, one module per call)"
                           % wrapper)
    devices = {a.device for a in list(model.parameters()) + list(model.buffers()) + list(inputs)
               if isinstance(a, torch.Tensor)}
    if len(devices) > 1 or any(d.type not in ("cpu", "cuda") for d in devices):
        raise CaptureError("remat.torch plans a step on the CPU or on one CUDA device; this model and batch are on "
                           "%s" % ", ".join(sorted(str(d) for d in devices)))
    return next(iter(devices)) if devices else torch.device("cpu")


def rng_state(device):
    """The random state a random op on device draws from: the CPU
    generator's, and the CUDA device's."""
    return torch.get_rng_state(), device, torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def set_rng_state(state):
    cpu, device, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda, device)


def _restore_point(model, device):
    """What capture's steps change: the gradients (set aside, so that a
    capture inside an accumulating loop neither adds into them nor counts
    them), the buffers and the RNG."""
    grads = {n: p.grad for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = None
    bufs = {n: b.detach().clone() for n, b in model.named_buffers()}
    return grads, bufs, rng_state(device)


def _restore(model, point):
    grads, bufs, rng = point
    for n, p in model.named_parameters():
        p.grad = grads[n]
    with torch.no_grad():
        for n, b in model.named_buffers():
            b.copy_(bufs[n])
    set_rng_state(rng)


def capture(model: torch.nn.Module, inputs: Any, loss_fn: Callable[[Any], torch.Tensor], warmup: bool = True,
            transients: str = "auto") -> Trace:
    """See _capture. It runs on a thread of its own with a deep stack:
    freeing the autograd graph of a long chain of ops with Python hooks on
    its nodes recurses once per node (HeavyModel's 100,000 adds overflow
    the main thread's 8 MiB)."""
    import threading
    out = {}

    def body():
        try:
            out["trace"] = _capture(model, inputs, loss_fn, warmup, transients)
        except BaseException as e:  # re-raised on the caller's thread
            out["error"] = e

    old = threading.stack_size(1 << 30)
    try:
        th = threading.Thread(target=body, name="remat-capture")
        th.start()
        th.join()
    finally:
        threading.stack_size(old)
    if "error" in out:
        raise out["error"]
    return out["trace"]


def _capture(model, inputs, loss_fn, warmup=True, transients="auto"):
    """Captures one training step of `model` on `inputs` (a tensor or a tuple
    of the model's positional arguments) with loss `loss_fn(output)`:
    forward, loss and the values the backward reads. With warmup, one step
    runs first, unrecorded, so that what a first step allocates once
    (oneDNN's caches) is not taken for the step's memory; two for a
    DistributedDataParallel model, which rebuilds its gradient buckets in
    its second forward (the steps after are all alike). transients: how
    each op's transient bytes are measured (meters.meter_for: "auto",
    "counter", "profiler", "none"). Returns a Trace;
    the model, its gradients, its buffers and the RNG are left as they
    were."""
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    device = device_of(model, inputs)
    t = Trace()
    t.source = "torch %s: %s" % (torch.__version__, type(model).__name__)
    t.model = weakref.ref(model)
    t.input_sig = signature(inputs)
    t.layer_kinds = layer_kinds_of(model)
    try:
        t.fsdp = fsdp.units(model)
    except ValueError as e:
        raise CaptureError(str(e)) from None
    leaves, shards = {}, {}
    params = [(n, p) for n, p in model.named_parameters()]
    for kind, named in (("parameter", [(n, p) for n, p in params if p.requires_grad]),
                        ("buffer", [(n, p) for n, p in params if not p.requires_grad]),
                        ("buffer", list(model.named_buffers()))):
        for n, p in named:
            local = compat.local(p)  # an FSDP2 parameter: this rank's shard
            k = _skey(local)
            if k and k not in leaves:
                leaves[k] = len(t.values)
                t.leaf_layouts[len(t.values)] = (tuple(local.size()), tuple(local.stride()), local.storage_offset())
                t.values.append(Value(len(t.values), kind, local.untyped_storage().nbytes(), n))
            if local is not p and k:
                shards[n] = leaves[k]
    point = _restore_point(model, device)
    ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
    for _ in range((2 if ddp else 1) if warmup else 0):  # what a first step allocates once: not the step's memory
        try:
            loss = loss_fn(model(*inputs))
            if isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.requires_grad:
                loss.backward()
        finally:
            _restore(model, point)
        del loss
    meter = meters.meter_for(device, transients)
    clock = clock_for(device)
    rec = _Recorder(t, leaves, meter, clock)
    rec.shards = shards
    t.transients, t.unmeasured = meter.how, meter.unmeasured
    start = time.perf_counter()
    # FSDP2: its hooks' calls are not ops of the step; every unit keeps its
    # gathered parameters to its backward, so that no all-gather runs inside
    # another op's backward (its memory would count as that op's)
    units = contextlib.ExitStack()
    if t.fsdp:
        bound = fsdp.bind(t.fsdp, model)
        units.enter_context(fsdp.Settings(bound, [False] * len(bound)))
        units.enter_context(fsdp.Hooks(bound, rec))
    units.enter_context(ModuleCalls(rec))
    if ddp:
        # DDP's all-reduces run on the communication thread while the
        # backward's ops run: the counter, which sees the whole process,
        # would take what they allocate or free for an op's transient (up
        # or down, by timing). The recorded step reduces nothing; the plan
        # counts a bucket's all-reduce beside the whole backward instead
        # (_ddp_buckets)
        units.enter_context(model.no_sync())
    try:
        with units, meter:
            with torch.autograd.graph.saved_tensors_hooks(lambda x: (rec.saved(x), x)[1], lambda x: x):
                with _node_hook(rec), rec:
                    loss = loss_fn(model(*inputs))
                rec._flush_guess(())
            _check_loss(loss, rec, t)
            if not rec.exact:
                rec._tag_node(loss)
            bwd = BackwardMeter(t, meter, clock)
            with bwd:
                loss.backward()
        meter.finish()
        clock.resolve()  # each op's seconds and seconds_bwd
        t.unmeasured = meter.unmeasured
        rec.resolve(meter.peaks())
        bwd.resolve(meter.peaks())
        flat = tree_flatten(inputs)[0]
        known = [rec.known(a) if isinstance(a, torch.Tensor) else None for a in flat]
        t.input_values = [-1 if v is None else v for v in known]
        t.input_layouts = [(tuple(a.stride()), a.storage_offset()) if isinstance(a, torch.Tensor) else None
                           for a in flat]
        for o in t.ops:  # untagged (read by no op, or only by an ignored one): its forward's
            if not rec.exact and o.id not in bwd.seen and o.has_node:
                o.transient_bwd = o.transient
        no_grad = [n for n, p in params if p.requires_grad and p.grad is None and _skey(compat.local(p)) in leaves
                   and t.values[leaves[_skey(compat.local(p))]].readers > 0]
        for n in no_grad:
            warnings.warn("parameter %s gets no gradient from this loss" % n, stacklevel=3)
    finally:
        _restore(model, point)
    try:
        with (model.no_sync() if ddp else contextlib.nullcontext()):
            why = holds.probe(t, model, inputs, loss_fn, _ignored, fsdp.bind(t.fsdp, model) if t.fsdp else ())
    finally:
        _restore(model, point)
    if why is not None:
        warnings.warn("the model's forward ran other calls the second time (%s): how long its code holds "
                      "values is not known, and a plan's peak may exceed its prediction" % why, stacklevel=3)
    if ddp:
        _ddp_buckets(t, model)
        _agree_across_ranks(t, next(model.parameters()).device, getattr(model, "process_group", None))
    elif t.fsdp:
        _agree_across_ranks(t, compat.local(next(model.parameters())).device, None)
    _unused_params_to_buffers(t)
    trains = {v.name for v in t.values if v.kind == "parameter"}
    t.params = frozenset(n for n, _ in params if n in trains)
    t.capture_seconds = time.perf_counter() - start
    return t


def _check_loss(loss, rec, t):
    """Refuses a loss that is not a float32 scalar made by an op of the step
    with a gradient to give; else sets the trace's loss value."""
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or loss.dtype != torch.float32:
        raise CaptureError("loss_fn must return a float32 scalar tensor; it returned %r"
                           % (type(loss).__name__ if not isinstance(loss, torch.Tensor) else
                              "%s of shape %s" % (loss.dtype, tuple(loss.shape))))
    if not loss.requires_grad:
        raise CaptureError("the loss does not depend on any parameter that requires grad")
    lv = rec.live.get(_skey(loss), -1)
    if lv < 0 or t.values[lv].producer < 0 or t.ops[t.values[lv].producer].outputs[0] != lv:
        raise CaptureError("the loss is not the first output of an op of the step")
    t.loss = lv


def _ddp_buckets(t, ddp):
    """A DistributedDataParallel model's memory beside its step's: its
    gradient buckets, held for the model's life (t.comm_bytes; with
    gradient_as_bucket_view they hold the gradients: t.grads_in_buckets),
    and, where it has several buckets, the buffers of a bucket's all-reduce,
    which runs while the backward still holds activations (with one bucket
    it runs after the backward's last op): t.comm_transient, the most an
    all-reduce of the largest bucket takes beside it, measured by the
    counter of the device (gloo on the CPU allocates its own buffers, up to
    2 MiB per all-reduce on PyTorch 2.15), else the largest bucket's bytes,
    an allowance the plan names in unmeasured."""
    import torch.distributed as dist
    sizes, t.grads_in_buckets = compat.ddp_buckets(ddp)
    t.comm_bytes = sum(sizes)
    if len(sizes) < 2 or not dist.is_initialized():
        return
    dev = next(ddp.parameters()).device
    c = memtrack.counter(dev)
    group = getattr(ddp, "process_group", None)
    probe = torch.zeros(max(sizes) // 4 + 1, dtype=torch.float32, device=dev)
    dist.barrier(group=group)
    if c is None:
        dist.all_reduce(probe, group=group)  # every rank makes the same calls
        t.comm_transient = max(sizes)
        seen = "an all-reduce's own buffers (allowed: the largest DDP bucket, %d bytes)" % max(sizes)
        t.unmeasured = seen if not t.unmeasured else t.unmeasured + "; " + seen
        return
    live = c.live()
    c.reset_peak()
    dist.all_reduce(probe, group=group)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    t.comm_transient = max(0, c.peak() - live)


def _agree_across_ranks(t, dev, group):
    """Every rank of a data-parallel model (DistributedDataParallel, FSDP2)
    plans the same step, so that every rank makes the same collective calls:
    each op's transients and times, and each value's bytes (FSDP2's shards
    can differ by their padding), become their largest over the ranks. They
    can differ, since the counter also sees what the communication thread
    allocates while an op runs on a rank (FSDP2's collectives; DDP's
    recorded step reduces nothing). dev: where the collectives reduce
    (NCCL's on the device)."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        return
    shape = torch.tensor([len(t.ops), len(t.values), -len(t.ops), -len(t.values)], dtype=torch.int64, device=dev)
    dist.all_reduce(shape, op=dist.ReduceOp.MAX, group=group)
    if int(shape[0]) != -int(shape[2]) or int(shape[1]) != -int(shape[3]):
        raise CaptureError("the ranks captured different steps (%d to %d ops, %d to %d values): every rank must "
                           "run the same ops, on batches of the same shapes" % (-int(shape[2]), int(shape[0]),
                                                                                 -int(shape[3]), int(shape[1])))
    v = torch.tensor([b for o in t.ops for b in (o.transient, o.transient_bwd)]
                     + [b for x in t.values for b in (x.bytes, x.gbytes)] + [t.comm_transient], dtype=torch.int64,
                     device=dev)
    secs = torch.tensor([b for o in t.ops for b in (o.seconds, o.seconds_bwd)], dtype=torch.float64, device=dev)
    dist.all_reduce(v, op=dist.ReduceOp.MAX, group=group)
    dist.all_reduce(secs, op=dist.ReduceOp.MAX, group=group)  # and their times, for plans costed in seconds
    v, secs = v.cpu().tolist(), secs.cpu().tolist()
    for i, o in enumerate(t.ops):
        o.transient, o.transient_bwd = int(v[2 * i]), int(v[2 * i + 1])
        o.seconds, o.seconds_bwd = float(secs[2 * i]), float(secs[2 * i + 1])
    t.comm_transient = int(v[-1])
    for i, x in enumerate(t.values):
        x.bytes = int(v[2 * len(t.ops) + 2 * i])
        if x.grad_bytes is not None:
            x.grad_bytes = int(v[2 * len(t.ops) + 2 * i + 1])


def _unused_params_to_buffers(t):
    """Parameters no op reads are left out of the graph; parameters read only
    by ops the loss does not depend on get no gradient: they count as
    buffers (remat would refuse them as parameters that do not train)."""
    need = [False] * len(t.values)
    need[t.loss] = True
    for o in reversed(t.ops):
        if any(need[v] for v in o.outputs):
            for v in o.inputs:
                need[v] = True
    for v in t.values:
        if v.kind == "parameter" and not need[v.id]:
            v.kind = "buffer"
    # leaves nobody reads are not part of the step
    read = set()
    for o in t.ops:
        read.update(o.inputs)
    keep = [v for v in t.values if v.kind == "activation" or v.id in read]
    if len(keep) != len(t.values):
        remap = {v.id: i for i, v in enumerate(keep)}
        for i, v in enumerate(keep):
            v.id = i
        for o in t.ops:
            o.inputs = [remap[v] for v in o.inputs]
            o.outputs = [remap[v] for v in o.outputs]
            o.saves = [remap[v] for v in o.saves if v in remap]
        for c in t.calls:
            c.new = [(i, remap[v]) for i, v in c.new]
            c.reads = [remap.get(v, -1) for v in c.reads]
            for a in form_leaves(c.form) if c.form is not None else ():
                if isinstance(a, Slot):
                    a.v = remap.get(a.v, -1)
        # every other list of values the trace keeps (once left as they were: a model with a leaf
        # nobody reads had its saved tensors and its calls' forms name the values after it wrongly)
        t.pack_values = [remap.get(v, -1) for v in t.pack_values]
        t.input_values = [remap.get(v, -1) for v in t.input_values]
        t.output_values = [remap[v] for v in t.output_values if v in remap]
        t.leaf_layouts = {remap[v]: x for v, x in t.leaf_layouts.items() if v in remap}
        t.module_outputs = {i: [(j, remap[v]) for j, v in got] for i, got in t.module_outputs.items()}
        t.loss = remap[t.loss]
        t.values = keep
