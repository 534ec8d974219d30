"""FSDP2 (``torch.distributed.fsdp.fully_shard``) in a plan, per rank.

A fully_shard module (a *unit*) holds its parameters sharded: a rank keeps
its shard of each (a DTensor), all-gathers the whole parameters in the
unit's forward pre-hook, frees them after its forward (``reshard_after_forward``)
or keeps them for the backward, gathers them again before its backward,
and after it reduce-scatters the gradients into sharded ones. In the
graph a rank plans (docs/pytorch.md, "FSDP2"):

- each parameter is its shard (its bytes, its gradient's, its optimizer
  state's: what this rank holds for the whole step);
- each unit's all-gather is an op, ``fsdp.all_gather(unit)``, that reads
  the unit's shards and makes one value, the unit's gathered parameters,
  which the unit's ops read; its backward is the reduce-scatter, which
  reads the gradients of 0-byte values it makes, one per parameter, which
  the ops that read the parameter read too (each parameter's unsharded
  gradient, made by the first backward that writes it and held until the
  reduce-scatter), and makes the shards' gradients. It saves its own
  output: FSDP holds the gathered parameters until its reduce-scatter;
- whether the gathered value is kept from the forward to the backward or
  made again (recomputed: gathered again) is the plan's choice, as for any
  value, at its bytes and its measured time; the applier carries it out
  with ``set_reshard_after_forward`` per unit, and a recomputation that
  runs a unit's ops outside its backward gathers the unit first
  (``FSDPModule.unshard``);
- the all-gather's and the reduce-scatter's own buffers are their
  transients, measured like any op's.

Under a plan (and in capture) FSDP prefetches nothing, and keeps neither an
all-gather's buffer until the next all-gather nor a reduce-scatter's input
until the next reduce-scatter (``gathered``): every all-gather happens where
the plan puts it, and each collective's buffers are its transients (on a
GPU that gives up overlapping one unit's collectives with the next one's
compute). Every rank plans the same graph (each value's
bytes, each op's transients and times their largest over the ranks), so
every rank makes the same collective calls.
"""

import torch

from . import compat


class Unit:
    """One fully_shard module, by names: its module's (``name``, "" for the
    root) and the parameters it manages (those of its modules but the ones
    nested units manage), each as (state_dict name, owning module's name,
    attribute). ``bind`` finds them in a model: the captured one, or
    another built the same way that a plan is applied to."""
    __slots__ = ("name", "params", "op")

    def __init__(self, name, params):
        self.name = name
        self.params = params
        self.op = -1  # the trace's all-gather op, or -1 (a unit without parameters)

    @property
    def label(self):
        return self.name or "(root)"


class Bound:
    """A unit in a model: its module, and its parameters as the module holds
    them at any moment (tensors()): the shards outside its forward and
    backward, the gathered parameters inside."""
    __slots__ = ("unit", "module", "owners")

    def __init__(self, unit, module, owners):
        self.unit, self.module, self.owners = unit, module, owners

    def tensors(self):
        return [getattr(owner, attr) for owner, attr in self.owners]


def units(model):
    """model's FSDP2 units in the order of its modules (outermost first), or
    [] when it has none."""
    cls = compat.fsdp_module_class()
    if cls is None:
        return []
    mods = dict(model.named_modules())
    unit_names = [n for n, m in mods.items() if isinstance(m, cls)]
    out = []
    for un in unit_names:
        prefix = un + "." if un else ""
        nested = [n for n in unit_names if n != un and n.startswith(prefix)]
        params = []
        for mn, m in mods.items():
            if not mn.startswith(prefix) and mn != un:
                continue
            if any(mn == n or mn.startswith(n + ".") for n in nested):
                continue
            for pn, p in m.named_parameters(recurse=False):
                full = (mn + "." if mn else "") + pn
                if compat.is_dtensor(p) and p.device_mesh.ndim > 1:
                    raise ValueError("parameter %s is sharded over a %d-dimensional device mesh (HSDP, or tensor "
                                     "parallelism with FSDP): remat.torch plans FSDP2 over one dimension"
                                     % (full, p.device_mesh.ndim))
                params.append((full, mn, pn))
        out.append(Unit(un, params))
    return out


