"""The ``lit-marl`` command: LightningCLI with algorithms and tasks in subclass mode.

::

    lit-marl fit --config configs/mappo_vmas_balance.yaml [--model.init_args.lr 1e-4] [--print_config]
    lit-marl fit --config runs/<run>/config.yaml --ckpt_path runs/<run>/checkpoints/last.ckpt   # resume
    lit-marl validate --config runs/<run>/config.yaml --ckpt_path runs/<run>/checkpoints/last.ckpt
    lit-marl test --config runs/<run>/config.yaml --ckpt_path ... [--evaluation.videos 10]
    lit-marl benchmark --config configs/benchmarks/vmas_on_policy.yaml     # algorithms × tasks × seeds
    lit-marl benchmark --config configs/benchmarks/vmas_on_policy.yaml --launcher slurm   # as a SLURM job array
    lit-marl report runs/benchmarks/vmas_on_policy --out report/           # plots and tables
    lit-marl compare <eval folder A> <eval folder B>                       # paired difference with a CI
    lit-marl export --ckpt_path runs/<run>/checkpoints/last.ckpt --format onnx  # deployable per-group policies
    lit-marl tune --config configs/quickstart.yaml --space space.yaml --trials 20 --workers 2   # Optuna search

Every run writes into a new folder ``runs/<name>/version_<n>/`` (``config.yaml``, ``metrics.csv``,
``checkpoints/``; ``--trainer.default_root_dir DIR`` puts it under ``DIR/<name>/``): nothing of an earlier run is
overwritten, and two runs started at once never share a folder.
"""

from __future__ import annotations

import errno
import importlib
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, Literal

import torch
import yaml
from jsonargparse import Namespace
from lightning.pytorch.accelerators import CUDAAccelerator, MPSAccelerator, XLAAccelerator
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from typing_extensions import override

from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.callbacks.preemption import Interrupts, signal_label
from lit_marl.checkpoint import (LIGHTNING_CKPT_ALIASES, check_compatible, check_group_map, check_state_dict,
                                 fold_constant_agent_ids, read_checkpoint, refuse_training_on_folded)
from lit_marl.cli_args import check_numbers, merge_simulator_kwargs
from lit_marl.cli_errors import LitMarlArgumentParser, find_cause
from lit_marl.distributed import check_shares, check_strategy
from lit_marl.envs.base import Task
from lit_marl.errors import ConfigError, NumericalError, check_gradient_clipping, did_you_mean
from lit_marl.reading import DuplicateKeyError, load_yaml, read_text, twice
from lit_marl.callbacks import EvaluationReport
from lit_marl.run_folders import (
    DEFAULT_LOGGER,
    NEW_RUN_FOLDERS,
    check_writable,
    claim_version_folder,
    keep_a_run_folder,
    last_checkpoint_of,
    place_run_folders,
    remove_unused_run_folders,
    unversioned_run_folder_logger,
)
from lit_marl.cli_signals import count_interrupts, what_was_left
from lit_marl.sigint import (Terminated, Terminations, exit_interrupted, exit_terminated, forget_caught_interrupt,
                             raise_on_termination, restore)
from lit_marl.utils import instantiate

TRAINER_DEFAULTS: dict[str, Any] = {
    "max_epochs": -1,  # the frame budget (model.init_args.max_frames) ends training
    "gradient_clip_val": 5.0,  # BenchMARL's clip_grad_val, applied per parameter group
    "check_val_every_n_epoch": 20,  # 20 iterations × 6000 frames = BenchMARL's 120k-frame interval
    "num_sanity_val_steps": 0,
    # no save_dir: lit-marl puts the run folder under trainer.default_root_dir, or ./runs (place_run_folders)
    "logger": DEFAULT_LOGGER,
}

