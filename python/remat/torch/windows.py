"""Windows: a plan applied with no dispatch mode, where its recipes come
from capture and its values from the order autograd saves tensors.

Following a call with the applier's dispatch mode costs Python around the
op, and on a CPU the step's kernels leave that Python's caches cold: there
a call in the mode costs several times a module hook (docs/pytorch.md,
"What applying costs"; bench/torch/applier_windows.py). Most plans need
neither the calls' tensors nor their order:

- a recomputed op's recipe is its calls as capture saw them (Call.form):
  each tensor argument a value, a view of it, or a parameter or buffer by
  name, the other arguments as they were. A random call's replay draws
  from the generator's state where its stretch of module code (below)
  began, recorded there in each step, which is the state it drew from
  where no call of the stretch drew before it (``draws``; attention with
  no dropout draws nothing). A recipe cannot be for a tensor capture knew
  no value of (but one with no elements) nor one the model's call was not
  given, nor for a stateful op other than BatchNorm in training (whose
  replay reads no running statistics) (recipes._form_recipe). Its floats
  are capture's where they are configuration: a norm's, or those a module
  of PyTorch's own passes (``module_config``: the applier checks the
  module's attributes when the step begins, and follows the step's calls
  where one changed: a dropout's p the loop schedules); any other is the
  step's own, read by a dispatch mode on only in the call's stretch of
  module code (``stretch``; apply._Reader);
- autograd saves the step's tensors in the captured order (Trace.pack_values,
  pack_modules, pack_calls): in a stretch of a module call's own code
  (between its beginning, its children's calls and its end, where its
  module hooks and its children's run), the n-th tensor saved is the n-th
  that capture saw saved there. So the saved-tensor hooks on in a few such
  stretches (the windows) tell each dropped value's saved tensors, which
  become handles, and give each value a recomputation starts from (its
  saved tensor: the same storage); a value no op saves, where a module
  call that returns it ends (Trace.module_outputs), else where its call
  makes it, by the reader (apply._Reader) on in that call's stretch; a
  batch tensor a recomputation reads (an embedding's) where the model is
  called (Trace.input_values). Which value each recomputed op reads is capture's:
  the applier compares each dropped value's bits in the forward and after
  its replay in a plan's first step and one in apply.VERIFY_EVERY
  (Applier.verify), and plan.apply(follow=True) checks each read,
  following calls.

``draws`` finds where each random call's generator state is recorded, and
``place`` finds the windows, or None where a value a recomputation
starts from is written in place later, or a dropped value is saved
outside the model's call (the loss) or in a module call without a name:
the applier then follows calls (regions.py). A value that lives on in a
copy autograd saved before an in-place write (capture's `moved`) is that
copy's save.
"""

import torch

from . import compat

_PLAIN = (bool, int, float, str, type(None))


def module_config(module):
    """For a module whose forward is PyTorch's own (torch.nn's; a
    dropout, ReLU6, multi-head attention) and that has no hooks of its
    own: its plain attributes, ((name, value), ...), from which the floats
    its own code passes to its calls follow (a dropout's p, ReLU6's
    bounds, attention's scale from its head size); else None (a user's
    module, whose floats may come from anywhere: a temperature the loop
    anneals)."""
    f = getattr(type(module), "forward", None)
    if not getattr(f, "__module__", "").startswith("torch.nn.") or "forward" in vars(module) or \
            compat.module_hooks(module):
        return None
    return tuple((k, v) for k, v in vars(module).items() if isinstance(v, _PLAIN) or (
        isinstance(v, tuple) and all(isinstance(x, _PLAIN) for x in v)))


def output_tensors(out):
    """The tensors a module call returned, in tree_flatten's order."""
    if isinstance(out, torch.Tensor):
        return [out]
    return [x for x in compat.tree_flatten(out)[0] if isinstance(x, torch.Tensor)]


def stretch(t, ci):
    """The stretch of module code call ci runs in: the part of its module
    call's own code between the beginning, its children's calls and the
    end, as (the event that opens it, its first call, the event that
    closes it, its end), an event ("pre" or "post", module name, its
    call); or None where the module call or the child call before it has
    no name (no hook can tell the opening in the step). The closing event
    is None where the next child call has no name."""
    mods = t.modules
    inv = t.call_module[ci] if ci < len(t.call_module) else -1
    if inv < 0 or mods[inv][3] is None:
        return None
    kids = [i for i in range(inv + 1, len(mods)) if mods[i][2] == inv]
    before = -1
    for c in kids:
        if mods[c][1] <= ci:
            before = c
    after = next((c for c in kids if mods[c][0] > ci), -1)
    if before >= 0 and mods[before][3] is None:
        return None
    opening = ("post", mods[before][3], mods[before][4]) if before >= 0 else ("pre", mods[inv][3], mods[inv][4])
    closing = ("post", mods[inv][3], mods[inv][4]) if after < 0 else \
        ("pre", mods[after][3], mods[after][4]) if mods[after][3] is not None else None
    return opening, mods[before][1] if before >= 0 else mods[inv][0], closing, \
        mods[after][0] if after >= 0 else mods[inv][1]


def draws(t, calls, drawing):
    """Where the generator's state is recorded for each random call among
    calls (indices into t.calls): {call: the event (place's) that begins
    its stretch of module code}, or None where a call's stretch is not
    known (a module call without a name) or a call of the stretch drew
    before it (drawing(call): whether a call draws), so that the state
    there is not the one it draws from."""
    out = {}
    for ci in calls:
        s = stretch(t, ci)
        if s is None or any(drawing(j) for j in range(s[1], ci)):
            return None
        out[ci] = s[0]
    return out


