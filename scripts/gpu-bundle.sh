#!/usr/bin/env bash
# Packs what a GPU machine without our Debian libraries needs to run
# remat's CUDA tests and benchmarks: the CUDA build's programs (built here
# with nvcc for sm_90) and the shared libraries they link that such a
# machine lacks (OpenBLAS and its Fortran runtime, cJSON), as
# .devrun/bundle.tar.xz. scripts/gpu-run.sh unpacks it there; cuBLAS and
# cuDNN come from that machine's CUDA and PyTorch installation.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-cuda}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DREMAT_CUDA=ON >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
rm -rf .devrun && mkdir -p .devrun/stage/bin .devrun/stage/lib
cp "$build"/remat "$build"/tests/test_cuda "$build"/tests/test_weights "$build"/tests/test_models \
   "$build"/bench_kernels .devrun/stage/bin/
for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libcjson.so.1; do
    cp -L "$(ldd "$build"/remat | awk -v l="$lib" '$1 == l {print $3}')" .devrun/stage/lib/
done
tar -C .devrun/stage -cJf .devrun/bundle.tar.xz bin lib
rm -rf .devrun/stage
ls -la .devrun/bundle.tar.xz
