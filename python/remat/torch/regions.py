"""Regions: where the applier's dispatch mode and its saved-tensor hooks are on.

A plan's applier must follow some calls of the forward (a recipe to
record, a tracked value made or made stale): its dispatch mode must be on
around them, and every call it is on for costs Python (about as much as
the op's own dispatch). Turning the mode on and off costs Python too: a
module's pre-hook and forward hook, the mode's entry and exit. The mode
can only be turned on or off where a module call begins or ends, so it is
on over runs of module calls: a run begins where one module call begins
and ends where a later sibling's (or the same one's) ends, and follows
every call in between.

``cover`` picks the runs that cover the calls to follow at the least
cost, a run costing TOGGLE_CALLS plus the calls it spans (and half a
toggle per call of its first and last modules before theirs, whose hooks
run for those calls too), by dynamic
programming over capture's tree of module calls: a module call is covered
whole, or its children are, alone or in runs of consecutive siblings
(which also cover the calls its own code runs between them).

``Regions`` turns the mode on and off at those module calls in a step.
"""

import bisect

from .capture import CaptureError

# what turning the mode on and off once costs, in calls followed. Measured
# on a CPU (2 threads, PyTorch 2.15; bench/torch/applier_cost.py
# --breakdown): a mode that only runs each call, on over the whole forward,
# adds 56-61 us a call to ResNet-18's and a GPT-2's (its Python, and the op
# running after it on caches it left cold: alone in a loop a call costs 10
# us); the two module hooks, the mode's entry and exit and the applier's
# bookkeeping around them take 60-90 us a region
TOGGLE_CALLS = 2

# after a run of the mode ends, the saved-tensor hooks stay on for a dropped value saved just after
# it if at most this many other tensors are saved meanwhile (place): each passes the pack and
# unpack hooks, about what following a call costs
CLOSE_PACKS = 2


def cover(t, calls):
    """The runs that cover calls (indices into t.calls, inside the model's
    call) at the least cost: [(first module call, last module call)] (indices
    into t.modules, siblings or the same), or None where a call lies in no
    module call with a name (the mode could not be turned on around it)."""
    if not calls:
        return []
    mods = t.modules
    children = [[] for _ in mods]
    for i, m in enumerate(mods):
        if m[2] >= 0:
            children[m[2]].append(i)
    direct = [[] for _ in mods]  # the calls to follow that each module call's own code makes
    for ci in calls:
        inv = t.call_module[ci]
        if inv < 0 or mods[inv][3] is None:
            return None
        direct[inv].append(ci)
    inside = [0] * len(mods)  # the calls to follow within each module call
    for i in reversed(range(len(mods))):  # a child comes after its parent
        inside[i] += len(direct[i])
        if mods[i][2] >= 0:
            inside[mods[i][2]] += inside[i]
    best = {}

    def span(a, b):
        # a module called before (a ResNet block's one ReLU, three times) runs the hook for
        # those calls too: each costs about half a toggle
        return TOGGLE_CALLS * (1 + (mods[a][4] + mods[b][4]) / 2) + mods[b][1] - mods[a][0]

    def solve(i):
        # (cost, runs) covering every call to follow within module call i
        if i in best:
            return best[i]
        whole = (span(i, i), [(i, i)]) if mods[i][3] is not None else (float("inf"), None)
        kids = children[i]

        def free(lo, hi):  # none of i's own calls to follow lies in [lo, hi)
            return not any(lo <= ci < hi for ci in direct[i])

        if not kids or not free(mods[i][0], mods[kids[0]][0]) or not free(mods[kids[-1]][1], mods[i][1]):
            best[i] = whole
            return whole
        # g[j]: the least cost covering everything up to the end of kids[j - 1]
        g = [(0.0, [])] + [(float("inf"), None)] * len(kids)
        for j in range(1, len(kids) + 1):
            k = kids[j - 1]
            if j == 1 or free(mods[kids[j - 2]][1], mods[k][0]):
                c, runs = solve(k) if inside[k] else (0.0, [])
                if g[j - 1][0] + c < g[j][0]:
                    g[j] = (g[j - 1][0] + c, g[j - 1][1] + runs)
            if inside[k] == 0 or mods[k][3] is None:
                continue  # a run ends where it must: at a call that holds one to follow
            for a in range(j, 0, -1):  # a run from kids[a - 1] to k
                first = kids[a - 1]
                if a > 1 and not free(mods[kids[a - 2]][1], mods[first][0]):
                    continue  # a call to follow just before first: the run must begin further back
                if mods[first][3] is not None and g[a - 1][0] + span(first, k) < g[j][0]:
                    g[j] = (g[a - 1][0] + span(first, k), g[a - 1][1] + [(first, k)])
        best[i] = whole if whole[0] <= g[-1][0] else g[-1]
        return best[i]

    roots = [i for i, m in enumerate(mods) if m[2] < 0]
    out = []
    for r in roots:
        if inside[r]:
            c, runs = solve(r)
            if runs is None:
                return None
            out += runs
    return out


