"""torch.compile with a budget in bytes: remat's planner chooses what
AOTAutograd's partitioner saves for the backward.

    step = rt.compile(model, (x, y), budget="300MiB", optimizer=opt, loss=F.cross_entropy)
    print(step.plan)                  # predicted peak per category, before the first step
    for x, y in batches:
        loss = step(x, y)             # loss_fn(model(x), y), compiled by Inductor
        loss.backward()
        opt.step(); opt.zero_grad()

Under torch.compile, AOTAutograd traces the forward and backward into one
joint graph and its min-cut partitioner splits it into a forward graph,
which saves some values, and a backward graph, which recomputes the rest
from them. Here remat makes that choice: the joint graph becomes a remat
graph file (joint_graph: bytes from each node's fake tensor, FLOPs from
PyTorch's formulas, each backward read attributed to the forward op whose
autograd sequence number it carries), remat plans it under the budget
(recomputing each op at most once, as a backward graph does), and the
forward saves what the plan keeps. Everything else is Inductor's own
pipeline: the backward is reordered to recompute just before use,
random ops are functionalized (a recomputed dropout draws the same mask),
and BatchNorm's running statistics are written once, in the forward.
docs/pytorch.md ("torch.compile with a budget") says what the prediction
counts and how close it comes.
"""

from __future__ import annotations

import operator
import time
import types
from typing import Any, Callable, Optional

import torch
from torch.fx.node import map_arg

from .._lib import RematError, plan_graph
from . import compat, memtrack
from .capture import _family, _restore, _restore_point, device_of
from .planning import Budget, Inputs, OptimizerLike

#: ops that alias their input by effect though their schemas do not say so
_ALIASES = {"aten::_unsafe_view", "aten::alias", "aten::_reshape_alias", "aten::lift_fresh"}

#: what a recomputation of an op that draws random numbers would cost: such
#: an op is never recomputed (the partitioner saves its output), so the
#: planner is told it is priceless
_NEVER = 1e30


#: ops Inductor runs as calls into a kernel library (oneDNN, cuBLAS, cuDNN,
#: PyTorch's attention), whose scratch memory is theirs: measured once per
#: shape (library_transients); the code Inductor generates takes none
_LIBRARY = {"aten::convolution", "aten::convolution_backward", "aten::mm", "aten::addmm", "aten::bmm",
            "aten::baddbmm"}


def _library(target):
    if not compat.is_overload(target):
        return False
    name = compat.schema_name(target)
    return name in _LIBRARY or name.startswith("aten::_scaled_dot_product") or name.startswith("aten::_flash_attention")


#: the convolutions Inductor runs channels-last under its layout optimization
_CONVOLUTIONS = {"aten::convolution", "aten::convolution_backward"}


def _channels_last_conv(node, channels_last):
    """Whether node is a 2-D convolution (or its backward) that Inductor runs
    on channels-last tensors (compat.inductor_channels_last)."""
    if not channels_last or not compat.is_overload(node.target) or compat.schema_name(node.target) not in _CONVOLUTIONS:
        return False
    val = node.meta.get("val")
    first = val[0] if isinstance(val, (tuple, list)) and val else val
    return any(isinstance(v, torch.Tensor) and v.dim() == 4 for v in (first,) + tuple(
        a.meta.get("val") for a in node.all_input_nodes))


def _real(val, channels_last=False):
    """A real tensor shaped as fake tensor val (random floats; zeros else),
    channels-last where asked and val has 4 dimensions."""
    if channels_last and val.dim() == 4:
        t = torch.empty(tuple(val.shape), dtype=val.dtype, device=val.device, memory_format=torch.channels_last)
    else:
        t = torch.empty_strided(tuple(val.shape), tuple(val.stride()), dtype=val.dtype, device=val.device)
    return t.normal_() if t.dtype.is_floating_point else t.zero_()


def _call_key(n, channels_last=False):
    sig = map_arg((n.args, n.kwargs), lambda a: (tuple(a.meta["val"].shape), tuple(a.meta["val"].stride()),
                                                  str(a.meta["val"].dtype)) if isinstance(a.meta.get("val"),
                                                                                          torch.Tensor) else None)
    return (str(n.target), repr(sig), channels_last)


