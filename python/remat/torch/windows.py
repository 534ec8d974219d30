"""Windows: a plan applied with no dispatch mode, where its recipes come
from capture and its values from the order autograd saves tensors.

Following a call with the applier's dispatch mode costs Python around the
op, and on a CPU the step's kernels leave that Python's caches cold: there
a call in the mode costs several times a module hook (docs/pytorch.md,
"What applying costs"; bench/torch/applier_windows.py). Most plans need
neither the calls' tensors nor their order:

- a recomputed op's recipe is its calls as capture saw them (Call.form):
  each tensor argument a value, a view of it, or a parameter or buffer by
  name, the other arguments as they were. It cannot be for a random op
  (its generator's state is the step's), for a tensor capture knew no
  value of, for a batch tensor, or for a stateful op other than BatchNorm
  in training (whose replay reads no running statistics);
- autograd saves the step's tensors in the captured order (Trace.pack_values,
  pack_modules): inside a module call, the n-th tensor saved after its
  pre-hook is the n-th that capture saw saved in that call. So the
  saved-tensor hooks on around a few module calls (the windows) tell each
  dropped value's saved tensors, which become handles, and give each value
  a recomputation starts from (its saved tensor: the same storage).

``place`` finds those windows, or None where a value a recomputation
starts from is never saved in a module call or is written in place later,
a dropped value is saved outside the model's module calls, or one lives on
in a copy autograd saved before an in-place write (capture's `moved`): the
applier then follows calls (regions.py).
"""

from . import regions


def place(t, drop, src):
    """The windows for a plan that drops the values drop (their saved
    tensors become handles) and starts recomputations from the values src:
    ({(module name, its call): (its first saved tensor, end)}, {saved tensor
    index: value}) with every save of a dropped value and one of each src
    value inside a window, or None (see the module's docstring). Every save
    in a window passes the hooks, so that the applier can check their
    number when the window's module call returns: a save more or fewer
    there would move every later one's value."""
    mods = t.modules
    if not mods or mods[0][3] != "" or len(t.pack_modules) != len(t.pack_values):
        return None

    def usable(k):
        inv = t.pack_modules[k]
        return inv > 0 and mods[inv][3] is not None

    if any(t.values[v].moved >= 0 for v in drop):
        return None  # autograd saves a copy of it made by its writer's clone: capture's value of that save is not it
    chosen = [k for k, v in enumerate(t.pack_values) if v in drop]
    if not all(usable(k) for k in chosen):
        return None
    wins = _outer(t, chosen)
    if wins is None:
        return None
    for v in sorted(src):
        val = t.values[v]
        if val.overwritten >= 0 or val.moved >= 0:
            return None  # its storage holds another value by the backward
        cand = [k for k, u in enumerate(t.pack_values) if u == v and usable(k)]
        if not cand:
            return None
        inside = [k for k in cand if _within(t, t.pack_modules[k], wins)]
        chosen.append(inside[0] if inside else cand[0])
        if not inside:
            wins = _outer(t, chosen)
            if wins is None:
                return None
    # each window's saves: the contiguous run of saved tensors whose module call lies in it
    spans = {}
    for k, inv in enumerate(t.pack_modules):
        w = _owner(t, inv, wins)
        if w is None:
            continue
        if w in spans and spans[w][1] != k:
            return None  # not contiguous: saves of another module call between
        spans[w] = (spans[w][0] if w in spans else k, k + 1)
    want, at, out = drop | src, {}, {}
    for w, (first, end) in spans.items():
        need = [k for k in range(first, end) if t.pack_values[k] in want]
        at.update((k, t.pack_values[k]) for k in need)
        if need:
            out[(mods[w][3], mods[w][4])] = (first, end)
    return out, at


def _outer(t, ks):
    """The outermost of the module calls that saved the tensors ks, or None
    where one is the loss's, after the model."""
    got = regions.outermost(t, [(t.pack_modules[k], t.pack_calls[k]) for k in ks])
    if got is None or got[1]:
        return None
    return set(got[0])


def _owner(t, inv, wins):
    """The window that module call inv lies in, or None."""
    while inv >= 0:
        if inv in wins:
            return inv
        inv = t.modules[inv][2]
    return None


def _within(t, inv, wins):
    return _owner(t, inv, wins) is not None
