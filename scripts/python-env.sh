#!/usr/bin/env bash
# Creates (once) and prints the path of the virtual environment in which the
# Python package's tests run: PyTorch 2.x, torchvision, transformers (the
# library sweep builds its models from configs), pytest with pytest-xdist
# (the tests run in two processes), and the linter and type checker (ruff,
# mypy) from PyPI,
# cached outside the clone (REMAT_VENV, default ~/.cache/remat/venv-torch)
# so that later runs reuse it. The C library and its tests never need it.
#
# REMAT_TORCH=oldest: the oldest PyTorch the package supports instead
# (python/pyproject.toml; 2.1.2 with torchvision 0.16.2, without
# transformers, whose releases need a newer one), in its own venv
# (default ~/.cache/remat/venv-torch-oldest): scripts/test-torch-oldest.sh.
set -euo pipefail
if [ "${REMAT_TORCH:-}" = oldest ]; then
    venv="${REMAT_VENV:-$HOME/.cache/remat/venv-torch-oldest}"
    check="import torch, torchvision, pytest"
    pkgs=("torch==2.1.2" "torchvision==0.16.2" pytest "numpy<2" safetensors)
else
    venv="${REMAT_VENV:-$HOME/.cache/remat/venv-torch}"
    check="import torch, torchvision, transformers, pytest, xdist, ruff, mypy"
    pkgs=("torch>=2.1,<3" torchvision transformers pytest pytest-xdist numpy safetensors ruff mypy)
fi
if ! "$venv/bin/python" -c "$check" 2>/dev/null; then
    echo "creating $venv (PyTorch from PyPI: a large download, once)" >&2
    mkdir -p "$(dirname "$venv")"
    if ! python3 -m venv "$venv" 2>/dev/null; then
        SUDO=""
        [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        $SUDO apt-get update -q >&2
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q python3-venv >&2
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install -q --upgrade pip >&2
    "$venv/bin/pip" install -q "${pkgs[@]}" >&2
fi
echo "$venv"
