"""The applier's replay rules, each on a step whose plan is set by
hand (the ops named below recomputed for the backward), against the same
step without a plan:

- a recomputed op that writes a view of a value in place (T5's
  _shift_right: shifted[..., 1:] = ids[..., :-1]) makes the whole value
  again, not the view: its replay writes to a copy of the whole storage
  (once a RuntimeError inside loss.backward(): setStorage ... out of
  bounds, the value restored onto a copy of the slice);
- a storage is a value only while it lives: the address of a value freed
  in the forward, taken by a tensor made where no captured call makes it
  (torch.tensor(...)), is not that value (once silently wrong gradients:
  the backward read the recomputed value instead of the new tensor);
- a random op given its own torch.Generator replays from that
  generator's state when it first drew (once it drew from the default
  generator's, silently another mask);
- a recomputed op whose output nothing reads (a dropout's product before
  a residual add: the backward needs its mask and input, not its output)
  never runs again, and what only it would have read is freed after its
  last read all the same (once a mask and its input were held to the
  step's end: HuggingFace's GPT-2 measured 4.8% above its prediction);
- a dropped value is saved by its reader, often in another module than
  its maker: the saved-tensor hooks are on where one is saved, and only
  there (every other saved tensor passes no Python): while the dispatch
  mode is on, between the two calls it is saved between; just after a
  run of the mode, until it is saved; elsewhere, in the module call
  where it is saved;
- the dispatch mode is on over runs of sibling module calls where that
  costs less than turning it on and off around each (regions.cover), and
  a run whose modules run fewer ops than when captured is refused, naming
  them."""
import contextlib
import copy

import pytest
import torch
import torch.nn as nn

import remat.torch as rt


@pytest.fixture
def following(monkeypatch):
    """The applier follows calls with its dispatch mode (regions.py), as for
    a plan whose recipes capture's forms cannot give (windows.py)."""
    from remat.torch import windows
    monkeypatch.setattr(windows, "place", lambda *a: None)


def force(plan, ops):
    """plan, changed to drop ops' outputs and recompute them at once."""
    plan.recompute_ops = sorted(ops)
    plan.drop_ops = sorted(set(plan.drop_ops) | set(ops))
    plan.recompute_groups = [sorted(ops)]
    plan._decisions = None
    return plan


def grads(model, inputs, plan):
    m = copy.deepcopy(model)
    if plan is None:
        loss = m(*inputs)
        loss.backward()
    else:
        with plan.apply():
            loss = m(*inputs)
            loss.backward()
    return [loss.detach()] + [p.grad for p in m.parameters()]


def check(model, inputs, pick):
    t = rt.capture(model, inputs, lambda o: o)
    plan = force(rt.plan_trace(t, None), pick(t))
    assert plan.recompute_ops
    ref, got = grads(model, inputs, None), grads(model, inputs, plan)
    assert all(a is not None and torch.equal(a, b) for a, b in zip(ref, got))
    return t, plan


class ShiftRight(nn.Module):
    """transformers' T5 _shift_right, then an embedding (which saves the int64 ids)."""

    def __init__(self):
        super().__init__()
        self.emb, self.lin = nn.Embedding(64, 32), nn.Linear(32, 32)

    def forward(self, ids):
        shifted = ids.new_zeros(ids.shape)
        shifted[..., 1:] = ids[..., :-1].clone()
        shifted[..., 0] = 0
        shifted.masked_fill_(shifted == -100, 0)
        return self.lin(self.emb(shifted)).sum()


def test_replayed_write_into_a_view_makes_the_whole_value():
    torch.manual_seed(0)
    ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))

    def before_embedding(t):
        e = next(o.id for o in t.ops if o.name == "aten::embedding")
        return [o.id for o in t.ops[:e]]

    t, plan = check(ShiftRight(), (ids,), before_embedding)
    assert "aten::copy_" in plan.recomputed  # the write into shifted[..., 1:]


class MadeInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(32, 256), nn.Linear(256, 256)
        self.rows = None  # the Python data of c, made before a is freed (its lists would take a's memory)
        self.reused = []  # whether c took a's address, per step

    def forward(self, x):
        a = torch.tanh(self.l1(x))
        b = self.l2(a)
        at = a.untyped_storage().data_ptr()
        del a  # under the plan its storage is freed here
        c = torch.tensor(self.rows)  # no aten call makes it: the dispatch mode sees it first read
        self.reused.append(c.untyped_storage().data_ptr() == at)
        return (b * c).sum()


