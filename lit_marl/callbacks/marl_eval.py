"""marl-eval's JSON during training (Gorsane et al., *Towards a Standardised Performance Evaluation Protocol for
Cooperative MARL*, NeurIPS 2022), as `marl-eval <https://github.com/instadeepai/marl-eval>`_ reads it::

    {env: {task: {algorithm: {"seed_<s>": {
        "step_<k>": {"step_count": frames, "return": [per-episode returns], "<group>_return": [...]},
        ...,
        "absolute_metrics": {"return": [...], "<group>_return": [...], "step_count": frames of the best}}}}}}

``step_<k>`` is the k-th evaluation of the run, ``return`` the per-episode return (mean over groups of each
group's mean agent return, as ``val/return``). ``absolute_metrics`` follows the protocol: the best policy (the
weights of the evaluation with the highest mean return, kept in the callback's checkpoint state) re-evaluated on
``absolute_factor`` × the evaluation episodes at the end of training, not the best single episode.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from tensordict import TensorDictBase
from typing_extensions import override

from lit_marl.callbacks.hooks import MarlCallback
from lit_marl.data import EvaluationBatches
from lit_marl.errors import ConfigError, non_negative_int
from lit_marl.evaluation.episodes import episode_records
from lit_marl.evaluation.io import write_json
from lit_marl.evaluation.marl_eval import FILE_NAME


def _keys(pl_module) -> tuple[str, str, str, str]:
    family, _, task = pl_module.task.name.partition("/")
    return family, task or family, pl_module.algorithm_name, f"seed_{pl_module.seed}"


def _returns(pl_module, batches: list[dict[str, int]], rollouts: list[TensorDictBase]) -> dict[str, list[float]]:
    records = []
    for batch, rollout in zip(batches, rollouts):
        records.extend(episode_records(pl_module.task, rollout, batch["seed"], batch["first_episode"]))
    metrics = {"return": [r["return"] for r in records]}
    for group in pl_module.groups:
        metrics[f"{group}_return"] = [r["return_per_group"][group] for r in records]
    successes = [r["success"] for r in records if r["success"] is not None]
    if successes:
        metrics["success"] = [float(s) for s in successes]
    return metrics


class MarlEvalJson(MarlCallback):
    """Writes every evaluation's per-episode returns to a marl-eval JSON file (atomically, after each one).

    Args:
        path: the JSON file; an existing file is continued (its other runs and earlier steps are kept). Default:
            ``marl_eval.json`` in the run folder; a resume from ``<old run>/checkpoints/*.ckpt`` starts from the
            old run's file (up to the resumed frame count) and writes into the new run folder.
        absolute_factor: the best policy is re-evaluated on this many times the evaluation episodes at the end
            of training (``absolute_metrics``); 0 turns that off.
        absolute_batch_size: episodes rolled out in parallel for the absolute metrics (default: all of them;
            vectorised simulators such as VMAS run a large batch in about the time of a small one).
    """

    def __init__(self, path: str | None = None, absolute_factor: int = 10, absolute_batch_size: int | None = None) -> None:
        non_negative_int("marl_eval.absolute_factor", absolute_factor)
        if absolute_batch_size is not None and (not isinstance(absolute_batch_size, int) or absolute_batch_size <= 0):
            raise ConfigError(f"marl_eval.absolute_batch_size: must be a positive integer, got {absolute_batch_size!r}")
        self.path = path
        self.absolute_factor = absolute_factor
        self.absolute_batch_size = absolute_batch_size
        self.data: dict[str, Any] | None = None
        self.best_return = float("-inf")
        self.best_frames = -1
        self.best_weights: dict[str, torch.Tensor] | None = None
        self._file: Path | None = None

    # ---------------------------------------------------------------------- file
    def file(self, trainer: pl.Trainer) -> Path:
        """The JSON file this run writes: ``path``, else ``marl_eval.json`` in the run folder."""
        if self._file is None:
            if self.path is not None:
                self._file = Path(self.path)
            else:
                self._file = Path(trainer.log_dir or trainer.default_root_dir) / FILE_NAME
        return self._file

    def _load(self, trainer: pl.Trainer, pl_module) -> dict[str, Any]:
        if self.data is not None:
            return self.data
        source = self.file(trainer)
        if not source.is_file() and self.path is None and trainer.ckpt_path:
            ckpt = Path(str(trainer.ckpt_path))
            if ckpt.parent.name == "checkpoints":
                source = ckpt.parent.parent / FILE_NAME  # the run this one resumes
        data = json.loads(source.read_text()) if source.is_file() else {}
        env, task, algorithm, seed = _keys(pl_module)
        run = data.setdefault(env, {}).setdefault(task, {}).setdefault(algorithm, {}).setdefault(seed, {})
        # evaluations after the resumed checkpoint happened in a run that was cut short: they are redone
        for step in [k for k, v in run.items() if k.startswith("step_") and v["step_count"] > pl_module.frames]:
            del run[step]
        self.data = data
        return data

    def _run(self, pl_module) -> dict[str, Any]:
        env, task, algorithm, seed = _keys(pl_module)
        return self.data[env][task][algorithm][seed]

    # ---------------------------------------------------------------------- hooks
    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Read the file this run continues (its own, or a resumed run's), dropping evaluations after the resumed frame
        count (they are redone)."""
        if trainer.is_global_zero:
            self._load(trainer, pl_module)

    @override
    def on_evaluation_end(self, trainer: pl.Trainer, pl_module, episodes: list[TensorDictBase]) -> None:
        if trainer.testing or trainer.sanity_checking or not trainer.is_global_zero or self.data is None:
            return
        metrics = _returns(pl_module, list(pl_module.val_dataloader()), episodes)
        run = self._run(pl_module)
        steps = {v["step_count"]: k for k, v in run.items() if k.startswith("step_")}
        name = steps.get(pl_module.frames, f"step_{len(steps)}")
        run[name] = {"step_count": int(pl_module.frames), **metrics}
        write_json(self.file(trainer), self.data, overwrite=True)
        mean = float(np.mean(metrics["return"]))
        if mean > self.best_return:
            self.best_return, self.best_frames = mean, int(pl_module.frames)
            self.best_weights = {k: v.detach().cpu().clone() for k, v in pl_module.state_dict().items()}

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Re-evaluate the best validated weights on ``absolute_factor`` times the evaluation episodes and write them as
        ``absolute_metrics`` (not when a signal stopped the run to be resumed: its real end comes later)."""
        if not trainer.is_global_zero or self.data is None or not self.absolute_factor or self.best_weights is None:
            return
        if getattr(pl_module, "stopped_by_signal", None) is not None:
            # stopped to be resumed (SIGTERM, a pre-emption, Ctrl-C): the absolute metrics belong to the run's real
            # end, which the resume reaches, and ten times the evaluation episodes (on RWARE, 500k steps) would
            # outlast a scheduler's grace period after the checkpoint
            return
        current = copy.deepcopy({k: v.detach().cpu() for k, v in pl_module.state_dict().items()})
        pl_module.load_state_dict(self.best_weights)
        try:
            episodes = pl_module.evaluation_episodes * self.absolute_factor
            batches = list(EvaluationBatches(episodes, self.absolute_batch_size or episodes, pl_module.evaluation_seed))
            rollouts = [pl_module.evaluate(b["seed"], b["num_envs"]) for b in batches]
        finally:
            pl_module.load_state_dict(current)
        run = self._run(pl_module)
        run.pop("absolute_metrics", None)  # last in the run, as marl-eval expects, also after a resume added steps
        run["absolute_metrics"] = {"step_count": self.best_frames, **_returns(pl_module, batches, rollouts)}
        write_json(self.file(trainer), self.data, overwrite=True)

    # ---------------------------------------------------------------------- checkpoint state
    @override
    def state_dict(self) -> dict[str, Any]:
        """The best validation return so far, its frame count and its weights (checkpoints carry them)."""
        return {"best_return": self.best_return, "best_frames": self.best_frames,
                "best_weights": self.best_weights}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.best_return = float(state_dict["best_return"])
        self.best_frames = int(state_dict["best_frames"])
        self.best_weights = state_dict["best_weights"]