def library_transients(graph, cache, channels_last=False):
    """{node: bytes} of each library call's transient memory in graph (what
    it holds at its peak beyond its inputs and outputs), measured by running
    it on real tensors of its shapes with capture's meter (the heap counter
    or a CUDA device's statistics where there is one, else PyTorch's
    profiler), the second of two calls; a convolution's on channels-last
    tensors where Inductor runs it so (compat.inductor_channels_last).
    cache: {call key: bytes}, kept across graphs."""
    nodes = [n for n in graph.nodes if n.op == "call_function" and _library(n.target)
             and all(isinstance(a.meta.get("val"), torch.Tensor) or a.meta.get("val") is None
                     for a in n.all_input_nodes)]
    layout = {n: _channels_last_conv(n, channels_last) for n in nodes}
    todo = {}
    for n in nodes:
        k = _call_key(n, layout[n])
        if k not in cache:
            todo.setdefault(k, n)
    if todo:
        from . import meters
        vals = [n.meta.get("val") for n in todo.values()]
        device = next((v.device for v in vals if isinstance(v, torch.Tensor)), torch.device("cpu"))
        with compat.real_tensors(), torch.no_grad():
            meter = meters.meter_for(device)
            made = {}
            with meter:
                for k, n in todo.items():
                    args, kwargs = map_arg((n.args, n.kwargs), lambda a, cl=layout[n]: _real(a.meta["val"], cl))
                    # once unmeasured: a first call's one-time allocations (a
                    # kernel library's initialization, its primitive cache)
                    # are not what the call takes in every step
                    n.target(*args, **kwargs)
                    meter.begin(k)
                    out = n.target(*args, **kwargs)
                    meter.end()
                    outs = compat.tree_flatten(out)[0]
                    made[k] = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                                   for t in outs if isinstance(t, torch.Tensor)}.values())
                    del out, outs, args, kwargs
            meter.finish()
            for k, peak in meter.peaks().items():
                cache[k] = max(0, peak - made.get(k, 0))
    return {n: cache.get(_call_key(n, layout[n]), 0) for n in nodes}


def _is_view(target):
    if not compat.is_overload(target):
        return False
    return bool(getattr(target, "is_view", False)) or compat.schema_name(target) in _ALIASES


def _nbytes(t):
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def _flops(node, outs):
    packet = compat.overload_packet(node.target)
    if packet in compat.FLOPS:
        try:
            args = map_arg(node.args, lambda n: n.meta.get("val"))
            kwargs = map_arg(node.kwargs, lambda n: n.meta.get("val"))
            f = float(compat.FLOPS[packet](*args, **kwargs, out_val=node.meta.get("val")))
            if f > 0:
                return f
        except Exception:
            pass
    return float(sum(t.numel() for t in outs if isinstance(t, torch.Tensor)))


