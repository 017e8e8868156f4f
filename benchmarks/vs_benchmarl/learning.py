"""Learning side by side: BenchMARL 1.5.2 and lit-marl, the same algorithm on vmas/balance at BenchMARL's defaults,
the same seeds and frames, evaluated at the same frame counts (10 deterministic episodes each). (issue 21, item 2)

    python benchmarks/vs_benchmarl/learning.py run --side lit-marl --algorithm qmix --seed 0
    python benchmarks/vs_benchmarl/learning.py run --side benchmarl --algorithm qmix --seed 0   # in BenchMARL's venv
    python benchmarks/vs_benchmarl/learning.py table --algorithms qmix                           # the table, with CIs
    python benchmarks/vs_benchmarl/learning.py run --side lit-marl-one-stream --algorithm qmix --seed 0
    python benchmarks/vs_benchmarl/learning.py table --sides lit-marl lit-marl-one-stream       # re-seeding or not

Each run writes ``benchmarks/out/vs_benchmarl/learning/<side>_<algorithm>_seed<seed>.json`` ({frames: mean
evaluation return}) and ``….training.json`` beside it (the mean return of the episodes each collection finished,
iteration by iteration); runs may go side by side (one torch thread each). ``table`` prints, per algorithm and
evaluation, both sides' mean over seeds and the difference of means (lit-marl − BenchMARL) with a bootstrap 95 % CI
over seeds (``lit_marl.evaluation.statistics``), the same for the training returns of the last five collections
(where both sides recorded them), and writes ``learning.json`` beside the runs.

The side ``lit-marl-one-stream`` is lit-marl with its training environments seeded once, at the first collection,
instead of at every iteration that starts on episode boundaries (``one_stream.py``; issue 32 item 3); ``table --sides
lit-marl lit-marl-one-stream`` compares it with the shipped design the same way. The side ``lit-marl-per-env-resets``
is the shipped config with ``task.batched_resets: false`` (each finished VMAS environment reset on its own, as
torchrl's VmasEnv does; benchmarks/results/reset_modes.yaml).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "out" / "vs_benchmarl" / "learning"
VENV = Path(os.environ.get("LIT_MARL_BENCHMARL_VENV", ROOT / ".venv-benchmarl"))
FRAMES_PER_BATCH = 6000  # BenchMARL's default, on- and off-policy; lit-marl's configs match it

#: algorithm → (BenchMARL config class, continuous actions, lit-marl config, extra lit-marl arguments)
ALGORITHMS = {
    "mappo": ("MappoConfig", True, "mappo_vmas_balance.yaml", []),
    "ippo": ("IppoConfig", True, "ippo_vmas_balance.yaml", []),
    "maddpg": ("MaddpgConfig", True, "maddpg_vmas_balance.yaml", []),
    "iddpg": ("IddpgConfig", True, "iddpg_vmas_balance.yaml", []),
    "masac": ("MasacConfig", True, "masac_vmas_balance.yaml", []),
    "isac": ("IsacConfig", True, "isac_vmas_balance.yaml", []),
    "qmix": ("QmixConfig", False, "qmix_vmas_balance.yaml", []),
    "vdn": ("VdnConfig", False, "qmix_vmas_balance.yaml", ["--model.class_path", "lit_marl.algorithms.VDN"]),
    "iql": ("IqlConfig", False, "iql_vmas_balance.yaml", []),
}


try:  # BenchMARL's venv only (BenchMARL pickles its callbacks: the class must live at module level)
    from benchmarl.experiment.callback import Callback as _BenchmarlCallback
except ImportError:
    _BenchmarlCallback = object


class TrainingReturns(_BenchmarlCallback):
    """The mean return of the episodes that ended in each collected batch (lit-marl's
    ``collection/reward/episode_reward_mean``), recorded by BenchMARL's ``on_batch_collected``."""

    def __init__(self) -> None:
        super().__init__()
        self.training: list[float] = []

    def on_batch_collected(self, batch) -> None:
        finished = batch.get(("next", "done")).reshape(*batch.batch_size, -1).any(-1)
        returns = batch.get(("next", "agents", "episode_reward")).reshape(*batch.batch_size, -1).mean(-1)
        self.training.append(float(returns[finished].mean()))


