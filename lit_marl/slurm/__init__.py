"""Studies on a SLURM cluster through submitit (the optional extra ``cluster``): the plumbing that
``lit-marl benchmark --launcher slurm`` and ``lit-marl tune --launcher slurm`` share.

``settings.py`` reads and checks the ``slurm:`` settings (and the cluster: ``sbatch --test-only``) before anything is
submitted and makes submitit's executor; ``jobs.py`` is what one array task runs (:class:`~lit_marl.slurm.jobs.Watched`:
the same process a local launch starts, with SLURM's time-limit signal turned into a checkpoint and a requeue) and the
queue read back. What a benchmark run and a tune worker are, and how each command submits them, live beside the
commands (:mod:`lit_marl.benchmark.slurm`, :mod:`lit_marl.tune.slurm`). The run folder is the truth: submitit's job
states and results are never read (without SLURM accounting they say nothing).
"""