class JointGraph:
    """AOTAutograd's joint forward+backward graph as a remat graph file.

    Values: the primal inputs (parameters: those with a gradient; buffers:
    static inputs without one; the rest inputs) and each forward op's
    outputs; a view (and getitem of a view op) is its base's value. Ops: the
    forward's call_function nodes that make tensors, but views and the
    in-place epilogue (BatchNorm's copy_ into its running statistics). What
    each op's backward reads (saves): every forward value a backward node
    reads, given to the forward op of the same autograd sequence number
    that reads or makes it (the last such), else to its maker (which holds
    it longer: a conservative guess). The loss: an op that reads the
    forward's differentiable outputs and saves them, as the loss outside
    the graph holds them until the backward, whose gradients (the graph's
    tangents) its backward makes. Where Inductor runs convolutions
    channels-last (compat.inductor_channels_last), it copies a primal input
    or weight of a convolution in another layout to channels-last before
    the convolution, and the forward saves that copy where the backward
    reads the primal (whatever the partition says): the copy is a later
    output of the convolution's op that its backward reads, which remat
    holds from the op's forward to its backward, a recomputation or not
    (a node's aux, docs/graph-format.md), and a copy no backward reads is
    the op's forward transient."""

    def __init__(self, joint_graph, node_info, transients=None):
        self.graph = joint_graph
        fw, static, primals = compat.joint_node_info(node_info)
        self.fw = set(fw)
        outs = compat.tree_flatten([n.args for n in joint_graph.nodes if n.op == "output"])[0]
        nbw = len(primals)
        if len(outs) < nbw:
            raise RematError("the joint graph has %d outputs for %d primal inputs: it is not AOTAutograd's joint "
                             "graph as rt.compile knows it" % (len(outs), nbw))
        fwd_out, bwd_out = outs[:len(outs) - nbw], outs[len(outs) - nbw:]
        self.values, self.ops = [], []
        self.value_of = {}   # fx node -> value id (a view: its base's)
        self.outputs_of = {}  # multi-output fx node -> [value id or None] per element
        self.producer = {}   # value id -> op id
        self.op_node = []    # op id -> fx node
        self.random = set()  # op ids that draw random numbers
        self.channels_last = compat.inductor_channels_last(joint_graph)
        self.copies = {}     # primal value id -> its channels-last copy's value id
        for i, p in enumerate(primals):
            val = p.meta.get("val")
            if not isinstance(val, torch.Tensor) or _nbytes(val) == 0:
                continue
            grad = bwd_out[i] is not None
            kind = "parameter" if grad else ("buffer" if p in static else "input")
            self._value(p, kind, _nbytes(val), name=p.name)
        by_seq = {}
        for n in joint_graph.nodes:
            if n in self.fw and n.op == "call_function":
                self._forward_node(n, by_seq)
        self._loss([o for o in fwd_out if isinstance(o, torch.fx.Node)])
        self._saves(by_seq)
        if transients is not None:
            self._transients(library_transients(joint_graph, transients, self.channels_last), by_seq)

    def _transients(self, measured, by_seq):
        """Each library call's transient bytes, on its op: a forward call's
        as the op's forward transient, a backward call's (convolution_backward)
        as the backward transient of the last op of its sequence number that
        reads or makes a value the call reads (the convolution, not the
        BatchNorm's counter update that shares its number), else the last."""
        op_of = {n: i for i, n in enumerate(self.op_node) if n is not None}
        for n, b in measured.items():
            if not b:
                continue
            if n in self.fw:
                if n in op_of:
                    t = self.ops[op_of[n]].setdefault("transient", {"forward": 0, "backward": 0})
                    t["forward"] = max(t["forward"], b)
            else:
                group = by_seq.get(n.meta.get("seq_nr"))
                if group:
                    read = {self.copies.get(v, v) for v in (self.value_of.get(a) for a in n.all_input_nodes)
                            if v is not None}
                    touching = [o for o in group if read & set(self.ops[o]["inputs"] + self.ops[o]["outputs"])]
                    t = self.ops[(touching or group)[-1]].setdefault("transient", {"forward": 0, "backward": 0})
                    t["backward"] = max(t["backward"], b)

    def _copy(self, node):
        """A value for the channels-last copy of primal node that Inductor
        makes before a convolution reads it (None: it needs none). The
        first copy of each primal is the one its backward reads (copies)."""
        v = self.value_of.get(node)
        val = node.meta.get("val")
        if node.op != "placeholder" or v is None or not isinstance(val, torch.Tensor) or val.dim() != 4 \
                or val.is_contiguous(memory_format=torch.channels_last):
            return None
        c = self._value(None, "activation", _nbytes(val))
        self.values[c]["grad_bytes"] = 0
        self.copies.setdefault(v, c)
        return c

    def _value(self, node, kind, nbytes, name=None):
        v = {"id": len(self.values), "kind": kind, "bytes": int(nbytes)}
        if name:
            v["name"] = name
        self.values.append(v)
        if node is not None:
            self.value_of[node] = v["id"]
        return v["id"]

    def _forward_node(self, n, by_seq):
        t = n.target
        if t is operator.getitem:
            parent = self.outputs_of.get(n.args[0])
            if parent is not None and isinstance(n.args[1], int) and n.args[1] < len(parent):
                if parent[n.args[1]] is not None:
                    self.value_of[n] = parent[n.args[1]]
            elif n.args[0] in self.value_of:  # an element of a view op's list (split): the base's
                self.value_of[n] = self.value_of[n.args[0]]
            return
        if _is_view(t):
            base = next((a for a in n.all_input_nodes if a in self.value_of), None)
            if base is not None:
                self.value_of[n] = self.value_of[base]
            return
        if compat.is_overload(t) and t._schema.is_mutable:
            return  # the epilogue that writes a buffer in place (running statistics): not an activation
        val = n.meta.get("val")
        elems = list(val) if isinstance(val, (tuple, list)) else [val]
        if not any(isinstance(e, torch.Tensor) for e in elems):
            return
        op_id = len(self.ops)
        outs = []
        for e in elems:
            outs.append(self._value(None, "activation", _nbytes(e)) if isinstance(e, torch.Tensor) else None)
        if isinstance(val, (tuple, list)):
            self.outputs_of[n] = outs
        else:
            self.value_of[n] = outs[0]
        made = [v for v in outs if v is not None]
        if _channels_last_conv(n, self.channels_last):  # the copies of its primals it makes first, as later outputs
            made += [c for c in (self._copy(a) for a in n.args[:2] if isinstance(a, torch.fx.Node)) if c is not None]
        if len(made) > 16:
            raise RematError("node %s (%s) makes %d tensors; a remat op makes at most 16" % (n.name, t, len(made)))
        ins = list(dict.fromkeys(self.value_of[a] for a in n.all_input_nodes if a in self.value_of))
        if len(ins) > 32:
            raise RematError("node %s (%s) reads %d tensors; a remat op reads at most 32" % (n.name, t, len(ins)))
        for v in made:
            self.producer[v] = op_id
        name = compat.schema_name(t) if compat.is_overload(t) else str(t)
        random = compat.is_overload(t) and compat.is_random(t)
        fl = _flops(n, elems)
        op = {"id": op_id, "name": name, "inputs": ins, "outputs": made, "saves": [], "forward": fl,
              "backward": 2.0 * fl, "recompute": _NEVER if random else fl, "family": _family(name),
              "random": random}
        if random:
            self.random.add(op_id)
        self.ops.append(op)
        self.op_node.append(n)
        by_seq.setdefault(n.meta.get("seq_nr"), []).append(op_id)

    def _loss(self, fwd_out):
        ins = list(dict.fromkeys(self.value_of[o] for o in fwd_out if o in self.value_of and
                                 self.values[self.value_of[o]]["kind"] == "activation" and
                                 isinstance(o.meta.get("val"), torch.Tensor) and
                                 o.meta["val"].dtype.is_floating_point))
        if not ins:
            raise RematError("the compiled graph has no differentiable output made by an op: nothing to plan")
        if len(ins) > 32:
            raise RematError("the compiled graph has %d differentiable outputs; remat plans at most 32 (return "
                             "the loss from the compiled function: rt.compile(..., loss=...))" % len(ins))
        out = self._value(None, "activation", 4)
        self.loss = out
        self.producer[out] = len(self.ops)
        self.ops.append({"id": len(self.ops), "name": "loss (the graph's outputs until the backward)",
                         "inputs": ins, "outputs": [out], "saves": list(ins), "forward": 0.0, "family": "loss"})
        self.op_node.append(None)

    def _saves(self, by_seq):
        """Each forward value a backward node reads, as a save of one op."""
        touches = {}  # value id -> op ids that read or make it, ascending
        for op in self.ops:
            for v in op["inputs"] + op["outputs"]:
                touches.setdefault(v, []).append(op["id"])
        for b in self.graph.nodes:
            if b in self.fw or b.op != "call_function":
                continue
            group = by_seq.get(b.meta.get("seq_nr"), [])
            for a in b.all_input_nodes:
                v = self.value_of.get(a)
                if v is None:
                    v = self.element(b)
                v = self.copies.get(v, v)  # a primal Inductor copied channels-last: the forward saves the copy
                if v is None or self.values[v]["kind"] in ("parameter", "buffer"):
                    continue
                cand = [o for o in group if o in touches.get(v, ())]
                if cand:
                    o = cand[-1]
                elif v in self.producer:
                    o = self.producer[v]
                elif touches.get(v):
                    o = touches[v][0]
                else:
                    continue  # an input only the backward reads: held by the caller
                if v not in self.ops[o]["saves"]:
                    self.ops[o]["saves"].append(v)
        for op in self.ops:
            if len(op["saves"]) > 48:
                raise RematError("op %d (%s): its backward reads %d values; remat takes at most 48"
                                 % (op["id"], op["name"], len(op["saves"])))

    def element(self, n):
        """The value of getitem node n of an op of several outputs (an
        output that only the backward takes: attention's logsumexp), or None."""
        if n.op != "call_function" or n.target is not operator.getitem or n.args[0] not in self.outputs_of:
            return None
        outs, i = self.outputs_of[n.args[0]], n.args[1]
        return outs[i] if isinstance(i, int) and i < len(outs) else None

    def file(self):
        return {"format": "remat-graph", "version": 1, "cost_unit": "flops", "source": "torch.compile joint graph",
                "values": self.values, "ops": self.ops, "loss": self.loss}

    def saved_nodes(self, recomputed):
        """The forward nodes to save when the ops in recomputed are run again
        in the backward: walking back from what the backward reads, through
        recomputed nodes, to the first kept ones (and the inputs)."""
        stack = []
        for b in self.graph.nodes:
            if b in self.fw or b.op == "placeholder":
                continue
            if self.element(b) is not None:  # the backward takes an output of a forward op itself
                stack.append(b)
            else:
                stack.extend(a for a in b.all_input_nodes if a in self.fw)
        seen, saved = set(), []
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            v = self.value_of.get(n)
            if v is None:
                v = self.element(n)
            if v is None and n in self.outputs_of:  # an op of several outputs: its first made one's
                v = next((u for u in self.outputs_of[n] if u is not None), None)
            op = self.producer.get(v) if v is not None else None
            if n.op != "placeholder" and op is not None and op in recomputed and op not in self.random:
                stack.extend(a for a in n.all_input_nodes if a in self.fw)
            else:
                saved.append(n)
        order = {n: i for i, n in enumerate(self.graph.nodes)}
        return sorted(saved, key=order.__getitem__)


