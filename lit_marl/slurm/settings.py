"""The ``slurm:`` settings of a grid file or a study, checked before anything is submitted, and the submitit executor
they make.

::

    slurm:
      partition: gpu              # default: the cluster's default partition
      timeout_min: 120            # time limit of each run's allocation; a run still going is checkpointed and requeued
      cpus_per_task: 4
      gpus_per_task: 1            # the run's config chooses the accelerator (trainer.accelerator gpu, devices 1)
      mem_gb: 16
      array_parallelism: 8        # array tasks running at once (default: all)
      signal_delay_s: 120         # SIGUSR2 this long before the limit: time for an iteration and last.ckpt
      max_requeues: 3             # time-limit requeues of a run before it is left interrupted
      sbatch_flags: {account: my_lab, qos: normal}   # any other sbatch flag, without its dashes
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from lit_marl.errors import ConfigError, did_you_mean, non_negative_int, positive_float, positive_int

#: how runs (or a study's workers) are started: processes on this machine, or a SLURM job array
LAUNCHERS = ("local", "slurm")
#: submitit reads it on its first import ("NOCONFIG": leave logging as it is)
SUBMITIT_LOG_VARIABLE = "SUBMITIT_LOG_LEVEL"

#: sbatch flags lit-marl sets itself (one task per run, its time limit, signal, array and log files)
MANAGED_FLAGS = {"array": "array_parallelism", "time": "timeout_min", "t": "timeout_min", "signal": "signal_delay_s",
                 "partition": "partition", "p": "partition", "cpus-per-task": "cpus_per_task", "c": "cpus_per_task",
                 "gpus-per-node": "gpus_per_task", "gpus-per-task": "gpus_per_task", "gpus": "gpus_per_task",
                 "mem": "mem_gb", "output": None, "o": None, "error": None, "e": None, "open-mode": None,
                 "nodes": None, "N": None, "ntasks": None, "n": None, "ntasks-per-node": None, "requeue": None,
                 "no-requeue": None, "chdir": None, "D": None}
#: the commands lit-marl calls on the submitting machine
COMMANDS = ("sbatch", "squeue", "sinfo", "scontrol")


@dataclass
class SlurmSettings:
    """How each run (benchmark) or worker (tune) is submitted: one SLURM array task, one task and its devices each."""

    partition: str | None = None
    timeout_min: int = 60
    cpus_per_task: int = 1
    gpus_per_task: int = 0
    mem_gb: float | None = None
    array_parallelism: int | None = None
    signal_delay_s: int = 120
    max_requeues: int = 3
    sbatch_flags: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sbatch_args(self) -> list[str]:
        """The resource flags as ``sbatch`` takes them (for ``sbatch --test-only``)."""
        args = [f"--time={self.timeout_min}", f"--cpus-per-task={self.cpus_per_task}"]
        if self.partition:
            args.append(f"--partition={self.partition}")
        if self.gpus_per_task:
            args.append(f"--gpus-per-node={self.gpus_per_task}")
        if self.mem_gb is not None:
            args.append(f"--mem={int(self.mem_gb * 1024)}M")
        for key, value in self.sbatch_flags.items():
            args.append(f"--{key}" if value is True else f"--{key}={value}")
        return args


def parse_settings(data: Any, field_name: str = "slurm") -> SlurmSettings:
    """The settings of a ``slurm:`` mapping (None: the defaults); ConfigError naming the key, the value and what is
    allowed for an unknown key or a value out of range. Checks nothing on the cluster (:func:`check_cluster` does)."""
    if data is None:
        return SlurmSettings()
    allowed = [f.name for f in fields(SlurmSettings)]
    if not isinstance(data, dict):
        raise ConfigError(f"{field_name}: must be a mapping of SLURM settings, got {data!r}; allowed keys: "
                          f"{', '.join(allowed)}")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        hint = did_you_mean(unknown[0], allowed)
        raise ConfigError(f"{field_name}.{unknown[0]}: unknown SLURM setting; {hint}allowed: {', '.join(allowed)}")
    settings = SlurmSettings()
    for key, value in data.items():
        name = f"{field_name}.{key}"
        if key == "partition":
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"{name}: must be a partition name, got {value!r}")
        elif key == "mem_gb":
            value = None if value is None else positive_float(name, value)
        elif key == "gpus_per_task":
            non_negative_int(name, value)
        elif key == "array_parallelism":
            value = None if value is None else positive_int(name, value)
        elif key == "max_requeues":
            non_negative_int(name, value)
        elif key == "sbatch_flags":
            value = _sbatch_flags(name, value)
        else:
            value = positive_int(name, value)
        setattr(settings, key, value)
    if settings.signal_delay_s >= settings.timeout_min * 60:
        raise ConfigError(f"{field_name}.signal_delay_s: {settings.signal_delay_s} s is not shorter than the time "
                          f"limit ({field_name}.timeout_min {settings.timeout_min} min); allowed: fewer seconds than "
                          f"the limit, enough for one iteration and a checkpoint")
    return settings


def _sbatch_flags(name: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{name}: must be a mapping of sbatch flags (without dashes) to values, e.g. "
                          f"{{account: my_lab, qos: normal}}; got {value!r}")
    for key, flag_value in value.items():
        if not isinstance(key, str) or not key or key.startswith("-"):
            raise ConfigError(f"{name}: {key!r} is not an sbatch flag name; allowed: the name without dashes, e.g. "
                              f"account, qos, constraint")
        if key in MANAGED_FLAGS:
            instead = MANAGED_FLAGS[key]
            allowed = f"the setting slurm.{instead}" if instead else \
                "nothing (one task per run, its logs in the grid's slurm/ folder, run in the submitting directory)"
            raise ConfigError(f"{name}.{key}: lit-marl sets this sbatch flag itself; allowed: {allowed}")
        if not isinstance(flag_value, (str, int, float)) or flag_value is False:
            raise ConfigError(f"{name}.{key}: must be a string, a number or true (a flag without value), got "
                              f"{flag_value!r}")
    return dict(value)


def check_cluster(settings: SlurmSettings, field_name: str = "slurm") -> None:
    """Before anything is submitted: submitit is installed, SLURM's commands are on PATH, the partition exists and
    ``sbatch --test-only`` takes the settings (time limit, CPUs, GPUs, memory, account, qos…); ConfigError naming
    what is wrong otherwise."""
    try:
        import_submitit()
    except ImportError:
        raise ConfigError("launcher: 'slurm' needs submitit; allowed: pip install submitit (or pip install "
                          "'lit-marl[cluster]'), or launcher local") from None
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        raise ConfigError(f"launcher: 'slurm' but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not "
                          f"on PATH (no SLURM client here); allowed: launcher local, or run lit-marl where sbatch "
                          f"works (a cluster's login node)")
    partitions = _run(["sinfo", "-h", "-o", "%R"], "sinfo").split()
    if settings.partition is not None and settings.partition not in partitions:
        raise ConfigError(f"{field_name}.partition: {settings.partition!r} is not a partition of this cluster; "
                          f"allowed: {', '.join(sorted(set(partitions))) or '(sinfo lists none)'}")
    try:
        _run(["sbatch", "--test-only", "--job-name=lit-marl-check", *settings.sbatch_args(), "--wrap", "true"],
             "sbatch --test-only")
    except ConfigError as err:
        raise ConfigError(f"{field_name}: SLURM refuses these settings ({' '.join(settings.sbatch_args())}): "
                          f"{err}; allowed: resources a node of the partition has, and flags sbatch knows") from None


def _run(cmd: list[str], what: str) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ConfigError(f"launcher: {what} failed: {err}") from None
    if done.returncode != 0:
        message = " ".join((done.stderr or done.stdout).split())
        raise ConfigError(message or f"{what} exited with {done.returncode}")
    return done.stdout


def import_submitit():
    """submitit, imported without the ``logging.config.dictConfig`` it runs on its first import: that call closes
    every logging handler the process has (the application's log files, a test runner's captures) and replaces them.
    Here its loggers propagate to the application's instead; in the array tasks (submitit's own job process, which
    imports it afresh) it configures itself as usual."""
    if "submitit" not in sys.modules:
        previous = os.environ.get(SUBMITIT_LOG_VARIABLE)
        os.environ[SUBMITIT_LOG_VARIABLE] = "NOCONFIG"
        try:
            import submitit  # noqa: F401
        finally:
            if previous is None:
                os.environ.pop(SUBMITIT_LOG_VARIABLE, None)
            else:
                os.environ[SUBMITIT_LOG_VARIABLE] = previous
    return sys.modules["submitit"]


def make_executor(settings: SlurmSettings, folder: Path, job_name: str, tasks: int):
    """submitit's SLURM executor for ``tasks`` array tasks, its files (sbatch script, pickles, logs) in ``folder``:
    one task (submitit's ``srun`` step, which SLURM's time-limit signal reaches) and ``cpus_per_task`` CPUs each."""
    submitit = import_submitit()

    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=settings.max_requeues)
    executor.update_parameters(
        job_name=job_name, time=settings.timeout_min, cpus_per_task=settings.cpus_per_task, ntasks_per_node=1,
        nodes=1, signal_delay_s=settings.signal_delay_s,
        array_parallelism=min(settings.array_parallelism or tasks, tasks),
        stderr_to_stdout=True, additional_parameters=dict(settings.sbatch_flags),
        **({"partition": settings.partition} if settings.partition else {}),
        **({"gpus_per_node": settings.gpus_per_task} if settings.gpus_per_task else {}),
        **({"mem": f"{int(settings.mem_gb * 1024)}M"} if settings.mem_gb is not None else {}),
    )
    return executor


def submit_array(settings: SlurmSettings, root: Path, job_name: str, tasks: list) -> tuple[Path, list]:
    """``tasks`` (callables submitit pickles) as one job array, its files in a fresh submission folder
    ``<root>/slurm/<date-time>[.<n>]`` (SLURM's job ids can repeat after a reset: never reuse one); the folder and
    submitit's jobs. sbatch's refusal is a ConfigError."""
    folder = root / "slurm" / time.strftime("%Y%m%d-%H%M%S")
    suffix = 1
    while folder.exists():
        folder, suffix = folder.with_name(f"{folder.name.split('.')[0]}.{suffix}"), suffix + 1
    executor = make_executor(settings, folder / "%j", job_name, len(tasks))
    try:
        with executor.batch():
            jobs = [executor.submit(task) for task in tasks]
    except Exception as err:  # noqa: BLE001 (sbatch's refusal, whatever submitit wraps it in)
        raise ConfigError(f"slurm: sbatch refused the job array: {' '.join(str(err).split())}") from None
    return folder, jobs


def add_launcher_arguments(parser, workers: str, file: str, waited: str) -> None:
    """``--launcher`` and ``--wait`` of a command that starts ``workers`` here or as SLURM array tasks with the
    ``slurm:`` settings of its ``file``; ``waited``: what ``--wait`` does once the jobs have left the queue."""
    parser.add_argument("--launcher", choices=LAUNCHERS, default=None,
                        help=f"{workers} here, or SLURM array tasks with the {file}'s slurm: settings (default: the "
                             f"{file}'s launcher, else local)")
    parser.add_argument("--wait", action="store_true",
                        help=f"with --launcher slurm: wait until the jobs have left the queue, then {waited}")