def bind(units_, model):
    """The units in model, which must have the same FSDP2 units."""
    cls = compat.fsdp_module_class()
    mods = dict(model.named_modules())
    out = []
    for u in units_:
        m = mods.get(u.name)
        if m is None or cls is None or not isinstance(m, cls):
            raise ValueError("the plan was made for a model with a fully_shard module %r, which this model does not "
                             "have: plan this model" % u.label)
        out.append(Bound(u, m, [(mods[mn], attr) for _, mn, attr in u.params]))
    return out


class Hooks:
    """Forward hooks around FSDP's own on every unit, calling owner:
    ``fsdp_enter(unit, gathering)`` before FSDP's pre-forward (gathering:
    True) and post-forward (False), ``fsdp_gathered(unit, args, kwargs)``
    after its pre-forward (the unit's parameters gathered, its inputs as
    FSDP hands them on), ``fsdp_exit(unit)`` after its post-forward. What
    FSDP does between them is its business, not an op of the step."""

    def __init__(self, units, owner):
        self.units, self.owner = units, owner
        self._handles = []

    def __enter__(self):
        o = self.owner
        for u in self.units:
            m = u.module

            def pre_first(mod, args, kwargs, u=u):
                o.fsdp_enter(u, True)

            def pre_last(mod, args, kwargs, u=u):
                o.fsdp_gathered(u, args, kwargs)

            def post_first(mod, args, out, u=u):
                o.fsdp_enter(u, False)

            def post_last(mod, args, out, u=u):
                o.fsdp_exit(u)

            self._handles += [m.register_forward_pre_hook(pre_first, prepend=True, with_kwargs=True),
                              m.register_forward_pre_hook(pre_last, with_kwargs=True),
                              m.register_forward_hook(post_first, prepend=True),
                              m.register_forward_hook(post_last)]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        return False


class Settings:
    """For one step: whether each unit reshards after its forward
    (reshard[i]), no prefetching, and over gloo collectives that free their
    buffers before they return (compat.fsdp_gloo_comms); FSDP's own
    settings put back after."""

    def __init__(self, units, reshard):
        self.units, self.reshard = units, reshard
        self._saved = []

    def __enter__(self):
        for u, r in zip(self.units, self.reshard):
            m = u.module
            self._saved.append((m, compat.fsdp_settings(m)))
            m.set_reshard_after_forward(bool(r), recurse=False)
            compat.fsdp_no_prefetch(m)
            compat.fsdp_gloo_comms(m)
        return self

    def __exit__(self, *exc):
        for m, s in reversed(self._saved):
            compat.fsdp_restore(m, s)
        self._saved = []
        return False


def gathered(unit, args, kwargs):
    """What remat does after FSDP's pre-forward of a unit, in capture and
    under a plan alike: frees the all-gather buffer FSDP would keep until
    the next unit's all-gather, and has the unit's reduce-scatter input
    freed as soon as its reduce-scatter is done (after the backward of the
    autograd node FSDP put on the unit's inputs) instead of at the next
    unit's. Neither is then held across another unit's ops; both are the
    unit's all-gather's and reduce-scatter's transients."""
    compat.fsdp_release_all_gather(unit.module)
    for node in post_backward_nodes(args, kwargs):
        node.register_hook(lambda *_, m=unit.module: compat.fsdp_release_reduce_scatter(m))


class Releaser:
    """fsdp.Hooks' owner for a step under a plan that follows no call (a
    store-all plan): only what `gathered` does."""

    def fsdp_enter(self, unit, gathering):
        pass

    def fsdp_gathered(self, unit, args, kwargs):
        gathered(unit, args, kwargs)

    def fsdp_exit(self, unit):
        pass


def post_backward_nodes(args, kwargs):
    """The autograd nodes FSDP's pre-forward put on a unit's inputs
    (RegisterPostBackwardFunction): their backward is its reduce-scatter."""
    from .compat import tree_flatten
    return [a.grad_fn for a in tree_flatten((args, kwargs))[0]
            if isinstance(a, torch.Tensor) and a.grad_fn is not None
            and "PostBackward" in type(a.grad_fn).__name__]