class GraphPlan:
    """remat's plan for one compiled graph: the prediction, and what the
    forward saves and the backward recomputes."""

    def __init__(self, joint, result, budget):
        self.result = result
        self.budget = budget
        self.feasible = bool(result.get("feasible"))
        self.floor = int(result["floor"]) if not self.feasible and result.get("floor") else None
        self.predicted = {k: int(v) for k, v in result.get("predicted", {}).items()}
        self.peak_bytes = int(result.get("peak_bytes", 0))
        self.recompute_ops = [int(i) for i in result.get("recompute", [])]
        self.recomputed = [joint.ops[i]["name"] for i in self.recompute_ops]
        self.ops = len(joint.ops) - 1
        self.flops, self.extra_flops = float(result.get("flops", 0)), float(result.get("extra_flops", 0))
        self.seconds = 0.0  # translating and planning, inside the compile (Compiled._choose)
        self.saved = []  # the names of the forward nodes saved for the backward
        self.saved_bytes = 0
        #: what the trial step at rt.compile held (bytes, counted as rt.measure counts), or None
        self.measured = None

    def __repr__(self):
        if not self.feasible:
            return "<remat compiled plan: nothing fits %d bytes; the smallest feasible budget is %d bytes>" % (
                self.budget, self.floor or 0)
        lines = ["remat compiled plan: %s (%s), predicted peak %d bytes (%.1f MiB) for a budget of %s" % (
            self.result.get("strategy"), self.result.get("candidate") or self.result.get("planner"),
            self.peak_bytes, self.peak_bytes / 2 ** 20, "%d bytes" % self.budget if self.budget else "none")]
        for c in ("parameters", "gradients", "optimizer state", "activations", "transient", "workspace"):
            if self.predicted.get(c):
                lines.append("  %-16s %14d" % (c, self.predicted[c]))
        extra = 100.0 * self.extra_flops / self.flops if self.flops else 0.0
        lines.append("  the forward saves %d tensors (%d bytes); the backward recomputes %d of %d ops: +%.2f%% FLOPs"
                     % (len(self.saved), self.saved_bytes, len(self.recompute_ops), self.ops, extra))
        lines.append("  planned in %.3f s; %s" % (self.seconds, "not measured (no counter: python -m remat.torch run)"
                     if self.measured is None else "a trial step held %d bytes (%.3f of the prediction)" % (
                         self.measured, self.measured / self.peak_bytes)))
        return "\n".join(lines)


