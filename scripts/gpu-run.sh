#!/usr/bin/env bash
# On a GPU machine (see scripts/gpu-bundle.sh): unpacks .devrun/bundle.tar.xz
# into /tmp/remat, finds cuBLAS and cuDNN (the CUDA toolkit's, or the
# nvidia-* wheels beside PyTorch), and runs the command given with the
# bundle's programs on PATH, e.g.
#   scripts/gpu-run.sh test_cuda
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p /tmp/remat && tar -C /tmp/remat -xJf "$root/.devrun/bundle.tar.xz"
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
exec "$@"
