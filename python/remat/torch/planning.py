"""Plans of a captured step: what remat keeps and recomputes so that a
training step fits a budget in bytes (Plan, plan_trace, plan), plans per
input shape (Planner), the budget's margin (budget_for) and the largest
batch a budget fits (max_batch). libremat does the planning
(remat_plan_graph_json, through remat._lib.plan_graph); apply.py runs a
plan."""
from __future__ import annotations

import math
import time
from typing import Any, Callable, Optional, Sequence, Union

import torch

from .._lib import RematError, plan_graph
from . import compat
from .apply import Applied
from .capture import Trace, capture
from .decisions import Decisions

#: what a budget may be given as: bytes, or a string such as "6GiB" (None: no limit)
Budget = Union[int, str, None]
#: a torch.optim optimizer, or the name of the state remat counts ("sgd", "adamw")
OptimizerLike = Union[torch.optim.Optimizer, str, None]
#: a model's positional inputs: one tensor, or a tuple of its arguments
Inputs = Union[torch.Tensor, Sequence[Any]]
LossFn = Callable[[Any], torch.Tensor]
#: the layers per-layer checkpointing would wrap: "auto", a module class, a tuple of them, or None
Regions = Union[str, type, tuple, None]

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000 ** 2, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1000 ** 3, "gib": 1 << 30, "t": 1 << 40, "tb": 1000 ** 4, "tib": 1 << 40}


def parse_bytes(b: Budget) -> int:
    """Bytes from an int or a string such as "6GiB", "512MiB", "1.5GB"."""
    if b is None:
        return 0
    if isinstance(b, int):
        if b < 0:
            raise ValueError("a budget is a number of bytes >= 0, not %d" % b)
        return b
    s = str(b).strip().lower().replace(" ", "")
    i = len(s)
    while i > 0 and not (s[i - 1].isdigit() or s[i - 1] == "."):
        i -= 1
    num, unit = s[:i], s[i:]
    if unit not in _UNITS or not num:
        raise ValueError("cannot read %r as bytes (examples: 6GiB, 512MiB, 1500000000)" % b)
    return int(float(num) * _UNITS[unit])


def _optimizer_request(optimizer: OptimizerLike) -> dict:
    """The optimizer's state as remat counts it, from a torch.optim object or a name."""
    if optimizer is None:
        return {"kind": "none"}
    if isinstance(optimizer, str):
        return {"kind": optimizer.lower()}
    name = type(optimizer).__name__.lower()
    if name in ("adam", "adamw"):
        return {"kind": "adamw"}
    if name == "sgd":
        m = optimizer.defaults.get("momentum", 0) or 0
        return {"kind": "sgd", "momentum": float(m)}
    raise ValueError("remat counts the state of SGD, Adam and AdamW; %s is not one of them (pass optimizer='adamw' "
                     "to count two tensors per parameter, 'sgd' for none)" % type(optimizer).__name__)


_CATEGORIES = ("parameters", "gradients", "optimizer state", "activations", "transient", "workspace", "communication")