def place(t, drop, src):
    """The windows for a plan that drops the values drop (their saved
    tensors become handles) and starts recomputations from the values src:
    ({opening event: (its first saved tensor, end, closing event)}, {saved
    tensor index: value}, {a module call's end event: [(place among its
    output's tensors, value)]}, [the values in src that neither gives]),
    or None (see the module's docstring). A value in src that no window
    can take from a save is taken where a module call that returns it ends
    (a DenseNet's conv output, which only a concatenation reads, and it
    saves nothing), else where its call makes it, by the applier's reader
    (apply._Reader: T5's relative position buckets). A window
    is a stretch of one module call's own code: from its beginning or the
    end of a child's call to the beginning of its next child's call or its
    own end; an event is ("pre" or "post", module name, its call). Each
    dropped value's saves and one save of each src value lie in windows.
    Every save in a window passes the hooks, so that the applier can check
    their number when the window closes: a save more or fewer there would
    move every later one's value."""
    mods = t.modules
    if not mods or mods[0][3] != "" or len(t.pack_modules) != len(t.pack_values):
        return None
    children = [[] for _ in mods]
    for i, m in enumerate(mods):
        if m[2] >= 0:
            children[m[2]].append(i)
    gap_of = {}  # saved tensor -> its window's (module call, the child before it or -1), or None

    def gap(k):
        if k not in gap_of:
            gap_of[k] = _gap(t, children, k)
        return gap_of[k]

    chosen = [k for k, v in enumerate(t.pack_values) if v in drop]
    if any(gap(k) is None for k in chosen):
        return None
    gaps = {gap(k) for k in chosen}
    returned = None  # value -> the module call that returns it and ends first
    taken, made = {}, []
    for v in sorted(src):
        val = t.values[v]
        if val.overwritten >= 0:
            return None  # its storage holds another value by the backward
        # one written in place after autograd saved a copy of it (capture's `moved`: SiLU, Hardswish
        # and ReLU6 in place) lives on in that copy, which its writer's node saved
        cand = [k for k, u in enumerate(t.pack_values) if u == v and gap(k) is not None and (
            val.moved < 0 or t.pack_ops[k] == val.moved)]
        if not cand:
            if returned is None:
                returned = {}
                for i in sorted(t.module_outputs, key=lambda i: mods[i][1]):
                    for j, u in t.module_outputs[i]:
                        returned.setdefault(u, (i, j))
            if val.moved >= 0:
                return None
            if v not in returned or mods[returned[v][0]][3] is None:
                made.append(v)
                continue
            i, j = returned[v]
            taken.setdefault(("post", mods[i][3], mods[i][4]), []).append((j, v))
            continue
        k = next((k for k in cand if gap(k) in gaps), cand[0])  # one in a window already open, else the first
        chosen.append(k)
        gaps.add(gap(k))
    spans = {}
    for k in range(len(t.pack_values)):
        g = gap(k) if t.pack_modules[k] >= 0 else None
        if g not in gaps:
            continue
        if g in spans and spans[g][1] != k:
            return None  # not contiguous: saves of another module call between
        spans[g] = (spans[g][0] if g in spans else k, k + 1)
    want, at, out = drop | src, {}, {}
    for (inv, before), (first, end) in spans.items():
        at.update((k, t.pack_values[k]) for k in range(first, end) if t.pack_values[k] in want)
        kids = children[inv]
        nxt = kids.index(before) + 1 if before >= 0 else 0
        after = kids[nxt] if nxt < len(kids) else -1
        opening = ("post", mods[before][3], mods[before][4]) if before >= 0 else ("pre", mods[inv][3], mods[inv][4])
        closing = ("pre", mods[after][3], mods[after][4]) if after >= 0 else ("post", mods[inv][3], mods[inv][4])
        if opening in out:
            return None
        out[opening] = (first, end, closing)
    return _merged(out), at, taken, made


def _merged(out):
    """Windows with no saved tensor between them as one window, from the
    first's opening event to the last's closing one: the hooks stay on
    over the module calls between (capture saw no save there, and the
    count at the closing says if the step saved one), and those calls'
    module hooks do not run (ResNet-18's midpoint: 5 windows from its
    max-pool to its first block's second conv, one window)."""
    merged, last = {}, None
    for opening, (first, end, closing) in sorted(out.items(), key=lambda kv: kv[1][0]):
        if last is not None and merged[last][1] == first:
            merged[last] = (merged[last][0], end, closing)
        else:
            merged[opening], last = (first, end, closing), opening
    return merged


def _gap(t, children, k):
    """The window saved tensor k lies in, (its innermost module call, the
    child call that ended before it or -1), or None where that is not
    known: outside the model's call, in a module call without a name, or
    next to a child call that ran no op (its place among the saves at the
    same call is not known)."""
    mods = t.modules
    inv, at = t.pack_modules[k], t.pack_calls[k]
    if inv < 0 or mods[inv][3] is None or not mods[0][0] <= at <= mods[0][1]:
        return None
    before = -1
    for c in children[inv]:
        first, end = mods[c][0], mods[c][1]
        if mods[c][3] is None or (first == end == at):
            return None
        if end <= at:
            before = c
    return inv, before