def test_freed_address_is_not_the_value():
    """End to end: the step frees a (the plan drops it) and makes c with
    torch.tensor; where the allocator gives c a's address (glibc did, in
    the step without the fix), the backward must read c, not a recomputed
    a. Whether it does depends on the allocator: test_address_of_a_dead_storage
    checks the rule itself."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))
    model = MadeInForward()
    model.rows = [[float(i % 7) for i in range(256)] for _ in range(64)]
    # tanh and the linear before it recomputed: tanh's output is dropped in the forward
    t = rt.capture(model, (x,), lambda o: o)
    plan = force(rt.plan_trace(t, None), [o.id for o in t.ops if o.name in ("aten::addmm", "aten::tanh")][:2])
    ref = grads(model, (x,), None)
    for _ in range(5):
        got = grads(model, (x,), plan)
        assert all(torch.equal(a, b) for a, b in zip(ref, got))


def test_address_of_a_dead_storage():
    """The rule, with the address reuse made by hand: an entry for c's
    address that names a storage since freed is not c's value, in the
    applier (pack hands out no handle for it) and in capture (c is a new
    input)."""
    from remat.torch.apply import Applier
    from remat.torch.capture import Trace, Value, _Recorder, _skey, _weak
    from remat.torch.decisions import Decisions
    ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
    t = rt.capture(ShiftRight(), (ids,), lambda o: o)
    plan = force(rt.plan_trace(t, None), [0, 1])
    app = Applier(plan, Decisions(plan))
    dead = torch.empty(16)
    gone = _weak(dead)
    del dead
    c = torch.empty(16)
    v = next(iter(app.rec_vals))
    app.vmap[_skey(c)] = (v, gone)
    assert app.value_of(c) is None and app.pack(c) is c
    app.vmap[_skey(c)] = (v, _weak(c))
    assert app.value_of(c) == v and app.pack(c) is not c
    rec = _Recorder(Trace(), {}, None)
    rec.t.values.append(Value(0, "activation", 64))  # the value that held the dead storage
    rec.live[_skey(c)], rec.refs[_skey(c)] = 0, gone
    assert rec.known(c) is None
    assert rec._value_of(c) == 1 and rec.t.values[1].kind == "input"  # not value 0: a new input
    assert rec.known(c) == 1


class OwnGenerator(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.gen = nn.Linear(64, 64), torch.Generator().manual_seed(5)

    def forward(self, x):
        h = torch.tanh(self.lin(x))
        return (h * torch.bernoulli(torch.full_like(h, 0.5), generator=self.gen)).sum()


def test_random_op_with_its_own_generator():
    try:
        copy.deepcopy(torch.Generator())
    except TypeError:
        pytest.skip("this PyTorch cannot deep-copy a torch.Generator, which the test's models hold")
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(0))
    model = OwnGenerator()
    t = rt.capture(model, (x,), lambda o: o)
    plan = force(rt.plan_trace(t, None), [o.id for o in t.ops if o.name in ("aten::full_like", "aten::bernoulli")])
    assert any(t.ops[o].random for o in plan.recompute_ops)
    ref = grads(model, (x,), None)  # each on a deep copy of the model: its generator in the same state
    got = grads(model, (x,), plan)
    assert all(torch.equal(a, b) for a, b in zip(ref, got))


class DropoutResidual(nn.Module):
    """x + dropout(fc2(gelu(fc1(x)))), twice: HuggingFace's GPT-2 MLP."""

    def __init__(self):
        super().__init__()
        self.fc = nn.ModuleList([nn.Linear(64, 64) for _ in range(4)])
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        for i in (0, 2):
            x = x + self.drop(self.fc[i + 1](torch.nn.functional.gelu(self.fc[i](x))))
        return x.square().mean()


def dropout_residual():
    """DropoutResidual, its input and its captured step."""
    torch.manual_seed(0)
    model = DropoutResidual()
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(3))
    return model, x, rt.capture(model, (x,), lambda o: o)


def run_forced(model, x, plan):
    """One step of a copy of model under plan, checked bitwise against the
    step without it; the applier, and what it still held after the backward
    (before the context lets everything go)."""
    m = copy.deepcopy(model)
    torch.manual_seed(11)
    with plan.apply(m) as ap:
        loss = m(x)
        loss.backward()
        held = set(ap.applier.cache) | set(ap.applier.src)
    torch.manual_seed(11)
    ref = grads(model, (x,), None)
    assert torch.equal(ref[0], loss.detach()) and all(torch.equal(g, p.grad) for g, p in zip(ref[1:], m.parameters()))
    return ap.applier, held


def test_recomputed_op_nothing_reads_frees_its_inputs():
    model, x, t = dropout_residual()
    # the second block but its residual add: fc, gelu, fc, the mask, the dropout's product
    adds = [o.id for o in t.ops if o.name == "aten::add"]
    second = list(range(adds[0] + 1, adds[1]))
    assert [t.ops[o].name for o in second][-2:] == ["aten::empty_like", "aten::mul"], [t.ops[o].name for o in second]
    a, held = run_forced(model, x, force(rt.plan_trace(t, None), second))
    waiting = {v: n for v, n in a.uses.items() if n > 0}
    assert not waiting, "values still awaiting reads after the backward (held to the step's end): %s" % {
        v: (t.ops[t.values[v].producer].name, n) for v, n in waiting.items()}
    # and nothing still held: an idle op's inputs were released at their last
    # read (they stayed in the cache, or kept from the forward, once: on a
    # traced Llama the final norm's output, 2 MB through the whole backward)
    assert not held, "values held after the backward: %s" % {v: t.ops[t.values[v].producer].name for v in held}
    assert a.replays < len(second), "the dropout's product is not run again"


def test_an_idle_recomputation_releases_what_it_would_have_read():
    # the dropout's product recomputed (with the first block's GELU, which a
    # backward reads): nothing in the backward reads the product (the
    # residual add saves nothing), so it never runs again, and the second
    # fc's output and the mask, kept from the forward for it, must go when
    # the backward starts (once they stayed to the step's end)
    model, x, t = dropout_residual()
    adds = [o.id for o in t.ops if o.name == "aten::add"]
    product = adds[1] - 1
    gelu = next(o.id for o in t.ops if o.name == "aten::gelu")  # the first block's: its fc's backward reads it
    assert t.ops[product].name == "aten::mul"
    a, held = run_forced(model, x, force(rt.plan_trace(t, None), [gelu, product]))
    assert a.replays == 1  # the GELU
    assert not held, "values held after the backward: %s" % {v: t.ops[t.values[v].producer].name for v in held}


class Blocks(nn.Module):
    """fc, GELU (a module of its own), fc: six times, then a sum."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32)) for _ in range(6))

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return x.sum()


def test_the_hooks_are_on_where_a_dropped_value_is_saved_and_only_there(monkeypatch, following):
    from remat.torch import regions
    from remat.torch.decisions import Decisions
    model = Blocks()
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    gelu = [o.id for o in t.ops if o.name == "aten::gelu"][2]  # block 2's: block 2's second fc saves its output
    plan = force(rt.plan_trace(t, None), [gelu])
    d = Decisions(plan)
    assert not d.hooks_everywhere
    # the mode: on over the GELU alone (recorded; the fc output it reads is
    # learnt there, not where the fc makes it); the second fc saves the
    # GELU's output just after: the hooks stay on from the GELU's end until
    # that save, and are on nowhere else
    (first, end, last), = d.regions.values()
    assert list(d.regions) == [("blocks.2.1", 0)] and last == ("blocks.2.1", 0), d.regions
    assert d.closing == {("blocks.2.1", 0): 1} and not d.hook_regions and not d.hook_gaps, \
        (d.closing, d.hook_regions, d.hook_gaps)
    ran = []  # the module hooks that run in the step: each module has only those it uses
    enter, exit_ = regions.Regions._enter, regions.Regions._exit

    def pre(self, name):
        ran.append(("pre", name))
        enter(self, name)

    def post(self, name, out):
        ran.append(("post", name))
        exit_(self, name, out)

    monkeypatch.setattr(regions.Regions, "_enter", pre)
    monkeypatch.setattr(regions.Regions, "_exit", post)
    a, held = run_forced(model, x, plan)
    assert ran == [("pre", "blocks.2.1"), ("post", "blocks.2.1")], ran
    assert a.replays == 1 and not held
    dropped = sum(1 for v in t.pack_values if v in d.rec_vals)
    assert dropped and sum(a.packs.values()) == dropped, "every saved tensor of the dropped value is a handle"
    assert a.n_packs == dropped, "only the dropped value's saved tensor passes Python (%d of %d did)" % (
        a.n_packs, len(t.pack_ops))


class ConvBN(nn.Module):
    """A ResNet's stem and first conv: conv, BatchNorm, ReLU in place, conv."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1, self.bn, self.relu = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.conv2(self.relu(self.bn(self.conv1(x)))).sum()