class Plan:
    """A plan for one model's step: what remat predicts and what it recomputes."""

    def __init__(self, trace: Trace, result: dict, request: dict) -> None:
        self.trace = trace
        self.result = result
        self.request = request
        #: every parameter's gradient counted from the step's start (accumulate > 1, grads_held)
        self.grads_held = bool(request.get("grads_resident"))
        self.accumulate = int(request.get("accumulate", 1))
        #: the caller keeps the model's output through the backward (plan_trace's keep_output)
        self.keep_output = bool(request.get("keep_output"))
        #: how each op's transient bytes were measured (meters.py), and what that could not see (or None)
        self.transients = trace.transients
        self.unmeasured = trace.unmeasured
        self.feasible = bool(result.get("feasible"))
        self.budget = int(result.get("budget", 0))
        self.floor = int(result.get("floor", 0)) if not self.feasible else None
        #: no schedule of this step holds less (bytes, a lower bound from the
        #: library's model: each op's operands, the gradients live beside it,
        #: parameters and optimizer state); how far floor or peak_bytes can
        #: still be from the best plan
        self.bound = int(result["bound"]) if result.get("bound") else None
        self.predicted = {k: int(v) for k, v in result.get("predicted", {}).items()}
        self.peak_bytes = int(result.get("peak_bytes", 0))
        self.recompute_ops = [int(i) for i in result.get("recompute", [])]
        # the ops whose outputs the forward drops (handed to the backward by recomputation)
        self.drop_ops = [int(i) for i in result.get("drop", [])]
        #: values of recomputed ops that the forward makes and the plan holds into the backward
        #: (freed there and made again: a nested plan's applier holds them from the forward)
        self.kept_values = [int(v) for v in result.get("kept_values", [])]
        # the recomputations as the schedule runs them, each at once
        self.recompute_groups = [[int(i) for i in grp] for grp in result.get("recompute_groups", [])]
        #: schedules that recompute an op more than once were allowed (plan_trace's nested)
        self.nested = not request.get("recompute_once", True)
        #: a nested plan's instructions in order, (kind, op id): what the applier follows
        self.schedule = [(r[0], int(r[1])) for r in result.pop("timeline", [])] if self.nested else []
        self._decisions: Optional[Decisions] = None  # decisions.Decisions, made on the first apply()
        self._per_layer: Optional[dict] = None  # compare()'s plan of per-layer checkpointing
        self.extra_flops = float(result.get("extra_flops", 0))
        self.flops = float(result.get("flops", 0))
        #: what the planner weighed: "flops", or "seconds" (each op timed at capture)
        self.cost_unit = result.get("cost_unit", "flops")
        self.cost, self.extra_cost = float(result.get("cost", 0)), float(result.get("extra_cost", 0))
        if self.cost_unit == "seconds" and self.feasible:  # the FLOPs of the same schedule, from the trace
            self.flops = sum(3.0 * o.flops for o in trace.ops)
            self.extra_flops = sum(trace.ops[i].flops for grp in self.recompute_groups for i in grp)

    def compare(self) -> Optional[dict]:
        """This plan against per-layer checkpointing of the same step (each
        call of the regions' class checkpointed, as torch.utils.checkpoint
        or HuggingFace's gradient_checkpointing_enable() would run it),
        which optimal had among its candidates: a dict with the class, how
        many calls it wraps, each one's predicted peak (bytes), recomputed
        FLOPs and ops, and the ratios of this plan's to per-layer's. None
        when the plan was made without regions (regions=None, or a model
        with no layers to find)."""
        cls = self.request.get("regions")
        if cls is None:
            return None
        if self._per_layer is None:
            per_op = self.trace.regions(cls)
            req = {k: v for k, v in self.request.items() if k not in ("accumulate", "regions", "keep_output")}
            req.update(strategy="manual", budget=0, recompute_once=True, timeline=False, split=False)
            self._per_layer = plan_graph(self.trace.graph(self.cost_unit, per_op, self.keep_output), req)
        pl = self._per_layer
        name = cls.__name__ if isinstance(cls, type) else ", ".join(c.__name__ for c in cls)
        mine = {"peak_bytes": self.peak_bytes, "extra_flops": self.extra_flops, "recomputed": len(self.recompute_ops)}
        theirs = {"peak_bytes": int(pl.get("peak_bytes", 0)), "extra_flops": float(pl.get("extra_flops", 0)),
                  "recomputed": len(pl.get("recompute", []))}
        return {"regions": name, "calls": len({r for r in self.trace.regions(cls) if r >= 0}),
                "plan": mine, "per_layer": theirs,
                "peak_ratio": mine["peak_bytes"] / theirs["peak_bytes"] if theirs["peak_bytes"] else None,
                "extra_flops_ratio": (mine["extra_flops"] / theirs["extra_flops"] if theirs["extra_flops"]
                                      else None)}

    def at_peak(self) -> Optional[dict]:
        """What the plan holds at its predicted peak: the instruction that
        reaches it ("backward of op 57 aten::_log_softmax"), the live
        bytes of the step's values there (parameters and optimizer state
        aside), and the largest buffers live there (up to 16, largest
        first, as (what, role, category, bytes): what is an op or a
        parameter, role its output, aux, gradient or workspace): what a
        smaller budget would have to free. None for a plan that is not
        feasible."""
        at = self.result.get("at_peak")
        if not at:
            return None

        def what(r: dict) -> str:
            if "op" in r:
                return "op %d %s" % (r["op"], self.trace.ops[r["op"]].name)
            v = self.trace.values[r["value"]]
            return "%s %s" % (v.kind, v.name or r["value"])
        return {"instruction": "%s of %s" % (at["kind"], what(at)) if ("op" in at or "value" in at) else at["kind"],
                "live_bytes": int(at["live_bytes"]),
                "held": [(what(r), r["role"], r["category"], int(r["bytes"])) for r in at["held"]]}

    @property
    def recomputed(self) -> list:
        """The names of the ops the plan recomputes (aten op names), in order."""
        return [self.trace.ops[i].name for i in self.recompute_ops]

    def apply(self, model: Optional[torch.nn.Module] = None, follow: bool = False) -> Applied:
        """The context to run one training step under (forward, loss and
        backward inside it). The plan counts each parameter's gradient from
        the backward that makes it (set gradients to None between steps,
        optimizer.zero_grad()'s default), unless it was made with accumulate
        or grads_held. When model (default: the captured one) is called
        inside, its inputs must have the shapes and dtypes the plan was made
        for, and it must hold no gradient the plan did not count: else
        RematError, before it runs. follow: the applier follows the calls
        that its replays read, checking which tensor each reads, where it
        would otherwise replay them as captured (windows, docs/pytorch.md
        "Apply"): for a model whose Python code picks, from step to step,
        which tensor an op reads."""
        if not self.feasible:
            raise RematError(self.result.get("error", "the plan is not feasible"))
        if self._decisions is None:
            self._decisions = Decisions(self)
        return Applied(self, self._decisions.followed() if follow and self._decisions.windows is not None
                       else self._decisions, model)

    def __repr__(self) -> str:
        if not self.feasible:
            return "<remat plan: nothing fits %d bytes; the smallest feasible budget is %d bytes%s>" % (
                self.budget, self.floor or 0, "; no schedule holds less than %d" % self.bound if self.bound else "")
        lines = ["remat plan: %s (%s), predicted peak %d bytes (%.1f MiB) for a budget of %s" % (
            self.result.get("strategy"), self.result.get("candidate") or self.result.get("planner"),
            self.peak_bytes, self.peak_bytes / 2 ** 20, "%d bytes" % self.budget if self.budget else "none")]
        for c in _CATEGORIES:
            if self.predicted.get(c):
                lines.append("  %-16s %14d" % (c, self.predicted[c]))
        extra = 100.0 * self.extra_flops / self.flops if self.flops else 0.0
        lines.append("  recomputes %d of %d ops: +%.2f%% FLOPs%s" % (
            len(self.recompute_ops), len(self.trace.ops), extra, ", +%.2f%% time (ops timed at capture)" % (
                100.0 * self.extra_cost / (self.cost - self.extra_cost)) if self.cost_unit == "seconds" and
            self.cost > self.extra_cost else ""))
        if self.grads_held:
            lines.append("  gradients held from the step's start (%s)" % (
                "%d micro-steps per optimizer step" % self.accumulate if self.accumulate > 1 else
                "in DDP's gradient buckets: gradient_as_bucket_view" if self.trace.grads_in_buckets else "grads_held"))
        if self.trace.comm_bytes and not self.trace.grads_in_buckets:
            lines.append("  DDP's gradient buckets: %d bytes, held the whole step (in communication)"
                         % self.trace.comm_bytes)
        if self.trace.comm_transient:
            lines.append("  a bucket's all-reduce: %d bytes while the backward runs (in communication)"
                         % self.trace.comm_transient)
        held = self.trace.held_past_last_read()
        if held:
            lines.append("  the model's code holds %d values past their last read in the forward (a cache, locals): "
                         "%d bytes, counted" % (len(held), sum(self.trace.values[v].bytes for v in held)))
        if self.keep_output and self.trace.output_values:
            lines.append("  the model's output kept to the step's end (keep_output): %d bytes" % sum(
                self.trace.values[v].bytes for v in self.trace.output_values))
        if self.bound:
            lines.append("  no schedule of this step holds less than %d bytes (%.1f MiB): a lower bound"
                         % (self.bound, self.bound / 2 ** 20))
        lines.append("  transients measured by %s%s" % (self.transients, "; not seen: " + self.unmeasured
                                                         if self.unmeasured else ""))
        return "\n".join(lines)


