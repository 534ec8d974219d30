"""AOTAutograd's joint forward+backward graph as a remat graph file, with
what Inductor holds of it: the graph rt.compile plans (partition.py).

Values are the forward's tensors (bytes from each node's fake tensor),
ops its call_function nodes (FLOPs from PyTorch's formulas), each
backward read a save of the forward op of the same autograd sequence
number. Inductor does not run that graph as written: it fuses pointwise
ops into the kernels that read them, reuses a dying buffer for a new one
of its layout, computes gradients inside fused kernels, and calls kernel
libraries (oneDNN, cuBLAS, cuDNN) whose scratch is theirs. What of that
can be read from the joint graph is in the file (JointGraph._generated,
library_transients); docs/pytorch.md ("What Inductor holds") says what
is and how close it comes.
"""

from __future__ import annotations

import operator

import torch
from torch.fx.node import map_arg

from .._lib import RematError
from . import compat
from .capture import _family

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


def late_products(graph, forward):
    """The backward's adds that Inductor would turn into late products: it
    rewrites add(mm(a, b), c) as addmm(c, a, b) (its post-grad addmm
    fusion, bmm alike), which runs the product where c is made, and where c
    comes later (a tied weight's gradient: the output layer's product added
    to the embedding's part, made at the step's end) a and b are held until
    then (GPT-2: the logits' gradient, 98 MiB at b2 x 256, through the
    whole backward). [(add node, product node, c node)]; forward: the
    forward's nodes."""
    add = compat.aten_op("add", "Tensor")
    products = (compat.aten_op("mm", "default"), compat.aten_op("bmm", "default"))
    order = {n: i for i, n in enumerate(graph.nodes)}
    found = []
    for b in graph.nodes:
        if b in forward or b.op != "call_function" or b.target is not add or len(b.args) != 2 or b.kwargs:
            continue
        p = next((a for a in b.args if isinstance(a, torch.fx.Node) and a.target in products and len(a.users) == 1),
                 None)
        c = b.args[1] if p is b.args[0] else b.args[0]
        if p is None or not isinstance(c, torch.fx.Node) or order[c] < order[p] \
                or not isinstance(c.meta.get("val"), torch.Tensor) or c.meta["val"].shape != p.meta["val"].shape:
            continue
        found.append((b, p, c))
    return found


def products_where_made(graph, late):
    """Keeps each late product (late_products) where its inputs are made:
    its add becomes c - (-p), the same bits as c + p (negation is exact,
    and subtracting -p is adding p), which the fusion does not match."""
    sub, neg = compat.aten_op("sub", "Tensor"), compat.aten_op("neg", "default")
    for b, p, c in late:
        with graph.inserting_before(b):
            n = graph.call_function(neg, (p,))
            n.meta = dict(p.meta)
            d = graph.call_function(sub, (c, n))
            d.meta = dict(b.meta)
        b.replace_all_uses_with(d)
        graph.erase_node(b)


