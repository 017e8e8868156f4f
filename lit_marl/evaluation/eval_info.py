"""``eval_info.json`` and episode exports: what an evaluation leaves, built and read back.

- :func:`build_eval_info`: the ``eval_info`` dict of a test (per-episode records, aggregates with bootstrap CIs,
  provenance), as :class:`lit_marl.callbacks.EvaluationReport` writes it;
- :func:`export_rollouts` / :func:`load_episodes`: evaluation episodes as one memory-mapped TensorDict;
  :func:`load_collections`: the training batches :class:`lit_marl.callbacks.CollectionExport` saved;
- :func:`read_eval_info` / :func:`compare`: an ``eval_info.json`` read back (refused by name if it is not one), and
  two of them paired episode by episode.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from lit_marl.atomic import atomic_target
from lit_marl.errors import ConfigError
from lit_marl.evaluation.episodes import episode_records
from lit_marl.evaluation.io import provenance
from lit_marl.evaluation.statistics import CONFIDENCE, N_RESAMPLES, paired_difference, summarize
from lit_marl.reading import json_kind, read_json

#: the file name of the record ``lit-marl test`` writes into its ``eval/<timestamp>/`` folder (what
#: :func:`read_eval_info` reads and :func:`compare` compares)
EVAL_INFO = "eval_info.json"


#: eval_info.json's ``weights`` where no checkpoint was given (``lit-marl test`` without ``--ckpt_path``)
UNTRAINED = "untrained: no checkpoint was given, the config's freshly initialised weights were evaluated"


def build_eval_info(module, batches: list[dict[str, int]], rollouts: list[TensorDictBase], seconds: float,
                    checkpoint: str | None, confidence: float = CONFIDENCE,
                    n_resamples: int = N_RESAMPLES) -> dict[str, Any]:
    """The ``eval_info`` dict of a test: ``per_episode`` (:func:`episode_records`), ``aggregated`` (mean, IQM and
    bootstrap confidence intervals of the returns, overall and per group; mean length, success rate, time) and
    ``provenance`` (package versions, the checkpoint and its SHA-256, the run's config).

    Args:
        module: the evaluated run (a :class:`~lit_marl.algorithms.MarlAlgorithm`).
        batches: the batches of episodes (:class:`~lit_marl.data.EvaluationBatches`' items), one per rollout.
        rollouts: each batch's rollout, ``[num_envs, max_steps]`` with ``("episode", "mask")``.
        seconds: wall time of the evaluation.
        checkpoint: the evaluated checkpoint (None: the config's freshly initialised weights).
        confidence: width of the bootstrap confidence intervals.
        n_resamples: bootstrap resamples.
    """
    if len(batches) != len(rollouts):
        raise RuntimeError(f"{len(rollouts)} evaluation rollouts for {len(batches)} batches")
    per_episode = []
    for batch, rollout in zip(batches, rollouts):
        per_episode.extend(episode_records(module.task, rollout, batch["seed"], batch["first_episode"]))
    returns = [r["return"] for r in per_episode]
    aggregated: dict[str, Any] = {"episodes": len(per_episode), "return": summarize(returns, confidence, n_resamples)}
    for group in module.groups:
        aggregated[f"{group}/return"] = summarize([r["return_per_group"][group] for r in per_episode], confidence,
                                                   n_resamples)
    aggregated["length_mean"] = sum(r["length"] for r in per_episode) / len(per_episode)
    successes = [r["success"] for r in per_episode if r["success"] is not None]
    aggregated["success_rate"] = sum(successes) / len(successes) if successes else None
    aggregated["eval_s"] = seconds
    aggregated["eval_s_per_episode"] = seconds / len(per_episode)
    aggregated["confidence"] = confidence
    config = {"model": {"class_path": f"{type(module).__module__}.{type(module).__qualname__}",
                        "init_args": _plain(dict(module.hparams))}}
    return {
        "task": module.task.name,
        "algorithm": module.algorithm_name,
        # what was evaluated: a checkpoint's weights, or (no checkpoint given) the config's freshly initialised ones
        "weights": "checkpoint" if checkpoint is not None else UNTRAINED,
        "deterministic": module.evaluation_deterministic,
        "per_episode": per_episode,
        "aggregated": aggregated,
        "provenance": provenance(module.task.name.split("/")[0], checkpoint, config),
    }


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def export_rollouts(module, batches: list[dict[str, int]], rollouts: list[TensorDictBase], path: Path) -> Path:
    """Save evaluation rollouts as one memory-mapped TensorDict ``[episodes, max_steps]`` with each episode's
    ``("episode", "index"|"seed"|"env_index")`` and the real-step ``("episode", "mask")``; reload it with
    ``TensorDict.load_memmap(path)``."""
    if path.exists():
        raise ConfigError(f"export: {str(path)!r} already exists and is not overwritten")
    parts = []
    for batch, rollout in zip(batches, rollouts):
        rollout = rollout.detach().cpu().clone()
        n, steps = rollout.batch_size[:2]
        index = torch.arange(batch["first_episode"], batch["first_episode"] + n)
        rollout.set(("episode", "index"), index.unsqueeze(-1).expand(n, steps).clone())
        rollout.set(("episode", "seed"), torch.full((n, steps), batch["seed"]))
        rollout.set(("episode", "env_index"), torch.arange(n).unsqueeze(-1).expand(n, steps).clone())
        parts.append(rollout)
    data = torch.cat(parts, 0) if len(parts) > 1 else parts[0]
    with atomic_target(path, overwrite=False) as tmp:
        data.memmap(prefix=tmp)
    return path


def load_episodes(path: str | os.PathLike) -> TensorDictBase:
    """Reload an episode export (memory-mapped: nothing is read until used)."""
    return TensorDict.load_memmap(str(path))


#: what ``lit-marl compare`` reads
EVAL_INFO_ALLOWED = f"an {EVAL_INFO} written by lit-marl test (or the folder holding one)"


def eval_info_shape(data: Any) -> str | None:
    """What :func:`compare` needs of an ``eval_info`` that ``data`` lacks (None: nothing)."""
    if not isinstance(data, dict):
        return f"{json_kind(data)} where an object belongs"
    missing = [key for key in ("task", "per_episode", "provenance") if key not in data]
    if missing:
        return f"no {', '.join(map(repr, missing))}"
    records = data["per_episode"]
    if not isinstance(records, list) or not all(
            isinstance(r, dict) and isinstance(r.get("seed"), int) and isinstance(r.get("env_index"), int)
            and isinstance(r.get("return"), (int, float)) for r in records):
        return "'per_episode' is not a list of episodes with an integer 'seed' and 'env_index' and a number 'return'"
    if not isinstance(data["provenance"], dict):
        return f"'provenance' is {json_kind(data['provenance'])}, not an object"
    return None


def read_eval_info(path: str | os.PathLike) -> dict[str, Any]:
    """An ``eval_info.json`` (or the folder holding one), refused by name if it is not one."""
    path = Path(path)
    if path.is_dir():
        path = path / EVAL_INFO
    return read_json(path, "compare: eval_info", EVAL_INFO_ALLOWED, eval_info_shape)


def compare(a: dict[str, Any] | str | os.PathLike, b: dict[str, Any] | str | os.PathLike,
            confidence: float = CONFIDENCE, n_resamples: int = N_RESAMPLES) -> dict[str, Any]:
    """Paired comparison of two evaluations of the same task on the same episodes (seed, env index).

    Returns the mean and IQM of the per-episode return difference ``a - b`` with bootstrap CIs over the
    pairs, and the fraction of episodes where ``a`` did better: "A beats B" when the CI excludes 0.
    Evaluations on different seeds are refused, naming the episodes one of them lacks.

    Args:
        a: an ``eval_info`` (dict), or the path of an ``eval_info.json`` or of the folder holding one.
        b: the same, for the evaluation ``a`` is compared against.
        confidence: width of the bootstrap confidence intervals.
        n_resamples: bootstrap resamples.
    """
    a = a if isinstance(a, dict) else read_eval_info(a)
    b = b if isinstance(b, dict) else read_eval_info(b)
    if a["task"] != b["task"]:
        raise ConfigError(f"compare: the evaluations are of different tasks ({a['task']!r} and {b['task']!r})")
    key = lambda r: (r["seed"], r["env_index"])  # noqa: E731
    a_eps, b_eps = {key(r): r for r in a["per_episode"]}, {key(r): r for r in b["per_episode"]}
    only_a, only_b = sorted(set(a_eps) - set(b_eps)), sorted(set(b_eps) - set(a_eps))
    if only_a or only_b:
        raise ConfigError(
            f"compare: the evaluations are not on the same episodes (seed, env_index); only in A: {only_a[:10]}"
            f"{' …' if len(only_a) > 10 else ''}, only in B: {only_b[:10]}{' …' if len(only_b) > 10 else ''}; "
            f"allowed: evaluations with the same test_episodes, evaluation_seed and evaluation_batch_size")
    keys = sorted(a_eps)
    result = paired_difference([a_eps[k]["return"] for k in keys], [b_eps[k]["return"] for k in keys],
                               confidence, n_resamples)
    result["a_checkpoint"] = a["provenance"].get("checkpoint")
    result["b_checkpoint"] = b["provenance"].get("checkpoint")
    return result


def load_collections(folder: str | os.PathLike) -> TensorDictBase:
    """Every saved batch under ``folder``, in iteration order, concatenated along the env dimension."""
    parts = sorted(Path(folder).glob("iteration_*"))
    if not parts:
        raise ConfigError(f"collections: no iteration_* folder under {str(folder)!r}")
    return torch.cat([TensorDict.load_memmap(str(p)) for p in parts], 0)
