"""Every PyTorch name remat.torch uses that PyTorch does not promise to keep.

remat.torch supports PyTorch 2.1 and newer (python/pyproject.toml). The
private names it needs live here, each with what happens on a version
without it: a fallback, or a refusal that says which version is needed.
Nothing else in the package touches a private PyTorch name.
"""

import contextlib
import os

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
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402


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


def overload_packet(func):
    return getattr(func, "_overloadpacket", None)


def is_random(func):
    """An op that draws from the generator (tagged nondeterministic_seeded)."""
    return torch.Tag.nondeterministic_seeded in func.tags


# -- storages
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402  (2.0+)


def storage_id(t):
    """The identity of tensor t's storage, as StorageWeakRef(...).cdata names it."""
    return t.untyped_storage()._cdata


def node_saves_output(fn, i):
    """Whether autograd node fn keeps output i of its op for the backward:
    its saved-variable attributes, _saved_result for an only output,
    _saved_resultN for output N (PyTorch's generated nodes, 2.0+)."""
    names = set(n for n in dir(fn) if n.startswith("_saved_result"))
    return ("_saved_result" in names and i == 0) or "_saved_result%d" % i in names


# -- distributed wrappers remat.torch does not plan
def unplannable_wrapper(model):
    """The name of a wrapper or tensor type in model that remat.torch cannot
    plan a step of, or None. FSDP (FullyShardedDataParallel, and FSDP2's
    fully_shard, whose modules become FSDPModule subclasses) gathers and
    frees parameters per unit inside the step; tensor parallelism and FSDP2
    hold parameters as DTensors; both hide from the capture the memory a
    rank really holds. DistributedDataParallel is planned."""
    for name, mod in model.named_modules():
        where = " (module %r)" % name if name else ""
        for cls in type(mod).__mro__:
            if cls.__name__ == "FullyShardedDataParallel":
                return "FullyShardedDataParallel (FSDP)" + where
            if cls.__name__ == "FSDPModule":
                return "torch.distributed.fsdp.fully_shard (FSDP2)" + where
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if type(p).__name__ == "DTensor" or type(getattr(p, "data", None)).__name__ == "DTensor":
            return "a DTensor parameter %r (tensor parallelism or FSDP2)" % name
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
