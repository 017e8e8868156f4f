"""A whole MAPPO iteration with many VMAS environments, lit-marl against BenchMARL 1.5.2 on the same config, side by
side in one run (issue 33 item 3).

    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/vs_benchmarl/speed.py --envs 600 --iterations 4

vmas/balance (4 agents), BenchMARL's MAPPO networks (MLPs 256-256), ``envs × steps`` frames an iteration, ``epochs``
passes of ``minibatch``-frame minibatches (``benchmarks/gpu.py``'s config); BenchMARL's ``Experiment`` with its
on-policy settings set to the same (evaluation, checkpoints and loggers off), lit-marl's ``MAPPO`` through the
Trainer, with batched VMAS resets (its default) and with torchrl's per-environment resets (BenchMARL's way). Per side:
the median over the iterations after the first of the iteration's time, its collection and its update. BenchMARL's
side runs in its venv (``setup.sh``); times come from its callbacks (collection: from the end of the previous
iteration's training to ``on_batch_collected``). Writes ``benchmarks/out/vs_benchmarl/speed_<envs>.json`` (on CUDA:
``speed_cuda_<envs>.json``).

On a device machine without a registry (``benchmarks/gpu.sh``), BenchMARL's side runs with the interpreter
``LIT_MARL_BENCHMARL_PYTHON`` and the module path ``LIT_MARL_BENCHMARL_PATH`` (its wheels unpacked there) instead of
the venv; ``--device cuda`` steps the envs and trains on the GPU on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "out" / "vs_benchmarl"
VENV = Path(os.environ.get("LIT_MARL_BENCHMARL_VENV", ROOT / ".venv-benchmarl"))
#: BenchMARL's interpreter and module path where there is no venv (a device machine: wheels unpacked into a folder)
BENCHMARL_PYTHON, BENCHMARL_PATH = os.environ.get("LIT_MARL_BENCHMARL_PYTHON"), os.environ.get("LIT_MARL_BENCHMARL_PATH")
SIDES = ("benchmarl", "lit-marl", "lit-marl-per-env")

try:  # BenchMARL's venv only (it pickles its callbacks: the class lives at module level)
    from benchmarl.experiment.callback import Callback as _BenchmarlCallback
except ImportError:
    _BenchmarlCallback = object


class Timer(_BenchmarlCallback):
    """Each iteration's collection and update time in BenchMARL's loop."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[tuple[str, float]] = [("start", time.perf_counter())]

    device = "cpu"

    def on_batch_collected(self, batch) -> None:
        _sync(self.device)
        self.marks.append(("collected", time.perf_counter()))

    def on_train_end(self, training_td, group) -> None:
        _sync(self.device)
        self.marks.append(("trained", time.perf_counter()))


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def benchmarl_side(envs: int, steps: int, epochs: int, minibatch: int, iterations: int, device: str = "cpu") -> dict:
    from benchmarl.algorithms import MappoConfig
    from benchmarl.environments import VmasTask
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig

    with tempfile.TemporaryDirectory() as folder:
        config = ExperimentConfig.get_from_yaml()
        config.loggers, config.create_json, config.save_folder = [], False, folder
        config.evaluation, config.render = False, False
        config.checkpoint_interval, config.checkpoint_at_end = 0, False
        config.sampling_device = config.train_device = device
        config.on_policy_n_envs_per_worker = envs
        config.on_policy_collected_frames_per_batch = envs * steps
        config.on_policy_n_minibatch_iters, config.on_policy_minibatch_size = epochs, minibatch
        config.max_n_frames, config.max_n_iters = envs * steps * iterations, iterations
        timer = Timer()
        timer.device = device
        experiment = Experiment(task=VmasTask.BALANCE.get_from_yaml(), algorithm_config=MappoConfig.get_from_yaml(),
                                model_config=MlpConfig.get_from_yaml(), critic_model_config=MlpConfig.get_from_yaml(),
                                seed=0, config=config, callbacks=[timer])
        timer.marks = [("start", time.perf_counter())]
        experiment.run()
    collection, training = [], []
    for (_, before), (kind, at) in zip(timer.marks, timer.marks[1:]):
        (collection if kind == "collected" else training).append(at - before)
    return _summary("benchmarl", envs * steps, collection, training)