CHECKPOINT_DEFAULTS: dict[str, Any] = {
    "checkpoint.every_n_epochs": 20,
    "checkpoint.save_last": True,
    "checkpoint.save_on_train_epoch_end": True,
    # keep the `save_top_k` most recent checkpoints (the frame counter only grows)
    "checkpoint.monitor": "counters/frames",
    "checkpoint.mode": "max",
    "checkpoint.save_top_k": 3,
    "checkpoint.filename": "frames_{counters/frames:09.0f}",  # e.g. frames_000120000.ckpt
    "checkpoint.auto_insert_metric_name": False,
}


def _seed_to_int(seed: Any) -> int:
    if isinstance(seed, bool) or seed is None:
        return 0
    return int(seed)


class LitMarlCLI(LightningCLI):
    """LightningCLI for MARL algorithms (any :class:`MarlAlgorithm` subclass by class path).

    Args:
        args: the command line after ``lit-marl`` (default ``sys.argv[1:]``), or a config as a dict.
        run: run the subcommand (False: only parse the config and build the Trainer and model).
    """

    @staticmethod
    @override
    def subcommands() -> dict[str, set[str]]:
        """Lightning's, less ``predict`` (see :data:`COMMANDS`)."""
        return {name: skip for name, skip in LightningCLI.subcommands().items() if name in COMMANDS}

    def __init__(self, args: list[str] | None = None, run: bool = True) -> None:
        super().__init__(
            MarlAlgorithm,
            subclass_mode_model=True,
            seed_everything_default=0,
            trainer_defaults=TRAINER_DEFAULTS,
            save_config_kwargs={"overwrite": False},
            auto_configure_optimizers=False,
            parser_kwargs={"parser_mode": "yaml"},
            parser_class=LitMarlArgumentParser,  # errors lead with the field (lit_marl/cli_errors.py)
            args=args,
            run=run,
        )

    @override
    def add_arguments_to_parser(self, parser) -> None:
        """lit-marl's arguments beside Lightning's: ``checkpoint.*`` (a ``ModelCheckpoint``, by default every 20
        iterations, the 3 newest kept by frame count, and ``last.ckpt``), ``evaluation.*`` (what ``lit-marl test``
        writes), ``--nan_policy``, and ``seed_everything`` linked to the model's ``seed``."""
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        # what `lit-marl test` writes (eval_info.json, videos); inert in fit and validate
        parser.add_lightning_class_args(EvaluationReport, "evaluation")
        parser.set_defaults(CHECKPOINT_DEFAULTS)
        parser.add_argument(
            "--nan_policy", type=Literal["stop", "skip"], default="stop",
            help="a NaN/Inf loss term or gradient: stop training (exit code 3, naming group, term and iteration; "
                 "the last checkpoint is kept) or skip that update (counted in train/skipped_updates)",
        )
        parser.link_arguments("seed_everything", "model.init_args.seed", compute_fn=_seed_to_int)
        parser.link_arguments("nan_policy", "model.init_args.nan_policy")  # the model's argument, set by the flag

    @override
    def parse_arguments(self, parser, args) -> None:
        """LightningCLI's parsing, with a task's ``*_kwargs`` given on the command line merged into the config
        file's (:func:`merge_simulator_kwargs`), and the run folder placed (:func:`place_run_folders`) before the
        config is validated: a CSV or TensorBoard logger without a save_dir (the shipped configs') would not
        validate."""
        if isinstance(args, (dict, Namespace)):
            super().parse_arguments(parser, args)
            return check_numbers(self.config.get(self.config.get("subcommand")) or self.config)
        #: lines about the command line's simulator arguments, printed once the config has built (not before a
        #: refusal of the same arguments)
        self._notices: list[str] = []
        args = merge_simulator_kwargs(sys.argv[1:] if args is None else list(args), self._notices)
        config = parser.parse_args(args, _skip_validation=True)
        subcommand = config.get("subcommand")
        place_run_folders(config[subcommand] if subcommand else config)
        try:
            parser.validate(config)
        except (TypeError, KeyError) as err:  # as parse_args reports them
            parser.error(str(err), err)
        check_numbers(config[subcommand] if subcommand else config)  # Lightning's numbers, before the seed is set
        self.config = config

    @override
    def instantiate_classes(self) -> None:
        """Build the Trainer, model and callbacks, then print what the command line's simulator arguments changed
        (once the config has built, not before a refusal of the same arguments)."""
        super().instantiate_classes()
        for line in getattr(self, "_notices", ()):
            print(line, file=sys.stderr)

    @override
    def _parse_ckpt_path(self) -> None:
        """Keep the config and command line as given when ``--ckpt_path`` is set.

        LightningCLI would overwrite ``model`` with the hyper-parameters stored in the checkpoint, so a
        resume could not extend ``max_frames`` or change evaluation settings. lit-marl instead checks
        that the checkpoint belongs to the same algorithm and task (``before_instantiate_classes``) and
        otherwise lets the command line win.
        """

    @override
    def before_instantiate_classes(self) -> None:
        """Check a ``--ckpt_path`` (exists, loads, same algorithm and task) before anything is built."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        trainer = config.get("trainer") or {}
        # before the Trainer is built: Lightning would raise on a bad algorithm with a traceback, and train with a
        # negative value (lit-marl's per-group clipping would flip every gradient)
        check_gradient_clipping(trainer.get("gradient_clip_val"), trainer.get("gradient_clip_algorithm"))
        check_accelerator(trainer.get("accelerator"))
        if self.subcommand == "fit" and trainer.get("max_epochs") == 0:
            raise ConfigError("trainer.max_epochs: 0 trains nothing (and would leave an empty run folder); allowed: -1 "
                              "(the frame budget, model.init_args.max_frames, ends training) or a number of iterations "
                              ">= 1")
        keep_a_run_folder(config)
        ckpt_path = config.get("ckpt_path")
        if ckpt_path is not None and str(ckpt_path) == "last":
            ckpt_path = config["ckpt_path"] = str(last_checkpoint_of(config.get("trainer", {}).get("logger")))
        if not ckpt_path and self.subcommand in ("validate", "test"):
            print(f"lit-marl {self.subcommand}: no --ckpt_path: evaluating the config's untrained (freshly "
                  f"initialised) weights; --ckpt_path <run>/checkpoints/last.ckpt evaluates a trained policy",
                  file=sys.stderr)
        if not ckpt_path or str(ckpt_path) in LIGHTNING_CKPT_ALIASES:
            return
        # a resume trains on its replay buffers: checked whole here, before the run folder is made
        checkpoint = read_checkpoint(ckpt_path, verify_buffers=self.subcommand == "fit")
        meta = checkpoint["lit_marl"]
        # kept for before_<command>, which checks the networks once the model is built
        self._checkpoint_to_fit = (str(ckpt_path), meta.get("group_map"), checkpoint)
        model = config["model"]
        module_name, _, cls_name = str(model["class_path"]).rpartition(".")
        algorithm = getattr(importlib.import_module(module_name), cls_name)
        task = instantiate(model["init_args"]["task"].as_dict(), Task, "model.init_args.task")
        check_compatible(meta, algorithm.algorithm_name, task.to_config(), f"ckpt_path {str(ckpt_path)!r}")
        self._resumed = (str(ckpt_path), int(meta.get("frames", 0)))  # before_fit: a finished run is refused

    def _refuse_used_run_folder(self) -> None:
        """Refuse a run folder that already holds files, or cannot be written, before the Trainer starts: once
        started, even a failed run makes Lightning's CSV logger delete the folder's metrics.csv."""
        # DDP: the strategy and the split of the global sizes, before any process is spawned
        check_strategy(self.trainer)
        check_shares(self.model, self.trainer.world_size, self.subcommand or "fit")
        # the run folder is process 0's: the other DDP processes (started later, by the launcher, with the same
        # command line) would otherwise each pick, and make, a further version_<n> folder. They never write in their
        # own pick: loggers write on process 0 only and Lightning broadcasts process 0's log_dir and checkpoint folder
        rank_zero = self.trainer.global_rank == 0
        to_claim = unversioned_run_folder_logger(self.trainer) if rank_zero else None
        # a version the user fixed (or a logger without version_<n> folders): refuse a folder that holds a run
        log_dir = self.trainer.log_dir if rank_zero and to_claim is None else None
        if log_dir is not None and Path(log_dir).is_dir() and any(Path(log_dir).iterdir()):
            raise ConfigError(
                f"trainer.logger: the run folder {log_dir!r} already holds a run; nothing was written. Allowed: "
                f"leave trainer.logger.init_args.version unset (a new version_<n> folder) or choose another "
                f"trainer.logger.init_args.name"
            )
        self._check_checkpoint_fits()
        self._refuse_finished_run()
        if to_claim is not None:  # last: a refused start leaves no empty folder behind
            # Lightning's CSV and TensorBoard loggers keep the version they would pick by listing in `_version`
            to_claim._version = claim_version_folder(Path(to_claim.root_dir))
            log_dir = self.trainer.log_dir
        if rank_zero and log_dir is not None and (to_claim is not None or not Path(log_dir).exists()):
            # made by this run: `main` removes it again if the run is refused before it writes more than its config
            # (an unwritable folder below included)
            NEW_RUN_FOLDERS.append(Path(log_dir))
        if rank_zero:
            check_writable(Path(log_dir if log_dir is not None else self.trainer.default_root_dir))

    before_fit = before_validate = before_test = _refuse_used_run_folder

    def _refuse_finished_run(self) -> None:
        """``fit --ckpt_path`` of a run that already collected its ``max_frames``: nothing would train, and the new run
        folder would stay empty; refused by name before the folder is made."""
        ckpt_path, frames = getattr(self, "_resumed", None) or (None, None)
        max_frames = getattr(self.model, "max_frames", None)
        if self.subcommand == "fit" and ckpt_path is not None and max_frames is not None and frames >= max_frames:
            raise ConfigError(f"ckpt_path {ckpt_path!r}: its run has collected {frames} frames of "
                              f"model.init_args.max_frames {max_frames}: nothing is left to train (and the run folder "
                              f"would stay empty); allowed: a larger --model.init_args.max_frames to continue it")

    def _check_checkpoint_fits(self) -> None:
        """The ``--ckpt_path`` checkpoint's agent groups and network shapes against the built model, before
        anything is written (Lightning would otherwise fail inside ``load_state_dict``)."""
        ckpt_path, group_map, checkpoint = getattr(self, "_checkpoint_to_fit", (None, None, None))
        self._checkpoint_to_fit = None
        if ckpt_path is None:
            return
        source = f"ckpt_path {ckpt_path!r}"
        if group_map is not None:
            check_group_map(group_map, self.model.task.group_map, source)
        if checkpoint.get("state_dict") is not None:
            folded = fold_constant_agent_ids(checkpoint, self.model.state_dict())  # this copy's weights as today's
            if self.subcommand == "fit":
                refuse_training_on_folded(folded, source)
            check_state_dict(checkpoint["state_dict"], self.model.state_dict(), source)


#: ``lit-marl <command>`` beside fit/validate/test: the module whose ``main(argv)`` runs it
RESULT_COMMANDS = {
    "benchmark": "lit_marl.benchmark.command",
    "report": "lit_marl.evaluation.results",
    "compare": "lit_marl.evaluate",
    "export": "lit_marl.export",
    "tune": "lit_marl.tune.command",
}


#: what ``lit-marl --help`` lists: every command, in MARL terms (``lit-marl <command> --help`` for its options).
#: Lightning's ``predict`` is not offered: a MARL policy acts in an environment (``validate``, ``test``, ``export``).
COMMANDS = {
    "fit": "train an algorithm on a task from a config (--config configs/<name>.yaml); resume with --ckpt_path",
    "validate": "evaluate a checkpoint: its evaluation episodes and val/return, as during training",
    "test": "the full evaluation of a checkpoint: seeded episodes, per-episode records, success rate, videos, "
            "eval_info.json",
    "benchmark": "a grid of algorithms x tasks x seeds, one run each (finished runs skipped, interrupted ones resumed), "
                 "here or as a SLURM job array (--launcher slurm)",
    "report": "tables and plots of a benchmark's runs: IQM, optimality gap, performance profiles, with bootstrap CIs",
    "compare": "two evaluations of the same episodes side by side: the paired difference with a bootstrap CI",
    "export": "a checkpoint's per-group policies as TorchScript, torch.export or ONNX files, with their signature",
    "tune": "an Optuna search of a config's hyper-parameters; each trial's seeds are lit-marl fit runs of their own",
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {text}" for name, text in COMMANDS.items()]
    return "\n".join(["usage: lit-marl <command> [options]     (lit-marl <command> --help: its options)", "",
                      "Multi-agent reinforcement learning on PyTorch Lightning. Commands:", *lines])


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``lit-marl`` console script: ``args`` is the command line after ``lit-marl`` (default
    ``sys.argv[1:]``). A signal or Ctrl-C that stops it exits with 128 + the signal's number, saying what was left."""
    # Lightning 2.6 on torch 2.13 warns about its own pytree use at every fit; nothing a user can act on.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    Interrupts.reset()
    Terminations.reset()
    NEW_RUN_FOLDERS.clear()
    previous = count_interrupts()
    terminations = raise_on_termination()
    argv = sys.argv[1:] if args is None else list(args)
    try:
        _run(args)
    except Terminated as err:
        restore(terminations)
        terminations = {}
        exit_terminated(err.signum, f"lit-marl: stopped by {signal_label(err.signum)}; "
                                    f"{what_was_left(argv[0] if argv else '')}")
    except BaseException as err:
        if Interrupts.count and not (isinstance(err, SystemExit) and err.code in (0, None, EXIT_INTERRUPTED)):
            # Ctrl-C outside training, or a second one: whatever it surfaced as (Lightning's exit 1, an error
            # from inside torchrl), the user pressed Ctrl-C
            exit_interrupted(f"lit-marl: stopped by Ctrl-C; {what_was_left(argv[0] if argv else '')}")
        raise
    finally:
        restore(terminations)
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if Interrupts.count:  # a press some library caught: the exit code chosen stands (130 after training stops)
            forget_caught_interrupt()