def result_path(side: str, algorithm: str, seed: int) -> Path:
    return OUT / f"{side}_{algorithm}_seed{seed}.json"


def run_benchmarl(algorithm: str, seed: int, frames: int, eval_every: int) -> dict[int, float]:
    """Runs in BenchMARL's venv: its Experiment with its defaults; the evaluations from its marl-eval JSON."""
    from benchmarl import algorithms
    from benchmarl.environments import VmasTask
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig

    config_name, continuous, _, _ = ALGORITHMS[algorithm]
    with tempfile.TemporaryDirectory() as folder:
        config = ExperimentConfig.get_from_yaml()
        config.loggers, config.create_json, config.save_folder = [], True, folder
        config.max_n_frames, config.evaluation_interval = frames, eval_every
        config.evaluation_episodes, config.render = 10, False
        config.checkpoint_interval, config.checkpoint_at_end = 0, False
        config.prefer_continuous_actions = continuous
        config.sampling_device = config.train_device = "cpu"
        returns = TrainingReturns()
        experiment = Experiment(task=VmasTask.BALANCE.get_from_yaml(),
                                algorithm_config=getattr(algorithms, config_name).get_from_yaml(),
                                model_config=MlpConfig.get_from_yaml(), critic_model_config=MlpConfig.get_from_yaml(),
                                seed=seed, config=config, callbacks=[returns])
        experiment.run()
        (path,) = Path(folder).rglob("*.json")
        data = json.loads(path.read_text())
    seeds = data["vmas"]["balance"][algorithm][f"seed_{seed}"]
    evaluations = {int(v["step_count"]): sum(v["return"]) / len(v["return"])
                   for k, v in seeds.items() if k.startswith("step_")}
    return evaluations, {FRAMES_PER_BATCH * (i + 1): r for i, r in enumerate(returns.training)}


#: lit-marl's sides: how each starts ``lit-marl`` (the shipped entry point, or with one environment stream)
LIT_MARL_SIDES = {"lit-marl": ["-m", "lit_marl.cli"],
                  "lit-marl-one-stream": [str(ROOT / "benchmarks" / "vs_benchmarl" / "one_stream.py")],
                  "lit-marl-per-env-resets": ["-m", "lit_marl.cli"]}
#: what a side adds to the shipped config: ``lit-marl-per-env-resets`` resets each finished VMAS environment on its
#: own (``task.batched_resets: false``, as torchrl's VmasEnv does) instead of one batched reset (issue 48 item 5)
SIDE_OVERRIDES = {"lit-marl-per-env-resets": ["--model.init_args.task.init_args.batched_resets", "false"]}
SIDES = ["benchmarl", *LIT_MARL_SIDES]


def run_lit_marl(algorithm: str, seed: int, frames: int, eval_every: int,
                 workdir: Path | None = None, side: str = "lit-marl") -> dict[int, float]:
    """``lit-marl fit`` with the shipped config (the real command-line path); the evaluations from metrics.csv
    (the run's folder is kept under ``workdir`` where one is given: its metrics.csv grows as the run goes)."""
    _, _, config, extra = ALGORITHMS[algorithm]
    with _run_folder(workdir, f"{side}_{algorithm}_seed{seed}") as folder:
        subprocess.run([sys.executable, *LIT_MARL_SIDES[side], "fit", "--config", str(ROOT / "configs" / config),
                        *extra, *SIDE_OVERRIDES.get(side, []), "--seed_everything", str(seed), "--model.init_args.max_frames", str(frames),
                        "--trainer.check_val_every_n_epoch", str(eval_every // FRAMES_PER_BATCH),
                        "--checkpoint.every_n_epochs", "100000", "--trainer.default_root_dir", folder,
                        "--trainer.enable_progress_bar", "false"], check=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                           filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))))
        (metrics,) = Path(folder).rglob("metrics.csv")
        with open(metrics, newline="") as f:
            rows = list(csv.DictReader(f))
    evaluations = {int(float(r["counters/frames"])): float(r["val/return"]) for r in rows if r.get("val/return")}
    training = {int(float(r["counters/frames"])): float(r["collection/reward/episode_reward_mean"]) for r in rows
                if r.get("collection/reward/episode_reward_mean")}
    return evaluations, training


