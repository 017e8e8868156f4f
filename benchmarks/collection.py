"""Where a VMAS collection's time goes: torchrl's Collector against leaner ways of stepping the same envs.

    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/collection.py --algorithm mappo --rounds 3

vmas/balance with BenchMARL's defaults (4 agents, 10 envs, 6000 frames per iteration, the algorithm's collection
policy: MLP 256-256). Each way steps ``--steps`` steps of all envs (600 = one iteration), ways alternating within each
round; medians over rounds (seconds):

- ``collector``: lit-marl's Sampler, i.e. torchrl's ``Collector.next()`` (what the bare torchrl loop uses too);
- ``hand_loop``: ``policy(td)``, ``env.step_and_maybe_reset(td)``, one ``torch.stack`` at the end;
- ``rollout``: ``env.rollout(steps, policy, break_when_any_done=False)`` from a reset;
- ``policy``: the collection policy's forward alone;
- ``torchrl_env``: torchrl's ``VmasEnv.step_and_maybe_reset`` alone, fixed actions;
- ``raw_vmas``: VMAS's own ``env.step`` with uniform random actions and ``reset_at`` on done (no torchrl).

What is above ``raw_vmas + policy`` is what any collection path over torchrl's VMAS wrapper pays.
Writes ``benchmarks/out/collection_<algorithm>.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torchrl.envs.utils import ExplorationType, set_exploration_type  # noqa: E402

from lit_marl.algorithms import MADDPG, MAPPO  # noqa: E402
from lit_marl.envs import VmasTask  # noqa: E402

SCENARIO_KWARGS = {"n_agents": 4, "package_mass": 5, "random_package_pos_on_line": True}


def _ways(algorithm: str, num_envs: int, steps: int, batched_resets: bool = True, device: str = "cpu") -> dict:
    task = VmasTask("balance", max_steps=100, scenario_kwargs=SCENARIO_KWARGS, batched_resets=batched_resets)
    cls = MAPPO if algorithm == "mappo" else MADDPG
    model = cls(task, frames_per_batch=num_envs * steps, num_envs=num_envs, seed=0).to(device)  # envs there too
    sampler = model.collection.get_sampler()
    env, policy = sampler.env, sampler.collector.policy
    carried = env.reset()  # the hand loop continues its episodes across rounds, as the Collector does

    def hand_loop():
        nonlocal carried
        steps_out = []
        with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
            for _ in range(steps):
                out, carried = env.step_and_maybe_reset(policy(carried))
                steps_out.append(out)
        return torch.stack(steps_out, dim=len(env.batch_size))

    def rollout():  # from a reset (10 envs: ~13 ms)
        with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
            return env.rollout(steps, policy, break_when_any_done=False)

    def policy_only():
        td = env.reset()
        with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
            for _ in range(steps):
                policy(td.clone(False))

    def torchrl_env():
        with torch.no_grad():
            td = policy(env.reset())
            for _ in range(steps):
                env.step_and_maybe_reset(td)

    import vmas

    raw = vmas.make_env("balance", num_envs=num_envs, device=device, continuous_actions=True, seed=0, max_steps=100,
                        **SCENARIO_KWARGS)
    raw.reset()

    def raw_vmas():
        for _ in range(steps):
            actions = [torch.rand(num_envs, 2, device=device) * 2 - 1 for _ in range(SCENARIO_KWARGS["n_agents"])]
            _, _, dones, _ = raw.step(actions)
            for index in dones.nonzero().flatten().tolist():
                raw.reset_at(index)

    def raw_batched():  # the simulator's own batched step: one batched reset every max_steps (100) steps
        for step in range(steps):
            actions = [torch.rand(num_envs, 2, device=device) * 2 - 1 for _ in range(SCENARIO_KWARGS["n_agents"])]
            raw.step(actions)
            if step % 100 == 99:
                raw.reset()

    return {"collector": lambda: sampler.collect(0), "hand_loop": hand_loop, "rollout": rollout,
            "policy": policy_only, "torchrl_env": torchrl_env, "raw_vmas": raw_vmas, "raw_batched": raw_batched}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithm", default="mappo", choices=["mappo", "maddpg"])
    parser.add_argument("--num-envs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=600, help="steps of all envs per way and round (600: 6000 frames)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--per-env-resets", action="store_true",
                        help="torchrl's reset of one environment at a time (task.batched_resets: false)")
    parser.add_argument("--ways", nargs="+", default=None, help="only these ways (default: all)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the envs and the policy run")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device on this machine; allowed: --device cpu")
    ways = _ways(args.algorithm, args.num_envs, args.steps, batched_resets=not args.per_env_resets, device=args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    if args.ways:
        ways = {name: ways[name] for name in args.ways}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, way in ways.items():
            sync()
            start = time.perf_counter()
            way()
            sync()  # a GPU's queued work counts where it was asked for
            times[name].append(time.perf_counter() - start)
    result = {"algorithm": args.algorithm, "num_envs": args.num_envs, "steps": args.steps, "device": args.device,
              "batched_resets": not args.per_env_resets,
              "threads": torch.get_num_threads(),
              "seconds": {name: round(statistics.median(t), 4) for name, t in times.items()},
              "per_round": {name: [round(x, 4) for x in t] for name, t in times.items()}}
    print(json.dumps(result["seconds"], indent=2))
    out = args.out or Path(__file__).parent / "out" / f"collection_{args.algorithm}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
