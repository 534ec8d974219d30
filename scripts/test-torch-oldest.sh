#!/usr/bin/env bash
# The Python package's tests against the oldest PyTorch it supports
# (2.1.2; python/pyproject.toml), in a venv of their own that
# scripts/python-env.sh creates once and caches outside the clone. Not part
# of scripts/test.sh (CI's time): run it when the package changes what it
# asks of PyTorch. Needs the release build (scripts/test.sh, or the
# README's first command).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/libremat.so ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j"$(nproc)"; }
venv=$(REMAT_TORCH=oldest scripts/python-env.sh)
"$venv/bin/python" -c "import torch; print('PyTorch', torch.__version__)"
REMAT_LIB="$PWD/build/libremat.so" REMAT_MEMTRACK="$PWD/build/libremat-memtrack.so" PYTHONPATH="$PWD/python" \
    "$venv/bin/python" -m remat.torch run -m pytest -q -p no:cacheprovider python/tests