def bn_recomputed(model):
    """A batch for a ConvBN-like model, its trace, and a plan that recomputes its BatchNorm."""
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    bn = next(o.id for o in t.ops if o.name == "aten::native_batch_norm")
    return x, t, force(rt.plan_trace(t, None), [bn])


def test_while_the_mode_is_on_the_hooks_are_on_between_two_calls_only(following):
    # ResNet-18's midpoint: a BatchNorm recomputed. The mode follows the
    # BatchNorm (recorded: the conv output it reads, which its replay
    # starts from, is learnt there) and the ReLU (it overwrites the
    # BatchNorm's output); the hooks are on only after the BatchNorm (its
    # statistics, which it saves), after the ReLU (its result) and, once
    # the mode is off, until the second conv saves its input: only the
    # dropped values' saved tensors pass Python, not the BatchNorm's input
    # and weights nor the conv's weight
    from remat.torch.decisions import Decisions
    model = ConvBN()
    x, t, plan = bn_recomputed(model)
    d = Decisions(plan)
    (first, end, last), = d.regions.values()
    assert list(d.regions) == [("bn", 0)] and last == ("relu", 0) and not d.hook_regions, (d.regions, d.hook_regions)
    assert len(d.hook_gaps) == 2 and d.closing == {("bn", 0): 1}, (d.hook_gaps, d.closing)
    a, held = run_forced(model, x, plan)
    assert a.replays == 1 and not held
    assert sum(a.packs.values()) == sum(1 for v in t.pack_values if v in d.rec_vals)
    assert a.n_packs == sum(a.packs.values()), "saved tensors passed Python where nothing dropped is saved"


class TwoTanh(torch.autograd.Function):
    """tanh(tanh(x)) by the modules it is given, saving both outputs after
    the second, the second's first: where no call of the module it is
    applied in is next to the save."""

    @staticmethod
    def forward(ctx, x, first, second):
        y = first(x)
        z = second(y)
        ctx.save_for_backward(z, y)
        return z

    @staticmethod
    def backward(ctx, g):
        z, y = ctx.saved_tensors
        return g * (1 - z * z) * (1 - y * y), None, None


