"""``lit-marl benchmark``: check a grid, then run what is left of it here (one ``lit-marl fit`` process per run) or
submit it to SLURM, or show each run's state (:mod:`lit_marl.benchmark.grid` reads the grid and runs it here;
:mod:`lit_marl.benchmark.slurm` submits it)."""

from __future__ import annotations

import argparse

import torch

from lit_marl.benchmark.grid import Benchmark
from lit_marl.benchmark.slurm import refuse_live_jobs, status_table, submit
from lit_marl.slurm.settings import add_launcher_arguments

DESCRIPTION = "a grid of algorithms × tasks × seeds, one lit-marl fit process per run"


def main(argv: list[str]) -> int:
    """``lit-marl benchmark --config GRID [--parallel N] [--output_dir DIR] [--launcher slurm [--wait]] [--status]
    [--dry_run]``."""
    parser = argparse.ArgumentParser(prog="lit-marl benchmark", description=DESCRIPTION)
    parser.add_argument("--config", required=True, help="the grid YAML (configs/benchmarks/*.yaml)")
    parser.add_argument("--parallel", type=int, default=None, help="runs at a time (default: the grid's)")
    parser.add_argument("--output_dir", default=None, help="where <name>/ goes (default: the grid's)")
    add_launcher_arguments(parser, "runs as processes", "grid", "print the summary")
    parser.add_argument("--status", action="store_true", help="each run's state (and SLURM job), run nothing")
    parser.add_argument("--dry_run", action="store_true", help="check the grid and list the runs, run nothing")
    parser.add_argument("--in_process", action="store_true", help="run one after the other in this process")
    args = parser.parse_args(argv)
    bench = Benchmark(args.config, parallel=args.parallel, output_dir=args.output_dir, launcher=args.launcher)
    if args.status:
        print(status_table(bench), end="")
        return 0
    if args.dry_run:
        for run in bench.runs:
            print(f"{run.name} -> {run.folder}")
        return 0
    if bench.launcher == "slurm":
        return submit(bench, wait=args.wait)
    refuse_live_jobs(bench)  # a local launch would run them twice
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the runs share the machine's cores; restored for a caller that goes on (a test)
    try:
        runs = bench.run(in_process=args.in_process)
    finally:
        torch.set_num_threads(threads)
    if bench.stopped_by is not None:  # it has said what it stopped; exit as fit does when a signal stops it
        return 128 + bench.stopped_by
    return 1 if any(r.status == "failed" for r in runs) else 0