class Planner:
    """Plans for a loop whose inputs change shape (NLP buckets, a last
    partial batch, several image sizes), as torch.compile re-traces per
    shape: each new input signature (shapes and dtypes) is captured and
    planned once, on first sight, and its plan kept.

        planner = rt.Planner(model, budget="6GiB", optimizer=opt)
        for x, y in batches:
            with planner.apply((x,), lambda out: loss_fn(out, y)):
                loss = loss_fn(model(x), y)
                loss.backward()
            opt.step(); opt.zero_grad()
        print(planner)        # how many plans it made, and for what

    The other arguments are plan()'s. A signature that no plan fits raises
    RematError naming its floor.
    Capturing a new signature runs the step twice more (a warm-up and the
    recorded step), with the model, gradients, buffers and RNG restored."""

    def __init__(self, model: torch.nn.Module, budget: Budget, optimizer: OptimizerLike = None,
                 loss_fn: Optional[LossFn] = None, strategy: str = "auto", accumulate: int = 1,
                 grads_held: bool = False, transients: str = "auto", regions: Regions = "auto",
                 nested: bool = False, keep_output: bool = False) -> None:
        self.model, self.budget, self.optimizer, self.loss_fn = model, parse_bytes(budget), optimizer, loss_fn
        self.strategy, self.accumulate, self.grads_held, self.transients = strategy, accumulate, grads_held, transients
        self.regions, self.nested, self.keep_output = regions, nested, keep_output
        self.plans: dict = {}  # input signature -> Plan
        self.seconds = 0.0  # capturing and planning, all signatures

    def plan_for(self, inputs: Inputs, loss_fn: Optional[LossFn] = None) -> Plan:
        """The plan for inputs' signature, made now if it is new."""
        from .capture import signature
        if not isinstance(inputs, (tuple, list)):
            inputs = (inputs,)
        key = signature(inputs)
        p = self.plans.get(key)
        if p is None:
            lf = loss_fn or self.loss_fn
            if lf is None:
                raise ValueError("Planner needs a loss function (loss_fn(output) -> scalar) to plan a new shape")
            t0 = time.perf_counter()
            p = plan(self.model, tuple(inputs), lf, self.budget, self.optimizer, self.strategy, self.accumulate,
                     self.grads_held, self.transients, regions=self.regions, nested=self.nested,
                     keep_output=self.keep_output)
            self.seconds += time.perf_counter() - t0
            if not p.feasible:
                from .capture import describe
                raise RematError("no plan fits %d bytes for inputs %s: the smallest feasible budget is %d bytes"
                                 % (self.budget, describe(key), p.floor or 0))
            self.plans[key] = p
        return p

    def apply(self, inputs: Inputs, loss_fn: Optional[LossFn] = None, follow: bool = False) -> Applied:
        """The context to run the step on inputs under (plan.apply() of its plan)."""
        return self.plan_for(inputs, loss_fn).apply(self.model, follow)

    def __len__(self) -> int:
        return len(self.plans)

    def __repr__(self) -> str:
        from .capture import describe
        lines = ["remat planner: %d plan%s for a budget of %d bytes (%.2f s capturing and planning)" % (
            len(self.plans), "" if len(self.plans) == 1 else "s", self.budget, self.seconds)]
        for k, p in self.plans.items():
            lines.append("  %s: predicted peak %d bytes, recomputes %d ops" % (describe(k), p.peak_bytes,
                                                                              len(p.recompute_ops)))
        return "\n".join(lines)


