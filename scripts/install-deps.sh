#!/usr/bin/env bash
# Installs what remat needs to build, test and train, from Debian's
# packages. Does nothing when everything is already installed.
set -euo pipefail
# openmpi-bin and libopenmpi-dev: data-parallel training (mpirun) and its tests;
# python3 and python3-venv: fixture and token scripts, and the venv of the
# Python package's tests (scripts/python-env.sh)
# libdnnl-dev: oneDNN's convolutions and products (optional: REMAT_DNNL)
# clang-format: the C tree's format check (scripts/format-check.sh)
pkgs=(build-essential cmake pkg-config libopenblas-dev libcjson-dev zlib1g-dev dataset-fashion-mnist
      openmpi-bin libopenmpi-dev libdnnl-dev python3 python3-venv clang-format)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi
