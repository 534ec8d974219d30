#!/usr/bin/env bash
# Packs what a GPU machine without our Debian libraries needs to run
# remat's CUDA tests and benchmarks: the CUDA build's programs and libremat
# (built here with nvcc for sm_90) and every shared library they link
# except the C runtime's own and CUDA's (OpenBLAS, oneDNN, cJSON, hwloc,
# libgomp, ...), as .devrun/bundle.tar.xz. With MPI=1 it adds Open MPI
# (mpirun, its plugins, PMIx and their libraries) so that test_dist_device
# can run two ranks on the GPU. scripts/gpu-run.sh unpacks it there; cuBLAS
# and cuDNN come from that machine's CUDA and PyTorch installation.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-cuda}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DREMAT_CUDA=ON >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
rm -rf .devrun && mkdir -p .devrun/stage/bin .devrun/stage/lib .devrun/stage/root
progs=("$build"/remat "$build"/tests/test_cuda "$build"/tests/test_weights "$build"/tests/test_models
       "$build"/tests/test_dist_device "$build"/tests/test_offload_exec "$build"/bench_kernels)
cp "${progs[@]}" .devrun/stage/bin/
cp -L "$build"/libremat.so.1 .devrun/stage/lib/ && ln -s libremat.so.1 .devrun/stage/lib/libremat.so
objs=("${progs[@]}")
if [ "${MPI:-0}" = 1 ]; then
    # Open MPI's programs, plugins, help texts and settings travel under
    # root/ at the paths they were built with; gpu-run.sh points
    # OPAL_PREFIX and PMIX_INSTALL_PREFIX there.
    paths=()
    for p in /usr/bin/orterun /usr/bin/orted /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 \
             /etc/openmpi /usr/share/openmpi /usr/share/pmix; do
        if [ -e "$p" ]; then paths+=("${p#/}"); fi
    done
    tar -C / -cf - "${paths[@]}" | tar -C .devrun/stage/root -xf -
    mapfile -t plugins < <(find /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 -name '*.so')
    objs+=(/usr/bin/orterun /usr/bin/orted "${plugins[@]}")
fi
skip='^(libc|libm|libpthread|libdl|librt|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*)\.so'
ldd "${objs[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
while read -r name path; do
    [[ "$name" =~ $skip ]] || cp -Ln "$path" .devrun/stage/lib/"$name"
done
tar -C .devrun/stage -cJf .devrun/bundle.tar.xz bin lib root
rm -rf .devrun/stage
ls -la .devrun/bundle.tar.xz