#: What a plan leaves of its budget for what its model of PyTorch does not
#: see (a gradient the engine sums out of place while a Python dispatch mode
#: is active, the order in which it frees what it held): a plan for budget B
#: holds at most B - max(B MARGIN, MARGIN_BYTES) by remat's prediction.
#: docs/pytorch.md gives the measured gaps.
MARGIN = 0.01
MARGIN_BYTES = 1024


def _inner(b: int, margin: float) -> int:
    """The budget a plan for b bytes is made for."""
    return max(1, b - max(int(math.ceil(b * margin)), MARGIN_BYTES))


def budget_for(peak: int, margin: float = MARGIN) -> int:
    """The smallest budget whose plan may hold peak bytes by the prediction
    (a plan's floor is budget_for of the least peak any schedule holds)."""
    fb = max(int(math.ceil(peak / (1.0 - margin))), peak + MARGIN_BYTES)
    while _inner(fb, margin) < peak:
        fb += 1
    while fb > 1 and _inner(fb - 1, margin) >= peak:
        fb -= 1
    return fb


def _grads_request(accumulate: int, grads_held: bool) -> bool:
    if not isinstance(accumulate, int) or accumulate < 1:
        raise ValueError("accumulate is the number of forward and backward passes per optimizer step, >= 1, "
                         "not %r" % (accumulate,))
    return accumulate > 1 or bool(grads_held)


