"""``lit-marl benchmark``: a grid of algorithms × tasks × seeds, one ``lit-marl fit`` process per run, here
(:mod:`~lit_marl.benchmark.grid`) or as a SLURM job array (:mod:`~lit_marl.benchmark.slurm`); the command itself is
:mod:`~lit_marl.benchmark.command`."""

from lit_marl.benchmark.command import main
from lit_marl.benchmark.grid import Benchmark, Run, summary_table
from lit_marl.benchmark.run_folder import FINISHED, RUN_CONFIG, latest_checkpoint

__all__ = ["Benchmark", "Run", "FINISHED", "RUN_CONFIG", "latest_checkpoint", "summary_table", "main"]