@contextlib.contextmanager
def _run_folder(workdir: Path | None, name: str):
    if workdir is None:
        with tempfile.TemporaryDirectory() as folder:
            yield folder
        return
    folder = Path(workdir) / name
    folder.mkdir(parents=True, exist_ok=False)  # a kept folder is never reused: its metrics would mix two runs
    yield str(folder)


def table(algorithms: list[str], seeds: list[int], sides: tuple[str, str] = ("benchmarl", "lit-marl")) -> dict:
    """Per algorithm and evaluation: both sides' returns over the seeds run on both, their means, and the difference
    of means (second side − first, by default lit-marl − BenchMARL) with a bootstrap 95 % CI resampling each side on
    its own: the same seed number gives the two sides different random streams, so the runs are two samples, not
    pairs."""
    sys.path.insert(0, str(ROOT))
    from lit_marl.evaluation.statistics import independent_difference

    base, other = sides
    out: dict = {}
    for algorithm in algorithms:
        runs = {side: {s: json.loads(result_path(side, algorithm, s).read_text())
                       for s in seeds if result_path(side, algorithm, s).is_file()}
                for side in sides}
        common = sorted(set(runs[base]) & set(runs[other]))
        if not common:
            continue
        frames = sorted(set.intersection(*(set(r) for side in runs.values() for s, r in side.items()
                                           if s in common)), key=int)
        rows = []
        for f in frames:
            rows.append(_row(int(f), common, [runs[base][s][f] for s in common], [runs[other][s][f] for s in common],
                             independent_difference))
        training = _training_tail(algorithm, seeds, sides)
        if training is not None:
            rows.append(training)
        out[algorithm] = rows
    return out


def _row(frames, seeds: list[int], base: list[float], other: list[float], independent_difference) -> dict:
    diff = independent_difference(other, base) if len(seeds) > 1 else None
    return {"frames": frames, "seeds": seeds, "base": base, "other": other,
            "base_mean": sum(base) / len(base), "other_mean": sum(other) / len(other),
            "difference": diff["mean_difference"] if diff else None,
            "probability_other_better": diff["probability_a_better"] if diff else None,
            # the claim "learns as well" is made only where the CI includes 0 or favours the second side
            "learns_as_well": bool(diff and diff["mean_difference"]["ci_high"] >= 0)}


#: the collections the training-side row averages: the last five (96k-120k frames at BenchMARL's 6000 per batch)
TRAINING_TAIL = 5


