"""Where a run's files go: the run folder (``<save_dir>/<name>/version_<n>/``) placed under
``trainer.default_root_dir`` (or ``./runs``), claimed exclusively, checked for being writable before anything trains,
found again for ``--ckpt_path last``, and removed again when a refused run wrote nothing but its config."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from lit_marl.errors import ConfigError

#: where run folders go when neither the logger's save_dir nor trainer.default_root_dir says
RUNS_ROOT = "runs"
#: the run folder's logger when the config names none (no save_dir: :func:`place_run_folders` sets it)
DEFAULT_LOGGER: dict[str, Any] = {"class_path": "lightning.pytorch.loggers.CSVLogger",
                                  "init_args": {"name": "lit-marl"}}


def keep_a_run_folder(config: Any) -> None:
    """Loggers without a versioned run folder of their own (``MLFlowLogger``, ``WandbLogger``: Lightning's
    ``trainer.log_dir`` is then their shared ``save_dir``) get lit-marl's default CSV logger in front of them: the
    run's ``config.yaml``, ``metrics.csv``, checkpoints, videos and marl-eval JSON go to its new
    ``runs/lit-marl/version_<n>/`` (or ``<default_root_dir>/lit-marl/…``) and every metric, hyper-parameter and
    video to both."""
    trainer = config.get("trainer")
    logger = trainer.get("logger") if trainer is not None else None
    loggers = logger if isinstance(logger, list) else [logger] if isinstance(logger, Namespace) else []
    if not loggers or not isinstance(loggers[0], Namespace) or not loggers[0].get("class_path"):
        return
    cls = _logger_class(loggers[0].class_path)
    if cls is None or _versioned(cls):  # (an unknown class: jsonargparse names it when it instantiates the logger)
        return
    cls_name = cls.__name__
    default = DEFAULT_LOGGER
    root = str(trainer.get("default_root_dir") or RUNS_ROOT)  # as place_run_folders
    trainer["logger"] = [Namespace(class_path=default["class_path"],
                                   init_args=Namespace(**default["init_args"], save_dir=root)), *loggers]
    print(f"lit-marl: {cls_name} keeps no run folder of its own; config.yaml, metrics.csv, checkpoints and videos go "
          f"to a CSVLogger's {Path(root, default['init_args']['name'])}/version_<n>/ beside it", file=sys.stderr)


def place_run_folders(config: Any) -> None:
    """Run folders go under ``trainer.default_root_dir`` (else ``./runs``): every CSV or TensorBoard logger without a
    ``save_dir`` (the shipped configs set none) gets that one, before the config is validated and saved, so the run's
    ``config.yaml`` re-runs into the same place. A ``save_dir`` the user set wins; when it differs from a
    ``default_root_dir`` the user also set, one line says where the run goes."""
    trainer = config.get("trainer")
    logger = trainer.get("logger") if trainer is not None else None
    loggers = logger if isinstance(logger, list) else [logger]
    root = trainer.get("default_root_dir") if trainer is not None else None
    for i, entry in enumerate(loggers):
        if not isinstance(entry, Namespace) or not keeps_version_folders(entry.get("class_path")):
            continue
        init_args = entry.get("init_args")
        if init_args is None:
            init_args = entry["init_args"] = Namespace()
        save_dir = init_args.get("save_dir")
        if save_dir is None:
            init_args["save_dir"] = str(root or RUNS_ROOT)
        elif i == 0 and root is not None and Path(str(save_dir)).resolve() != Path(str(root)).resolve():
            print(f"lit-marl: the run folder goes under trainer.logger's save_dir {str(save_dir)!r}, not "
                  f"trainer.default_root_dir {str(root)!r} (a logger's save_dir wins; leave it unset to use "
                  f"default_root_dir)", file=sys.stderr)


def keeps_version_folders(class_path: Any) -> bool:
    """Whether a logger class writes ``<save_dir>/<name>/version_<n>/`` (CSVLogger, TensorBoardLogger)."""
    cls = _logger_class(class_path)
    return cls is not None and _versioned(cls)


def _logger_class(class_path: Any) -> type | None:
    """The class a logger's ``class_path`` names, or None where it does not import (jsonargparse names it when it
    instantiates the logger)."""
    module_name, _, cls_name = str(class_path or "").rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError, ValueError):
        return None
    return cls if isinstance(cls, type) else None


def _versioned(cls: type) -> bool:
    return issubclass(cls, (CSVLogger, TensorBoardLogger))


def unversioned_run_folder_logger(trainer: Any) -> Any:
    """The logger whose ``version_<n>`` folder is this run's (the first, a CSV or TensorBoard logger on the local
    file system) when the user fixed no version; None otherwise."""
    loggers = trainer.loggers
    if not loggers or not isinstance(loggers[0], (CSVLogger, TensorBoardLogger)):
        return None
    logger = loggers[0]
    if getattr(logger, "_version", 0) is not None or "://" in str(logger.root_dir):
        return None
    return logger


def claim_version_folder(root: Path) -> int:
    """Create ``root/version_<n>`` (n one past the highest existing) exclusively and return n: a folder another
    run created meanwhile makes it try n + 1, so two runs started at once never share one (Lightning's loggers
    pick the number by listing the folders and create it later). ConfigError naming the folder if it cannot be
    created."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        existing = [int(p.name.removeprefix("version_")) for p in root.iterdir()
                    if p.name.startswith("version_") and p.name.removeprefix("version_").isdigit()]
        version = max(existing, default=-1) + 1
        while True:
            try:
                os.mkdir(root / f"version_{version}")
                return version
            except FileExistsError:
                version += 1
    except OSError as err:
        raise unwritable(root, err) from None


