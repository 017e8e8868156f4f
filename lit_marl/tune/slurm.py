"""``lit-marl tune --launcher slurm``: the study's workers as one SLURM job array.

Each array task is one worker (:class:`TuneWorker`) on the study's journal file
(``<out>/journal.log``; the study folder must be on a file system every node shares). A worker killed mid-trial
(``scancel``, a node lost) leaves its trial RUNNING; the next worker to ask for a trial marks it FAIL and queues its
parameters again (same node: the worker's process is gone; any node: no heartbeat for ``heartbeat_timeout``). At
the time limit a worker stops its trial's run, marks the trial FAIL, queues its parameters and is requeued. The
worker that finds the study complete writes ``best.yaml``, ``trials.csv`` and the plots.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from typing_extensions import override

from lit_marl.slurm.jobs import Watched, record_jobs, wait_for
from lit_marl.slurm.settings import SlurmSettings, submit_array
from lit_marl.tune.results import write_study_results


class TuneWorker(Watched):
    """One worker of a ``lit-marl tune`` study (``python -m lit_marl.tune.study <study> <index>``), its output in
    ``<study>/workers/worker_<index>.log``. On SLURM's time-limit signal it is stopped as a Ctrl-C stops a local
    worker (SIGINT): its trial's run checkpoints, the trial is marked FAIL and its parameters queued again for the
    requeued worker (or any other). When it ends because the study has its trials, it writes the study's results
    (``best.yaml``, ``trials.csv``, plots)."""

    stop_signal = signal.SIGINT
    resend = False  # a second Ctrl-C would interrupt the worker while it fails and requeues its trial

    def __init__(self, folder: str, index: int = 0) -> None:
        super().__init__(folder)
        self.index = index
        self.log = f"workers/worker_{index}.log"

    def __getstate__(self) -> dict:
        return {"folder": self.folder, "index": self.index}

    @override
    def before(self) -> str | None:
        super().before()
        (Path(self.folder) / "workers").mkdir(exist_ok=True)
        return None

    @override
    def command(self) -> list[str]:
        return [sys.executable, "-m", "lit_marl.tune.study", self.folder, str(self.index)]

    @override
    def after(self, returncode: int) -> str:
        if returncode != 0:
            return f"worker {self.index} ended with exit {returncode}; see {Path(self.folder) / self.log}"
        write_study_results(Path(self.folder))
        return f"worker {self.index} done; results in {self.folder}"


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
