#!/usr/bin/env bash
# Builds remat and runs the whole test suite twice: a build under
# AddressSanitizer and UndefinedBehaviorSanitizer, then a release build.
# Every test runs in both (the slow ones at reduced sizes under the
# sanitizers); tests labelled cuda skip, saying so, without a GPU.
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
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs")
echo "== tests (release build)"
(cd build && ctest --output-on-failure -j"$jobs")