def _training_tail(algorithm: str, seeds: list[int], sides: tuple[str, str]) -> dict | None:
    """A second, less noisy look at the end of training: per run, the mean return of the episodes of its last
    ``TRAINING_TAIL`` collections (each 60 episodes, near-greedy for the value-based algorithms: epsilon 0.01 by
    then), over the seeds whose ``….training.json`` exists on both sides; the same difference and rule."""
    from lit_marl.evaluation.statistics import independent_difference

    tails: dict[str, dict[int, float]] = {}
    for side in sides:
        tails[side] = {}
        for seed in seeds:
            path = result_path(side, algorithm, seed).with_suffix(".training.json")
            if path.is_file():
                curve = json.loads(path.read_text())
                last = [curve[k] for k in sorted(curve, key=int)[-TRAINING_TAIL:]]
                tails[side][seed] = sum(last) / len(last)
    base, other = sides
    common = sorted(set(tails[base]) & set(tails[other]))
    if len(common) < 2:
        return None
    return _row("training", common, [tails[base][s] for s in common], [tails[other][s] for s in common],
                independent_difference)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--side", choices=SIDES, required=True)
    run.add_argument("--algorithm", choices=sorted(ALGORITHMS), required=True)
    run.add_argument("--seed", type=int, required=True)
    run.add_argument("--frames", type=int, default=120_000)
    run.add_argument("--eval_every", type=int, default=60_000, help="frames between evaluations")
    run.add_argument("--workdir", type=Path, help="lit-marl side: keep the run's folder here (else a temporary one)")
    run.add_argument("--inside_venv", action="store_true", help=argparse.SUPPRESS)
    tab = sub.add_parser("table")
    tab.add_argument("--algorithms", nargs="+", choices=sorted(ALGORITHMS), default=sorted(ALGORITHMS))
    tab.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    tab.add_argument("--sides", nargs=2, choices=SIDES, default=["benchmarl", "lit-marl"],
                     help="the two sides to compare: the difference is the second's mean minus the first's")
    args = parser.parse_args()
    if args.command == "table":
        base, other = args.sides
        result = table(args.algorithms, args.seeds, (base, other))
        OUT.mkdir(parents=True, exist_ok=True)
        name = "learning.json" if args.sides == ["benchmarl", "lit-marl"] else f"learning_{base}_{other}.json"
        (OUT / name).write_text(json.dumps(result, indent=1))
        print(f"| algorithm | frames | seeds | {base} per seed | {other} per seed | {base} mean | {other} mean "
              f"| difference [95 % CI] | P({other} better) | learns as well |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for algorithm, rows in result.items():
            for r in rows:
                d = r["difference"]
                ci = f"{d['value']:+.2f} [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}]" if d else "—"
                p = f"{r['probability_other_better']:.2f}" if d else "—"
                per_seed = [" / ".join(f"{v:.1f}" for v in r[k]) for k in ("base", "other")]
                when = f"{r['frames'] // 1000}k" if isinstance(r["frames"], int) else f"last {TRAINING_TAIL} collections"
                print(f"| {algorithm} | {when} | {len(r['seeds'])} | {per_seed[0]} | {per_seed[1]} | "
                      f"{r['base_mean']:.2f} | {r['other_mean']:.2f} | {ci} | {p} | "
                      f"{'yes' if r['learns_as_well'] else '**no**'} |")
        return
    if args.side == "benchmarl" and not args.inside_venv:  # re-run this script in BenchMARL's venv
        subprocess.run(["bash", str(ROOT / "benchmarks" / "vs_benchmarl" / "setup.sh")], check=True)
        subprocess.run([str(VENV / "bin" / "python"), __file__, *sys.argv[1:], "--inside_venv"], check=True)
        return
    if args.side == "benchmarl":
        curve, training = run_benchmarl(args.algorithm, args.seed, args.frames, args.eval_every)
    else:
        curve, training = run_lit_marl(args.algorithm, args.seed, args.frames, args.eval_every, args.workdir,
                                       args.side)
    OUT.mkdir(parents=True, exist_ok=True)
    path = result_path(args.side, args.algorithm, args.seed)
    path.write_text(json.dumps({str(k): v for k, v in sorted(curve.items())}, indent=1))
    # the training side: mean return of the episodes each collection finished, iteration by iteration
    path.with_suffix(".training.json").write_text(json.dumps({str(k): v for k, v in sorted(training.items())},
                                                             indent=1))
    print(f"{args.side} {args.algorithm} seed {args.seed}: {curve} -> {path}")


if __name__ == "__main__":
    main()
