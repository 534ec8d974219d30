#!/usr/bin/env bash
# On a GPU machine (see scripts/gpu-bundle.sh): unpacks .devrun/bundle.tar.xz
# into /tmp/remat (Open MPI, if bundled, runs from there), finds cuBLAS and cuDNN (the
# CUDA toolkit's, or the nvidia-* wheels beside PyTorch), and runs the
# command given with the bundle's programs on PATH and libremat in
# REMAT_LIB, e.g.
#   scripts/gpu-run.sh test_cuda
#   scripts/gpu-run.sh mpirun --oversubscribe -np 2 test_dist_device --device cuda --steps 20
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ -x /tmp/remat/bin/remat ] || { mkdir -p /tmp/remat && tar -C /tmp/remat -xJf "$root/.devrun/bundle.tar.xz"; }
if [ -x /tmp/remat/root/usr/bin/orterun ]; then
    # The bundle's Open MPI where it was unpacked, whatever MPI the machine
    # has (an H200 image had Ubuntu's 4.1.6 with PMIx 5, whose plugins the
    # bundle's PMIx 4 cannot load): OPAL_PREFIX and PMIX_INSTALL_PREFIX
    # move the paths it was built with.
    [ -e /tmp/remat/root/usr/bin/mpirun ] || ln -s orterun /tmp/remat/root/usr/bin/mpirun
    export OPAL_PREFIX=/tmp/remat/root/usr PMIX_INSTALL_PREFIX=/tmp/remat/root/usr/lib/x86_64-linux-gnu/pmix2
    export PATH="/tmp/remat/root/usr/bin:$PATH"
fi
libdirs=/tmp/remat/lib
for name in libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
    dir=""
    for base in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
                $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
        f=$(find "$base" -name "$name" 2>/dev/null | head -1 || true)
        if [ -n "$f" ]; then dir=$(dirname "$f"); break; fi
    done
    [ -n "$dir" ] || { echo "gpu-run: $name not found" >&2; exit 1; }
    case ":$libdirs:" in *":$dir:"*) ;; *) libdirs="$libdirs:$dir" ;; esac
done
export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="/tmp/remat/bin:$PATH"
export REMAT_LIB=/tmp/remat/lib/libremat.so.1
exec "$@"
