"""Tests of remat.torch. Those that measure memory need the heap counter
preloaded; scripts/test.sh runs pytest as `python -m remat.torch run -m
pytest ...`, which does. Without it they are skipped, saying so."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _threads():
    # one per pytest-xdist worker: scripts/test.sh runs two workers on two
    # cores, and more threads than cores leave OpenMP spinning on the core
    # the other worker needs (the suite took about a quarter longer with 2)
    torch.set_num_threads(1)
    yield


def need_counter():
    from remat.torch import memtrack
    if memtrack.counter() is None:
        pytest.skip("the heap counter is not preloaded (run pytest as python -m remat.torch run -m pytest)")


def run_plain(script, timeout=600, counter=False):
    """Runs script (its %(tests)r is this folder) in a plain `python`, as a
    user's python train.py runs: nothing preloaded (no heap counter; with
    counter=True what this process has preloaded), the package on the
    path. Returns the finished subprocess.run."""
    import subprocess

    import remat.torch as rt
    env = {k: v for k, v in os.environ.items() if counter or k != "LD_PRELOAD"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(rt.__file__)) + "/..",
                                                    env.get("PYTHONPATH", "")] if p)
    tests = os.path.dirname(os.path.abspath(__file__))
    return subprocess.run([sys.executable, "-c", script % {"tests": tests}], env=env, capture_output=True, text=True,
                          timeout=timeout)
