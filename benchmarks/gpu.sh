#!/usr/bin/env bash
# The GPU checks (issues 13 and 33, item 4), as one prepared script for a lent device machine:
#   collection  raw VMAS batched step, torchrl's env, the policy alone and lit-marl's collection at 600 and 4096 envs
#               (benchmarks/collection.py --device cuda)
#   speed       a whole MAPPO iteration, BenchMARL 1.5.2 and lit-marl (batched and per-env resets) side by side at
#               600 and 4096 envs (benchmarks/vs_benchmarl/speed.py --device cuda)
#   iterations  lit-marl's MAPPO with and without `compile`, and the update's share (benchmarks/gpu.py)
# Stages run in the order given (default: collection speed iterations); each copies its JSON to $OUT when set (the
# device tool brings back what is there). Wheels: `bash benchmarks/gpu_wheels.sh` here first, then carry `.whl`:
#   bash benchmarks/gpu.sh [STAGE...]          # on a machine with a CUDA device
#   bash benchmarks/gpu.sh --tiny              # gpu.py on CPU with tiny sizes (what the tests run)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--tiny" ]]; then
    shift
    exec python benchmarks/gpu.py --device cpu --envs 4 8 --steps 5 --epochs 1 --minibatch 20 --iterations 2 \
        --compile off "$@"
fi
python=${PYTHON:-python3}
stages=("$@")
[[ ${#stages[@]} -gt 0 ]] || stages=(collection speed iterations)
for stage in "${stages[@]}"; do
    [[ $stage =~ ^(collection|speed|iterations)$ ]] \
        || { echo "gpu.sh: unknown stage '$stage'; allowed: collection, speed, iterations" >&2; exit 2; }
done
# a device machine without a registry: each side's packages from its wheels, in a folder of its own
if [[ -d .whl/lit-marl ]] && ! "$python" -c "import torchrl" 2>/dev/null; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-lit-marl \
        .whl/lit-marl/*.whl
    export PYTHONPATH="/tmp/site-lit-marl:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
if [[ -d .whl/benchmarl && ! -x .venv-benchmarl/bin/python ]]; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-benchmarl \
        .whl/benchmarl/*.whl
    export LIT_MARL_BENCHMARL_PYTHON="$python" LIT_MARL_BENCHMARL_PATH=/tmp/site-benchmarl
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
keep() { if [[ -n "${OUT:-}" ]]; then cp "$@" "$OUT"/; fi; }
for stage in "${stages[@]}"; do
    echo "== $stage $(date +%T)"
    case $stage in
        collection)
            "$python" benchmarks/collection.py --device cuda --num-envs 600 --steps 100 --rounds 3 \
                --ways collector policy torchrl_env raw_batched --out benchmarks/out/collection_cuda_600.json
            "$python" benchmarks/collection.py --device cuda --num-envs 4096 --steps 50 --rounds 3 \
                --ways collector policy torchrl_env raw_batched --out benchmarks/out/collection_cuda_4096.json
            keep benchmarks/out/collection_cuda_600.json benchmarks/out/collection_cuda_4096.json ;;
        speed)
            for envs in 600 4096; do
                "$python" benchmarks/vs_benchmarl/speed.py --device cuda --envs "$envs" --iterations 3
                keep "benchmarks/out/vs_benchmarl/speed_cuda_$envs.json"
            done ;;
        iterations)
            "$python" benchmarks/gpu.py --device cuda --envs 600 4096 --iterations 4 --compile off on
            keep benchmarks/out/gpu.json ;;
    esac
done
