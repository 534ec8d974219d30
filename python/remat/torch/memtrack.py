"""The heap counter: the memory a CPU PyTorch process really holds.

libremat-memtrack.so (src/memtrack/memtrack.c, built beside libremat.so)
wraps glibc's allocations and keeps their live and peak bytes, each block
at the bytes asked for: every aligned block, from which PyTorch's CPU
allocator takes every tensor's buffer (and oneDNN its scratchpads), and
every malloc, calloc or realloc block of 64 KiB or more, which is what a
kernel library takes outside PyTorch's allocator (REMAT_MEMTRACK_MALLOC=off
counts aligned blocks only). The interpreter's objects and the autograd
engine's own structures (small mallocs) are not counted. It must be
preloaded when the process starts (LD_PRELOAD), so ``measure`` cannot
switch it on by itself; ``python -m remat.torch run SCRIPT [ARGS]`` runs a
script with it. Nothing the plan controls feeds this counter: it is the
independent measurement that the predicted peak is compared with. Capture
does not need it (meters.py measures transients with PyTorch's profiler
where it is absent), but uses it where it is preloaded, since it also sees
what kernel libraries allocate themselves.

On a GPU the same interface reads torch.cuda's allocator statistics at
the bytes each block was asked for (``requested_bytes``, as the heap
counter counts them): ``counter(device)``. ``memory_allocated`` and
``max_memory_allocated`` count the caching allocator's blocks instead,
which are rounded up to 512 B and, when a cached block is at most 1 MiB
larger than asked for, not split: up to 1 MiB more per large tensor,
depending on what was freed before. That slack is the allocator's, not
the step's; ``CudaCounter.allocated_peak`` reads it beside.
"""

import ctypes
import os
import sys

from .._lib import find_library


class Counter:
    def __init__(self, lib):
        self._lib = lib
        for f in ("memtrack_live", "memtrack_peak"):
            getattr(lib, f).restype = ctypes.c_int64
        lib.memtrack_reset_peak.restype = None
        lib.memtrack_dropped.restype = ctypes.c_int

    def live(self):
        return self._lib.memtrack_live()

    def peak(self):
        return self._lib.memtrack_peak()

    def reset_peak(self):
        self._lib.memtrack_reset_peak()

    def complete(self):
        """False once a block went uncounted (more than 2^21 live at once)."""
        return not self._lib.memtrack_dropped()

    def count_malloc(self, on):
        """Counts malloc blocks of 64 KiB or more from now on (on, the
        default), or tensor memory only (aligned blocks)."""
        self._lib.memtrack_count_malloc(1 if on else 0)


class CudaCounter:
    """A CUDA device's allocator statistics behind Counter's interface: the
    bytes its blocks were asked for (requested_bytes; where a PyTorch lacks
    that statistic, the allocated bytes)."""

    def __init__(self, device):
        import torch
        self._cuda, self.device = torch.cuda, device
        self._key = "requested_bytes" if "requested_bytes" in self._stats() else "allocated_bytes"

    def _stats(self):
        return self._cuda.memory_stats_as_nested_dict(self.device)

    def live(self):
        return self._stats()[self._key]["all"]["current"]

    def peak(self):
        return self._stats()[self._key]["all"]["peak"]

    def allocated(self):
        """The caching allocator's blocks live now (memory_allocated)."""
        return self._cuda.memory_allocated(self.device)

    def allocated_peak(self):
        """Their peak since reset_peak (max_memory_allocated)."""
        return self._cuda.max_memory_allocated(self.device)

    def reset_peak(self):
        self._cuda.reset_peak_memory_stats(self.device)

    def complete(self):
        return True


_counter = None


def counter(device=None):
    """The counter of device's memory: for a CUDA device its allocator's
    statistics; else the preloaded heap counter, or None when this process
    was started without it."""
    if device is not None and getattr(device, "type", str(device).split(":")[0]) == "cuda":
        return CudaCounter(device)
    global _counter
    if _counter is None:
        try:
            lib = ctypes.CDLL(None)
            lib.memtrack_live  # noqa: B018 - raises AttributeError when absent
        except (OSError, AttributeError):
            return None
        _counter = Counter(lib)
    return _counter


def path():
    """The path of libremat-memtrack.so, or None."""
    return find_library("remat-memtrack")


def run(argv):
    """Replaces this process by `python argv...` with the counter preloaded."""
    p = path()
    if p is None:
        raise SystemExit("remat: libremat-memtrack.so was not found (build remat with CMake, or set REMAT_MEMTRACK)")
    env = dict(os.environ)
    env["LD_PRELOAD"] = (p + " " + env.get("LD_PRELOAD", "")).strip()
    os.execve(sys.executable, [sys.executable] + list(argv), env)