def place(t, runs, tail, saves, dropped):
    """Where the saved-tensor hooks must be on for saves of values a plan
    drops, given the mode's runs (cover's) and tail (the first call after
    the model, or None). saves: [(index in t's saved tensors, module call,
    calls run when saved)]; dropped: per saved tensor, whether it is one.
    Autograd saves an op's inputs just before the op runs and its outputs
    just after, so a save falls between two calls. Returns:

    - gaps: where a save is made while the mode is on, the calls run when
      it is (the mode turns the hooks on after the call before it);
    - closing: {a run's first module call (name, call): the number of
      saves of dropped values just after the run's end}: the hooks stay on
      from there until the pack hook has seen the last of them, where at
      most CLOSE_PACKS other tensors are saved before each and no run
      begins;
    - rest: the others, [(module call, calls run)]."""
    mods, end = t.modules, t.modules[0][1]
    spans = sorted((mods[a][0], mods[b][1], (mods[a][3], mods[a][4])) for a, b in runs)
    firsts = [f for f, _, _ in spans]

    def in_mode(i, g):
        r = bisect.bisect_right(firsts, g) - 1  # the last run to begin by then, and the one before it
        for f, e, _ in spans[max(r - 1, 0):r + 1]:
            if f < g < e or (g in (f, e) and i >= 0 and f <= mods[i][0] < mods[i][1] <= e):
                return True
        return tail is not None and (g > end or (g == end and (i < 0 or mods[i][3] is None)))

    closing, closed = {}, set()
    for r, (_, e, first) in enumerate(spans):  # the saves just after each run's end, in the order made
        stop = spans[r + 1][0] if r + 1 < len(spans) else end
        others = 0
        for k in range(bisect.bisect_left(t.pack_calls, e), len(t.pack_calls)):
            i, g = t.pack_modules[k], t.pack_calls[k]
            if g > stop:
                break
            if in_mode(i, g):
                continue
            if not dropped[k]:
                others += 1
            elif others > CLOSE_PACKS:
                break
            else:
                closing[first], others = closing.get(first, 0) + 1, 0
                closed.add(k)
    gaps, rest = set(), []
    for k, i, g in saves:
        if in_mode(i, g):
            gaps.add(g)
        elif k not in closed:
            rest.append((i, g))
    return gaps, closing, rest


def outermost(t, where):
    """The module calls that hold every (innermost module call, call) of
    where: the outermost of those innermost calls, and whether the loss
    after the model holds one; None where one lies outside the model's
    module calls."""
    start, end = t.modules[0][0], t.modules[0][1]  # the model's call
    chosen, tail = set(), False
    for inv, ci in where:
        if ci >= end and (inv < 0 or t.modules[inv][3] is None):
            tail = True
        elif inv >= 0 and t.modules[inv][3] is not None and start <= ci:
            chosen.add(inv)
        else:
            return None
    out = []
    for inv in chosen:
        up, covered = t.modules[inv][2], False
        while up >= 0 and not covered:
            covered, up = up in chosen, t.modules[up][2]
        if not covered:
            out.append(inv)
    return out, tail


