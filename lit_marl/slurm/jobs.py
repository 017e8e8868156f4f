"""SLURM's job plumbing, for any study lit-marl submits (a benchmark grid, a tune study's workers): what one array
task runs (:class:`Watched`: a process on the compute node, the same one a local launch starts, watched by submitit's
job process, which turns SLURM's signals into a checkpoint and a requeue), and the queue read back (``squeue``) and
recorded (``slurm_jobs.json``). What a benchmark run and a tune worker are lives beside their commands
(:mod:`lit_marl.benchmark.slurm`, :mod:`lit_marl.tune.slurm`).

SLURM sends SIGUSR2 ``signal_delay_s`` before the time limit (or up to a minute earlier) to every process of the
task. The watched process ignores it; submitit calls :meth:`Watched.checkpoint`, which asks the process to stop
(SIGUSR1 for ``lit-marl fit``: :class:`~lit_marl.callbacks.preemption.PreemptionCheckpoint` finishes the iteration,
saves ``last.ckpt`` and exits), waits for it, and hands submitit a fresh task, which it requeues (``scontrol
requeue``). The requeued task finds the newest ``last.ckpt`` and resumes from it, as a local re-run does. SIGTERM
(``scancel``, a pre-emption, the time limit itself) reaches the process too; it checkpoints and exits, and the run
is left interrupted, resumed by the next submission.

The process gets the environment without SLURM's variables: Lightning would otherwise take the array task for a
``srun`` launch of its own (``SLURMEnvironment``: world size and ranks from ``SLURM_NTASKS``/``SLURM_PROCID``, and a
SIGUSR1 handler that requeues the job itself), while each run is one process that picks its devices as on a
workstation (``CUDA_VISIBLE_DEVICES``, which SLURM sets, is kept).
"""

from __future__ import annotations

import getpass
import json
import os
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from lit_marl.atomic import write_json
from lit_marl.errors import ConfigError
from lit_marl.utils import die_with_parent

#: environment variables the watched process does not get (SLURM's, submitit's)
STRIPPED_PREFIXES = ("SLURM_", "SLURMD_", "SBATCH_", "SRUN_", "SALLOC_", "SUBMITIT_", "PMI_", "PMIX_", "OMPI_")
#: exit codes of a run stopped by a signal after its checkpoint (SIGTERM, SIGUSR1, SIGINT), or killed
INTERRUPTED_CODES = {128 + signal.SIGTERM, 128 + signal.SIGUSR1, 128 + signal.SIGINT, -signal.SIGKILL,
                     -signal.SIGTERM}
#: seconds between repeats of the stop signal while the process has not installed its handler yet
RESEND_S = 2.0


def child_env() -> dict[str, str]:
    """This environment without SLURM's variables, with this lit_marl on PYTHONPATH and one OpenMP thread per
    allocated CPU (unless set)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(STRIPPED_PREFIXES)}
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", os.environ.get("SLURM_CPUS_PER_TASK", "1"))
    return env


def child_signals() -> None:
    """In the watched process before it starts: SLURM's SIGUSR2 is not for it, and a SIGUSR1 before its handler is
    installed must not kill it (it is sent again until the handler takes it); it gets SIGTERM when its watcher dies."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # (ignored when inherited so: Python would keep ignoring it)
    die_with_parent()


def array_job_id() -> str | None:
    """``<array job>_<task>`` (as squeue shows it) or the job id, inside a SLURM job."""
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        return f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID', '0')}"
    return os.environ.get("SLURM_JOB_ID")


