#!/usr/bin/env bash
# Builds remat and runs the whole test suite twice: a release build (every
# test, including a short training run on Fashion-MNIST), then a build under
# AddressSanitizer and UndefinedBehaviorSanitizer (every test but the
# training run, which ASan makes too slow).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
echo "== sanitizer build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DREMAT_SANITIZE=ON
cmake --build build-asan -j"$jobs"
echo "== tests under AddressSanitizer and UndefinedBehaviorSanitizer"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -LE slow)
echo "== tests (release build)"
(cd build && ctest --output-on-failure)