class Saves(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc, self.first, self.second, self.out = nn.Linear(16, 16), nn.Tanh(), nn.Tanh(), nn.Linear(16, 4)

    def forward(self, x):
        return self.out(TwoTanh.apply(self.fc(x), self.first, self.second)).sum()


@pytest.mark.parametrize("close", [1, 0])
def test_a_save_the_mode_cannot_reach_is_hooked_after_its_run_or_in_its_module_call(monkeypatch, close, following):
    # a custom autograd Function saves the first tanh's output in the
    # model's own code, after the second tanh's output and a call of
    # another module: the mode could be on there only over the whole model.
    # The hooks stay on from the first tanh's end until that save, the
    # second's output passing them too, where at most CLOSE_PACKS others
    # do (close=1); else they are on in the model's call (close=0). The
    # same bits either way
    from remat.torch import regions
    from remat.torch.decisions import Decisions
    monkeypatch.setattr(regions, "CLOSE_PACKS", close)
    model = Saves()
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    tanh = next(o.id for o in t.ops if o.name == "aten::tanh")
    plan = force(rt.plan_trace(t, None), [tanh])
    d = Decisions(plan)
    assert list(d.regions) == [("first", 0)] and not d.hook_gaps, d.regions
    if close:
        assert d.closing == {("first", 0): 1} and not d.hook_regions, (d.closing, d.hook_regions)
    else:
        assert not d.closing and d.hook_regions == {("", 0)}, (d.closing, d.hook_regions)
    a, held = run_forced(model, x, plan)
    assert a.replays == 1 and not held and a.packs == {v: 1 for v in d.rec_vals}
    assert a.n_packs == (2 if close else len(t.pack_ops))  # the model's call: every tensor saved


class Crossed(nn.Module):
    """Two fcs, a tanh of the first's output and a sigmoid of the first's or
    the second's (cross): the same ops either way."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)
        self.cross = False

    def forward(self, x):
        a, b = self.a(x), self.b(x)
        return (torch.tanh(a) + torch.sigmoid(b if self.cross else a) + b).sum()


def test_a_step_that_reads_other_tensors_than_captured_is_refused():
    # the tanh and the sigmoid recomputed from the fc's output they both
    # read, learnt where the tanh reads it: under plan.apply(follow=True), a
    # step whose sigmoid reads the other fc's output (the same ops, another
    # data flow) is refused in the forward, not replayed from the wrong
    # tensor. (Windows replay the captured data flow: the fc's output is
    # taken where its module returns it)
    from remat.torch.decisions import Decisions
    model = Crossed()
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    ops = [o.id for o in t.ops if o.name in ("aten::tanh", "aten::sigmoid")]
    plan = force(rt.plan_trace(t, None), ops)
    assert Decisions(plan).taken == {("post", "a", 0): [(0, t.ops[ops[0]].inputs[0])]}
    run_forced(model, x, plan)
    model.cross = True
    with pytest.raises(rt.CaptureError, match="reads another tensor"):
        with plan.apply(model, follow=True) as ap:
            assert ap.applier is None or ap.applier.windows is None
            model(x).backward()


def test_a_window_plan_checks_its_replays_bits(monkeypatch):
    # the same step under the window plan: its replays read capture's data
    # flow, so the sigmoid is made again from the wrong fc's output; the
    # step's end finds its bits differ from the forward's (fingerprints of
    # the dropped values) and refuses the step, in every step checked
    # (the plan's first, then one in VERIFY_EVERY)
    from remat.torch import apply
    model = Crossed()
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    ops = [o.id for o in t.ops if o.name in ("aten::tanh", "aten::sigmoid")]
    plan = force(rt.plan_trace(t, None), ops)
    a, held = run_forced(model, x, plan)  # the plan's first step: checked, the same bits
    assert a.verifying and a.windows is not None and len(a.checks) == 0 and a.replays == 2
    model.cross = True
    monkeypatch.setattr(apply, "VERIFY_EVERY", 1)
    sigmoid = t.ops[ops[1]].outputs[0]
    with pytest.raises(rt.CaptureError, match=r"\(%d, made by aten::sigmoid\): the model.s data flow" % sigmoid):
        with plan.apply(model):
            model(x).backward()


def test_batchnorm_replays_without_its_statistics():
    # a recomputed BatchNorm (training mode) runs again without its running
    # statistics: the same bits (its outputs do not read them), nothing to
    # copy, and the statistics changed once, by the step's first run
    import user_models as um

    from remat.torch.recipes import _stateless
    torch.manual_seed(0)
    model = um.BNNet()
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o.sum())
    bns = [o.id for o in t.ops if o.name == "aten::native_batch_norm"]
    assert bns and all(t.ops[o].stateful for o in bns)
    plan = force(rt.plan_trace(t, None), bns)
    ref, got = copy.deepcopy(model), copy.deepcopy(model)
    ref(x).sum().backward()
    with plan.apply(got) as ap:
        got(x).sum().backward()
    assert ap.applier.replays == len(bns)
    assert all(torch.equal(a, b) for a, b in zip(ref.state_dict().values(), got.state_dict().values()))
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ref.parameters(), got.parameters()))
    recipe = ap.applier.recipes[bns[0]][0]
    (args, _), writes = _stateless(recipe.func, (recipe.args, recipe.kwargs), recipe.writes)
    assert args[3] is None and args[4] is None and writes == ()


class _Mods:
    """A trace's module calls and calls, as regions.cover reads them."""

    def __init__(self, modules, n_calls):
        # modules: [first call, end, parent, name, its call]; each call's
        # innermost module call is the last one (in pre-order) that holds it
        self.modules = [list(m) for m in modules]
        self.call_module = [max((i for i, m in enumerate(modules) if m[0] <= c < m[1]), default=-1)
                            for c in range(n_calls)]


def test_cover_runs_siblings_where_one_toggle_costs_less():
    from remat.torch import regions
    assert 2 <= regions.TOGGLE_CALLS < 20  # what each case below assumes of a toggle's cost (k)
    # the model (calls 0..40): a (0..4), b (4..8), c (8..30; its children
    # c.x (8..9) and c.y (29..30)), d (30..40)
    t = _Mods([[0, 40, -1, "", 0], [0, 4, 0, "a", 0], [4, 8, 0, "b", 0], [8, 30, 0, "c", 0],
               [8, 9, 3, "c.x", 0], [29, 30, 3, "c.y", 0], [30, 40, 0, "d", 0]], 40)
    assert regions.cover(t, []) == []
    assert regions.cover(t, [1]) == [(1, 1)]  # a alone
    assert regions.cover(t, [1, 5]) == [(1, 2)]  # a and b adjacent: one run costs k + 8, two cost 2k + 8
    assert regions.cover(t, [8, 29]) == [(4, 4), (5, 5)]  # c.x and c.y: 2k + 2 against k + 22 for c
    assert regions.cover(t, [8, 15, 29]) == [(3, 3)]  # a call of c's own code between them: c whole
    assert regions.cover(t, [8, 15]) == [(3, 3)]
    assert regions.cover(t, [1, 35]) == [(1, 1), (6, 6)]  # a run a..d would follow all 40
    assert regions.cover(t, [1, 5, 8, 31]) == [(1, 2), (4, 4), (6, 6)]
    nameless = _Mods([[0, 10, -1, "", 0], [2, 4, 0, None, 0]], 10)
    assert regions.cover(nameless, [3]) is None  # a module call the applier cannot hook
    # a module called before (a block's one ReLU): its pre-hook and forward hook run for each
    # earlier call too, half a toggle each; its 3rd call alone costs k * 3 + 1 = 7, its block's
    # whole call k + 6 = 8, its 4th call alone k * 4 + 1 = 9
    for occurrence, runs in ((2, [(2, 2)]), (3, [(1, 1)])):
        reused = _Mods([[0, 40, -1, "", 0], [4, 10, 0, "block", 0], [9, 10, 1, "block.relu", occurrence]], 40)
        assert regions.cover(reused, [9]) == runs, (occurrence, regions.cover(reused, [9]))


class ConvBNTwice(ConvBN):
    """ConvBN, its ReLU module called again after the second conv."""

    def forward(self, x):
        return self.relu(self.conv2(self.relu(self.bn(self.conv1(x))))).sum()


def test_a_module_hook_goes_after_the_last_call_it_must_see(monkeypatch, following):
    # the run ends at the ReLU's first call: its forward hook goes then, and
    # the ReLU's second call runs no hook of the applier's
    from remat.torch import regions
    from remat.torch.decisions import Decisions
    model = ConvBNTwice()
    x, t, plan = bn_recomputed(model)
    (first, end, last), = Decisions(plan).regions.values()
    assert last == ("relu", 0), last
    ran, exit_ = [], regions.Regions._exit

    def post(self, name, out):
        ran.append(name)
        exit_(self, name, out)

    monkeypatch.setattr(regions.Regions, "_exit", post)
    a, held = run_forced(model, x, plan)
    assert ran == ["relu"] and a.replays == 1 and not held, ran


class _Act(nn.Module):
    """GELU, then a scale that the step may skip."""

    def __init__(self):
        super().__init__()
        self.scaled = True

    def forward(self, x):
        y = nn.functional.gelu(x)
        return y * 0.5 if self.scaled else y


def test_a_run_that_runs_fewer_ops_is_refused_naming_its_modules(following):
    from remat.torch.capture import CaptureError
    from remat.torch.decisions import Decisions
    model = Blocks()
    for b in model.blocks:
        b[1] = _Act()
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    gelu = [o.id for o in t.ops if o.name == "aten::gelu"][2]
    fc = max(o.id for o in t.ops if o.name == "aten::addmm" and o.id < gelu)  # the fc before it
    plan = force(rt.plan_trace(t, None), [fc, gelu])
    (first, end, last), = Decisions(plan).regions.values()
    assert last == ("blocks.2.1", 0)
    model.blocks[2][1].scaled = False  # one op fewer: the scale
    with pytest.raises(CaptureError, match="modules 'blocks.2.0' to 'blocks.2.1' ran %d ops where the captured step "
                       "ran %d" % (end - first - 1, end - first)):
        with plan.apply():
            model(x).backward()


def test_the_garbage_collector_waits_for_the_steps_end():
    # the applier's objects live for the step and go by reference count:
    # Python's cyclic collector is off inside plan.apply() and on again
    # after it, also when the step fails, and stays off where it was off
    import gc
    model = Blocks()
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    gelu = [o.id for o in t.ops if o.name == "aten::gelu"][2]
    plan = force(rt.plan_trace(t, None), [gelu])
    assert gc.isenabled()
    with plan.apply():
        assert not gc.isenabled()
        model(x).backward()
    assert gc.isenabled()
    model.zero_grad()
    with pytest.raises(RuntimeError, match="the user's"):
        with plan.apply():
            model(x)
            raise RuntimeError("the user's")
    assert gc.isenabled()
    gc.disable()
    try:
        with plan.apply():
            model(x).backward()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_plan_whose_recipes_capture_gives_runs_with_no_dispatch_mode(monkeypatch):
    # ResNet-18's midpoint: a BatchNorm (with its in-place ReLU) recomputed.
    # Its recipe is capture's form of its calls (the conv output it reads,
    # its weight and bias by name), and autograd's saves tell its values:
    # the hooks are on in the module calls where one of them is saved, and
    # no call passes the dispatch mode
    from remat.torch import apply
    from remat.torch.decisions import Decisions
    model = ConvBN()
    x, t, plan = bn_recomputed(model)
    d = Decisions(plan)
    assert not d.regions and not d.full and not d.hooks_everywhere and d.windows, (d.regions, d.windows)
    assert {e[0][1] for e in d.windows.items()} | {e[1][2][1] for e in d.windows.items()} <= {"bn", "relu", "conv2"}, \
        d.windows  # each window is the whole call of a module without children: from its beginning to its end
    # the BatchNorm's, the ReLU's and the conv's saves come back to back: one window from the
    # BatchNorm's beginning to the conv's end (windows._merged), two module hooks
    assert len(d.windows) == 1, d.windows
    dispatched = []
    monkeypatch.setattr(apply.Applier, "__torch_dispatch__", lambda self, *a, **k: dispatched.append(a))
    packed, pack = [], apply.Applier.window_pack

    def counting(self, x):
        packed.append(x)
        return pack(self, x)

    monkeypatch.setattr(apply.Applier, "window_pack", counting)
    a, held = run_forced(model, x, plan)
    assert not dispatched and a.replays == 1 and not held
    dropped = sum(1 for v in t.pack_values if v in d.rec_vals)
    assert sum(a.packs.values()) == dropped and a.done == len(d.windows)
    assert len(packed) == sum(e - f for f, e, _ in d.windows.values()) < len(t.pack_values)


class _ReLUMore(nn.ReLU):
    """An in-place ReLU that may scale its input by itself first (two saves more)."""

    def __init__(self):
        super().__init__(inplace=True)
        self.more = False

    def forward(self, x):
        return super().forward(x * x if self.more else x)


class SavesMore(ConvBN):
    def __init__(self):
        super().__init__()
        self.relu = _ReLUMore()


def test_a_window_whose_saves_differ_from_capture_is_refused():
    from remat.torch.capture import CaptureError
    from remat.torch.decisions import Decisions
    model = SavesMore()
    x, t, plan = bn_recomputed(model)
    assert list(Decisions(plan).windows) == [("pre", "bn", 0)]  # bn, relu and conv2 (windows._merged)
    model.relu.more = True  # the square saves its input twice, before the ReLU saves its output
    with pytest.raises(CaptureError, match="other ops than when it was planned"):
        with plan.apply():
            model(x).backward()


class Scaled(nn.Module):
    """fc, a scale the loop changes from step to step (a temperature), GELU, fc."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2, self.scale = nn.Linear(16, 32), nn.Linear(32, 4), 0.5

    def forward(self, x):
        return self.fc2(nn.functional.gelu(self.fc1(x) * self.scale)).square().sum()


def test_a_recipe_reads_a_float_the_code_may_change_in_the_step(monkeypatch):
    # capture's form would hold the scale of the step it captured: the
    # applier reads the step's own where the scale's stretch of module code
    # runs (between fc1's end and fc2's beginning), with a dispatch mode on
    # there only, and replays it (the step's gradients are compared bitwise)
    from remat.torch import apply
    from remat.torch.decisions import Decisions
    model = Scaled()
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    mul = next(o.id for o in t.ops if o.name == "aten::mul")
    plan = force(rt.plan_trace(t, None), [mul])
    d = Decisions(plan)
    assert d.windows is not None and list(d.reads) == [("post", "fc1", 0)], (d.windows, d.reads)
    r = d.reads[("post", "fc1", 0)]
    first, end, closing, want = r.first, r.end, r.closing, r.floats
    assert closing == ("pre", "fc2", 0) and len(want) == 1 and end - first < len(t.calls)
    read, calls = [], []
    seen = apply._Reader.__torch_dispatch__

    def counting(self, func, *a, **k):
        calls.append(func)
        return seen(self, func, *a, **k)

    monkeypatch.setattr(apply._Reader, "__torch_dispatch__", counting)
    monkeypatch.setattr(apply.Applier, "__torch_dispatch__", lambda self, *a, **k: read.append(a))
    for scale in (0.5, 0.25, 2.0):  # the scale at capture, and two others
        model.scale = scale
        calls.clear()
        a, held = run_forced(model, x, plan)
        assert a.replays == 1 and not held and a.read_done == 1 and list(a.floats.values()) == [[scale]]
        assert len(calls) == end - first, calls  # the stretch's calls only
    assert not read  # no call through the applier's own mode


def test_a_stretch_whose_floats_are_read_and_that_runs_other_ops_is_refused():
    # the reader counts its stretch's calls against capture's: one op more
    # there (the scale applied twice) is refused at the stretch's end
    from remat.torch.capture import CaptureError
    model = Scaled()
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    plan = force(rt.plan_trace(t, None), [next(o.id for o in t.ops if o.name == "aten::mul")])
    m = copy.deepcopy(model)
    m.forward = lambda x: m.fc2(nn.functional.gelu(m.fc1(x) * m.scale * m.scale)).square().sum()
    with pytest.raises(CaptureError, match=r"other ops than when it was planned"):
        with plan.apply(m):
            m(x).backward()


class EmptyStart(nn.Module):
    """A cache's empty start (a tensor with no elements that is no
    parameter nor buffer), concatenated with an activation."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 4)
        self.start = torch.zeros(0, 32)

    def forward(self, x):
        h = torch.cat([self.start, torch.tanh(self.fc1(x))], 0)
        return self.fc2(h.relu()).square().sum()


