#!/usr/bin/env bash
# An EPyMARL reference for lit-marl's EPyMARL-suite configs: EPyMARL itself is not on the package registries, so this
# installs pymarlzooplus 1.1.0 (Papadopoulos et al., AAMAS 2025: EPyMARL's code base extended; its QMIX learner, mixer
# and gymma wrapper are EPyMARL's) in a venv of its own, torch 2.13.0 first so that pip never pulls a CUDA build. Its
# declared requirements pull transformers, albumentations, PettingZoo[all] and more that the LBF and RWARE runs never
# import, so the package goes in without them and the modules it imports on those paths are listed below. Idempotent:
# a venv that already imports it is kept.
#   bash benchmarks/vs_epymarl/setup.sh            # makes .venv-epymarl/ at the repository root
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${LIT_MARL_EPYMARL_VENV:-.venv-epymarl}"
if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "from pymarlzooplus import pymarlzooplus" 2>/dev/null; then
    echo "$VENV: pymarlzooplus ready"
    exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q --no-deps pymarlzooplus==1.1.0
"$VENV/bin/pip" install -q torch==2.13.0 "numpy<2" "setuptools>=77,<81" gymnasium pyyaml sacred six tensorboard-logger \
    pandas scipy matplotlib seaborn scikit-learn tqdm rich dill networkx opencv-python-headless "pettingzoo==1.24.3" \
    "lbforaging==2.0.0" "rware==2.0.0"
"$VENV/bin/python" -c "from pymarlzooplus import pymarlzooplus; import lbforaging, rware; print('$VENV: pymarlzooplus ready')"
