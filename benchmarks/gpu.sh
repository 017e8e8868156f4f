#!/usr/bin/env bash
# Issue 13's GPU check: MAPPO on VMAS at 600 and 4096 envs, with and without `compile`, and the update's share of
# time (benchmarks/gpu.py). One short run: fits a few minutes on one GPU. Results: benchmarks/out/gpu.json.
#   bash benchmarks/gpu.sh           # on a machine with a CUDA device
#   bash benchmarks/gpu.sh --tiny    # the same script on CPU with tiny sizes (what the tests run)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--tiny" ]]; then
    shift
    exec python benchmarks/gpu.py --device cpu --envs 4 8 --steps 5 --epochs 1 --minibatch 20 --iterations 2 \
        --compile off "$@"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
exec python benchmarks/gpu.py --device cuda --envs 600 4096 --iterations 4 --compile off on "$@"