def test_a_tensor_with_no_elements_is_made_again_from_its_shape():
    from remat.torch.decisions import Decisions
    model = EmptyStart()
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    cat = next(o.id for o in t.ops if o.name == "aten::cat")
    plan = force(rt.plan_trace(t, None), [cat, cat + 1])
    assert Decisions(plan).windows is not None, Decisions(plan).why
    a, held = run_forced(model, x, plan)
    assert a.replays == 2 and not held


class Buckets(nn.Module):
    """T5's relative position buckets, shortly: an int tensor made in the
    module's own code (arange) that no op saves and no module call
    returns, from which the buckets an embedding reads are computed."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.emb, self.fc2 = nn.Linear(16, 32), nn.Embedding(7, 32), nn.Linear(32, 4)

    def forward(self, x):
        h = self.fc1(x)
        pos = torch.arange(x.shape[0], device=x.device)
        return self.fc2(torch.tanh(h + self.emb((pos * 3) % 7))).square().sum()


def test_a_value_saved_nowhere_is_taken_where_its_call_makes_it(monkeypatch):
    # the buckets recomputed (the embedding's save of them a handle) from
    # the arange, which is saved nowhere: the reader, on in the stretch
    # between fc1's end and the embedding's beginning, takes it where its
    # call makes it
    from remat.torch import apply
    from remat.torch.decisions import Decisions
    model = Buckets()
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    ops = [o.id for o in t.ops if o.name in ("aten::mul", "aten::remainder")]
    assert len(ops) == 2, [o.name for o in t.ops]
    plan = force(rt.plan_trace(t, None), ops)
    d = Decisions(plan)
    assert d.windows is not None and list(d.reads) == [("post", "fc1", 0)], (d.why, d.reads)
    r = d.reads[("post", "fc1", 0)]
    assert r.closing == ("pre", "emb", 0) and not r.floats and len(r.takes) == 1, (r.floats, r.takes)
    (ci, [(_, v)]), = r.takes.items()
    assert t.calls[ci].name.startswith("aten.arange") and t.values[v].producer not in plan.recompute_ops
    dispatched = []
    monkeypatch.setattr(apply.Applier, "__torch_dispatch__", lambda self, *a, **k: dispatched.append(a))
    a, held = run_forced(model, x, plan)
    assert not dispatched and a.replays == 2 and a.read_done == 1 and not held


class AttentionP(nn.Module):
    """Attention whose dropout p the loop sets (0 when planned)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.qkv, self.out, self.p = nn.Linear(16, 48), nn.Linear(16, 4), 0.0

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 4, 3, 2, 8).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=self.p)
        return self.out(y.transpose(1, 2).reshape(2, 4, 16)).square().sum()


