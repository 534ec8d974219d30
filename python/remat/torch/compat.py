"""Every PyTorch name remat.torch uses that PyTorch does not promise to keep.

remat.torch supports PyTorch 2.1 and newer (python/pyproject.toml). The
private names it needs live here, each with what happens on a version
without it: a fallback, or a refusal that says which version is needed.
Nothing else in the package touches a private PyTorch name.
"""

import contextlib
import functools
import os
import types

import torch

#: The oldest PyTorch the package supports (python/pyproject.toml says the same).
OLDEST = (2, 1)


def version():
    """PyTorch's (major, minor)."""
    parts = torch.__version__.split("+")[0].split(".")
    return int(parts[0]), int(parts[1])


def check_version():
    if version() < OLDEST:
        raise ImportError("remat.torch needs PyTorch %d.%d or newer; this is %s" % (OLDEST + (torch.__version__,)))


check_version()

# -- dispatch and pytrees (private modules, stable since 2.0)
from torch.utils._python_dispatch import TorchDispatchMode as TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten as tree_flatten  # noqa: E402


def current_autograd_node():
    """The autograd node whose backward is running on this thread, or None
    (torch._C._current_autograd_node, 2.0+)."""
    return torch._C._current_autograd_node()


def node_creation_hook():
    """torch.autograd.graph.node_creation_hook (2.15+), or None before it:
    capture then attributes saved tensors by the order of the calls."""
    return getattr(torch.autograd.graph, "node_creation_hook", None)


try:  # PyTorch's flop formulas, keyed by op packet (2.1+)
    from torch.utils.flop_counter import flop_registry as FLOPS  # noqa: E402
except Exception:  # pragma: no cover - a build without them: ops cost their outputs' elements
    FLOPS = {}


def schema_name(func):
    """An aten overload's qualified name (aten::relu), from its schema."""
    return func._schema.name


def schema_arguments(func):
    return func._schema.arguments


def view_base(t):
    """The tensor t is a view of, or None (Tensor._base, 1.0+)."""
    return t._base


def overload_packet(func):
    return getattr(func, "_overloadpacket", None)


def module_hooks(module):
    """Whether module has forward hooks or pre-hooks of its own."""
    return bool(module._forward_pre_hooks or module._forward_hooks)


def is_random(func):
    """An op that draws from the generator (tagged nondeterministic_seeded)."""
    return torch.Tag.nondeterministic_seeded in func.tags


# -- storages
from torch.multiprocessing.reductions import StorageWeakRef as StorageWeakRef  # noqa: E402  (2.0+)


def storage_id(t):
    """The identity of tensor t's storage, as StorageWeakRef(...).cdata names it."""
    return t.untyped_storage()._cdata


def node_saves_output(fn, i):
    """Whether autograd node fn keeps output i of its op for the backward:
    its saved-variable attributes, _saved_result for an only output,
    _saved_resultN for output N (PyTorch's generated nodes, 2.0+)."""
    names = set(n for n in dir(fn) if n.startswith("_saved_result"))
    return ("_saved_result" in names and i == 0) or "_saved_result%d" % i in names


# -- distributed wrappers
def fsdp_module_class():
    """FSDP2's FSDPModule (torch.distributed.fsdp, 2.6+; before that
    torch.distributed._composable.fsdp, 2.4+), or None: this PyTorch has no
    fully_shard."""
    try:
        from torch.distributed.fsdp import FSDPModule
        return FSDPModule
    except ImportError:
        pass
    try:
        from torch.distributed._composable.fsdp import FSDPModule
        return FSDPModule
    except ImportError:
        return None


def is_dtensor(t):
    return type(t).__name__ == "DTensor" or type(getattr(t, "data", None)).__name__ == "DTensor"


def local(t):
    """The tensor that holds a rank's memory of t: a DTensor's local shard
    (DTensor.to_local, public), else t."""
    return t.to_local() if type(t).__name__ == "DTensor" else t


def fsdp_modules_of_state(module):
    """How many modules one FSDP2 state manages (fully_shard([a, b]) makes
    one state for a group): FSDPState._modules."""
    return len(getattr(module._get_fsdp_state(), "_modules", (module,)))


