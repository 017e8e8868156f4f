#!/usr/bin/env bash
# The BenchMARL 1.5.2 reference environment for the differential harness: a venv of its own (BenchMARL 1.5.2 needs
# torchrl 0.11, lit-marl torchrl 0.14), torch 2.13.0 first so that pip never pulls a CUDA build. Idempotent: a venv
# that already imports benchmarl 1.5.2 is kept.
#   bash benchmarks/vs_benchmarl/setup.sh            # makes .venv-benchmarl/ at the repository root
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${LIT_MARL_BENCHMARL_VENV:-.venv-benchmarl}"
if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "import benchmarl, sys; sys.exit(benchmarl.__version__ != '1.5.2')" 2>/dev/null; then
    echo "$VENV: benchmarl 1.5.2 ready"
    exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q torch==2.13.0 "benchmarl[vmas]==1.5.2" "torchrl==0.11.1" "tensordict==0.11.0" "vmas==1.5.2"
"$VENV/bin/python" -c "import benchmarl, torchrl; print('$VENV: benchmarl', benchmarl.__version__, 'torchrl', torchrl.__version__)"