def last_checkpoint_of(logger: Any) -> Path:
    """``--ckpt_path last``: the ``last.ckpt`` of the newest ``<save_dir>/<name>/version_<n>`` run that has one
    (Lightning would look in the new, empty run folder and silently start from scratch)."""
    if isinstance(logger, list) and logger:
        logger = logger[0]  # the run folder's
    init_args = {}
    if logger is not None and not isinstance(logger, bool) and hasattr(logger, "get"):
        init_args = dict(logger.get("init_args") or {})
    if "save_dir" not in init_args:
        raise ConfigError(
            "ckpt_path: 'last' needs a logger with a save_dir (trainer.logger.init_args.save_dir) to find the earlier "
            "runs in; allowed: the checkpoint's path, e.g. runs/<name>/version_<n>/checkpoints/last.ckpt"
        )
    root = Path(init_args["save_dir"]) / str(init_args.get("name") or "")
    versions = sorted((p for p in root.glob("version_*") if p.name.removeprefix("version_").isdigit()),
                      key=lambda p: int(p.name.removeprefix("version_")), reverse=True)
    for version in versions:
        if (version / "checkpoints" / "last.ckpt").is_file():
            return version / "checkpoints" / "last.ckpt"
    raise ConfigError(
        f"ckpt_path: 'last' found no run with checkpoints/last.ckpt under {str(root)!r}; allowed: a checkpoint's path, "
        f"or leave ckpt_path unset to start a new run"
    )


#: run folders this process made; a run refused (exit 2) before writing anything but its config removes them
NEW_RUN_FOLDERS: list[Path] = []
#: what a refused run may have written and still leaves nothing behind
UNUSED_RUN_FILES = {"config.yaml", "hparams.yaml"}


def remove_unused_run_folders() -> None:
    """Remove the run folders of a refused run that hold no more than its config (and empty folders): nothing of the
    run exists, so an empty ``version_<n>`` would only mislead ``--ckpt_path last`` and a reader."""
    while NEW_RUN_FOLDERS:
        folder = NEW_RUN_FOLDERS.pop()
        if not folder.is_dir():
            continue
        files = [p for p in folder.rglob("*") if not p.is_dir()]
        if any(p.parent != folder or p.name not in UNUSED_RUN_FILES for p in files):
            continue  # something of the run was written: keep all of it
        shutil.rmtree(folder, ignore_errors=True)


def check_writable(folder: Path) -> None:
    """Create ``folder`` and write, sync and remove a small file in it; ConfigError naming the folder if that fails
    (read-only or full file system, no permission)."""
    probe = folder / f".lit-marl-write-check-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            with open(probe, "wb") as f:
                f.write(b"lit-marl")
                f.flush()
                os.fsync(f.fileno())
        finally:
            probe.unlink(missing_ok=True)
    except OSError as err:
        raise unwritable(folder, err) from None


def unwritable(folder: Path, err: OSError) -> ConfigError:
    return ConfigError(
        f"trainer.logger: the run folder {str(folder)!r} cannot be written ({err.strerror or err}); nothing was "
        f"trained. Allowed: a writable folder with free space (trainer.logger.init_args.save_dir or "
        f"trainer.default_root_dir)"
    )