class Regions:
    """Turns the applier's mode on and off around its regions (Decisions),
    or its saved-tensor hooks around its windows (windows.py), with hooks
    on those modules only, so that every other module call keeps
    PyTorch's fast path: a global forward pre-hook waits for the step's
    first module call (the model, or a copy of it built the same way), finds
    the regions' modules in it by name, hooks them (a pre-hook after their
    own, before them for windows, where capture counted the saves of a
    module's own pre-hooks as its call's; a forward hook before theirs) and
    removes itself. A module's hook goes once the last of its calls it must
    see has passed."""

    def __init__(self, applier):
        self.a = applier
        self.count = {}  # module name -> its calls begun, with a pre-hook
        self.ended = {}  # module name -> its calls ended, with a forward hook
        self.first = None
        self._pre, self._post = {}, {}  # module name -> its hook's handle, until its last call it must see
        self.last_enter, self.last_exit = {}, {}
        self.ran = False  # the model was called

    def __enter__(self):
        from torch.nn.modules import module as nn_module
        self.first = nn_module.register_module_forward_pre_hook(self._bind)
        return self

    def _bind(self, model, args):
        self.first.remove()
        self.first = None
        self.ran = True
        a = self.a
        # per module, the last of its calls whose beginning (end) a hook must see: a module
        # called again after it (a ResNet block's one ReLU, called three times) runs no hook then
        enters, exits = {}, {}
        for (name, k), (_, _, (last, j)) in a.regions.items():
            enters[name] = max(enters.get(name, -1), k)
            exits[last] = max(exits.get(last, -1), j)
        for name, k in a.hook_regions:
            enters[name] = max(enters.get(name, -1), k)
            exits[name] = max(exits.get(name, -1), k)
        if a.tail is not None:
            exits[""] = 0
        if a.windows is not None:  # the events that open and close them; the model's end checks every one passed
            for kind, name, k in [e for o, (_, _, c) in a.windows.items() for e in (o, c)] + list(a.draws) + list(
                    a.taken) + [e for o, r in a.reads.items() for e in (o, r.closing)]:
                side = enters if kind == "pre" else exits
                side[name] = max(side.get(name, -1), k)
            exits[""] = 0
        self.last_enter, self.last_exit = enters, exits
        # before the hooks below: a module with hooks has no configuration (windows.module_config)
        if a.windows is not None and a.decisions.configs and model is not a.checked and \
                not a.decisions.configs_hold(model):
            raise CaptureError("the model's modules of PyTorch's own have other attributes (a dropout's p) than when "
                               "the plan was made, and the plan replays their calls: plan.apply(model) with the "
                               "model the step runs, or plan again")
        mods = a.decisions.of(model)[0]
        for name in sorted(set(enters) | set(exits)):
            m = mods.get(name)
            if m is None:
                raise CaptureError("the model this plan runs on has no module %r, which the plan follows: plan this "
                                   "model" % name)
            if name in enters:  # a window opens before the module's own pre-hooks run, as capture's calls begin
                self._pre[name] = m.register_forward_pre_hook(lambda mod, a, name=name: self._enter(name),
                                                              prepend=a.windows is not None)
            if name in exits:
                self._post[name] = m.register_forward_hook(lambda mod, a, o, name=name: self._exit(name, o),
                                                           prepend=True)
        if a.windows is not None:  # recipes read the model's parameters by name, and its inputs
            a.model = model
            a.model_inputs(args)
        self.count[""] = 1  # the model's own call began before its hooks
        if "" in enters:
            a.module_enter("", 0)
            if enters[""] == 0:
                self._pre.pop("").remove()

    def _enter(self, name):
        k = self.count.get(name, 0)
        self.count[name] = k + 1
        self.a.module_enter(name, k)
        if k >= self.last_enter[name]:
            self._pre.pop(name).remove()

    def _exit(self, name, out):
        k = self.ended.get(name, 0)  # a module's calls end in the order they began
        self.ended[name] = k + 1
        self.a.module_exit(name, k, out)
        if k >= self.last_exit[name]:
            self._post.pop(name).remove()

    def __exit__(self, *exc):
        if self.first is not None:
            self.first.remove()
            self.first = None
        for h in (*self._pre.values(), *self._post.values()):
            h.remove()
        self._pre, self._post = {}, {}
        return False
