"""How long the model's own code holds each value in the forward.

A plan frees a value it recomputes after its last read in the forward; the
model's Python code may hold it longer: a local variable until its function
returns, a cache object (transformers' ``use_cache``: every layer's keys
and values until the model returns), a list of features. Capture cannot
tell from storages alone, as autograd holds what the backward reads. So
capture runs the forward once more with autograd keeping nothing (a
saved-tensor hook that packs a token): a storage alive after a call is then
held by the model's code, or by the caller's. Each activation's last op
after which its storage was seen alive becomes its ``held_until``
(docs/graph-format.md): the planners keep it that long in the forward,
whatever the plan.
"""
import contextlib

import torch

from . import fsdp
from .compat import StorageWeakRef, TorchDispatchMode, schema_name, tree_flatten


class _Probe(TorchDispatchMode):
    """Follows the storages of the values each recorded call makes."""

    def __init__(self, trace, ignored):
        super().__init__()
        self.t, self.ignored = trace, ignored
        self.i = 0            # the next recorded call
        self.op = -1          # the latest op whose call ran
        self.alive = {}       # value -> weak reference to its storage
        self.owner = {}       # storage id -> the value it holds now (a write in place makes a new one)
        self.held = {}        # value -> the last op after which its storage was alive
        self.mismatch = None  # (call index, expected, got) when the sequence differs from the capture's
        self.suspended = False  # inside FSDP2's hooks
        self.output = set()     # the values the model's output holds

    # FSDP2 (fsdp.Hooks): FSDP's own calls in its hooks are not the step's
    def fsdp_enter(self, unit, gathering):
        self.suspended = True

    def fsdp_gathered(self, unit, args, kwargs):
        self.suspended = False

    def fsdp_exit(self, unit):
        self.suspended = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.mismatch is not None or self.suspended or self.ignored(func):
            return out
        calls = self.t.calls
        if self.i >= len(calls) or calls[self.i].name != str(func):
            self.mismatch = (self.i, calls[self.i].name if self.i < len(calls) else None, schema_name(func))
            return out
        call = calls[self.i]
        self.i += 1
        if call.op >= 0:
            self.op = call.op
        flat = tree_flatten(out)[0]
        for idx, v in call.new:
            if 0 <= idx < len(flat) and isinstance(flat[idx], torch.Tensor):
                ref = StorageWeakRef(flat[idx].untyped_storage())
                old = self.owner.get(ref.cdata)
                if old is not None:
                    self.alive.pop(old, None)  # overwritten: the old version ends here
                self.owner[ref.cdata] = v
                self.alive[v] = ref
        for v, ref in list(self.alive.items()):
            if ref.expired():
                del self.alive[v]
                self.owner.pop(ref.cdata, None)
            else:
                self.held[v] = self.op
        return out


def tensors_in(obj, depth=6):
    """The tensors an object returned by a model holds: in tuples, lists,
    dicts (transformers' ModelOutput) and the attributes of other objects
    (transformers' Cache and its layers), to a depth; not a module's."""
    out, seen, todo = [], set(), [(obj, 0)]
    while todo:
        x, d = todo.pop()
        if id(x) in seen or d > depth:
            continue
        seen.add(id(x))
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (tuple, list)):
            todo.extend((y, d + 1) for y in x)
        elif isinstance(x, dict):
            todo.extend((y, d + 1) for y in x.values())
        elif hasattr(x, "__dict__") and not isinstance(x, (torch.nn.Module, type)):
            todo.extend((y, d + 1) for y in vars(x).values())
    return out


def probe(trace, model, inputs, loss_fn, ignored, units=()):
    """Runs the forward and the loss once with autograd keeping nothing and
    sets each activation's held_until: the last op after which the model's
    code (or the loss function's) still held it, and trace.output_values:
    the activations the model's output holds (what a caller that keeps the
    output through the backward holds: planning's keep_output). Returns
    None, or a message when the calls differ from the captured ones (then
    nothing is set). units: an FSDP2 model's units (fsdp.bind), whose
    hooks' calls are FSDP's; each reshards after its forward, as no
    backward follows."""
    p = _Probe(trace, ignored)
    with contextlib.ExitStack() as fsdp_hooks:
        if units:
            fsdp_hooks.enter_context(fsdp.Settings(units, [True] * len(units)))
            fsdp_hooks.enter_context(fsdp.Hooks(units, p))
        _forward(p, model, inputs, loss_fn)
    if p.mismatch is None and p.i != len(trace.calls):
        p.mismatch = (p.i, trace.calls[p.i].name, None)
    if p.mismatch is not None:
        i, want, got = p.mismatch
        return "call %d was %s when captured and %s when probed" % (i, want, got)
    for v, op in p.held.items():
        trace.values[v].held_until = op
    trace.output_values = sorted(v for v in p.output if v is not None and trace.values[v].kind == "activation")
    return None


def _forward(p, model, inputs, loss_fn):
    """The forward and the loss under probe p, autograd keeping nothing;
    p.output: the values the model's output holds."""
    with torch.autograd.graph.saved_tensors_hooks(lambda x: None, lambda x: x):
        with p:
            out = model(*inputs)
            p.output = {p.owner.get(StorageWeakRef(t.untyped_storage()).cdata) for t in tensors_in(out)}
            loss = loss_fn(out)
            del out
    del loss
