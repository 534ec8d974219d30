"""Nested recomputation: a plan whose schedule recomputes an op more than
once (rotor's schedules: plan_trace(..., nested=True)).

Under such a plan a recomputed value lives in windows: from a group of the
schedule that makes it (a run of recomputations between two backward
instructions) to its last read before the next group that makes it again,
and is freed in between, as the memory plan frees it. What reads a value is
known per window before the backward starts:

- every saved tensor handed to the backward as a handle (apply.Applier's
  pack) is read by the backward of the op that saved it, which capture
  recorded per saved tensor in the order autograd saves them
  (Trace.pack_ops; the step saves the same tensors in the same order);
  that backward's place in the schedule puts the read in a window;
- every recomputation reads its inputs in its group's window.

So each window holds its value for a count of reads, and the last one
drops it. The backward asks for a value by unpacking a handle: when the
value is not held, the groups up to the one whose window holds that read run
(in the schedule's order: they are the plan's), each op of a group from its
recipe, with what it makes kept for its window's reads (none: dropped at
once, as the plan frees an output nothing reads).
"""

import torch

from .capture import CaptureError

_STEP = 1e-6  # the place of an op within its group


class Schedule:
    """A nested plan's schedule as the applier follows it, worked out once
    per plan: the recompute groups in order, each op's backward's place,
    and what each group makes and reads. rec_ops: the ops the applier
    recomputes (decisions.Decisions); tracked: the values it follows."""

    def __init__(self, plan, rec_ops, tracked):
        t = plan.trace
        rows = []
        for kind, op in plan.schedule:
            if not rows or rows[-1] != (kind, op):  # an op and its extra outputs' nodes
                rows.append((kind, op))
        self.groups = []  # [(place, [ops])], in the schedule's order
        self.bpos = {}    # op -> the place of its backward
        run = None
        for i, (kind, op) in enumerate(rows):
            if kind == "recompute" and op in rec_ops:
                if run is None:
                    run = (float(i), [])
                    self.groups.append(run)
                run[1].append(op)
            elif kind != "recompute":
                run = None
            if kind == "backward":
                self.bpos.setdefault(op, float(i))
        # per value its windows: [(place, group)] in order (group -1: made in the forward)
        self.windows = {}
        self.reads = {}  # value -> places of the recomputations that read it
        for g, (place, ops) in enumerate(self.groups):
            for k, o in enumerate(ops):
                at = place + k * _STEP
                for v in t.ops[o].outputs:
                    if v in tracked:
                        self.windows.setdefault(v, []).append((at, g))
                for v in set(t.ops[o].inputs):
                    if v in tracked and v not in t.ops[o].outputs:
                        self.reads.setdefault(v, []).append(at)

    def window(self, v, at):
        """The group whose window holds value v's read at place at: the
        last that makes v before it (-1: v as the forward made it)."""
        g = -1
        for place, grp in self.windows.get(v, ()):
            if place < at:
                g = grp
            else:
                break
        return g


class Run:
    """One step's nested recomputation (apply.Applier calls it)."""

    def __init__(self, applier, schedule):
        self.a, self.s = applier, schedule
        self.ran = 0        # groups run so far
        self.left = {}      # (value, group) -> reads still to come in that window

    # -- forward
    def forward_done(self, handles, src):
        """Counts each window's reads: handles, every saved tensor of a
        recomputed value handed out; src, the values the forward kept that
        recomputations start from."""
        s = self.s
        for h in handles:
            at = s.bpos.get(getattr(h, "op", -1), float("inf"))
            h.window = s.window(h.v, at)
            key = (h.v, h.window)
            self.left[key] = self.left.get(key, 0) + 1
        for v, places in s.reads.items():
            for at in places:
                key = (v, s.window(v, at))
                self.left[key] = self.left.get(key, 0) + 1
        for v in list(src):
            if self.left.get((v, -1), 0) <= 0:
                src.pop(v, None)

    # -- backward
    def value(self, h):
        """The tensor handle h stands for, recomputing what the schedule
        says first; its window's read taken."""
        a, v = self.a, h.v
        with torch.no_grad():
            if not a._have(v) and h.window >= self.ran:
                self._run_to(h.window)
            if not a._have(v):  # the schedule's windows missed this read: made again, for it alone
                return self._again(v)
        out = a._get(v)
        self._read(v, h.window)
        return out

    def _again(self, v):
        """v made again from what is held, for one read (bits as always: the
        same ops on the same inputs); what it takes is freed after."""
        a, t = self.a, self.a.t
        made_here, stack = [], [v]
        while stack:
            u = stack[-1]
            if u in a.cache or u in a.src:
                stack.pop()
                continue
            p = t.values[u].producer
            if p < 0 or p not in a.recipes:
                raise CaptureError("internal: the nested plan's value %d (made by op %d) is neither held nor "
                                   "recomputable for its read" % (u, p))
            missing = list(dict.fromkeys(x.v for rec in a.recipes[p] for x in _refs(rec)
                                         if x.v not in t.ops[p].outputs and x.v not in a.cache
                                         and x.v not in a.src and x.v not in stack))
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            for w, x in a._run(p).items():
                if w not in a.cache:
                    a.cache[w] = x
                    made_here.append(w)
        out = a.cache[v]
        for w in made_here:
            a.cache.pop(w, None)
        return out

    def _run_to(self, g):
        while self.ran <= g:
            grp = self.ran
            self.ran += 1
            self._group(grp)

    def _group(self, g):
        a, t, s = self.a, self.a.t, self.s
        place, ops = s.groups[g]
        for k, o in enumerate(ops):
            made = a._run(o)
            for v in t.ops[o].outputs:
                if v in made and self.left.get((v, g), 0) > 0:
                    a.cache[v] = made[v]
                    a.window_of[v] = g
            for v in set(t.ops[o].inputs):
                if v in a.tracked and v not in t.ops[o].outputs:
                    self._read(v, s.window(v, place + k * _STEP))

    def _read(self, v, g):
        key = (v, g)
        n = self.left.get(key, 0) - 1
        self.left[key] = n
        if n > 0:
            return
        if g == -1:  # the forward's tensor, its last read taken
            self.a.src.pop(v, None)
        if self.a.window_of.get(v, -1) == g:
            self.a.cache.pop(v, None)
            self.a.window_of.pop(v, None)


def _refs(recipe):
    """The values a recipe reads, by reference."""
    from .recipes import _leaves, _Ref
    return [a for a in _leaves((recipe.args, recipe.kwargs)) if isinstance(a, _Ref)]
