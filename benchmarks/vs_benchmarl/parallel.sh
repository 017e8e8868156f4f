#!/usr/bin/env bash
# lit-marl's side of the learning table on a many-core machine: one run per core, one torch thread each, on the CPU
# (CUDA hidden, as on BenchMARL's side), each stopped at a deadline; then everything in one archive.
#
#   bash benchmarks/vs_benchmarl/parallel.sh DEADLINE_S ARCHIVE_DIR ALGORITHM:SEED [ALGORITHM:SEED ...]
#
# ARCHIVE_DIR/learning.tar.gz holds the finished runs' JSON files (benchmarks/out/vs_benchmarl/learning/), every run's
# metrics.csv (it grows as the run goes, so a run stopped at the deadline still shows its evaluations so far) and
# logs; the results are printed too. Needs as many cores as runs.
set -uo pipefail
deadline=$1; archive=$2; shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
cores=$(nproc)
[ "$#" -le "$cores" ] || { echo "parallel.sh: $# runs but $cores cores; allowed: at most one run per core" >&2; exit 2; }
core=0
for item in "$@"; do
  algorithm=${item%%:*}; seed=${item##*:}
  CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1 taskset -c "$core" timeout "$deadline" \
    python3 "$root/benchmarks/vs_benchmarl/learning.py" run --side lit-marl --algorithm "$algorithm" --seed "$seed" \
    --workdir "$work/runs" >"$work/${algorithm}_seed${seed}.log" 2>&1 &
  core=$((core + 1))
done
wait
mkdir -p "$archive" "$root/benchmarks/out/vs_benchmarl/learning"
# metrics and logs only: a run's folder also holds its replay buffers and checkpoints (hundreds of MB)
(cd "$work" && find . -name metrics.csv -o -name '*.log') | tar -czf "$archive/learning.tar.gz" -C "$work" -T - \
  -C "$root/benchmarks/out/vs_benchmarl" learning
grep -h "seed .*->" "$work"/*.log