def check_accelerator(accelerator: Any) -> None:
    """``trainer.accelerator`` naming a device this machine lacks, refused by name before anything is built (Lightning
    raised a MisconfigurationException with a traceback)."""
    if not isinstance(accelerator, str) or accelerator not in ("gpu", "cuda", "mps", "tpu"):
        return
    found = {"cuda": CUDAAccelerator.is_available(), "mps": MPSAccelerator.is_available(),
             "tpu": XLAAccelerator.is_available()}
    found["gpu"] = found["cuda"] or found["mps"]
    if not found[accelerator]:
        here = [name for name in ("cuda", "mps", "tpu") if found[name]]
        raise ConfigError(f"trainer.accelerator: {accelerator!r}, but this machine has no such device (torch "
                          f"{torch.__version__} sees none); allowed here: cpu, auto{''.join(', ' + h for h in here)}")


def check_command_line(argv: list[str]) -> None:
    """What LightningCLI's parser would answer with a traceback or with its three commands only: a command lit-marl
    does not have (every command is offered, with the closest), and a ``--config`` file that is not text (a
    checkpoint, binary data), a folder, missing, or has a key twice (refused by name, as every input file is)."""
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        raise ConfigError(f"command {argv[0]!r} is not one of lit-marl's; {did_you_mean(argv[0], COMMANDS)}allowed: "
                          f"{', '.join(COMMANDS)} (lit-marl --help)")
    for i, arg in enumerate(argv):
        path = argv[i + 1] if arg == "--config" and i + 1 < len(argv) else arg.partition("=")[2] \
            if arg.startswith("--config=") else None
        if path:
            allowed = "a lit-marl config YAML (configs/<name>.yaml, or a run's config.yaml)"
            text = read_text(path, "--config", allowed, "YAML")
            try:  # jsonargparse's YAML reading keeps the last of a key given twice, silently
                load_yaml(text)
            except DuplicateKeyError as err:
                raise twice("--config", path, err, allowed) from None
            except yaml.YAMLError:
                pass  # not YAML: the parser names it


