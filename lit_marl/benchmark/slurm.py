"""``lit-marl benchmark --launcher slurm``: what is left of a grid as one SLURM job array (each run a :class:`FitRun`),
and ``--status``.

The grid's folder gains::

    <output_dir>/<name>/slurm_jobs.json          run -> its newest SLURM job (array job id _ task), submission folder
    <output_dir>/<name>/slurm/<submission>/      submitit's sbatch script, pickles and job logs of one submission

A run's state is read from its folder first (``finished.json``; ``failed.json``; a ``last.ckpt``) and from
``squeue`` for a job still queued or running: submitit's own job states need SLURM accounting, which many
clusters (and a one-node test cluster) lack.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import yaml
from typing_extensions import override

from lit_marl.atomic import write_atomic, write_json
from lit_marl.benchmark.grid import Benchmark, Run, summary_table
from lit_marl.benchmark.launcher import launcher_lock
from lit_marl.benchmark.run_folder import (FINISHED, RUN_CONFIG, at_budget, final_metrics, fit_command,
                                           latest_checkpoint, write_finished)
from lit_marl.errors import ConfigError
from lit_marl.slurm.jobs import (INTERRUPTED_CODES, PENDING_STATES, RUNNING_STATES, Watched, array_job_id, queued,
                                 read_jobs, record_jobs, wait_for)
from lit_marl.slurm.settings import check_cluster, submit_array

#: a run whose fit failed (not interrupted) says so here; the next launch removes it
FAILED = "failed.json"
#: what ``--status`` calls each state
STATES = ("finished", "running", "pending", "interrupted (resumable)", "failed", "not started")


class FitRun(Watched):
    """One run of a benchmark grid: ``lit-marl fit --config <run>/run_config.yaml [--ckpt_path <newest last.ckpt>]``;
    ``finished.json`` when it ends with exit 0, ``failed.json`` when it fails (not when a signal stopped it)."""

    def __init__(self, folder: str) -> None:
        super().__init__(folder)
        self._resumed_from: Path | None = None

    @override
    def before(self) -> str | None:
        super().before()
        folder = Path(self.folder)
        if (folder / FINISHED).is_file():
            return "finished already"
        if not (folder / RUN_CONFIG).is_file():
            raise RuntimeError(f"lit-marl: {folder / RUN_CONFIG} is missing; submit the grid again")
        (folder / FAILED).unlink(missing_ok=True)
        self._resumed_from = latest_checkpoint(folder)
        if self._resumed_from is not None and at_budget(self._resumed_from,
                                                        yaml.safe_load((folder / RUN_CONFIG).read_text()) or {}):
            # the fit reached its max_frames, but this job was stopped before it wrote finished.json
            write_finished(folder, None, None, self._resumed_from, recorded_late=True)
            return "finished already (its last.ckpt has its max_frames; finished.json written now)"
        return None

    @override
    def command(self) -> list[str]:
        return fit_command(Path(self.folder), self._resumed_from)

    @override
    def after(self, returncode: int) -> str:
        folder = Path(self.folder)
        if returncode == 0:
            write_finished(folder, self._started, time.time() - self._started, self._resumed_from)
            return "finished"
        if returncode in INTERRUPTED_CODES:
            return f"interrupted (exit {returncode}); the next submission resumes it from its last.ckpt"
        write_json(folder / FAILED, {"exit": returncode, "job": array_job_id(), "host": socket.gethostname(),
                                     "log": str(folder / self.log), "ended": time.time()}, overwrite=True)
        return f"FAILED (exit {returncode}); see {folder / self.log}"


def run_state(run: Run, job: dict[str, Any] | None, queue: dict[str, str]) -> str:
    """One of :data:`STATES`: the folder says finished or failed; squeue says pending or running; a ``last.ckpt``
    left by a job no longer queued is interrupted (the next launch resumes it)."""
    if (run.folder / FINISHED).is_file():
        return "finished"
    queue_state = queue.get(job["job_id"]) if job else None
    if queue_state in RUNNING_STATES:
        return "running"
    if queue_state in PENDING_STATES:
        return "pending" if latest_checkpoint(run.folder) is None else "pending (requeued)"
    if (run.folder / FAILED).is_file():
        return "failed"
    checkpoint = latest_checkpoint(run.folder)
    if checkpoint is not None:  # at its budget: finished, and the next launch writes its finished.json
        return "finished" if at_budget(checkpoint, run.config) else "interrupted (resumable)"
    if job:  # submitted, left the queue, and wrote nothing the next launch could use
        return "failed"
    return "not started"


def status_table(bench: Benchmark, queue: dict[str, str] | None = None) -> str:
    """A Markdown table of every run of the grid: state, SLURM job, frames so far."""
    jobs = read_jobs(bench.root)
    if queue is None:
        queue = queued() if jobs else {}
    lines = [f"lit-marl benchmark {bench.name}: {bench.root}",
             "| task | algorithm | seed | state | SLURM job | frames |", "|---|---|---|---|---|---:|"]
    for run in bench.runs:
        job = jobs.get(run.name)
        frames = final_metrics(run.folder).get("frames") if run.folder.is_dir() else None
        lines.append(f"| {run.task} | {run.algorithm} | {run.seed} | {run_state(run, job, queue)} | "
                     f"{job['job_id'] if job else ''} | {'' if frames is None else frames} |")
    return "\n".join(lines) + "\n"


def live_runs(bench: Benchmark, jobs: dict[str, dict[str, Any]], queue: dict[str, str]) -> list[Run]:
    """The runs whose newest job is queued or running."""
    return [r for r in bench.runs
            if r.name in jobs and queue.get(jobs[r.name]["job_id"]) in PENDING_STATES | RUNNING_STATES]


def refuse_live_jobs(bench: Benchmark) -> None:
    """ConfigError before a local launch of a grid whose runs are queued or running on SLURM."""
    jobs = read_jobs(bench.root)
    live = live_runs(bench, jobs, queued()) if jobs else []
    if live:
        shown = ", ".join(f"{r.name}: job {jobs[r.name]['job_id']}" for r in live[:3])
        raise ConfigError(f"launcher: {len(live)} run(s) of this grid are queued or running on SLURM ({shown}"
                          f"{', ...' if len(live) > 3 else ''}); a local launch would run them twice; allowed: wait "
                          f"for them (--status), scancel them, or --launcher slurm")


def submit(bench: Benchmark, wait: bool = False, log=print, poll_s: float = 2.0) -> int:
    """Submit what is left of the grid (not finished, not queued or running already) as one job array; with
    ``wait``, return when those jobs have left the queue, after the summary table (exit code 1 when a run failed)."""
    settings = bench.slurm
    check_cluster(settings)  # before anything is written or submitted
    with launcher_lock(bench.root):  # a second launcher (local or SLURM) would submit or start the same runs again
        return _submit(bench, wait, log, poll_s)


def _submit(bench: Benchmark, wait: bool, log, poll_s: float) -> int:
    settings = bench.slurm
    jobs, queue = read_jobs(bench.root), queued(strict=True)
    for run in bench.runs:
        bench.prepare(run)  # run_config.yaml (a changed grid is refused), finished runs skipped
    live = [r for r in live_runs(bench, jobs, queue) if r.status == "pending"]
    todo = [r for r in bench.runs if r.status == "pending" and r not in live]
    log(f"lit-marl benchmark {bench.name} on SLURM: {len(bench.runs)} runs, "
        f"{sum(r.status == 'skipped' for r in bench.runs)} finished, {len(live)} queued or running already, "
        f"{sum(r.resumed_from is not None for r in todo)} to resume, {sum(r.resumed_from is None for r in todo)} "
        f"to start")
    submitted: dict[str, dict[str, Any]] = {}
    if todo:
        folder, pending_jobs = submit_array(settings, bench.root, f"lit-marl:{bench.name}",
                                            [FitRun(str(run.folder.resolve())) for run in todo])
        for run, job in zip(todo, pending_jobs):
            submitted[run.name] = {"job_id": job.job_id, "submission": str(folder), "submitted": time.time()}
            log(f"  {'resume' if run.resumed_from else 'start '} {run.name}: job {job.job_id}")
        record_jobs(bench.root, submitted)
    if not wait:
        log(f"see each run's state with: lit-marl benchmark --config {bench.path} --status")
        return 0
    waiting = {v["job_id"] for v in submitted.values()} | {jobs[r.name]["job_id"] for r in live}
    wait_for(waiting, poll_s)
    jobs = read_jobs(bench.root)
    for run in bench.runs:
        run.status = {"finished": "finished", "failed": "failed"}.get(run_state(run, jobs.get(run.name), {}),
                                                                      "interrupted")
        if run.status == "finished":
            run.info = {**final_metrics(run.folder), **json.loads((run.folder / FINISHED).read_text())}
    table = summary_table(bench.runs)
    write_atomic(bench.root / "summary.md", table, overwrite=True)  # as a local launch: derived from the run folders
    log(table)
    return 1 if any(r.status != "finished" for r in bench.runs) else 0
