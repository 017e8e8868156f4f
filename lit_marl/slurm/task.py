"""What one SLURM array task runs: a process on the compute node (the same one a local launch starts), watched by
submitit's job process, which turns SLURM's signals into a checkpoint and a requeue.

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

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from pathlib import Path

from typing_extensions import override

from lit_marl.atomic import write_json

#: a run whose fit failed (not interrupted) says so here; the next launch removes it
FAILED = "failed.json"
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


def _child_signals() -> None:
    """In the watched process before it starts: SLURM's SIGUSR2 is not for it, and a SIGUSR1 before its handler is
    installed must not kill it (it is sent again until the handler takes it); it gets SIGTERM when its watcher dies."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # (ignored when inherited so: Python would keep ignoring it)
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


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
        """The process to run: each kind of task says (:class:`FitRun`: ``lit-marl fit``; the tune worker's)."""

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
                                          cwd=os.getcwd(), preexec_fn=_child_signals)
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
        from submitit.helpers import DelayedSubmission

        if self._proc is not None:
            code = self._proc.returncode if self._proc.poll() is not None else self._stop()
            print(f"lit-marl: {self.folder}: stopped for a requeue (exit {code})", flush=True)
            if code == 0 or code not in INTERRUPTED_CODES:
                print(f"lit-marl: {self.folder}: {self.after(code)}", flush=True)
                return None
        return DelayedSubmission(type(self)(**self.__getstate__()))


class FitRun(Watched):
    """One run of a benchmark grid: ``lit-marl fit --config <run>/run_config.yaml [--ckpt_path <newest last.ckpt>]``;
    ``finished.json`` when it ends with exit 0, ``failed.json`` when it fails (not when a signal stopped it)."""

    def __init__(self, folder: str) -> None:
        super().__init__(folder)
        self._resumed_from: Path | None = None

    @override
    def before(self) -> str | None:
        from lit_marl.benchmark import FINISHED, RUN_CONFIG, latest_checkpoint

        super().before()
        folder = Path(self.folder)
        if (folder / FINISHED).is_file():
            return "finished already"
        if not (folder / RUN_CONFIG).is_file():
            raise RuntimeError(f"lit-marl: {folder / RUN_CONFIG} is missing; submit the grid again")
        (folder / FAILED).unlink(missing_ok=True)
        self._resumed_from = latest_checkpoint(folder)
        return None

    @override
    def command(self) -> list[str]:
        from lit_marl.benchmark import fit_command

        return fit_command(Path(self.folder), self._resumed_from)

    @override
    def after(self, returncode: int) -> str:
        from lit_marl.benchmark import write_finished

        folder = Path(self.folder)
        if returncode == 0:
            write_finished(folder, self._started, time.time() - self._started, self._resumed_from)
            return "finished"
        if returncode in INTERRUPTED_CODES:
            return f"interrupted (exit {returncode}); the next submission resumes it from its last.ckpt"
        write_json(folder / FAILED, {"exit": returncode, "job": array_job_id(), "host": socket.gethostname(),
                                     "log": str(folder / self.log), "ended": time.time()}, overwrite=True)
        return f"FAILED (exit {returncode}); see {folder / self.log}"


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
        from lit_marl.tune.command import write_study_results

        write_study_results(Path(self.folder))
        return f"worker {self.index} done; results in {self.folder}"