def _regions(trace: Trace, regions: Regions) -> tuple:
    """(per op its checkpoint region or -1, the class) for plan_trace's
    regions, or (None, None)."""
    if regions is None or regions is False:
        return None, None
    cls = trace.region_class() if regions == "auto" else regions
    if cls is None:
        return None, None
    if not (isinstance(cls, type) or (isinstance(cls, tuple) and cls and all(isinstance(c, type) for c in cls))):
        raise ValueError("regions is \"auto\", None, or a module class (or a tuple of them) whose calls per-layer "
                         "checkpointing wraps, not %r" % (regions,))
    per_op = trace.regions(cls)
    if all(r < 0 for r in per_op):
        if regions == "auto":
            return None, None
        raise ValueError("no op of the step ran in a call of %s: it names no layer of this model" % (
            cls.__name__ if isinstance(cls, type) else ", ".join(c.__name__ for c in cls)))
    return per_op, cls


def _better(a: dict, b: dict) -> bool:
    """Whether planner result a beats b: feasible where b is not, cheaper,
    or as cheap and holding less; of two infeasible ones, the lower floor."""
    if bool(a.get("feasible")) != bool(b.get("feasible")):
        return bool(a.get("feasible"))
    if not a.get("feasible"):
        return 0 < int(a.get("floor") or 0) < int(b.get("floor") or 1 << 62)
    ca, cb = float(a.get("cost", 0)), float(b.get("cost", 0))
    return ca < cb or (ca == cb and int(a.get("peak_bytes", 0)) < int(b.get("peak_bytes", 0)))


def plan_trace(trace: Trace, budget: Budget = None, optimizer: OptimizerLike = None, strategy: str = "auto",
               margin: float = MARGIN, accumulate: int = 1, grads_held: bool = False, cost: str = "flops",
               regions: Regions = "auto", nested: bool = False, keep_output: bool = False) -> Plan:
    """Plans a captured step (capture(...)) at a budget (bytes or "6GiB").
    accumulate=k: the loop runs k forward and backward passes per optimizer
    step (gradient accumulation), so every gradient is held from the first
    pass on; grads_held=True: the same for a loop that keeps its gradients
    between steps (zero_grad(set_to_none=False)). The plan covers every
    micro-step: each holds the same. cost: what recomputation is weighed
    in, "flops" (PyTorch's formulas; the same plan on every run) or
    "seconds" (each op's time at capture, on a CUDA device by CUDA events,
    the applier's dispatch of a replayed op included: memory-bound ops are
    not free). regions: the
    module class (or tuple of classes) whose every call per-layer
    checkpointing would wrap, "auto" (the model's layers: the class with
    the most calls among the modules held in a ModuleList or Sequential),
    or None: optimal counts that checkpointing among its candidates, so
    its plan is never costlier than it at the same budget
    (plan.compare()); strategy "manual" is that checkpointing. nested:
    schedules that recompute an op more than once are allowed (rotor's
    nested schedules, whose floors lie below per-layer checkpointing's;
    the applier frees a recomputed value after its last read in one
    backward segment and recomputes it again for the next: nested.py),
    and the plan is the better of that and recompute_once's, so never
    worse; it needs PyTorch 2.15's node_creation_hook and a model without
    FSDP2. keep_output: the training loop keeps the model's output through
    the backward (outputs = model(**batch); outputs.loss.backward(): its
    logits, a transformers cache), so the plan counts the activations it
    holds from when they are made to the step's end; by default the
    output is dropped once the loss is made (loss = loss_fn(model(x))),
    and plan.apply() warns when a step kept it."""
    b = parse_bytes(budget)
    per_op, cls = _regions(trace, regions)
    if nested and (compat.node_creation_hook() is None or not any(o >= 0 for o in trace.pack_ops)):
        raise ValueError("nested=True needs torch.autograd.graph.node_creation_hook (PyTorch 2.15 or newer; this is "
                         "%s): capture tells by it which backward reads each saved tensor" % torch.__version__)
    if nested and trace.fsdp:
        raise ValueError("nested=True is not supported for an FSDP2 model yet: plan it with nested=False")
    inner = _inner(b, margin) if b else 0  # 0 is "no budget"
    # recompute_once: the applier keeps what it recomputed until its last use,
    # so the plans it runs recompute each op at most once
    # a DDP model's buckets are held the whole step; where its gradients are
    # views into them (gradient_as_bucket_view) they are the gradients, held
    # from the step's start
    req = {"budget": inner, "strategy": strategy, "optimizer": _optimizer_request(optimizer),
           "recompute_once": not nested, "timeline": bool(nested), "split": bool(nested),
           "grads_resident": _grads_request(accumulate, grads_held) or trace.grads_in_buckets,
           "communication_bytes": (0 if trace.grads_in_buckets else int(trace.comm_bytes)) + int(trace.comm_transient)}
    graph = trace.graph(cost, per_op, keep_output)
    result = plan_graph(graph, req)
    if nested:
        # the planner's searches are greedy and bounded, so allowed more
        # schedules they can end at a costlier plan, or a higher floor, than
        # with recompute_once (densenet121: 0.4% above): both are planned and
        # the better is the plan, which the nested applier runs either way
        once = plan_graph(graph, dict(req, recompute_once=True, split=False))
        if _better(once, result):
            result = once
    req["accumulate"] = accumulate
    req["regions"] = cls
    req["timeline"] = False
    req["keep_output"] = keep_output
    result["budget"] = b
    if not result.get("feasible") and result.get("floor"):
        result["floor"] = budget_for(int(result["floor"]), margin)
    return Plan(trace, result, req)