def test_attention_planned_without_dropout_is_refused_where_it_draws():
    # attention called with p = 0 draws nothing, and its replay draws
    # nothing: a step that calls it with p > 0 is refused in the forward
    from remat.torch.capture import CaptureError
    from remat.torch.decisions import Decisions
    model = AttentionP()
    x = torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    att = [o.id for o in t.ops if "attention" in o.name]
    assert len(att) == 1, [o.name for o in t.ops]
    plan = force(rt.plan_trace(t, None), att)
    assert Decisions(plan).reads
    a, _ = run_forced(model, x, plan)
    assert a.replays == 1
    model.p = 0.5
    with pytest.raises(CaptureError, match="draws for its dropout|other ops than when it was planned"):
        with plan.apply():
            model(x).backward()


def test_a_replay_reads_the_parameters_the_model_holds_in_its_step():
    # a window plan's recipe names the BatchNorm's weight and bias; a loop
    # that assigns new ones (load_state_dict(..., assign=True)) between two
    # steps of the same model replays with those, as the step without a
    # plan runs
    from remat.torch.decisions import Decisions
    model = ConvBN()
    x, t, plan = bn_recomputed(model)
    assert Decisions(plan).windows
    ref = copy.deepcopy(model)
    got = []
    for m, p in ((model, plan), (ref, None)):
        for step in range(2):
            if step:
                new = {k: v + 0.5 if k.startswith("bn.") and v.is_floating_point() else v.clone()
                       for k, v in m.state_dict().items()}
                m.load_state_dict(new, assign=True)
            m.zero_grad()
            with plan.apply() if p is not None else contextlib.nullcontext():
                m(x).backward()
        got.append([q.grad for q in m.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*got))