def _tagged(node, tag):
    """Whether fx node calls an aten overload with torch.Tag tag (pointwise, reduction)."""
    return node is not None and compat.is_overload(node.target) and getattr(torch.Tag, tag) in node.target.tags


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

    def __init__(self, joint_graph, node_info, transients=None, late=()):
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
        self.fake = {}       # activation value id -> the fake tensor it was made as
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
        self.late = list(late)
        self._generated(by_seq)

    def _generated(self, by_seq):
        """What Inductor's generated kernels never hold, where the joint
        graph says so (docs/pytorch.md, "What Inductor holds"): gradients
        made and read only inside generated code (_fused_gradients), the
        parts of a tied weight's gradient (_shared_parameters), a pointwise
        op's output that only the next generated op reads (_fuse) and a
        pointwise op's output written over the activation it reads last
        (_in_place)."""
        self._fused_gradients(by_seq)
        self._shared_parameters()
        self._late_holds(by_seq)
        self._fuse()
        self._in_place()

    def _uses(self):
        """(readers: value id -> the ids of the ops that read it, in order;
        saved: the values a backward reads; held: the graph's outputs, held
        by the caller until the backward, their gradients its tangents)."""
        readers: dict = {}
        for op in self.ops:
            for v in op["inputs"]:
                readers.setdefault(v, []).append(op["id"])
        return readers, {v for op in self.ops for v in op["saves"]}, set(self.ops[-1]["inputs"])

    def _shared_parameters(self):
        """A parameter that several ops read (tied weights: an embedding and
        the output layer): the backward of the last reader makes its
        gradient, and each other reader's backward makes its own part of it
        in a buffer of the parameter's size, then adds it in (the joint
        graph sums the parts): a backward transient of the parameter's bytes."""
        for v, ops in self._uses()[0].items():
            if self.values[v]["kind"] != "parameter":
                continue
            for o in ops[:-1]:
                t = self.ops[o].setdefault("transient", {"forward": 0, "backward": 0})
                t["backward"] += self.values[v]["bytes"]

    def _late_holds(self, by_seq):
        """Where Inductor runs a late product (late_products) where c is made,
        in the backward of an earlier op, a and b are held until then:
        counted as a transient of that backward ('_late' on its op, added
        by file(late=True); the step's end, where the gradients are whole,
        is where such a hold weighs most)."""
        first = {q: min(ops) for q, ops in by_seq.items()}
        for _, p, c in self.late:
            at, made = first.get(p.meta.get("seq_nr")), first.get(c.meta.get("seq_nr"))
            if at is None or made is None or made >= at:
                continue
            held = sum(_nbytes(a.meta.get("val")) for a in p.args[:2] if isinstance(a, torch.fx.Node))
            self.ops[made]["_late"] = self.ops[made].get("_late", 0) + held

    def _fused_gradients(self, by_seq):
        """A gradient that only generated code makes and reads (the backward
        nodes of the op that makes the value and of every op that reads it,
        by autograd sequence number, call no library) is computed inside the
        fused kernels that use it: its grad_bytes are 0. The graph's outputs
        keep theirs (the caller's tangents)."""
        library, grouped = set(), set()
        for b in self.graph.nodes:
            if b in self.fw or b.op != "call_function":
                continue
            seq = b.meta.get("seq_nr")
            grouped.add(seq)
            if _library(b.target):
                library.add(seq)
        seq_of = {o: q for q, ops in by_seq.items() for o in ops}
        readers, _, held = self._uses()
        for v, val in enumerate(self.values):
            if val["kind"] != "activation" or v in held or v not in self.producer or v == self.loss:
                continue
            seqs = {seq_of.get(o) for o in [self.producer[v]] + readers.get(v, [])}
            if None not in seqs and not seqs & library and seqs & grouped:
                val["grad_bytes"] = 0

    def _fuse(self):
        """Inductor computes a pointwise op inside the kernel of the one
        generated op (pointwise or a reduction) that reads its output, where
        nothing else reads it (no other op, no backward): such an op becomes
        part of its reader's op (its FLOPs added, its inputs read), and its
        output is no value of the graph. Where a backward reads that output
        but its gradient is fused (_fused_gradients: both ops' backwards are
        one generated kernel, as SiLU's and the product of SwiGLU), the two
        are one op too, the output a later one of it (held with the op's
        first, as Inductor's kernel writes both): the merged op's backward
        holds what both backwards read and makes both inputs' gradients at
        once, as that kernel does. Ops are numbered again."""
        readers, saved, held = self._uses()
        into: dict = {}     # op id -> the op id whose op it becomes part of
        members: dict = {}  # op id -> the op ids it is made of, in order
        ins: dict = {}      # op id -> the value ids its op (with its members) reads
        for op in self.ops:
            o = op["id"]
            members.setdefault(o, []).append(o)
            ins.setdefault(o, []).extend(v for v in op["inputs"] if v not in ins.get(o, []))
            n = self.op_node[o]
            if not _tagged(n, "pointwise") or o in self.random or len(op["outputs"]) != 1:
                continue
            v = op["outputs"][0]
            rs = readers.get(v, [])
            # a saved output joins too where its gradient is fused (one kernel
            # runs both backwards): it stays an output of the merged op
            if len(rs) != 1 or v in held or (v in saved and self.values[v].get("grad_bytes", 1) != 0):
                continue
            r = rs[0]
            if r in self.random or not (_tagged(self.op_node[r], "pointwise") or _tagged(self.op_node[r], "reduction")):
                continue
            merged = [u for u in ins[o] if u not in ins.get(r, [])] + ins.get(r, [])
            merged += [u for u in self.ops[r]["inputs"] if u not in merged]
            merged = [u for u in merged if u != v]
            kept = sum(u in saved for m in members[o] + members.get(r, []) for u in self.ops[m]["outputs"])
            if len(merged) > 32 or kept + 1 > 16:  # a remat op reads at most 32 values and makes at most 16
                continue
            into[o] = r
            members[r] = members.pop(o) + members.get(r, [])
            ins[r] = merged
        if not into:
            return
        new_id, ops = {}, []
        for op in self.ops:
            o = op["id"]
            if o in into:
                continue
            new_id[o] = len(ops)
            group = [self.ops[m] for m in members[o]]
            inner = {u for g in group[:-1] for u in g["outputs"]}
            merged = dict(op, id=len(ops), inputs=[u for u in ins[o] if u not in inner],
                          outputs=op["outputs"] + [u for g in group[:-1] for u in g["outputs"] if u in saved])
            if len(group) > 1:
                merged["name"] = "+".join(g["name"] for g in group)
                merged["saves"] = list(dict.fromkeys(u for g in group for u in g["saves"]))
                for k in ("forward", "backward", "recompute"):
                    merged[k] = sum(g[k] for g in group)
                tr = [g["transient"] for g in group if "transient" in g]
                if tr:
                    merged["transient"] = {k: max(t[k] for t in tr) for k in ("forward", "backward")}
                late = sum(g.get("_late", 0) for g in group)
                if late:
                    merged["_late"] = late
            ops.append(merged)
        for o, r in into.items():
            while r in into:
                r = into[r]
            new_id[o] = new_id[r]
        self.ops = ops
        self.op_node = [self.op_node[o] for o in sorted(new_id) if o not in into]
        # an output made inside a fused op: its producer is the op it is part of
        self.producer = {v: new_id[o] for v, o in self.producer.items()}
        self.random = {new_id[o] for o in self.random}

    def _in_place(self):
        """An op whose generated kernel ends in a pointwise op writes its
        output over an activation it reads last (in the forward) that has
        the output's layout, where no backward reads it: Inductor reuses a
        dying buffer of the same layout in place (overwritten_by)."""
        readers, saved, held = self._uses()
        last = {v: ops[-1] for v, ops in readers.items()}
        for o, n in enumerate(self.op_node):
            if not _tagged(n, "pointwise") or len(self.ops[o]["outputs"]) != 1:
                continue
            out = n.meta.get("val")
            for v in self.ops[o]["inputs"]:
                val = self.fake.get(v)
                if val is None or v in saved or v in held or last.get(v) != o or "overwritten_by" in self.values[v] \
                        or not isinstance(out, torch.Tensor) or _nbytes(val) != self.values[v]["bytes"] \
                        or val.shape != out.shape or val.stride() != out.stride() or val.dtype != out.dtype:
                    continue
                self.values[v]["overwritten_by"] = o
                break

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
            if outs[-1] is not None:
                self.fake[outs[-1]] = e
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

    def file(self, late=False):
        """The graph file: with late, Inductor's late products held (as
        Inductor runs the step), else each product where its inputs are
        made (as products_where_made makes it run)."""
        ops = []
        for op in self.ops:
            if "_late" in op:
                op = {k: v for k, v in op.items() if k != "_late"}
                if late:
                    t = dict(op.get("transient", {"forward": 0, "backward": 0}))
                    t["backward"] += self.ops[op["id"]]["_late"]
                    op["transient"] = t
            ops.append(op)
        return {"format": "remat-graph", "version": 1, "cost_unit": "flops", "source": "torch.compile joint graph",
                "values": self.values, "ops": ops, "loss": self.loss}

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