def fsdp_settings(module):
    """What remat.torch changes on an FSDP2 module for a step, to put back
    afterwards: each parameter group's post-forward mesh (None: it does not
    reshard after forward; set publicly by set_reshard_after_forward, which
    has no getter) and the state's automatic-reshard flag and prefetch
    lists (FSDPState._auto_reshard_after_forward,
    _states_to_forward_prefetch, _states_to_backward_prefetch), and each
    group's comms (FSDPParamGroup._all_gather_comm, _reduce_scatter_comm)."""
    st = module._get_fsdp_state()
    return ([g.post_forward_mesh_info for g in st._fsdp_param_groups],
            getattr(st, "_auto_reshard_after_forward", None),
            list(st._states_to_forward_prefetch), list(st._states_to_backward_prefetch),
            [(getattr(g, "_all_gather_comm", None), getattr(g, "_reduce_scatter_comm", None))
             for g in st._fsdp_param_groups])


def fsdp_restore(module, saved):
    st = module._get_fsdp_state()
    meshes, auto, fwd, bwd, comms = saved
    for g, m, (ag, rs) in zip(st._fsdp_param_groups, meshes, comms):
        g.post_forward_mesh_info = m
        if ag is not None:
            g._all_gather_comm = ag
        if rs is not None:
            g._reduce_scatter_comm = rs
    if auto is not None:
        st._auto_reshard_after_forward = auto
    st._states_to_forward_prefetch, st._states_to_backward_prefetch = fwd, bwd


def fsdp_release_all_gather(module):
    """Frees the all-gather's output buffer that FSDP2 keeps after a
    forward all-gather until the next one (to overlap its copy-out with
    that all-gather): FSDPCommContext.release_all_gather_state_for_comm_reuse,
    which first orders the all-gather streams after the copy-out, as FSDP
    does before it reuses the buffer. Versions without it keep nothing."""
    ctx = getattr(module._get_fsdp_state(), "_comm_ctx", None)
    release = getattr(ctx, "release_all_gather_state_for_comm_reuse", None)
    if release is not None:
        release()


def fsdp_release_reduce_scatter(module):
    """Frees the reduce-scatter inputs that FSDP2 keeps after a unit's
    reduce-scatter until a later unit's begins (to overlap them on a GPU):
    FSDPCommContext.reduce_scatter_states (2.15; reduce_scatter_state
    before), each dropped after its allocation stream waits on its event,
    as FSDP drops them itself."""
    ctx = getattr(module._get_fsdp_state(), "_comm_ctx", None)
    states = getattr(ctx, "reduce_scatter_states", None)
    if states is None:
        one = getattr(ctx, "reduce_scatter_state", None)
        states = [one] if one is not None else []
        if one is not None:
            ctx.reduce_scatter_state = None
    while states:
        st = states.pop(0)
        ev = getattr(st, "event", None)
        if ev is not None:
            stream = getattr(st, "allocation_stream", None) or torch.cuda.current_stream()
            stream.wait_event(ev)
        del st