class Watched(ABC):
    """A process started in ``folder`` (its output appended to ``folder/log``) and stopped with ``stop_signal`` when
    SLURM's time-limit signal comes; subclasses say what it is (:meth:`command`), what is checked before it starts
    (:meth:`before`) and what its exit code means (:meth:`after`)."""

    stop_signal: int = signal.SIGUSR1
    #: send the stop signal again every RESEND_S seconds until the process ends (it ignores it until its handler
    #: is installed); once is enough where its handler is there from the start (Python's SIGINT)
    resend: bool = True
    log: str = "train.log"

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._proc: subprocess.Popen | None = None
        self._started = 0.0

    def __getstate__(self) -> dict:
        return {"folder": self.folder}  # the process handle stays behind (submitit pickles the task)

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    @abstractmethod
    def command(self) -> list[str]:
        """The process to run: each kind of task says (a benchmark run: ``lit-marl fit``; a tune worker)."""

    def before(self) -> str | None:
        """Checks before the process starts; a reason not to start it, or None."""
        folder = Path(self.folder)
        if not folder.is_dir():
            raise RuntimeError(
                f"lit-marl: {folder} does not exist on {socket.gethostname()}: the folders lit-marl submits from must "
                f"be on a file system the compute nodes share (a cluster's home or project space), not a local disk")
        return None

    def after(self, returncode: int) -> str:
        return f"exit {returncode}"

    def __call__(self) -> str:
        reason = self.before()
        if reason is not None:
            print(f"lit-marl: {self.folder}: {reason}", flush=True)
            return reason
        cmd = self.command()
        print(f"lit-marl: job {array_job_id()} on {socket.gethostname()}: {' '.join(cmd)}", flush=True)
        self._started = time.time()
        with open(Path(self.folder) / self.log, "a") as out:
            self._proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=child_env(),
                                          cwd=os.getcwd(), preexec_fn=child_signals)
            try:
                while self._proc.poll() is None:
                    time.sleep(0.5)
            finally:
                if self._proc.poll() is None:  # this process is ending (an error, submitit's exit): stop it cleanly
                    self._stop()
        result = self.after(self._proc.returncode)
        print(f"lit-marl: {self.folder}: {result}", flush=True)
        return result

    def _stop(self) -> int:
        """Send the stop signal (again every RESEND_S seconds with :attr:`resend`) until the process ends; its exit."""
        proc = self._proc
        assert proc is not None
        proc.send_signal(self.stop_signal)
        while proc.poll() is None:
            try:
                proc.wait(timeout=RESEND_S)
            except subprocess.TimeoutExpired:
                if self.resend:
                    proc.send_signal(self.stop_signal)
        return proc.returncode

    def checkpoint(self, *args, **kwargs):
        """submitit, on SLURM's signal before the time limit (or a pre-emption): stop the process at its next
        checkpoint and hand back a fresh task to requeue; None (no requeue) when it had ended anyway."""
        from submitit.helpers import DelayedSubmission  # submitit: the optional extra ``cluster``

        if self._proc is not None:
            code = self._proc.returncode if self._proc.poll() is not None else self._stop()
            print(f"lit-marl: {self.folder}: stopped for a requeue (exit {code})", flush=True)
            if code == 0 or code not in INTERRUPTED_CODES:
                print(f"lit-marl: {self.folder}: {self.after(code)}", flush=True)
                return None
        return DelayedSubmission(type(self)(**self.__getstate__()))


JOBS_FILE = "slurm_jobs.json"
#: squeue states of a job waiting for its (next) start, and of one running
PENDING_STATES = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESV_DEL_HOLD"}
RUNNING_STATES = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}


def read_jobs(root: Path) -> dict[str, dict[str, Any]]:
    path = root / JOBS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def record_jobs(root: Path, jobs: dict[str, dict[str, Any]]) -> None:
    """Add (or replace) runs' jobs in ``slurm_jobs.json``, atomically."""
    write_json(root / JOBS_FILE, {**read_jobs(root), **jobs}, overwrite=True)


def queued(strict: bool = False) -> dict[str, str]:
    """Job id (``<array>_<task>`` for array tasks) -> squeue state, of this user's jobs in the queue; empty where
    squeue does not answer, or (``strict``, before a submission: a run could be submitted twice) ConfigError."""
    try:
        done = subprocess.run(["squeue", "-h", "-r", "-u", getpass.getuser(), "-o", "%i|%T"], capture_output=True,
                              text=True, timeout=60)
        error = "" if done.returncode == 0 else " ".join((done.stderr or done.stdout).split())
    except (OSError, subprocess.TimeoutExpired) as err:
        done, error = None, str(err)
    if error:
        if strict:
            raise ConfigError(f"launcher: squeue failed ({error}); lit-marl reads the queue before submitting, so "
                              f"that no run is submitted twice; allowed: submit where squeue works")
        return {}
    return dict(line.split("|", 1) for line in done.stdout.split() if "|" in line)


def wait_for(job_ids: set[str], poll_s: float = 2.0) -> None:
    """Return when none of ``job_ids`` is in the queue (twice in a row: a requeued job passes through states)."""
    absent = 0
    while absent < 2:
        time.sleep(poll_s)
        queue = queued()
        absent = absent + 1 if not job_ids & set(queue) else 0
