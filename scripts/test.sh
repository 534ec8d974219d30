#!/usr/bin/env bash
# Builds remat and runs the whole test suite twice: a build under
# AddressSanitizer and UndefinedBehaviorSanitizer, then a release build.
# Every test runs in both (the slow ones at reduced sizes under the
# sanitizers); tests labelled cuda skip, saying so, without a GPU. Then the
# Python package's tests (python/tests, pytest) against the release build's
# libremat.so, in a virtual environment with PyTorch from PyPI that
# scripts/python-env.sh creates once and caches outside the clone, after
# the Python files' linter (ruff) and the package's type checker (mypy).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
echo "== sanitizer build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DREMAT_SANITIZE=ON
cmake --build build-asan -j"$jobs"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
echo "== tests under AddressSanitizer and UndefinedBehaviorSanitizer"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs") | tee "$logs/asan"
echo "== tests (release build)"
(cd build && ctest --output-on-failure -j"$jobs") | tee "$logs/release"
venv=$(scripts/python-env.sh)
echo "== Python lint (ruff: ruff.toml) and types (mypy: python/pyproject.toml)"
"$venv/bin/ruff" check --no-cache . | tee "$logs/ruff"
(cd python && "$venv/bin/mypy" --cache-dir "$HOME/.cache/remat/mypy") | tee "$logs/mypy"
echo "== Python package (remat.torch) against PyTorch"
# the heap counter preloaded (python -m remat.torch run) for the tests that
# measure memory, in each of pytest-xdist's two worker processes (each
# process counts its own heap; much of a test's time is Python's, on one core)
REMAT_LIB="$PWD/build/libremat.so" REMAT_MEMTRACK="$PWD/build/libremat-memtrack.so" PYTHONPATH="$PWD/python" \
    "$venv/bin/python" -m remat.torch run -m pytest -q -p no:cacheprovider -n 2 python/tests | tee "$logs/pytest"
# the closing summary line (each step above stops the script when it fails)
echo "summary: ctest under the sanitizers: $(grep -o '[0-9]* tests failed out of [0-9]*' "$logs/asan");" \
     "ctest release: $(grep -o '[0-9]* tests failed out of [0-9]*' "$logs/release");" \
     "ruff: $(tail -n 1 "$logs/ruff"); mypy: $(tail -n 1 "$logs/mypy");" \
     "pytest: $(grep -E '^[0-9]+ (passed|failed)' "$logs/pytest" | tail -n 1)"
