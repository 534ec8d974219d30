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
graph file (joint.py: bytes from each node's fake tensor, FLOPs from
PyTorch's formulas, each backward read attributed to the forward op whose
autograd sequence number it carries, and what Inductor's kernels never
hold left out), remat plans it under the budget
(recomputing each op at most once, as a backward graph does), and the
forward saves what the plan keeps. Everything else is Inductor's own
pipeline: the backward is reordered to recompute just before use,
random ops are functionalized (a recomputed dropout draws the same mask),
and BatchNorm's running statistics are written once, in the forward.
docs/pytorch.md ("torch.compile with a budget") says what the prediction
counts and how close it comes.
"""

from __future__ import annotations

import contextlib
import time
import types
from typing import Any, Callable, Optional

import torch

from .._lib import RematError, plan_graph
from . import compat, meters
from .capture import _restore, _restore_point, device_of
from .joint import JointGraph, late_products, products_where_made
from .planning import Budget, Inputs, OptimizerLike


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
        #: what measured it: the heap counter, a CUDA device's allocator or
        #: PyTorch's profiler (a plain script: PyTorch's allocations only), or None
        self.measured_by: Optional[str] = None
        #: how many backward products run where their inputs are made, not
        #: where Inductor's addmm fusion would put them (joint.late_products)
        self.products_kept = 0

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
        if self.products_kept:
            lines.append("  backward products kept where their inputs are made: %d (Inductor's addmm fusion "
                         "would run them later)" % self.products_kept)
        lines.append("  planned in %.3f s; %s" % (self.seconds, "not measured (REMAT_TRANSIENTS=none)"
                     if self.measured is None else "a trial step held %d bytes (%.3f of the prediction, by %s)" % (
                         self.measured, self.measured / self.peak_bytes, self.measured_by)))
        if self.measured_by == meters.PROFILER:
            lines.append("  not seen by the profiler: " + meters.ProfilerMeter.unmeasured)
        return "\n".join(lines)


class Compiled:
    """A model (with its loss, when compile() was given one) compiled by
    Inductor, each of its graphs partitioned by remat's plan. Call it as
    the model (or as loss(model(*inputs), *targets)); .plan is the latest
    graph's plan, .plans every one made (a new input shape compiles and
    plans again); .rejected and .superseded the plans whose trial steps
    (warm_up) held more than the budget, or held it where a cheaper one
    did too."""

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
        self._joints: list = []  # the latest graph's files (JointGraph.file; _plan): warm_up previews plans on them
        self._transients: dict = {}  # library calls' measured transient bytes, by call (library_transients)
        #: seconds in the backend: AOTAutograd, the partition (the plan's
        #: share in each plan's .seconds) and Inductor's forward, every compile
        self.compile_seconds = 0.0
        self.warm_up_seconds = 0.0  # rt.compile's warm-up: compiles and trial steps
        self._graphs = 0
        #: each input signature met (shapes, dtypes, devices) -> the (generation,
        #: request budget) its plan was compiled with: calling with it again runs
        #: that compiled step (Dynamo keeps one per shape and generation)
        self._shapes: dict = {}
        self._warming = False  # warm_up's trial steps are running
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
        late = late_products(joint_graph, set(compat.joint_node_info(node_info)[0]))
        joint = JointGraph(joint_graph, node_info, self._transients, late)
        self._joints = [joint.file()] + ([joint.file(late=True)] if late else [])
        result, which = self._plan(self._request["budget"])
        early = late if which == 0 else []  # the plan with each product where its inputs are made is the better one
        products_where_made(joint_graph, early)
        model_floor = int(result["floor"]) if not result.get("feasible") and result.get("floor") else None
        if model_floor:
            result["floor"] = budget_for(model_floor, MARGIN)
        p = GraphPlan(joint, result, self.budget)
        p.products_kept = len(early)
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

    def _plan(self, budget):
        """remat's plan for the latest graph at budget: (result, which graph
        file: 0, each product where its inputs are made; 1, Inductor's late
        products, where the graph has any). Of two plans that fit, the one
        that recomputes less, then the one that holds less, then Inductor's
        own order (its bits); where neither fits, the lower floor's."""
        rs = [plan_graph(f, dict(self._request, budget=budget)) for f in self._joints]

        def key(i):
            r = rs[i]
            if r.get("feasible"):
                return (0, float(r.get("extra_flops", 0)), int(r.get("peak_bytes", 0)), -i)
            return (1, float(r.get("floor") or float("inf")), 0, -i)
        best = min(range(len(rs)), key=key)
        return rs[best], best

    @property
    def plan(self) -> Optional[GraphPlan]:
        return self.plans[-1] if self.plans else None

    #: how many graphs Dynamo may compile for one rt.compile (each input
    #: shape, and each trial plan at warm-up, is one): its own limit (8)
    #: would run later shapes uncompiled, without a plan, and say nothing
    RECOMPILES = 256

    def __call__(self, *args: Any) -> Any:
        sig = _signature(args)
        if self._warming:
            pass  # a trial step: the plan warm_up asks for
        elif sig in self._shapes:
            self._generation, self._request["budget"] = self._shapes[sig]
        elif self.budget and torch.is_grad_enabled():
            self.warm_up(args)  # a new shape in training: its plan checked by trial steps, as the first one's
        else:
            self._shapes[sig] = (self._generation, self._request["budget"])
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

    #: the least share of the step's FLOPs a cheaper plan must save to be
    #: tried (a trial compiles the step again)
    GAIN = 0.005

    def warm_up(self, example: tuple) -> None:
        """Compiles (and plans) for example's shapes now, with the model's
        buffers, gradients and random state restored afterwards. Two trial
        steps run (the first compiles the backward) and the second is
        measured, as rt.measure counts it, by capture's meter (meters.meter_for:
        the heap counter preloaded, a CUDA device's statistics, else PyTorch's
        profiler, which sees PyTorch's allocations only), and the measure
        decides, since Inductor's step is not remat's model of it (it fuses
        and reuses buffers; docs/pytorch.md): a plan whose step holds more
        than the budget is replaced by one predicted to hold less by the
        excess, or by remat's model's floor plan where the model has none
        that small (also where the budget is below that floor, within
        TRIAL_REACH); and where a plan's step leaves room under the budget,
        the plan predicted to hold that much more is tried when it
        recomputes less. The cheapest plan whose trial held the budget is
        kept; up to ATTEMPTS trials, no plan twice. With REMAT_TRANSIENTS=none
        one forward runs, and the plan is not checked
        (plan.measured is None). A new input shape met in training (with a
        budget, gradients on) is warmed up so before its first step."""
        self._warming = True
        try:
            self._warm_up(example)
        finally:
            self._warming = False

    def _warm_up(self, example):
        from .planning import MARGIN, _inner
        sig = _signature(example)
        # each shape's trials start from the budget asked for
        self._request["budget"] = _inner(self.budget, MARGIN) if self.budget else 0
        device = device_of(self.model, [a for a in example if isinstance(a, torch.Tensor)])
        c = meters.meter_for(device)
        if isinstance(c, meters.NoMeter):
            c = None
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
            p.measured, p.measured_by = measured, c.how if measured is not None else None
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
        self._shapes[sig] = (self._generation, self._request["budget"])
        self.warm_up_seconds += time.perf_counter() - t0

    def _preview(self, request):
        """What the plan for request budget on the latest graph recomputes
        (a frozenset of op ids; None: no plan fits)."""
        r = self._plan(request)[0] if self._joints else {}
        if not r.get("feasible"):
            return None
        return frozenset(int(i) for i in r.get("recompute", []))

    def _cheaper(self, p, measured, tried):
        """The request budget of a plan not yet tried that recomputes less
        than p (by GAIN of the step's FLOPs) and is predicted to hold p's prediction plus the room p's
        trial left under the budget (with Inductor's difference from the
        prediction about the same, it fits), or None: no such plan, or too
        little room."""
        room = self.budget - measured
        if not p.recompute_ops or room < self.HEADROOM * self.budget or not self._joints:
            return None
        from .planning import MARGIN, _inner
        request = max(self._request["budget"], _inner(p.peak_bytes + room, MARGIN))
        r = self._plan(request)[0]
        if not r.get("feasible") or float(r.get("extra_flops", 0)) > p.extra_flops - self.GAIN * p.flops \
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
        """Compiles and plans for example (one forward; with meter c, a
        meters.CounterMeter or ProfilerMeter, two forward and backward
        steps, the second measured): the measured bytes or None."""
        if isinstance(c, meters.ProfilerMeter):
            c = meters.ProfilerMeter()  # a profiler of its own per trial
        point = _restore_point(self.model, device)
        graphs, plans = self._graphs, len(self.plans)
        before = sum(compat.graph_break_reasons().values())
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        measured = None
        try:
            with torch.enable_grad():
                for i in range(2 if c is not None else 1):
                    for p in self.model.parameters():
                        p.grad = None
                    if c is None:
                        self(*example)
                        break
                    sync()
                    with c if i == 1 else contextlib.nullcontext():
                        if i == 1:
                            c.begin("step")
                        out = self(*example)
                        # the outputs' gradients as a loss of each would make them (a tangent per output)
                        outs = [t for t in compat.tree_flatten(out)[0]
                                if isinstance(t, torch.Tensor) and t.requires_grad]
                        torch.autograd.backward([t if t.dim() == 0 else t.sum() for t in outs])
                        del out, outs
                        sync()
                    if i == 1:
                        c.finish()
                        measured = c.peaks().get("step")
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


def _signature(args):
    """What Dynamo compiles a step anew for, of a call's arguments: each
    tensor's shape, dtype and device (anything else by its type)."""
    return tuple((tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else type(a) for a in args)


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
    False (the only value taken) compiles and plans each new input shape
    on its own; True (one graph for every shape) is refused, as one plan
    cannot hold a budget at every shape. Where a
    counter can measure the step, trial steps decide which plan runs
    (Compiled.warm_up). A budget nothing fits raises RematError naming the
    floor (the error's .floor).
    Needs PyTorch 2.5 or newer."""
    if dynamic:
        raise RematError("rt.compile(dynamic=True) would compile one graph for every input shape, whose peak "
                         "grows with the shapes, and one plan cannot hold a budget at each: with dynamic=False "
                         "(the default) each new shape is compiled and planned on its own (step.plans)")
    opts = dict(compat.inductor_mode_options(mode)) if mode else {}
    opts.update(options or {})
    c = Compiled(model, budget, optimizer, loss, inputs, strategy, opts, fullgraph, dynamic)
    c.warm_up(tuple(example) if isinstance(example, (tuple, list)) else (example,))
    return c