def _storage_refs(t):
    """How many tensors share t's storage (torch._C._storage_Use_Count)."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


@functools.lru_cache(maxsize=None)
def _gloo_comms():
    """(all-gather, reduce-scatter) comm classes for FSDP2 over gloo that
    free every buffer of a collective before it returns, or None where this
    FSDP takes no custom comms (FSDPModule.set_custom_all_gather and
    set_custom_reduce_scatter fill these slots; 2.15 has them) or torch has
    no storage use count. Made once (the classes are the same every step).

    gloo runs a collective on a worker thread, which drops the collective's
    work object (its own buffers, and its references to the tensors it was
    given) after it has signalled the collective done, at a moment that
    varies: in about 1 call in 12 the buffers outlived the call and
    overlapped the ops after it (its all-gather's flat output, the whole
    unit's parameters; its reduce-scatter's clone of the whole input). The
    work holds tensors on the storages of the tensors FSDP passes, so a
    storage's use count back to what it was before the call says the work
    is gone; these comms return only then (within WAIT seconds)."""
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter
    except ImportError:
        return None
    if not hasattr(torch._C, "_storage_Use_Count"):
        return None
    import time

    import torch.distributed as dist

    WAIT = 2.0  # seconds at most for gloo's thread to let go

    def released(counts):
        end = time.monotonic() + WAIT
        while any(_storage_refs(t) > n for t, n in counts) and time.monotonic() < end:
            time.sleep(0)

    class GlooAllGather(DefaultAllGather):
        """FSDP's own all-gather, returning once gloo has dropped its work."""

        def __call__(self, output_tensor, input_tensor, group, async_op=False):
            if async_op:
                return super().__call__(output_tensor, input_tensor, group, async_op)
            counts = [(t, _storage_refs(t)) for t in (output_tensor, input_tensor)]
            super().__call__(output_tensor, input_tensor, group, False)
            released(counts)
            return None

    class GlooReduceScatter(DefaultReduceScatter):
        """gloo's reduce_scatter_tensor all-reduces a clone of its input and
        copies this rank's chunk out (ProcessGroupGloo::
        reduce_scatter_single_coalesced); this does the same all-reduce on
        the input itself (the same values: the same bits), which FSDP drops
        after the call, and returns once gloo has dropped its work."""

        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            if async_op or input_tensor.dim() != 1 or not input_tensor.is_contiguous() \
                    or input_tensor.numel() % dist.get_world_size(group):
                return super().__call__(output_tensor, input_tensor, group, op, async_op)
            counts = [(input_tensor, _storage_refs(input_tensor))]
            flat = input_tensor.view(-1)  # what gloo holds: a tensor of its own on the input's storage
            dist.all_reduce(flat, op=op, group=group)
            chunk = flat.numel() // dist.get_world_size(group)
            output_tensor.copy_(flat.narrow(0, dist.get_rank(group) * chunk, chunk).view(output_tensor.shape))
            del flat
            released(counts)
            return None

    return GlooAllGather, GlooReduceScatter


def fsdp_gloo_comms(module):
    """Where FSDP2 runs a unit's collectives over gloo with its default
    comms, the comms remat uses instead (_gloo_comms: the same bits, every
    buffer freed before the call returns); put back by fsdp_restore
    (fsdp_settings saves them). A user's own comms are left as they are."""
    import torch.distributed as dist
    comms = _gloo_comms()
    if comms is None:
        return
    for g in module._get_fsdp_state()._fsdp_param_groups:
        pg = getattr(getattr(g, "mesh_info", None), "shard_process_group", None)
        try:
            if pg is None or dist.get_backend(pg) != "gloo":
                continue
        except Exception:  # pragma: no cover - a group dist cannot name
            continue
        for attr, default, cls in (("_all_gather_comm", "DefaultAllGather", comms[0]),
                                   ("_reduce_scatter_comm", "DefaultReduceScatter", comms[1])):
            if type(getattr(g, attr, None)).__name__ == default:
                setattr(g, attr, cls())


def fsdp_no_prefetch(module):
    """No all-gather issued ahead of the module's own (the plan places each):
    no forward prefetch list, and a backward one naming only the module
    itself, which FSDP takes instead of its implicit prefetch of the next
    module and which finds it already gathered."""
    st = module._get_fsdp_state()
    st._states_to_forward_prefetch = []
    st._states_to_backward_prefetch = [st]