def _run(args: list[str] | None) -> None:
    argv = sys.argv[1:] if args is None else list(args)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        raise SystemExit(0 if argv else EXIT_CONFIG)
    try:
        if argv and argv[0] in RESULT_COMMANDS:  # not Lightning subcommands: plain argparse
            code = importlib.import_module(RESULT_COMMANDS[argv[0]]).main(argv[1:])
            if code:
                raise SystemExit(code)
            return
        check_command_line(argv)
        cli = LitMarlCLI(args=args)
    except ValueError as err:
        config_error = _find_config_error(err)
        if config_error is None:
            raise
        remove_unused_run_folders()
        print(f"lit-marl: error: {config_error}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None
    except NumericalError as err:
        print(f"lit-marl: error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_NUMERICAL) from None
    except RuntimeError as err:  # torch.OutOfMemoryError (CUDA) is one too
        if not out_of_memory(err):
            raise
        remove_unused_run_folders()
        print(f"lit-marl: error: out of memory: {str(err).strip().splitlines()[-1]}. The run's sizes need more memory "
              f"than this machine has (lit-marl refuses at start only what it can estimate: one step's tensors per "
              f"environment, the collected batch, the validation rollout, the replay memory); files written before "
              f"are intact. Allowed: a smaller model.init_args.num_envs, frames_per_batch, memory_size, minibatch "
              f"size or evaluation_batch_size, or buffer_device: disk", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None
    except OSError as err:
        if err.errno not in WRITE_ERRNOS:
            raise
        print(f"lit-marl: error: could not write {err.filename or 'a file'!s}: {err.strerror or err}; "
              f"files written before are intact (checkpoints are replaced atomically). Free space or make the "
              f"run folder writable, then resume with --ckpt_path <run>/checkpoints/last.ckpt", file=sys.stderr)
        raise SystemExit(EXIT_WRITE) from None
    model = getattr(cli, "model", None)
    if isinstance(model, MarlAlgorithm) and model.stopped_by_signal is not None:
        # the callback that saved last.ckpt has said so, and how to resume, once (lit_marl/callbacks/preemption.py)
        raise SystemExit(128 + model.stopped_by_signal)
    if Terminations.late is not None:
        exit_terminated(Terminations.late, f"lit-marl: received {signal_label(Terminations.late)} after training "
                                           f"ended; the run is complete: {what_was_left('fit')}")


#: exit codes of ``lit-marl`` (docs/guide/checkpoints.md): 0 done, 1 unexpected error (a bug: traceback),
#: 2 bad config or checkpoint (nothing written), 3 NaN/Inf stopped training, 4 a write failed (disk full,
#: read-only), 128 + signal number when SIGTERM (143), SIGUSR1 (138) or Ctrl-C (130) stopped training after a
#: checkpoint; 130 also for a Ctrl-C outside training or a second one (the checkpoints on disk are whole)
EXIT_CONFIG, EXIT_NUMERICAL, EXIT_WRITE, EXIT_INTERRUPTED = 2, 3, 4, 128 + signal.SIGINT
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}


def out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation that failed: CUDA's OutOfMemoryError, or the CPU allocator's "can't allocate
    memory" RuntimeError."""
    return isinstance(err, torch.OutOfMemoryError) or "can't allocate memory" in str(err)


def _find_config_error(err: BaseException | None) -> ConfigError | None:
    """The ConfigError behind ``err``. jsonargparse wraps errors raised while it instantiates the model (subclass mode:
    ``adapt_typehints`` → ``raise_union_unexpected_value``, "Does not validate against any of the Union subtypes")
    in a ValueError whose ``__cause__`` is the ConfigError; a task's, and a simulator's refusal of the task's
    arguments (``Task.probing``), arrive the same way."""
    return find_cause(err, ConfigError)


if __name__ == "__main__":
    main()