def plan(model: torch.nn.Module, inputs: Inputs, loss_fn: LossFn, budget: Budget = None,
         optimizer: OptimizerLike = None, strategy: str = "auto", accumulate: int = 1, grads_held: bool = False,
         transients: str = "auto", cost: str = "flops", regions: Regions = "auto", nested: bool = False,
         keep_output: bool = False) -> Plan:
    """Captures model's training step on inputs with loss_fn(output) -> scalar
    and plans it within budget (bytes, or a string such as "6GiB"; None: no
    limit). optimizer: a torch.optim.SGD/Adam/AdamW (or "sgd", "adamw"), whose
    state the plan counts. accumulate=k: k forward and backward passes per
    optimizer step (gradient accumulation); grads_held=True: gradients kept
    between steps (zero_grad(set_to_none=False)); both count every gradient
    from the step's start. transients: how capture measures each op's
    transient bytes ("auto": the heap counter where it is preloaded or a
    CUDA device's statistics, else PyTorch's profiler; see meters.py).
    cost: "flops" or "seconds"; regions: the layers whose per-layer
    checkpointing optimal is never worse than; nested, keep_output: see
    plan_trace. A
    budget nothing fits gives a Plan with feasible False and .floor, the
    smallest budget that fits (see plan.result)."""
    return plan_trace(capture(model, inputs, loss_fn, transients=transients), budget, optimizer, strategy,
                      accumulate=accumulate, grads_held=grads_held, cost=cost, regions=regions, nested=nested,
                      keep_output=keep_output)


def max_batch(make_inputs: Callable[[int], Inputs], model: torch.nn.Module, loss_fn: LossFn, budget: Budget,
              optimizer: OptimizerLike = None, start: int = 1, limit: int = 1 << 16, accumulate: int = 1,
              grads_held: bool = False) -> dict:
    """The largest batch whose step fits budget, with store-all and with
    remat's plan: {"all": b, "optimal": b}. make_inputs(b) gives the model's
    inputs for batch b; loss_fn(output) the loss; accumulate and grads_held
    as for plan(). Each batch is captured (PyTorch runs one step at that
    batch) and planned: doubling, then bisection."""
    budget = parse_bytes(budget)
    out = {}
    for strategy in ("all", "optimal"):
        def fits(b: int, strategy: str = strategy) -> bool:
            t = capture(model, make_inputs(b), loss_fn)
            p = plan_trace(t, budget, optimizer, strategy, accumulate=accumulate, grads_held=grads_held)
            return p.feasible and p.peak_bytes <= budget
        lo, hi = 0, start
        while hi <= limit and fits(hi):
            lo, hi = hi, hi * 2
        hi = min(hi, limit + 1)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
        out[strategy] = lo
    return out
