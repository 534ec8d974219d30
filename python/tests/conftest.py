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
    torch.set_num_threads(2)
    yield


def need_counter():
    from remat.torch import memtrack
    if memtrack.counter() is None:
        pytest.skip("the heap counter is not preloaded (run pytest as python -m remat.torch run -m pytest)")
