"""Run the EPyMARL reference (pymarlzooplus 1.1.0, in the venv ``setup.sh`` makes) on an EPyMARL-suite task, one
process per seed, with the settings lit-marl's config copies from EPyMARL's repository.

pymarlzooplus's own ``qmix.yaml`` differs from EPyMARL's in two places (a GRU agent, the last action in the
observation); ``--algorithm qmix`` sets EPyMARL's values (``use_rnn=False``, ``obs_last_action=False``), its
5,000-episode buffer and EPyMARL's test protocol (100 greedy episodes every 50,000 steps), as
``configs/qmix_rware.yaml`` has them.
pymarlzooplus's gymma wrapper also drops the flag that tells its runner an episode was cut by the time limit, so there
the limit is terminal, as it was in EPyMARL's 2021 code (the paper's); the runs here restore the handling of EPyMARL's
current repository (the TD target bootstraps at the limit, as lit-marl's does by default) unless
``--time-limit-terminal`` is given (lit-marl's counterpart: ``task.init_args.time_limit_terminal: true``).
Anything else goes after the options as sacred's ``key=value``::

    bash benchmarks/vs_epymarl/setup.sh
    python benchmarks/vs_epymarl/run.py --algorithm qmix --seeds 0 1 --t-max 2050000 \\
        --out benchmarks/out/epymarl_qmix_lbf                                   # LBF 8x8-2p-2f-coop, both seeds at once
    python benchmarks/vs_epymarl/compare.py benchmarks/out/epymarl_qmix_lbf runs/benchmarks/epymarl_lbf/.../qmix

Each seed writes ``<out>/seed_<n>/results/sacred/<algorithm>/<key>/1/info.json`` (every logged statistic with its
step) and ``<out>/seed_<n>.log``; an existing seed folder is refused rather than overwritten.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: EPyMARL's values where pymarlzooplus's algorithm configs differ from them (uoe-agents/epymarl src/config/algs)
EPYMARL = dict.fromkeys(("qmix", "vdn", "iql"), ["use_rnn=False", "obs_last_action=False", "buffer_size=5000"])
TEST = ["test_nepisode=100", "test_interval=50000", "log_interval=50000", "learner_log_interval=10000",
        "runner_log_interval=10000", "use_cuda=False", "use_tensorboard=False"]
ENTRY = '''import sys
from pymarlzooplus import pymarlzooplus
if sys.argv[1] == "--epymarl-time-limit":
    # EPyMARL's current gymma wrapper reports an episode cut by the time limit as episode_limit, so its runner stores it
    # as not terminated and the TD target bootstraps there; pymarlzooplus's (as EPyMARL's 2021 one) returns no info, so
    # the limit reads as terminal
    from pymarlzooplus.envs import gym_wrapper

    step = gym_wrapper._GymmaWrapper.step

    def step_reporting_the_limit(self, actions):
        reward, done, info = step(self, actions)
        food = getattr(self.original_env.unwrapped, "field", None)  # LBF ends early when all food is collected
        if done and self.timelimit_env._elapsed_steps >= self.episode_limit and (food is None or food.sum() > 0):
            info = {**info, "episode_limit": True}
        return reward, done, info

    gym_wrapper._GymmaWrapper.step = step_reporting_the_limit
pymarlzooplus(["pymarlzooplus/main.py", *sys.argv[2:]])
'''


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithm", default="qmix",
                        help="a pymarlzooplus algorithm config (qmix, vdn, iql, mappo, ...)")
    parser.add_argument("--key", default="lbforaging:Foraging-8x8-2p-2f-coop-v3", help="the gymma environment key")
    parser.add_argument("--time-limit", type=int, default=50, help="episode steps (LBF 50, RWARE 500)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--t-max", type=int, default=2_050_000,
                        help="environment steps (EPyMARL's off-policy 2.05M)")
    parser.add_argument("--out", type=Path, required=True, help="a new folder for the runs")
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-epymarl")
    parser.add_argument("--time-limit-terminal", action="store_true",
                        help="keep pymarlzooplus's handling, EPyMARL 2021's: an episode cut by the time limit is "
                             "terminal (EPyMARL's current one, the default here, bootstraps there as lit-marl does)")
    parser.add_argument("overrides", nargs="*", help="more sacred settings, key=value")
    args = parser.parse_args(argv)
    python = args.venv / "bin" / "python"
    if not python.exists():
        parser.error(f"--venv: {args.venv} has no bin/python; run bash benchmarks/vs_epymarl/setup.sh first")
    for option, value in (("--time-limit", args.time_limit), ("--t-max", args.t_max)):
        if value < 1:
            parser.error(f"{option}: {value}; allowed: a positive number of steps")
    repeated = sorted({s for s in args.seeds if args.seeds.count(s) > 1})
    if repeated or min(args.seeds) < 0:
        parser.error(f"--seeds: {args.seeds} " + (f"repeats {repeated[0]} (two runs would share seed_{repeated[0]}/)"
                                                  if repeated else "has a negative seed")
                     + "; allowed: distinct seeds >= 0")
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        parser.error(f"overrides: {bad[0]!r} is not key=value")
    taken = [s for s in args.seeds if (args.out / f"seed_{s}").exists()]
    if taken:
        parser.error(f"--out: {args.out / f'seed_{taken[0]}'} exists; allowed: a folder without these seeds' runs")
    processes, logs = [], []
    for seed in args.seeds:
        folder = (args.out / f"seed_{seed}").resolve()
        folder.mkdir(parents=True)
        (folder / "entry.py").write_text(ENTRY)  # pymarlzooplus writes results/ beside the script it was started from
        settings = [f"--config={args.algorithm}", "--env-config=gymma", "with", f"env_args.key={args.key}",
                    f"env_args.time_limit={args.time_limit}", f"env_args.seed={seed}", f"seed={seed}",
                    f"t_max={args.t_max}", *EPYMARL.get(args.algorithm, []), *TEST, *args.overrides]
        logs.append(log := open(args.out / f"seed_{seed}.log", "w"))
        limit = "--pymarlzooplus-time-limit" if args.time_limit_terminal else "--epymarl-time-limit"
        processes.append(subprocess.Popen([str(python), str(folder / "entry.py"), limit, *settings], cwd=folder,
                                          stdout=log, stderr=subprocess.STDOUT,
                                          env={**os.environ, "OMP_NUM_THREADS": "1"}))  # one core per seed
        print(f"seed {seed}: {python} {folder / 'entry.py'} {limit} {' '.join(settings)}")
    codes = [p.wait() for p in processes]
    for log in logs:
        log.close()
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
