#!/usr/bin/env bash
# lit-marl against an earlier lit-marl, whole runs alternating (issue 14 item 8: throughput unchanged or better):
#   bash benchmarks/versions.sh <git-rev> <algorithm> [rounds]
# checks <git-rev> out into a temporary worktree and runs benchmarks/throughput.py --sides lit_marl (one thread)
# with each tree's lit_marl on the path, alternating; prints frames/s per round.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$1 algorithm=$2 rounds=${3:-3}
old=$(mktemp -d)/before
git worktree add --detach "$old" "$rev" >/dev/null
trap 'git worktree remove --force "$old"' EXIT
for r in $(seq 1 "$rounds"); do
    for tree in "$old" "$PWD"; do
        OMP_NUM_THREADS=1 PYTHONPATH="$tree" python benchmarks/throughput.py --sides lit_marl --threads 1 \
            --algorithms "$algorithm" --iterations 3 --rounds 1 >/dev/null 2>&1
        fps=$(python -c "import json; print(round(json.load(open('benchmarks/out/throughput_threads1_$algorithm.json'))['$algorithm']['lit_marl']['fps'], 1))")
        echo "$algorithm round $r $([[ $tree == "$old" ]] && echo "$rev" || echo HEAD) $fps fps"
    done
done
