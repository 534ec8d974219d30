"""The heap counter: what a CPU PyTorch process really holds.

libremat-memtrack.so (bench/torch/memtrack.c, built beside libremat.so)
wraps glibc's allocator and keeps the live and peak bytes of the blocks of
64 KiB or more, which is where PyTorch's CPU tensors live. It must be
preloaded when the process starts (LD_PRELOAD), so ``measure`` cannot switch
it on by itself; ``python -m remat.torch run SCRIPT [ARGS]`` runs a script
with it. Nothing the plan controls feeds this counter: it is the
independent measurement that the predicted peak is compared with.
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

    def live(self):
        return self._lib.memtrack_live()

    def peak(self):
        return self._lib.memtrack_peak()

    def reset_peak(self):
        self._lib.memtrack_reset_peak()


_counter = None


def counter():
    """The preloaded counter, or None when this process was started without it."""
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
