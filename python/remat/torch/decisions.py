"""Decisions: what a plan means for the applier, worked out once per plan.

Which ops are dropped and recomputed, which values recomputations make
and start from, and how a step follows them: with windows (windows.py:
recipes from capture's forms, saved tensors told by their order, the
reader on in the stretches whose floats or values it must see), or with
the dispatch mode on over runs of module calls (regions.py). A step
(apply.Applier) pays only for following them.
"""

from . import nested, regions, windows
from .recipes import (
    _device_of,
    _draws,
    _form_recipe,
    _Input,
    _leaves,
    _module_floats,
    _reads_floats,
    _RngAt,
)


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
