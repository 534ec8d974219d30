"""The C library, through ctypes.

remat's planner is libremat (C); this package reaches it through one
JSON-in, JSON-out call, remat_plan_graph_json, so that no C struct layout is
mirrored here. The shared library is looked for, in order:

1. the path in the environment variable REMAT_LIB;
2. the package's own copy, ``remat/lib/libremat.so``, which
   ``pip install ./python`` builds from the checkout's C sources
   (python/pyproject.toml; with ``pip install -e`` it lies in
   site-packages, another folder of the package's ``__path__``);
3. a CMake build directory of the source tree this package sits in
   (``build/`` beside ``python/``: PYTHONPATH=python in a checkout);
4. the system's library path (``libremat.so.1`` after ``cmake --install``).

The heap counter, libremat-memtrack.so, is looked for the same way
(REMAT_MEMTRACK first). ctypes was chosen over a C extension so that the
package works with any build of the library and one wheel serves every
Python 3.
"""

import ctypes
import json
import os
import sys
from typing import Iterator, Optional

_HERE = os.path.dirname(os.path.abspath(__file__))
_TREE = os.path.dirname(os.path.dirname(_HERE))  # the checkout: python/remat/.. /..


class RematError(RuntimeError):
    """A failure reported by libremat, with its message. Where a budget is
    what failed, floor is the smallest budget that fits (bytes), else
    None."""

    floor: Optional[int] = None


def _candidates(name: str) -> Iterator[str]:
    env = os.environ.get("REMAT_LIB" if name == "remat" else "REMAT_MEMTRACK")
    if env:
        yield env
    # every folder of the package: an editable install (pip install -e)
    # keeps the modules in the checkout and remat/lib/ in site-packages
    pkg = sys.modules.get(__package__)
    for d in getattr(pkg, "__path__", None) or [_HERE]:
        yield os.path.join(d, "lib", "lib%s.so" % name)
    for build in ("build", "build-release"):
        yield os.path.join(_TREE, build, "lib%s.so" % name)
    yield "lib%s.so.1" % name if name == "remat" else "lib%s.so" % name


def find_library(name: str = "remat") -> Optional[str]:
    """The path of libremat.so (or of libremat-memtrack.so), or None."""
    for c in _candidates(name):
        if os.path.isabs(c):
            if os.path.exists(c):
                return c
        else:
            try:
                ctypes.CDLL(c)
                return c
            except OSError:
                pass
    return None


_lib: Optional[ctypes.CDLL] = None


def lib() -> ctypes.CDLL:
    """libremat, loaded once per process."""
    global _lib
    if _lib is None:
        path = find_library("remat")
        if path is None:
            raise RematError(
                "libremat.so was not found: install this package with pip from a checkout "
                "(pip install ./python builds it), or build it (cmake -S . -B build && cmake --build build) "
                "and install it (cmake --install build) or set REMAT_LIB to its path")
        so = ctypes.CDLL(path)
        so.remat_plan_graph_json.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        so.remat_plan_graph_json.restype = ctypes.c_int
        so.remat_free.argtypes = [ctypes.c_void_p]
        so.remat_free.restype = None
        so.remat_last_error.argtypes = []
        so.remat_last_error.restype = ctypes.c_char_p
        _lib = so
    return _lib


def plan_graph(graph: dict, request: dict) -> dict:
    """Plans a graph file's step (dicts in, dict out): remat_plan_graph_json."""
    so = lib()
    out = ctypes.c_void_p()
    text = json.dumps(graph, separators=(",", ":")).encode()
    rc = so.remat_plan_graph_json(text, json.dumps(request).encode(), ctypes.byref(out))
    if rc != 0:
        raise RematError(so.remat_last_error().decode(errors="replace"))
    try:
        if not out.value:
            raise RematError("libremat returned no plan")
        return json.loads(ctypes.string_at(out.value).decode())
    finally:
        so.remat_free(out)
