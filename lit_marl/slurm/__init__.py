"""Studies on a SLURM cluster through submitit (the optional extra ``cluster``): ``lit-marl benchmark --launcher slurm``
and ``lit-marl tune --launcher slurm``.

``settings.py`` reads and checks the ``slurm:`` settings (and the cluster: ``sbatch --test-only``) before anything is
submitted and makes submitit's executor; ``task.py`` is what one array task runs (the same ``lit-marl fit`` process
a local launch starts, with SLURM's time-limit signal turned into a checkpoint and a requeue); ``grid.py`` submits a
benchmark grid and reports each run's state; ``tune.py`` submits the workers of a study. The run folder is the truth:
submitit's job states and results are never read (without SLURM accounting they say nothing).
"""
