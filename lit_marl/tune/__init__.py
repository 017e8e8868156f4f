"""Hyperparameter search of a lit-marl config with Optuna (``lit-marl tune``; the optional extra ``tune``).

``space.py`` reads the search-space file, ``study.py`` runs trials as ``lit-marl fit`` processes (workers sharing one
journal-file study), ``pruning.py`` is the callback inside those processes, ``results.py`` writes best.yaml, the
trials table and plots, ``command.py`` is the command line. A launcher other than local processes (SLURM) would
start ``python -m lit_marl.tune.study <study folder> <worker index>`` where ``run_workers`` starts it locally.
"""
