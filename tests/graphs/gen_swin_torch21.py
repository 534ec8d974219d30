"""Writes swin_tiny_torch21.json beside this file: the library sweep's
small Swin Transformer (python/tests/library_models.py, swin_small_config)
as remat.torch's capture traced it on PyTorch 2.1.2 with the heap counter
preloaded (transients measured, FLOP costs). On it the chain DP's schedule
at its floor did not fit when simulated (the DP counts what a stage that
drops its input frees in slots rounded up: docs/planning.md), and
`optimal` failed with "the chain schedule exceeds the budget";
cli_graph_swin_floor keeps the floor answered. The transients are measured, so a new run writes a
slightly different graph: the committed file is the case.

    REMAT_TORCH=oldest scripts/python-env.sh   # the venv with PyTorch 2.1.2
    REMAT_LIB=build/libremat.so REMAT_MEMTRACK=build/libremat-memtrack.so PYTHONPATH=python:python/tests \
        ~/.cache/remat/venv-torch-oldest/bin/python -m remat.torch run tests/graphs/gen_swin_torch21.py
"""
import json
import os

import library_models as lm

import remat.torch as rt

HERE = os.path.dirname(os.path.abspath(__file__))

case = lm.build("swin_small_config")
with lm.settings(case):
    trace = rt.capture(case.model, case.inputs, case.loss_fn)
    with open(os.path.join(HERE, "swin_tiny_torch21.json"), "w") as f:
        json.dump(trace.graph(), f, separators=(",", ":"))
