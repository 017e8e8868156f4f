"""``lit-marl tune --launcher slurm``: the study's workers as one SLURM job array.

Each array task is one worker (:class:`~lit_marl.slurm.task.TuneWorker`) on the study's journal file
(``<out>/journal.log``; the study folder must be on a file system every node shares). A worker killed mid-trial
(``scancel``, a node lost) leaves its trial RUNNING; the next worker to ask for a trial marks it FAIL and queues its
parameters again (same node: the worker's process is gone; any node: no heartbeat for ``heartbeat_timeout``). At
the time limit a worker stops its trial's run, marks the trial FAIL, queues its parameters and is requeued. The
worker that finds the study complete writes ``best.yaml``, ``trials.csv`` and the plots.
"""

from __future__ import annotations

import time
from pathlib import Path

from lit_marl.slurm.grid import record_jobs, wait_for
from lit_marl.slurm.settings import SlurmSettings, submit_array
from lit_marl.slurm.task import TuneWorker


def submit_workers(root: Path, workers: int, settings: SlurmSettings, wait: bool = False, log=print,
                   poll_s: float = 2.0) -> bool:
    """Submit ``workers`` workers on the study in ``root`` (prepared: ``lit-marl tune`` made it); with ``wait``,
    return when their jobs have left the queue. Whether it waited (the caller then writes the results)."""
    folder, jobs = submit_array(settings, root, f"lit-marl-tune:{root.name}",
                                [TuneWorker(str(root.resolve()), index) for index in range(workers)])
    record_jobs(root, {f"worker_{i}": {"job_id": job.job_id, "submission": str(folder), "submitted": time.time()}
                       for i, job in enumerate(jobs)})
    log(f"lit-marl tune: {workers} SLURM worker(s): jobs {', '.join(job.job_id for job in jobs)}; logs in "
        f"{root / 'workers'}")
    if not wait:
        log(f"lit-marl tune: the last worker writes {root / 'best.yaml'} and {root / 'trials.csv'} when the study "
            f"has its trials; squeue -n lit-marl-tune:{root.name} shows the workers")
        return False
    wait_for({job.job_id for job in jobs}, poll_s)
    return True
