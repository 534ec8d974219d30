#!/usr/bin/env bash
# The on-device checks of docs/gpu.md in one run, for a GPU machine lent for
# minutes: scripts/gpu-run.sh's bundle (scripts/gpu-bundle.sh, MPI=1 for the
# two-rank check) and the repository's tests/ and bench/. Each check runs
# under its own time limit, in order of importance, and is skipped once
# DEADLINE seconds (default 540) have passed since the start; the output
# goes to stdout and to $DIR/checks.log (DIR: $OUT, else /tmp/gpu-checks),
# the comparisons' JSON beside it.
#   scripts/gpu-run.sh scripts/gpu-checks.sh [CHECK...]
# CHECKs (default all, in this order): cuda dist grad calibrate compare
# offload compare16 conv16 profile pytest workspace truth applier compile
# determinism (conv16: the bf16 convolutions on channels-last copies;
# remat.torch's memory truth, the applier's cost and rt.compile at byte
# budgets on the device, COMPILE_ARGS narrowing the last; what
# deterministic cuDNN convolutions cost PyTorch)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${DIR:-${OUT:-/tmp/gpu-checks}}
mkdir -p "$dir"
deadline=${DEADLINE:-540}
start=$SECONDS
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mtl='^ofi,psm,psm2' OMPI_MCA_osc='^ucx'
export PYTHONUNBUFFERED=1
exec > >(tee -a "$dir/checks.log") 2>&1

# check NAME LIMIT COMMAND...: runs COMMAND with LIMIT seconds unless the
# deadline has passed, and prints its status and time.
check() {
    local name=$1 limit=$2; shift 2
    local left=$((deadline - (SECONDS - start)))
    if [ "$left" -le 10 ]; then echo "== $name: skipped (deadline)"; return; fi
    [ "$limit" -le "$left" ] || limit=$left
    echo "== $name (limit ${limit}s): $*"
    local t0=$SECONDS
    timeout -k 5 "$limit" "$@"
    echo "== $name: exit $? in $((SECONDS - t0)) s"
}

remat=$(command -v remat)
want=${*:-cuda dist grad calibrate compare offload compare16 conv16 profile pytest workspace truth applier compile determinism}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for c in $want; do
    case $c in
    cuda)      check test_cuda 200 test_cuda
               check test_offload_exec_cuda 200 test_offload_exec --device cuda --quick ;;
    dist)      check test_dist_device_cuda_np2 120 mpirun --oversubscribe -np 2 test_dist_device --device cuda --steps 20 ;;
    grad)      (cd "$root/tests" && check cli_grad_cuda 60 test_weights --cli "$remat" "--device cuda" &&
                check cli_grad_models_cuda 90 test_models --cli "$remat" "--device cuda") ;;
    calibrate) check calibrate_link 40 remat calibrate --device cuda ;;
    workspace) for w in "" --least-workspace; do
                   check "plan_cnn_b64 $w" 30 remat plan --model cnn --batch 64 --device cuda --budget 1MiB --optim sgd $w
               done ;;
    compare)   check compare_fp32 240 python3 "$root/bench/torch/compare.py" --device cuda --remat "$remat" \
                   --rounds 1 --timeout 100 --json "$dir/compare.json" ;;
    offload)   check plan_siamese_11GiB 90 remat plan --model siamese-resnet50 --device cuda --device-memory 11GiB \
                   --host-budget 32GiB --max-batch
               for b in ${SIAMESE_BATCHES:-65 177}; do
                   check "train_siamese_b$b" 60 remat train --model siamese-resnet50 --batch "$b" --device cuda \
                       --budget 11GiB --host-budget 32GiB --data synthetic --steps 3 --log-every 1
               done ;;
    compare16) check compare_bf16 150 python3 "$root/bench/torch/compare.py" --device cuda --remat "$remat" \
                   --precision bf16 --rows resnet50,gpt2-small --rounds 1 --timeout 60 --json "$dir/compare_bf16.json" ;;
    # the bf16 convolutions on channels-last copies (REMAT_CUDA_CONV16=nhwc, not yet run on a GPU): the
    # kernels against the CPU's and across plans, then resnet50 against autocast as compare16 has it
    conv16)    check test_cuda_nhwc 200 env REMAT_CUDA_CONV16=nhwc test_cuda
               check compare_bf16_nhwc 120 env REMAT_CUDA_CONV16=nhwc python3 "$root/bench/torch/compare.py" \
                   --device cuda --remat "$remat" --precision bf16 --rows resnet50 --rounds 1 --timeout 60 \
                   --json "$dir/compare_bf16_nhwc.json"
               check bench_profile_nhwc 90 env REMAT_CUDA_CONV16=nhwc remat bench --model resnet50 --batch 64 \
                   --device cuda --precision bf16 --strategies all --profile --steps 3 ;;
    profile)   check bench_profile 90 remat bench --model resnet50 --batch 64 --device cuda --strategies all --profile \
                   --steps 5 --prefetch
               # at PyTorch's checkpointed peak (compare.py's resnet50 row on an H200): where recomputation goes
               check bench_profile_budget 90 remat bench --model resnet50 --batch 64 --device cuda --strategies all \
                   --budget "${RESNET50_BUDGET:-2603741696}" --profile --steps 5 ;;
    pytest)    (cd "$root" && check pytest_gpu 90 env PYTHONPATH="$root/python:$root/python/tests" \
                   python3 -m pytest -q -x python/tests/test_gpu.py) ;;
    truth)     (cd "$root" && check torch_truth 150 env PYTHONPATH="$root/python:$root/python/tests" \
                   python3 bench/torch/remat_truth.py --device cuda --models resnet50,unet,gpt2,llama \
                   --json "$dir/truth.json") ;;
    applier)   (cd "$root" && check torch_applier 150 env PYTHONPATH="$root/python:$root/python/tests" \
                   python3 bench/torch/applier_cost.py --device cuda --models resnet50-b64,gpt2-small --rounds 5
                # where ResNet-50's midpoint time goes there (1.38-1.49x no plan on an H200, 2026-11-30)
                check torch_applier_breakdown 120 env PYTHONPATH="$root/python:$root/python/tests" \
                   python3 bench/torch/applier_cost.py --device cuda --models resnet50-b64 --rounds 5 --breakdown) ;;
    compile)   (cd "$root" && check rt_compile_cuda 240 env PYTHONPATH="$root/python:$root/python/tests" \
                   python3 bench/torch/rt_compile.py --device cuda ${COMPILE_ARGS:---rows gpt2} \
                   --json "$dir/rt_compile.json") ;;
    determinism) (cd "$root" && check cudnn_determinism 90 python3 bench/torch/cudnn_determinism.py --steps 5) ;;
    *) echo "gpu-checks: unknown check '$c'" >&2; exit 2 ;;
    esac
done
echo "== done in $((SECONDS - start)) s"
