#!/usr/bin/env bash
# Checks what `pip install ./python` gives a user: a wheel built from this
# checkout (python/pyproject.toml: scikit-build-core runs CMake on the
# repository root) carries libremat.so and libremat-memtrack.so in
# remat/lib/, and, installed into a fresh virtual environment and imported
# from outside the checkout with REMAT_LIB and REMAT_MEMTRACK unset, the
# package finds its own copies and plans tests/graphs/mlp.json; REMAT_LIB
# still overrides. Where the PyTorch venv of scripts/python-env.sh exists,
# `python -m remat.torch run` then plans a small model with the bundled heap
# counter preloaded.
#
# The build backend comes from PyPI (or pip's cache): when it cannot be
# installed, the script exits 77 (ctest: skipped), saying so. The build
# itself runs without isolation in the fresh venv, so that a failure to
# reach PyPI is told apart from a failure to build.
#
# usage: scripts/test-wheel.sh            (ctest: test_wheel, label wheel)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset REMAT_LIB REMAT_MEMTRACK PYTHONPATH
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

python3 -m venv "$work/venv"
py="$work/venv/bin/python"
if ! "$py" -m pip install -q --timeout 30 --retries 1 "scikit-build-core>=0.10" >"$work/backend.log" 2>&1; then
    cat "$work/backend.log"
    echo "skipped: scikit-build-core could not be installed from PyPI (or pip's cache)"
    exit 77
fi

echo "== pip wheel ./python"
"$py" -m pip wheel -q --no-build-isolation --no-deps -w "$work/dist" "$src/python"
wheel=$(ls "$work/dist"/remat-*.whl)
echo "$(basename "$wheel")"
"$py" - "$wheel" <<'EOF'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
for need in ("remat/lib/libremat.so", "remat/lib/libremat-memtrack.so", "remat/_lib.py", "remat/torch/__init__.py"):
    assert need in names, "the wheel lacks " + need
print("wheel holds remat/lib/libremat.so and remat/lib/libremat-memtrack.so")
EOF

echo "== installed, imported from outside the checkout"
"$py" -m pip install -q --no-deps "$wheel"
mkdir "$work/elsewhere"
cd "$work/elsewhere"
site=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$py" - "$src/tests/graphs/mlp.json" "$site" <<'EOF'
import json, os, sys
import remat
from remat._lib import find_library, plan_graph
site = os.path.realpath(sys.argv[2])
lib, memtrack = find_library(), find_library("remat-memtrack")
assert os.path.realpath(lib) == os.path.join(site, "remat", "lib", "libremat.so"), lib
assert os.path.realpath(memtrack) == os.path.join(site, "remat", "lib", "libremat-memtrack.so"), memtrack
with open(sys.argv[1]) as f:
    plan = plan_graph(json.load(f), {"budget": 0})
assert plan["format"] == "remat-plan" and plan["feasible"] and plan["peak_bytes"] > 0, plan
print("bundled", lib)
print("mlp.json planned: strategy %s, peak %d bytes" % (plan["strategy"], plan["peak_bytes"]))
EOF
# REMAT_LIB first: a copy elsewhere is the one found
cp "$site/remat/lib/libremat.so" "$work/libremat-copy.so"
REMAT_LIB="$work/libremat-copy.so" "$py" -c "
import remat, sys
assert remat.find_library() == sys.argv[1], remat.find_library()
print('REMAT_LIB overrides:', remat.find_library())" "$work/libremat-copy.so"

venv_torch="${REMAT_VENV:-$HOME/.cache/remat/venv-torch}"
if "$venv_torch/bin/python" -c "import torch" 2>/dev/null; then
    echo "== remat.torch from the wheel, with PyTorch from $venv_torch"
    cat > plan_mlp.py <<'EOF'
import torch, remat.torch as rt
net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
print(rt.plan(net, (torch.randn(8, 64),), lambda o: o.sum(), budget="1MiB"))
EOF
    PYTHONPATH="$site" "$venv_torch/bin/python" -m remat.torch run plan_mlp.py | tee torch.log
    grep -q "transients measured by heap counter" torch.log || { echo "FAIL: the bundled heap counter was not preloaded"; exit 1; }
else
    echo "-- no PyTorch venv at $venv_torch (scripts/python-env.sh): remat.torch not run"
fi
echo "wheel: ok"