def lit_marl_side(envs: int, steps: int, epochs: int, minibatch: int, iterations: int, batched: bool,
                  device: str = "cpu") -> dict:
    import csv

    import lightning.pytorch as pl

    sys.path.insert(0, str(ROOT))
    from lit_marl.algorithms import MAPPO
    from lit_marl.envs import VmasTask

    pl.seed_everything(0, verbose=False)
    frames = envs * steps
    task = VmasTask("balance", max_steps=100, batched_resets=batched,
                    scenario_kwargs={"n_agents": 4, "package_mass": 5, "random_package_pos_on_line": True})
    model = MAPPO(task, num_envs=envs, frames_per_batch=frames, minibatch_size=min(minibatch, frames),
                  n_minibatch_iters=epochs, max_frames=frames * iterations)
    with tempfile.TemporaryDirectory() as folder:
        trainer = pl.Trainer(accelerator="gpu" if device == "cuda" else "cpu", devices=1, max_epochs=-1, gradient_clip_val=5.0,
                             logger=pl.loggers.CSVLogger(folder, name="speed"), enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                             num_sanity_val_steps=0)
        trainer.fit(model)
        with open(Path(trainer.logger.log_dir) / "metrics.csv") as f:
            rows = [r for r in csv.DictReader(f) if r.get("timers/iteration_time")]
    collection = [float(r["timers/collection_time"]) for r in rows]
    training = [float(r["timers/training_time"]) for r in rows]
    return _summary("lit-marl" + ("" if batched else " (per-env resets)"), frames, collection, training)


def _summary(side: str, frames: int, collection: list[float], training: list[float]) -> dict:
    steady = slice(1, None) if len(collection) > 1 else slice(None)
    c, t = statistics.median(collection[steady]), statistics.median(training[steady])
    return {"side": side, "frames_per_iteration": frames, "iterations": len(collection),
            "collection_s": round(c, 3), "update_s": round(t, 3), "iteration_s": round(c + t, 3),
            "collection_fps": round(frames / c), "per_iteration": {"collection": collection, "update": training}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=600)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--minibatch", type=int, default=4096)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where both sides step and train")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES), help="the first is the baseline")
    parser.add_argument("--side", choices=SIDES, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = (args.envs, args.steps, args.epochs, args.minibatch, args.iterations)
    if args.side == "benchmarl":
        print(json.dumps(benchmarl_side(*sizes, device=args.device)))
        return
    if args.side is not None:
        print(json.dumps(lit_marl_side(*sizes, batched=args.side == "lit-marl", device=args.device)))
        return
    if "benchmarl" in args.sides and BENCHMARL_PYTHON is None:
        subprocess.run(["bash", str(ROOT / "benchmarks" / "vs_benchmarl" / "setup.sh")], check=True)
    results = []
    for side in args.sides:
        python, env = sys.executable, dict(os.environ)
        if side == "benchmarl":
            python = BENCHMARL_PYTHON or str(VENV / "bin" / "python")
            if BENCHMARL_PATH is not None:  # BenchMARL's torchrl 0.11 instead of lit-marl's 0.14
                env["PYTHONPATH"] = BENCHMARL_PATH
        out = subprocess.run([python, __file__, "--side", side, "--envs", str(args.envs), "--steps", str(args.steps),
                              "--epochs", str(args.epochs), "--minibatch", str(args.minibatch), "--iterations",
                              str(args.iterations), "--device", args.device], check=True, capture_output=True,
                             text=True, env=env)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = results[0]["iteration_s"]
    print(f"| side | collection s | update s | iteration s | collection frames/s | iteration vs {results[0]['side']} |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['side']} | {r['collection_s']:.2f} | {r['update_s']:.2f} | {r['iteration_s']:.2f} | "
              f"{r['collection_fps']} | {base / r['iteration_s']:.2f}x |")
    OUT.mkdir(parents=True, exist_ok=True)
    name = f"speed_{args.envs}.json" if args.device == "cpu" else f"speed_{args.device}_{args.envs}.json"
    (OUT / name).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