# -- DistributedDataParallel's gradient buckets
def ddp_buckets(ddp):
    """(sizes, views) of a DistributedDataParallel model's gradient buckets:
    the bytes of each flat tensor its reducer allocates at construction and
    holds for its life, and whether the parameters' gradients are views
    into them (gradient_as_bucket_view). The sizes are the reducer's
    buckets as they are now (DDP lays them out again in its second step;
    Reducer._get_zeros_like_grad_buckets, 1.10+, which allocates a copy of
    each for the moment), else DDP's report of its first layout
    (_get_ddp_logging_data's "bucket_sizes", 1.9+: the same bytes in all),
    else one bucket of the gradients' bytes of the parameters DDP reduces
    (the buckets hold each once)."""
    views = bool(getattr(ddp, "gradient_as_bucket_view", False))
    try:
        buckets = ddp.reducer._get_zeros_like_grad_buckets()
        return [b.buffer().numel() * b.buffer().element_size() for b in buckets], views
    except Exception:  # pragma: no cover - an older or newer DDP: its report of the first layout
        pass
    try:
        sizes = ddp._get_ddp_logging_data().get("bucket_sizes")
        return [int(x) for x in str(sizes).split(",") if x.strip()], views
    except Exception:  # pragma: no cover - an older or newer DDP: count what its buckets hold
        ignored = getattr(ddp, "parameters_to_ignore", set())
        return [sum(p.numel() * p.element_size() for n, p in ddp.module.named_parameters()
                    if p.requires_grad and n not in ignored)], views


def unplannable_wrapper(model):
    """The name of a wrapper or tensor type in model that remat.torch cannot
    plan a step of, or None. FSDP (FullyShardedDataParallel) gathers and
    frees parameters inside the step where no hook of a module shows it;
    tensor parallelism holds parameters as DTensors that no FSDP2 module
    manages. DistributedDataParallel and FSDP2 (fully_shard) are planned
    (fsdp.py); FSDP2 with several modules to one state
    (fully_shard([a, b])) is refused."""
    fsdp2 = fsdp_module_class()
    managed = set()
    for name, mod in model.named_modules():
        where = " (module %r)" % name if name else ""
        for cls in type(mod).__mro__:
            if cls.__name__ == "FullyShardedDataParallel":
                return "FullyShardedDataParallel (FSDP)" + where
        if fsdp2 is not None and isinstance(mod, fsdp2):
            if fsdp_modules_of_state(mod) > 1:
                return "fully_shard over several modules at once (fully_shard([a, b]))" + where
            managed.update(id(p) for p in mod.parameters())
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if is_dtensor(p) and id(p) not in managed:
            return "a DTensor parameter %r that no fully_shard module manages (tensor parallelism)" % name
    return None


# -- the profiler's memory events (ProfilerMeter)
def memory_profiler():
    """A CPU profiler that records PyTorch's allocations (not yet started)."""
    return torch.autograd.profiler.profile(profile_memory=True, record_shapes=False, with_stack=False)


def profiler_events(prof):
    """(name, start ns, end ns, bytes) of each event a finished profiler
    recorded: its ranges and, named "[memory]", the CPU allocator's
    allocations (bytes > 0) and frees (< 0). From the Kineto results
    (profile.kineto_results, 2.0+)."""
    res = getattr(prof, "kineto_results", None)
    if res is None:
        raise RuntimeError("this PyTorch's profiler has no kineto_results: transients cannot be measured without "
                           "the heap counter (python -m remat.torch run SCRIPT)")
    out = []
    for e in res.events():
        if e.device_type() != torch.autograd.DeviceType.CPU:
            continue
        start = e.start_ns() if hasattr(e, "start_ns") else int(e.start_us() * 1000)
        dur = e.duration_ns() if hasattr(e, "duration_ns") else int(e.duration_us() * 1000)
        out.append((e.name(), start, start + dur, int(e.nbytes())))
    return out


@contextlib.contextmanager
def quiet_stderr():
    """File descriptor 2 to /dev/null for a moment: Kineto prints a line when
    a profiler starts and stops (and an error when it finds no GPU), which a
    user's training log should not get from a capture."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to quiet
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


# -- torch.compile (partition.py): AOTAutograd's partitioner and Inductor
def compile_support():
    """None where rt.compile can plan this PyTorch's compiled steps, else why
    not: it replaces the choice of saved values inside AOTAutograd's
    min-cut partitioner (torch._functorch.partitioners.choose_saved_values_set,
    given the joint graph and its forward/backward classification; 2.5+),
    keeping the rest of Inductor's pipeline (decompositions, RNG
    functionalization, the backward's reordering, code generation)."""
    try:
        from torch._functorch import partitioners
    except Exception as e:  # pragma: no cover - a build without functorch
        return "torch._functorch.partitioners cannot be imported (%s)" % e
    if not hasattr(partitioners, "choose_saved_values_set") or not hasattr(partitioners, "classify_nodes"):
        return ("rt.compile needs PyTorch 2.5 or newer (this is %s): its partitioner has no "
                "choose_saved_values_set to hand the choice of saved values to remat" % torch.__version__)
    return None