class Compiled:
    """A model (with its loss, when compile() was given one) compiled by
    Inductor, each of its graphs partitioned by remat's plan. Call it as
    the model (or as loss(model(*inputs), *targets)); .plan is the latest
    graph's plan, .plans every one made (a new input shape compiles and
    plans again)."""

    def __init__(self, model: torch.nn.Module, budget: Budget, optimizer: OptimizerLike, loss: Optional[Callable],
                 inputs: int, strategy: str, options: Optional[dict], fullgraph: bool, dynamic: bool) -> None:
        from .planning import MARGIN, _inner, _optimizer_request, parse_bytes
        if compat.compile_support() is not None:
            raise RematError(compat.compile_support())
        self.model, self.loss, self.inputs = model, loss, inputs
        self.budget = parse_bytes(budget)
        self._request: dict = {"budget": _inner(self.budget, MARGIN) if self.budget else 0, "strategy": strategy,
                         "optimizer": _optimizer_request(optimizer), "recompute_once": True}
        self._generation = 0  # read by the compiled step: a new value makes Dynamo compile (and plan) again
        self.options = options or {}
        self.plans: list = []
        self.rejected: list = []  # plans whose trial step held more than the budget (warm_up)
        self.superseded: list = []  # plans whose trial step held the budget where a cheaper one did too
        self._joint: Optional[dict] = None  # the latest graph file planned: warm_up previews plans on it
        self._transients: dict = {}  # library calls' measured transient bytes, by call (library_transients)
        #: seconds in the backend: AOTAutograd, the partition (the plan's
        #: share in each plan's .seconds) and Inductor's forward, every compile
        self.compile_seconds = 0.0
        self.warm_up_seconds = 0.0  # rt.compile's warm-up: compiles and trial steps
        self._graphs = 0
        self._error: Optional[RematError] = None
        # a code object of its own: Dynamo keeps compiled graphs (and counts
        # recompilations) per code object, and guards on a model's class and
        # shapes rather than its identity, so another Compiled of the same
        # model class would otherwise reuse this one's graphs and plans
        code = Compiled._step.__code__.replace(co_name="remat_step_%x" % id(self))
        step = types.FunctionType(code, Compiled._step.__globals__, code.co_name)
        self._fn = torch.compile(types.MethodType(step, self), backend=self._backend, fullgraph=fullgraph,
                                 dynamic=dynamic)

    def _step(self, *args):
        if self._generation < 0:  # never: Dynamo guards on the value, so a new one compiles again
            raise RuntimeError("unreachable")
        if self.loss is None:
            return self.model(*args)
        return self.loss(self.model(*args[:self.inputs]), *args[self.inputs:])

    def _backend(self, gm, example_inputs):
        self._graphs += 1
        t0 = time.perf_counter()
        try:
            with compat.saved_values_chooser(self._choose):
                return compat.inductor(gm, example_inputs, self.options)
        finally:
            self.compile_seconds += time.perf_counter() - t0

    def _choose(self, joint_graph, node_info):
        from .planning import MARGIN, budget_for
        t0 = time.perf_counter()
        joint = JointGraph(joint_graph, node_info, self._transients)
        self._joint = joint.file()
        result = plan_graph(self._joint, self._request)
        model_floor = int(result["floor"]) if not result.get("feasible") and result.get("floor") else None
        if model_floor:
            result["floor"] = budget_for(model_floor, MARGIN)
        p = GraphPlan(joint, result, self.budget)
        if not p.feasible:
            self._error = RematError("no plan fits %d bytes for this compiled graph: %s" % (
                self.budget, "the smallest feasible budget is %d bytes" % p.floor if p.floor else
                result.get("error", "")))
            self._error.floor = p.floor
            self._error.model_floor = model_floor  # the request its floor plan is made for (warm_up)
            raise self._error
        saved = joint.saved_nodes(set(p.recompute_ops))
        p.saved = [n.name for n in saved]
        seen = set()
        for n in saved:
            v = joint.value_of.get(n, joint.element(n))
            v = joint.copies.get(v, v)  # a primal saved as Inductor's channels-last copy of it
            if v is not None and v not in seen and joint.values[v]["kind"] == "activation":
                seen.add(v)
                p.saved_bytes += joint.values[v]["bytes"]
        p.seconds = time.perf_counter() - t0
        self.plans.append(p)
        return saved

    @property
    def plan(self) -> Optional[GraphPlan]:
        return self.plans[-1] if self.plans else None

    #: how many graphs Dynamo may compile for one rt.compile (each input
    #: shape, and each trial plan at warm-up, is one): its own limit (8)
    #: would run later shapes uncompiled, without a plan, and say nothing
    RECOMPILES = 256

    def __call__(self, *args: Any) -> Any:
        try:
            with compat.recompile_limit(self.RECOMPILES):
                return self._fn(*args)
        except compat.backend_failure():
            if self._error is not None:
                err, self._error = self._error, None
                raise err from None
            raise

    #: how many trial steps warm_up runs at most: each compiles the step
    #: again for another plan (Dynamo keeps every one: RECOMPILES)
    ATTEMPTS = 4

    #: the least measured / predicted a compiled step has shown (0.686, GPT-2's
    #: store-all on the CPU; ResNet-50 0.98-1.01): below a budget this far
    #: under remat's model's floor a trial step of the floor plan is not tried
    TRIAL_REACH = 0.65

    #: headroom (measured below the budget, as a share of it) under which
    #: warm_up looks for no cheaper plan
    HEADROOM = 0.01

    def warm_up(self, example: tuple) -> None:
        """Compiles (and plans) for example's shapes now, with the model's
        buffers, gradients and random state restored afterwards. Where a
        counter can measure the step (the heap counter preloaded, or a CUDA
        device), two trial steps run (the first compiles the backward) and
        the second is measured, as rt.measure counts it, and the measure
        decides, since Inductor's step is not remat's model of it (it fuses
        and reuses buffers; docs/pytorch.md): a plan whose step holds more
        than the budget is replaced by one predicted to hold less by the
        excess, or by remat's model's floor plan where the model has none
        that small (also where the budget is below that floor, within
        TRIAL_REACH); and where a plan's step leaves room under the budget,
        the plan predicted to hold that much more is tried when it
        recomputes less. The cheapest plan whose trial held the budget is
        kept; up to ATTEMPTS trials, no plan twice. Without a counter one
        forward runs, and the plan is not checked (plan.measured is None)."""
        device = device_of(self.model, [a for a in example if isinstance(a, torch.Tensor)])
        c = memtrack.counter(device)
        t0 = time.perf_counter()
        start = len(self.plans)
        tried: dict = {}  # what each plan tried recomputes -> what its trial step held
        best = None  # (generation, request budget, plan) of the cheapest plan whose trial held the budget
        for _ in range(self.ATTEMPTS):
            try:
                measured = self._trial(example, device, c)
            except RematError as e:
                floor = getattr(e, "model_floor", None)
                if best is not None or c is None or not self.budget or not floor \
                        or floor * self.TRIAL_REACH > self.budget or self._preview(floor) in tried:
                    if best is not None:
                        break
                    raise self._no_plan(e) from None
                self._request["budget"] = floor  # the trial decides whether the floor plan fits
                self._generation += 1
                continue
            except compat.out_of_memory() as e:
                if best is None:
                    raise RematError("a trial step of the plan predicted to hold %d bytes ran out of memory: %s"
                                     % (self.plans[-1].peak_bytes, str(e).split("\n")[0])) from None
                break
            p = self.plans[-1]  # _trial made it
            p.measured = measured
            tried[frozenset(p.recompute_ops)] = measured
            if measured is None or not self.budget:
                break
            if measured <= self.budget:
                if best is None or p.extra_flops < best[2].extra_flops:
                    best = (self._generation, self._request["budget"], p)
                nxt = self._cheaper(p, measured, tried)
                if nxt is None:
                    break
                self._request["budget"] = nxt
            else:
                self.rejected.append(p)
                # a plan predicted to hold less than this one by the excess: with
                # Inductor's excess over the prediction about the same, it fits
                self._request["budget"] = max(1, min(self._request["budget"], p.peak_bytes) - (measured - self.budget))
            self._generation += 1
        if self.budget and c is not None:
            if best is None:
                p = self.plans[-1]
                raise RematError("the compiled step holds %d bytes, over the budget of %d bytes, with each of %d "
                                 "plans (the last predicted %d bytes): Inductor's step holds more than remat's "
                                 "model of it; give a larger budget" % (p.measured, self.budget, len(self.rejected),
                                                                          p.peak_bytes))
            # back to the best plan's compiled step (Dynamo still holds it)
            self._generation, self._request["budget"] = best[0], best[1]
            self.superseded += [q for q in self.plans[start:] if q is not best[2] and q not in self.rejected]
            self.plans[start:] = [best[2]]
        self.warm_up_seconds = time.perf_counter() - t0

    def _preview(self, request):
        """What the plan for request budget on the latest graph recomputes
        (a frozenset of op ids; None: no plan fits), and its extra FLOPs."""
        r = plan_graph(self._joint, dict(self._request, budget=request)) if self._joint is not None else {}
        if not r.get("feasible"):
            return None
        return frozenset(int(i) for i in r.get("recompute", []))

    def _cheaper(self, p, measured, tried):
        """The request budget of a plan not yet tried that recomputes less
        than p and is predicted to hold p's prediction plus the room p's
        trial left under the budget (with Inductor's difference from the
        prediction about the same, it fits), or None: no such plan, or too
        little room."""
        room = self.budget - measured
        if not p.recompute_ops or room < self.HEADROOM * self.budget or self._joint is None:
            return None
        from .planning import MARGIN, _inner
        request = max(self._request["budget"], _inner(p.peak_bytes + room, MARGIN))
        r = plan_graph(self._joint, dict(self._request, budget=request))
        if not r.get("feasible") or float(r.get("extra_flops", 0)) >= p.extra_flops \
                or frozenset(int(i) for i in r.get("recompute", [])) in tried:
            return None
        return request

    def _no_plan(self, e):
        """The error for a budget no plan fits: where trial steps held more
        than the budget, the least they held as a budget known to fit, else
        remat's model's floor (e)."""
        if not self.rejected:
            return e
        from .planning import MARGIN, budget_for
        least = min(self.rejected, key=lambda q: q.measured)
        # the least budget known to fit, not a proven floor: a plan below
        # remat's model's floor may still fit the compiled step
        err = RematError("the compiled step held %d bytes in a trial step, over the budget of %d bytes "
                         "(remat's model of Inductor's step predicted %d), and remat's model has no plan "
                         "below that: a budget of %d bytes fits (what that trial held); a smaller one may" % (
                             least.measured, self.budget, least.peak_bytes, budget_for(least.measured, MARGIN)))
        err.floor = budget_for(least.measured, MARGIN)
        return err

    def _trial(self, example, device, c):
        """Compiles and plans for example (one forward; with counter c two
        forward and backward steps, the second measured): the measured
        bytes or None."""
        point = _restore_point(self.model, device)
        graphs, plans = self._graphs, len(self.plans)
        before = sum(compat.graph_break_reasons().values())
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        measured = None
        try:
            with torch.enable_grad():
                for _ in range(2 if c is not None else 1):
                    for p in self.model.parameters():
                        p.grad = None
                    sync()
                    live = c.live() if c is not None else 0
                    if c is not None:
                        c.reset_peak()
                    out = self(*example)
                    if c is None:
                        break
                    # the outputs' gradients as a loss of each would make them (a tangent per output)
                    outs = [t for t in compat.tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
                    torch.autograd.backward([t if t.dim() == 0 else t.sum() for t in outs])
                    del out, outs
                    sync()
                    measured = c.peak() - live
        finally:
            _restore(self.model, point)
        breaks = compat.graph_break_reasons()
        if self._graphs - graphs > 1 or sum(breaks.values()) > before:
            raise RematError("the step compiled into %d graphs (graph breaks: %s): remat plans a whole step as one "
                             "graph; remove the break (fullgraph=True names it)" % (
                                 self._graphs - graphs, "; ".join(sorted(breaks)) or "unknown"))
        if len(self.plans) == plans:
            raise RematError("the step was not compiled again for a new plan (a Dynamo cache hit)")
        if measured is None:
            return None
        p = self.plans[-1]
        # what the step holds beside what it allocates: the parameters and
        # the optimizer's state as the plan counts them (the state may not
        # exist before the first optimizer step), and the batch
        return (measured + p.predicted.get("parameters", 0) + p.predicted.get("optimizer state", 0)
                + sum(a.untyped_storage().nbytes() for a in example if isinstance(a, torch.Tensor)))

    def __getattr__(self, name):  # the model's parameters(), buffers(), train(), state_dict()...
        if name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)

    def __repr__(self) -> str:
        lines = ["remat compiled step: %d plan%s for a budget of %s" % (
            len(self.plans), "" if len(self.plans) == 1 else "s",
            "%d bytes" % self.budget if self.budget else "none")]
        for p in self.plans:
            lines.append("  " + repr(p).replace("\n", "\n  "))
        return "\n".join(lines)