@pytest.mark.parametrize("pick", ["embedding", "midpoint"])
def test_a_decoder_runs_with_windows_bitwise(pick):
    # a Llama-style decoder: its attention draws nothing (no dropout), and a
    # recomputed embedding reads the batch, which the applier takes where
    # the model is called (wherever in its storage the loop's batch lies);
    # three AdamW steps bitwise as without a plan
    import library_models as lm
    import torch.nn.functional as F
    import user_models as um

    from remat.torch.decisions import Decisions
    torch.manual_seed(0)
    model = um.Llama(layers=2, dim=64, heads=4, vocab=128, context=32)
    g = torch.Generator().manual_seed(0)
    idx, tgt = torch.randint(0, 128, (2, 32), generator=g), torch.randint(0, 128, (2, 32), generator=g)

    def lf(o):
        return F.cross_entropy(o.reshape(-1, o.shape[-1]), tgt.reshape(-1))

    t = rt.capture(model, (idx,), lf)
    if pick == "embedding":
        plan = force(rt.plan_trace(t, None), [next(o.id for o in t.ops if o.name == "aten::embedding")])
    else:
        top, floor = rt.plan_trace(t, None, "adamw", "all"), rt.plan_trace(t, 1, "adamw").floor
        plan = rt.plan_trace(t, (floor + rt.budget_for(top.peak_bytes)) // 2, "adamw")
    d = Decisions(plan)
    assert plan.recompute_ops and d.windows and not d.regions
    assert d.input_src or pick != "embedding"
    # the loop's batches are slices of a larger tensor (a dataset in memory): each step's lies
    # elsewhere in its storage than the captured batch did in its own
    data = torch.cat([torch.randint(0, 128, (3, 32), generator=g), idx, idx.flip(0), idx])
    batch = [data[3:5], data[5:7], data[7:9]]
    ref = lm.loops.run(copy.deepcopy(model), lambda i: (batch[i],), lf, lm.optimizer, None, 3)
    got = lm.loops.run(copy.deepcopy(model), lambda i: (batch[i],), lf, lm.optimizer, plan, 3)
    assert not lm.differences(ref, got)
    if pick == "embedding":  # laid out otherwise: refused when the model is called, naming the input
        with pytest.raises(rt.CaptureError, match="read the model's input 0 as laid out"):
            with plan.apply():
                lf(model(data[3:5].t().contiguous().t())).backward()


def test_a_replay_reads_a_view_of_a_parameter_wherever_it_lies():
    # a recomputed fc reads a transposed view of its weight (addmm); the
    # loop's weight lies elsewhere in its storage than at capture (a
    # parameter made from a view of a larger buffer): the replay takes the
    # view from where the weight lies now, as the step without a plan does
    from remat.torch.decisions import Decisions
    model = Blocks()
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    fc = [o.id for o in t.ops if o.name == "aten::addmm"][4]  # block 2's first
    plan = force(rt.plan_trace(t, None), [fc])
    assert Decisions(plan).windows
    w = model.blocks[2][0].weight
    flat = torch.cat([torch.randn(100), w.detach().reshape(-1)])
    model.blocks[2][0].weight = nn.Parameter(flat[100:].view(w.shape))
    assert model.blocks[2][0].weight.storage_offset() == 100
    got = []
    for p in (plan, None):
        model.zero_grad()
        with plan.apply() if p is not None else contextlib.nullcontext():
            model(x).backward()
        got.append([q.grad.clone() for q in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*got))


def test_a_window_opens_before_the_modules_own_pre_hooks(monkeypatch):
    # a user's pre-hook on the second conv saves a tensor for the backward
    # (a product on the side, dropped at once): capture counted it in the conv's call (its
    # module hooks run before the module's own), so the window opens
    # before the user's hook runs (the windows apart: merged, the conv's
    # is inside the BatchNorm's)
    from remat.torch import windows
    from remat.torch.decisions import Decisions
    monkeypatch.setattr(windows, "_merged", lambda out: out)
    model = ConvBN()
    model.conv2.register_forward_pre_hook(
        lambda mod, args: (torch.ones(3, requires_grad=True) * torch.ones(3), None)[1])
    x, t, plan = bn_recomputed(model)
    assert ("pre", "conv2", 0) in Decisions(plan).windows
    a, held = run_forced(model, x, plan)
    assert a.replays == 1 and not held and a.done == len(Decisions(plan).windows)


def test_a_dropout_replays_from_the_generator_state_where_its_module_call_began(monkeypatch):
    # both dropout masks recomputed (nn.Dropout called twice): a window
    # plan records the generator's state where each of the module's calls
    # begins (no call draws before its own bernoulli there), and its
    # replay draws from that state: the same masks, with no call through
    # the dispatch mode. The floats its recipes hold (p, 1 - p) are
    # nn.Dropout's, checked when the step begins
    from remat.torch import apply
    from remat.torch.decisions import Decisions
    model, x, t = dropout_residual()
    masks = [o.id for o in t.ops if o.name == "aten::empty_like"]
    assert len(masks) == 2 and all(t.ops[o].random for o in masks)
    plan = force(rt.plan_trace(t, None), masks)
    d = Decisions(plan)
    assert d.windows and set(d.draws) == {("pre", "drop", 0), ("pre", "drop", 1)}, (d.windows, d.draws)
    assert "drop" in d.configs
    dispatched = []
    monkeypatch.setattr(apply.Applier, "__torch_dispatch__", lambda self, *a, **k: dispatched.append(a))
    a, held = run_forced(model, x, plan)  # its generator seeded otherwise than at capture
    assert not dispatched and a.replays == 2 and a.drawn == 2 and not held


def test_a_dropout_whose_p_changed_since_capture_is_followed():
    # the loop schedules the dropout's p: the window plan's recipes hold
    # capture's, so the step follows its calls and replays the step's own
    from remat.torch.decisions import Decisions
    model, x, t = dropout_residual()
    plan = force(rt.plan_trace(t, None), [o.id for o in t.ops if o.name == "aten::empty_like"])
    assert Decisions(plan).windows
    model.drop.p = 0.3
    a, held = run_forced(model, x, plan)
    assert a.windows is None and a.replays == 2 and not held
    model.drop.p = 0.1  # as captured: windows again
    a, held = run_forced(model, x, plan)
    assert a.windows is not None and a.replays == 2
    model.drop.register_forward_hook(lambda *args: None)  # a hook of the user's: its code may pass anything
    a, held = run_forced(model, x, plan)
    assert a.windows is None and a.replays == 2


class Noisy(nn.Module):
    """Noise drawn twice in one module call's own code (no floats): a VAE's
    reparameterisation, twice."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))  # which the ReLU saves: the applier takes it there
        a = torch.tanh(h + torch.randn_like(h))
        b = torch.sigmoid(h + torch.randn_like(h))
        return self.fc2(a * b).square().sum()


@pytest.mark.parametrize("which", [0, 1])
def test_only_a_stretchs_first_draw_replays_from_its_beginning(which):
    # the first noise's state is the module call's at its beginning; the
    # second's is not (the first drew in between): a plan recomputing it
    # follows the calls, and replays from the state recorded at its call
    from remat.torch.decisions import Decisions
    model = Noisy()
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    noise = [o.id for o in t.ops if o.name == "aten::randn_like"]
    assert len(noise) == 2
    add = next(o.id for o in t.ops if o.id > noise[which] and o.name == "aten::add")
    act = add + 1
    assert t.ops[act].name == ("aten::tanh", "aten::sigmoid")[which]
    plan = force(rt.plan_trace(t, None), [noise[which], add, act])
    d = Decisions(plan)
    assert (d.windows is not None) == (which == 0), d.windows
    if which == 0:
        assert list(d.draws) == [("post", "fc1", 0)]  # its stretch begins where fc1 ends
    a, held = run_forced(model, x, plan)
    assert a.replays == 3 and not held


def test_a_torch_transformer_layer_runs_with_windows_bitwise():
    # nn.TransformerEncoderLayer with dropout: its own code, its attention's
    # (the q scale) and its dropouts' floats are PyTorch's modules'
    # configuration; at the midpoint, three SGD steps under the window plan
    # as without a plan
    import library_models as lm
    import torch.nn.functional as F

    from remat.torch.decisions import Decisions
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), nn.Flatten(),
                          nn.Linear(8 * 32, 5))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 8, 32, generator=g), torch.randint(0, 5, (4,), generator=g)

    def lf(o):
        return F.cross_entropy(o, y)

    t = rt.capture(model, (x,), lf)
    top, floor = rt.plan_trace(t, None, "sgd", "all"), rt.plan_trace(t, 1, "sgd").floor
    plan = rt.plan_trace(t, (floor + rt.budget_for(top.peak_bytes)) // 2, "sgd")
    d = Decisions(plan)
    assert plan.recompute_ops and d.windows and any(n.endswith("self_attn") for n in d.configs), d.configs
    ref = lm.loops.run(copy.deepcopy(model), lambda i: (x,), lf, lm.optimizer, None, 3)
    got = lm.loops.run(copy.deepcopy(model), lambda i: (x,), lf, lm.optimizer, plan, 3)
    assert not lm.differences(ref, got)


class ConvBNReLU6(ConvBN):
    """ConvBN with MobileNet's ReLU6 in place: autograd saves a copy of the
    BatchNorm's output before hardtanh_ writes it (capture's `moved`)."""

    def __init__(self):
        super().__init__()
        self.relu = nn.ReLU6(inplace=True)


@pytest.mark.parametrize("pick", ["batchnorm", "relu6"])
def test_a_value_living_on_in_autogradss_copy_is_that_copys_save(pick):
    # the BatchNorm's output lives on in the copy hardtanh_'s node saved:
    # dropped, that save becomes a handle ("batchnorm"); read by a
    # recomputed ReLU6 ("relu6": it clones it and writes the clone), that
    # save is what the replay starts from. Both with windows (once: the
    # mode, capture's save of the copy named the value after it)
    from remat.torch.decisions import Decisions
    model = ConvBNReLU6()
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    bn = next(o.id for o in t.ops if o.name == "aten::native_batch_norm")
    relu6 = next(o.id for o in t.ops if o.name == "aten::hardtanh_")
    assert t.values[t.ops[bn].outputs[0]].moved == relu6
    plan = force(rt.plan_trace(t, None), [bn] if pick == "batchnorm" else [relu6])
    # the copy's save is told by its writer's node: before PyTorch 2.15 capture does not know each
    # save's node (Trace.pack_ops), and a recomputation starting from the copy follows calls
    assert Decisions(plan).windows or (pick == "relu6" and all(k < 0 for k in t.pack_ops))
    a, held = run_forced(model, x, plan)
    assert a.replays == 1 and not held
    if pick == "batchnorm":  # the copy's memory goes after the forward: its save is a handle
        assert a.packs.get(t.ops[bn].outputs[0]) == 1, a.packs


class UnreadLeaf(ConvBN):
    """ConvBN with a buffer its forward never reads (transformers' models
    hold some): capture leaves it out, and every value after it moves down
    one place."""

    def __init__(self):
        super().__init__()
        self.register_buffer("unused", torch.zeros(5))


def test_a_trace_without_an_unread_leaf_names_its_values_everywhere():
    # once: the values were renumbered but the saved tensors' values, the
    # calls' forms and the inputs' values kept the old numbers, so a
    # window plan's recipes read the wrong values (refused, or worse)
    from remat.torch.decisions import Decisions
    model = UnreadLeaf()
    x, t, plan = bn_recomputed(model)
    assert all(v.name != "unused" for v in t.values)
    saved = [v for v in t.pack_values if v >= 0]
    assert saved and all(t.values[v].kind in ("activation", "parameter", "buffer", "input") for v in saved)
    assert all(s.v < len(t.values) for c in t.calls if c.form for s in _slots(c.form))
    assert t.values[t.input_values[0]].kind == "input"
    assert Decisions(plan).windows
    a, held = run_forced(model, x, plan)
    assert a.replays == 1 and not held


def _slots(form):
    from remat.torch.trace import Slot, leaves
    return [a for a in leaves(form) if isinstance(a, Slot)]


class Dense(nn.Module):
    """A DenseNet's layer: two convs' outputs concatenated, then BatchNorm,
    ReLU and a conv. The concatenation saves nothing: its inputs are saved
    by no op (a conv saves its input, not its output)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1, self.conv2 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.bn, self.conv3 = nn.BatchNorm2d(8), nn.Conv2d(8, 4, 1)

    def forward(self, x):
        a = self.conv1(x)
        return self.conv3(torch.relu(self.bn(torch.cat([a, self.conv2(a)], 1)))).sum()


def test_a_recomputation_starts_from_values_taken_where_their_modules_return_them():
    # the concatenation recomputed for the BatchNorm's backward: of the two
    # conv outputs it reads, conv1's is saved (conv2's input) and conv2's
    # is saved by no op: it is taken where conv2 returns it (its forward
    # hook) and held for the replay, with no dispatch mode
    from remat.torch.decisions import Decisions
    model = Dense()
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    t = rt.capture(model, (x,), lambda o: o)
    cat = next(o.id for o in t.ops if o.name == "aten::cat")
    plan = force(rt.plan_trace(t, None), [cat])
    d = Decisions(plan)
    assert d.windows is not None and list(d.taken) == [("post", "conv2", 0)], d.taken
    a, held = run_forced(model, x, plan)
    assert a.replays == 1 and a.took == 1 and not held
