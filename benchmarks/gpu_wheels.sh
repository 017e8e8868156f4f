#!/usr/bin/env bash
# The wheels benchmarks/gpu.sh installs on a device machine that has torch, Lightning and numpy but no registry
# (Python 3.12, x86-64): lit-marl's side in .whl/lit-marl, BenchMARL 1.5.2's (torchrl 0.11) in .whl/benchmarl.
# Run here, where the registry is; .whl/ is git-ignored and travels as a carried path (`carry: [".whl"]`).
#   bash benchmarks/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
platforms=(--python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
           --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
fetch() {  # fetch DIR SPEC...: a binary wheel for the device's Python, else one built here (pure-Python sdists)
    local dir=$1; shift
    mkdir -p "$dir"
    for spec in "$@"; do
        python3 -m pip download -q --no-deps --only-binary=:all: "${platforms[@]}" -d "$dir" "$spec" 2>/dev/null \
            || python3 -m pip wheel -q --no-deps --no-build-isolation -w "$dir" "$spec"
    done
}
rm -rf .whl
fetch .whl/lit-marl torchrl==0.14.1 tensordict==0.14.3 vmas==1.5.2 pyglet==1.5.27 jsonargparse==4.53.0 \
    docstring_parser==0.18.0 typeshed_client==2.15.0 gymnasium==1.4.0 farama-notifications==0.0.6 orjson==3.11.5 \
    importlib_metadata==10.2.0 pyvers==0.2.3
fetch .whl/benchmarl torchrl==0.11.1 tensordict==0.11.0 benchmarl==1.5.2 vmas==1.5.2 pyglet==1.5.27 \
    hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3 orjson==3.11.5 importlib_metadata==10.2.0 pyvers==0.2.3
du -sh .whl/*
