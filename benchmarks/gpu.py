"""MAPPO frames/s on VMAS with many envs on one device, with and without ``compile``, and the update's share of time.

    python benchmarks/gpu.py --device cuda --envs 600 4096 --compile off on     # what benchmarks/gpu.sh runs
    python benchmarks/gpu.py --device cpu --envs 4 8 --steps 5 --compile off    # the tiny CPU check in the tests

vmas/balance (4 agents), BenchMARL's MAPPO networks (MLPs 256-256), envs and networks on the same device; each
iteration collects ``envs × steps`` frames and trains ``--epochs`` passes of minibatches of ``--minibatch`` frames.
Per setting: whole-run frames/s (setup, compilation and the first iteration included) and steady frames/s with the
update's share of each iteration (medians over the iterations after the first). Writes benchmarks/out/gpu.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lightning.pytorch as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lit_marl.algorithms import MAPPO  # noqa: E402
from lit_marl.envs import VmasTask  # noqa: E402

SCENARIO_KWARGS = {"n_agents": 4, "package_mass": 5, "random_package_pos_on_line": True}


def run(device: str, envs: int, steps: int, epochs: int, minibatch: int, iterations: int, compile: bool) -> dict:
    pl.seed_everything(0, verbose=False)
    frames = envs * steps
    start = time.perf_counter()
    model = MAPPO(VmasTask("balance", max_steps=100, scenario_kwargs=SCENARIO_KWARGS), num_envs=envs,
                  frames_per_batch=frames, minibatch_size=min(minibatch, frames), n_minibatch_iters=epochs,
                  max_frames=frames * iterations, compile=compile)
    with tempfile.TemporaryDirectory() as folder:
        trainer = pl.Trainer(accelerator=device, devices=1, max_epochs=-1, gradient_clip_val=5.0,
                             logger=pl.loggers.CSVLogger(folder, name="gpu"), enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                             num_sanity_val_steps=0, log_every_n_steps=1)
        trainer.fit(model)
        wall = time.perf_counter() - start
        with open(Path(trainer.logger.log_dir) / "metrics.csv") as f:
            rows = [r for r in csv.DictReader(f) if r.get("timers/iteration_time")]
    iteration = [float(r["timers/iteration_time"]) for r in rows]
    training = [float(r["timers/training_time"]) for r in rows]
    steady = slice(1, None) if len(rows) > 1 else slice(None)
    return {"device": device, "envs": envs, "frames_per_iteration": frames, "iterations": len(rows),
            "compile": compile, "whole_run_fps": model.frames / wall,
            "steady_fps": frames / statistics.median(iteration[steady]),
            "update_share": statistics.median(t / i for t, i in zip(training[steady], iteration[steady])),
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--envs", type=int, nargs="+", default=[600, 4096])
    parser.add_argument("--steps", type=int, default=100, help="steps per env per iteration")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--minibatch", type=int, default=4096)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--compile", nargs="+", default=["off", "on"], choices=["off", "on"])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "gpu.json")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device on this machine; allowed: --device cpu")
    results = []
    for envs in args.envs:
        for setting in args.compile:
            if args.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            try:
                results.append(run(args.device, envs, args.steps, args.epochs, args.minibatch, args.iterations,
                                   setting == "on"))
            except Exception as err:  # one setting's failure is a result too; the others still run
                results.append({"device": args.device, "envs": envs, "compile": setting == "on",
                                "error": f"{type(err).__name__}: {err}"[:2000]})
                print(f"{envs:>5} envs compile={setting:<3} FAILED: {results[-1]['error'][:300]}", flush=True)
                continue
            r = results[-1]
            print(f"{envs:>5} envs compile={setting:<3} whole {r['whole_run_fps']:>9.0f} fps  steady "
                  f"{r['steady_fps']:>9.0f} fps  update {100 * r['update_share']:.0f}%", flush=True)
            # after every setting: a run cut short by a device lease keeps what it measured
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"torch": torch.__version__, "gpu": torch.cuda.get_device_name()
                                            if args.device == "cuda" else None, "results": results}, indent=2))


if __name__ == "__main__":
    main()
