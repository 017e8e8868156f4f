"""Where a collection's time goes for the task families that step one episode per simulator object (issue 33, item 6).

    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/collection_families.py

For each family (a shipped config's task, at that config's ``num_envs``), torchrl's ``Collector`` steps lit-marl's
env with uniform random actions (no policy network: what is measured is the env side) for ``--batches`` batches of
``--steps`` steps of every env, after one batch of warm-up, under cProfile. Reported per family: frames per second,
and the share of the profiled time spent

- ``simulator``: in the simulator's own code (its package: pettingzoo/mpe2, lbforaging, rware, gymnasium_robotics
  and mujoco, meltingpot and dmlab2d, gymnasium), i.e. what no wrapper can remove;
- ``resets``: inside the per-episode envs' ``_reset`` (torchrl's ``SerialEnv`` resets each finished episode: one
  simulator object each, so one call each is inherent, not a loop to batch);
- ``lit_marl``: in lit-marl's own code (its wrappers: agent tuples, grouping, batching);
- ``torchrl``/``tensordict``/``torch``: the batching and bookkeeping around the simulator.

A wrapper cost above 10 % of collection (``lit_marl``, or a per-step synchronisation) is what issue 33 asks to fix.
Writes ``benchmarks/out/collection_families.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torchrl.collectors import Collector  # noqa: E402

from lit_marl.envs.base import Task  # noqa: E402
from lit_marl.utils import instantiate  # noqa: E402

#: family -> the shipped config whose task (and num_envs) is measured
FAMILIES = {
    "pettingzoo_mpe": "mappo_mpe_simple_spread.yaml",
    "pettingzoo_sisl": "ippo_sisl_multiwalker.yaml",
    "lbf": "mappo_lbf.yaml",
    "rware": "mappo_rware.yaml",
    "mamujoco": "mappo_mamujoco_halfcheetah.yaml",
    "gymnasium": "ppo_gymnasium_cartpole.yaml",
    "meltingpot": "mappo_meltingpot_prisoners_dilemma.yaml",
}
#: path fragments of each layer's files (the first that matches)
LAYERS = (("lit_marl", ("/lit_marl/",)), ("torchrl", ("/torchrl/",)), ("tensordict", ("/tensordict/",)),
          ("torch", ("/torch/",)),
          ("simulator", ("/pettingzoo/", "/mpe2/", "/lbforaging/", "/rware/", "/gymnasium_robotics/", "/mujoco/",
                         "/meltingpot/", "/dmlab2d/", "/gymnasium/", "/pymunk/", "/Box2D/", "/pygame/", "/dm_env/",
                         "/numpy/")))


def layer(filename: str) -> str:
    for name, fragments in LAYERS:
        if any(fragment in filename for fragment in fragments):
            return name
    return "builtins" if filename.startswith("~") or filename.startswith("<") else "other"


def measure(config_name: str, steps: int, batches: int) -> dict:
    config = yaml.safe_load((ROOT / "configs" / config_name).read_text())
    init_args = config["model"]["init_args"]
    task = instantiate(init_args["task"], Task, "task")
    num_envs = int(init_args.get("num_envs", 10))
    env = task.make_env(num_envs=num_envs, seed=0, device="cpu")
    collector = Collector(env, None, frames_per_batch=num_envs * steps, total_frames=-1)  # uniform random actions
    collector.next()  # warm-up: builds, first resets
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    for _ in range(batches):
        collector.next()
    profile.disable()
    seconds = time.perf_counter() - start
    collector.shutdown()
    stats = pstats.Stats(profile)
    total = sum(row[2] for row in stats.stats.values())  # tottime over every function: the profiled time
    shares: dict[str, float] = {}
    resets = 0.0
    for (filename, _, function), (_, _, tottime, cumtime, _) in stats.stats.items():
        shares[layer(filename)] = shares.get(layer(filename), 0.0) + tottime
        if function == "_reset" and "batched_envs" in filename:  # SerialEnv._reset: every episode's reset under it
            resets = max(resets, cumtime)
    frames = num_envs * steps * batches
    return {"config": config_name, "task": task.name, "num_envs": num_envs, "frames": frames,
            "seconds": seconds, "frames_per_s": frames / seconds,
            "shares": {k: round(v / total, 4) for k, v in sorted(shares.items(), key=lambda kv: -kv[1])},
            "resets": round(resets / total, 4)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--steps", type=int, default=100, help="steps of every env per batch")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "collection_families.json"))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    results = {}
    for family in args.families:
        try:
            results[family] = measure(FAMILIES[family], args.steps, args.batches)
        except Exception as err:  # noqa: BLE001 - a family whose simulator is not installed is reported, not fatal
            results[family] = {"error": f"{type(err).__name__}: {err}"}
        row = results[family]
        if "error" in row:
            print(f"{family:16s} {row['error']}")
        else:
            shares = ", ".join(f"{k} {v:.0%}" for k, v in row["shares"].items() if v >= 0.01)
            print(f"{family:16s} {row['task']:40s} {row['num_envs']:4d} envs {row['frames_per_s']:9.0f} frames/s; "
                  f"resets {row['resets']:.0%}; {shares}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