def compile(model: torch.nn.Module, example: Inputs, budget: Budget = None, optimizer: OptimizerLike = None,
            loss: Optional[Callable] = None, inputs: int = 1, strategy: str = "auto", mode: Optional[str] = None,
            options: Optional[dict] = None, fullgraph: bool = True, dynamic: bool = False) -> Compiled:
    """torch.compile(model) with a budget in bytes: Inductor compiles the
    step, and what its forward saves for the backward is remat's plan
    within budget (bytes or "6GiB"; None: no limit, which saves what the
    backward reads). example: the arguments of one call, with which the
    step is compiled and planned now (one forward runs; the model's
    buffers, gradients and random state are restored), so that .plan
    holds the prediction before the first step. optimizer: whose state the
    plan counts, as for plan(). loss: when given, the compiled call is
    loss(model(*args[:inputs]), *args[inputs:]) and returns the loss,
    which keeps the loss's memory in the plan; else it is model(*args),
    and the plan counts its outputs as held until the backward. mode and
    options: Inductor's, as torch.compile takes them; fullgraph: a graph
    break is an error (remat plans a whole step as one graph); dynamic:
    False compiles and plans each new input shape on its own. A budget
    nothing fits raises RematError naming the floor (the error's .floor).
    Needs PyTorch 2.5 or newer."""
    opts = dict(compat.inductor_mode_options(mode)) if mode else {}
    opts.update(options or {})
    c = Compiled(model, budget, optimizer, loss, inputs, strategy, opts, fullgraph, dynamic)
    c.warm_up(tuple(example) if isinstance(example, (tuple, list)) else (example,))
    return c