@contextlib.contextmanager
def saved_values_chooser(choose):
    """Within the context, AOTAutograd's min-cut partitioner asks
    choose(joint_graph, node_info) for the forward values to save (instead of
    its own min cut), and the compiled-graph caches that would hand back a
    partition made without it (AOTAutograd's cache) are off."""
    from torch._functorch import config as fconfig
    from torch._functorch import partitioners
    orig = partitioners.choose_saved_values_set

    def chooser(joint_graph, node_info, memory_budget=1.0):
        return choose(joint_graph, node_info)

    patches = {}
    if hasattr(fconfig, "enable_autograd_cache"):
        patches["enable_autograd_cache"] = False
    partitioners.choose_saved_values_set = chooser
    try:
        with fconfig.patch(patches):
            yield
    finally:
        partitioners.choose_saved_values_set = orig


def joint_node_info(node_info):
    """(required forward nodes, static-lifetime inputs, the primal inputs) of
    the partitioner's NodeInfo."""
    return (node_info.required_fw_nodes, node_info.static_lifetime_input_nodes,
            [n for n in node_info.inputs if n.op == "placeholder" and "primals" in str(n.target)])


def inductor(gm, example_inputs, options=None):
    """Inductor's compile_fx: the backend torch.compile uses by default."""
    from torch._inductor.compile_fx import compile_fx
    return compile_fx(gm, example_inputs, config_patches=options or {})


def inductor_channels_last(graph):
    """Whether Inductor runs graph's 2-D convolutions channels-last (its
    layout optimization: GraphLowering.decide_layout_opt, on a joint graph
    as on each half of it; always, on a CPU with oneDNN). Then each input
    and weight of a convolution that is not channels-last already is
    copied to that layout, the copy being what the forward saves for the
    backward, and the convolutions' kernels (and their scratch) run on
    channels-last tensors. False where this PyTorch has no such decision."""
    try:
        from torch._inductor.graph import GraphLowering
        return bool(GraphLowering.decide_layout_opt(types.SimpleNamespace(graph=graph), is_inference=False))
    except Exception:
        return False


def inductor_mode_options(mode):
    """The Inductor options torch.compile's mode= sets (torch._inductor.list_mode_options)."""
    from torch._inductor import list_mode_options
    return dict(list_mode_options(mode))


def backend_failure():
    """The exception Dynamo raises for a backend's failure (its cause: the backend's own)."""
    from torch._dynamo.exc import BackendCompilerFailed
    return BackendCompilerFailed


def aten_op(name, overload):
    """torch.ops.aten.<name>.<overload>, as a traced graph's node calls it."""
    return getattr(getattr(torch.ops.aten, name), overload)


def recompile_limit(n):
    """A context in which Dynamo compiles a code object up to n times (its
    recompile_limit, cache_size_limit before 2.6) and, past that, fails
    rather than running the code uncompiled where its version can say so."""
    import torch._dynamo.config as config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    kw = {name: max(getattr(config, name), n)}
    for fail in ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit"):
        if hasattr(config, fail):
            kw[fail] = True
            break
    return config.patch(**kw)


def out_of_memory():
    """The exception a device allocator raises when it runs out of memory
    (torch.OutOfMemoryError from 2.5 on, torch.cuda's before)."""
    return getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


def graph_break_reasons():
    """Dynamo's counted graph breaks so far: {reason: count}."""
    from torch._dynamo.utils import counters
    return dict(counters.get("graph_break", {}))


def is_overload(target):
    """An aten (or prims) overload, as a traced graph's call_function node holds it."""
    return isinstance(target, torch._ops.OpOverload)


@contextlib.contextmanager
def real_tensors():
    """Real (not fake) tensors inside AOTAutograd's tracing (the fake mode
    it runs the partitioner under set aside), to run an op once and measure it."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        yield
