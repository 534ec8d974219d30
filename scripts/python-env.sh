#!/usr/bin/env bash
# Creates (once) and prints the path of the virtual environment in which the
# Python package's tests run: PyTorch 2.x, torchvision, transformers (the
# library sweep builds its models from configs) and pytest from PyPI,
# cached outside the clone (REMAT_VENV, default ~/.cache/remat/venv-torch)
# so that later runs reuse it. The C library and its tests never need it.
set -euo pipefail
venv="${REMAT_VENV:-$HOME/.cache/remat/venv-torch}"
if ! "$venv/bin/python" -c "import torch, torchvision, transformers, pytest" 2>/dev/null; then
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
    "$venv/bin/pip" install -q "torch>=2.1" torchvision transformers pytest numpy safetensors >&2
fi
echo "$venv"
