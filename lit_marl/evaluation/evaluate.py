"""``eval_info.json``: the thorough, standalone evaluation of one checkpoint (``lit-marl test``).

:class:`EvaluationReport` is a callback: at the end of a test (``Trainer.test`` / ``lit-marl test``) it turns
the evaluation rollouts into per-episode records, aggregates them with bootstrap CIs, renders the first
``videos`` episodes to mp4 (encoded in a background thread), optionally exports the episodes as a memory-mapped
TensorDict, and writes everything into a new folder ``<run>/eval/<timestamp>/``::

    eval/20260101-120000/
        eval_info.json          per_episode, aggregated, provenance
        videos/episode_0000.mp4
        episodes/               TensorDict.load_memmap(...) (with export_episodes)

:func:`evaluate_checkpoint` does the same from Python (notebooks); :func:`compare` pairs two evaluations
episode by episode.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_warn
from tensordict import TensorDict, TensorDictBase
from typing_extensions import override

from lit_marl.algorithms.registry import algorithm_class
from lit_marl.atomic import atomic_target
from lit_marl.lightning_adapter import attached_trainer, logged_step
from lit_marl.callbacks import MarlCallback
from lit_marl.errors import ConfigError, non_negative_int
from lit_marl.evaluation.episodes import episode_records
from lit_marl.evaluation.io import new_folder, provenance, write_json
from lit_marl.evaluation.statistics import CONFIDENCE, N_RESAMPLES, paired_difference, scipy_stats, summarize
from lit_marl.evaluation.video import VideoWriter, require_encoder, require_renderer
from lit_marl.reading import json_kind, read_json

EVAL_INFO = "eval_info.json"


class EvaluationReport(MarlCallback):
    """Writes ``eval_info.json`` (and videos, an episode export) at the end of every test.

    Args:
        videos: render the first ``videos`` test episodes to ``videos/episode_<i>.mp4``.
        output_dir: folder under which a new ``<timestamp>`` folder is made (default: ``<run>/eval`` where
            ``<run>`` is the run folder of the tested checkpoint, else the test run's log folder).
        export_episodes: save the test rollouts to ``episodes/`` as a memory-mapped TensorDict.
        fps: frames per second of the videos.
        confidence: width of the bootstrap confidence intervals.
        n_resamples: bootstrap resamples.
        checkpoint: the evaluated checkpoint, for provenance (default: the Trainer's ``ckpt_path``).
        val_video_every: during training, render the first validation episode of every ``val_video_every``-th
            evaluation to ``<run>/videos/val_frames_<frames>.mp4`` (0: never).
    """

    def __init__(self, videos: int = 0, output_dir: str | None = None, export_episodes: bool = False,
                 fps: int = 20, confidence: float = CONFIDENCE, n_resamples: int = N_RESAMPLES,
                 checkpoint: str | None = None, val_video_every: int = 0) -> None:
        for name, value in (("videos", videos), ("val_video_every", val_video_every)):
            non_negative_int(f"evaluation.{name}", value)
        require_encoder("evaluation.videos", videos)
        require_encoder("evaluation.val_video_every", val_video_every)
        if not isinstance(fps, int) or fps <= 0:
            raise ConfigError(f"evaluation.fps: must be a positive integer, got {fps!r}")
        if not 0 < confidence < 1:
            raise ConfigError(f"evaluation.confidence: must be in (0, 1), got {confidence!r}")
        self.videos = videos
        self.output_dir = output_dir
        self.export_episodes = bool(export_episodes)
        self.fps = fps
        self.confidence = float(confidence)
        self.n_resamples = int(n_resamples)
        self.checkpoint = checkpoint
        self.val_video_every = val_video_every
        self._evaluations = 0
        self._running: list[dict[str, Any]] = []
        #: the last ``eval_info`` written, and its folder
        self.result: dict[str, Any] | None = None
        self.folder: Path | None = None
        self._start = 0.0
        self._videos = videos

    @override
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # --evaluation.videos, or the model's test_videos (--model.init_args.test_videos)
        field = "evaluation.videos" if self.videos else "model.init_args.test_videos"
        self._videos = self.videos or int(getattr(pl_module, "test_videos", 0))
        require_encoder(field, self._videos)
        require_renderer(field, self._videos, pl_module.task)
        scipy_stats()  # fail before the episodes, not after them
        self._start = time.perf_counter()
        self._running = []

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        require_renderer("evaluation.val_video_every", self.val_video_every, pl_module.task)

    @override
    def on_test_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                          batch_idx: int, dataloader_idx: int = 0) -> None:
        """Show the running mean return (and success rate) on Lightning's test progress bar."""
        rollouts = getattr(pl_module, "_eval_rollouts", None)
        bar = getattr(trainer.progress_bar_callback, "test_progress_bar", None)
        if not rollouts or bar is None:
            return
        self._running.extend(episode_records(pl_module.task, rollouts[-1], batch["seed"], batch["first_episode"]))
        postfix = {"return": f"{sum(r['return'] for r in self._running) / len(self._running):.3f}"}
        successes = [r["success"] for r in self._running if r["success"] is not None]
        if successes:
            postfix["success"] = f"{sum(successes) / len(successes):.2f}"
        bar.set_postfix(postfix)

    @override
    def on_evaluation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                          episodes: list[TensorDictBase]) -> None:
        if not trainer.testing:
            self._validation_video(trainer, pl_module)
            return
        if not trainer.is_global_zero:
            return
        if trainer.world_size > 1:
            rank_zero_warn("lit-marl: eval_info.json holds rank 0's episodes only under DDP")
        seconds = time.perf_counter() - self._start
        batches = list(pl_module.test_dataloader())
        checkpoint = self.checkpoint or _checkpoint_file(trainer.ckpt_path)
        self.folder = new_folder(self._parent(trainer, checkpoint))
        self.result = build_eval_info(pl_module, batches, episodes, seconds, checkpoint, self.confidence,
                                      self.n_resamples)
        if self._videos:
            self._write_videos(pl_module, batches, episodes)
        if self.export_episodes:
            export = export_rollouts(pl_module, batches, episodes, self.folder / "episodes")
            self.result["episodes_export"] = str(export.relative_to(self.folder))
        write_json(self.folder / EVAL_INFO, self.result)

    def _validation_video(self, trainer: pl.Trainer, pl_module) -> None:
        if not self.val_video_every or trainer.sanity_checking or not trainer.is_global_zero:
            return
        self._evaluations += 1
        if (self._evaluations - 1) % self.val_video_every:
            return
        batch = next(iter(pl_module.val_dataloader()))
        frames, _ = _render(pl_module, batch, [0])
        folder = Path(trainer.log_dir or trainer.default_root_dir) / "videos"
        folder.mkdir(parents=True, exist_ok=True)
        writer = VideoWriter(self.fps)
        writer.submit(folder / f"val_frames_{pl_module.frames:09d}.mp4", frames[0])
        _log_videos(pl_module, writer.close(), [frames[0]], self.fps, "val/video")

    def _parent(self, trainer: pl.Trainer, checkpoint: str | None) -> Path:
        if self.output_dir is not None:
            return Path(self.output_dir)
        if checkpoint is not None and Path(checkpoint).parent.name == "checkpoints":
            return Path(checkpoint).resolve().parent.parent / "eval"
        return Path(trainer.log_dir or trainer.default_root_dir) / "eval"

    def _write_videos(self, pl_module, batches: list[dict[str, int]], episodes: list[TensorDictBase]) -> None:
        writer = VideoWriter(self.fps)
        (self.folder / "videos").mkdir()
        records = self.result["per_episode"]
        rendered = []
        try:
            for batch in batches:
                wanted = [i for i in range(batch["num_envs"]) if batch["first_episode"] + i < self._videos]
                if not wanted:
                    continue
                frames, replay = _render(pl_module, batch, wanted)
                replayed = episode_records(pl_module.task, replay, batch["seed"], batch["first_episode"])
                for i in wanted:
                    record = records[batch["first_episode"] + i]
                    if abs(replayed[i]["return"] - record["return"]) > 1e-4 * max(1.0, abs(record["return"])):
                        rank_zero_warn(f"lit-marl: the video of episode {record['episode']} replays a different "
                                       f"episode (return {replayed[i]['return']:.4f} vs {record['return']:.4f})")
                        continue
                    path = self.folder / "videos" / f"episode_{record['episode']:04d}.mp4"
                    writer.submit(path, frames[i])
                    rendered.append(frames[i])
                    record["video"] = str(path.relative_to(self.folder))
                    record["video_frames"] = len(frames[i])
        finally:
            written = writer.close()
        _log_videos(pl_module, written, rendered, self.fps)


def _render(module, batch: dict[str, int], env_indices: list[int]) -> tuple[dict[int, list], TensorDictBase]:
    """Replay an evaluation batch of ``module`` with its evaluation settings, rendering ``env_indices``."""
    return module.evaluator.render(module.evaluation_policy, batch["seed"], batch["num_envs"], env_indices,
                                   module.evaluation_deterministic)


def _checkpoint_file(ckpt_path: Any) -> str | None:
    return str(ckpt_path) if ckpt_path and Path(str(ckpt_path)).is_file() else None


def _log_videos(pl_module: pl.LightningModule, paths: list[Path], frames: list[list], fps: int,
                key: str = "test/video") -> None:
    """Send the videos to loggers that take video, at the step of the evaluation's metrics: W&B (``log_video``
    with the mp4 files), TensorBoard (an animated GIF image summary, what ``SummaryWriter.add_video`` writes,
    without its moviepy dependency) and MLflow (the mp4 files as artifacts of the run under ``<key>/``)."""
    from lightning.pytorch.loggers import MLFlowLogger

    if not paths:
        return
    step = logged_step(attached_trainer(pl_module))  # where Lightning logs this evaluation's metrics
    for logger in pl_module.loggers:
        if hasattr(logger, "log_video"):
            logger.log_video(key, [str(p) for p in paths], step=step)  # an mp4 keeps its own frame rate
        elif type(logger).__name__ == "TensorBoardLogger":
            for i, episode in enumerate(frames):
                _tensorboard_video(logger.experiment, f"{key}/{i}", episode, fps, step)
        elif isinstance(logger, MLFlowLogger):
            _mlflow_videos(logger, key, paths)


def _mlflow_videos(logger, key: str, paths: list[Path]) -> None:
    """MLflow has no video type: each mp4 becomes an artifact of the logger's run, ``<key>/<file name>`` (e.g.
    ``val/video/val_frames_000120000.mp4``), which MLflow's UI lists and serves."""
    for path in paths:
        logger.experiment.log_artifact(logger.run_id, str(path), artifact_path=key)


def _tensorboard_video(writer, tag: str, frames: list, fps: int, step: int) -> None:
    import io

    try:
        from PIL import Image
        from tensorboard.compat.proto.summary_pb2 import Summary
    except ImportError:
        rank_zero_warn("lit-marl: videos reach TensorBoard as GIFs, which need pillow (pip install 'lit-marl[eval]')")
        return

    images = [Image.fromarray(frame[..., :3]) for frame in frames]
    buffer = io.BytesIO()
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    height, width = frames[0].shape[:2]
    image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=buffer.getvalue())
    writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)
    writer.flush()


def build_eval_info(module, batches: list[dict[str, int]], rollouts: list[TensorDictBase], seconds: float,
                    checkpoint: str | None, confidence: float = CONFIDENCE,
                    n_resamples: int = N_RESAMPLES) -> dict[str, Any]:
    """The ``eval_info`` dict of a test: ``per_episode``, ``aggregated``, ``provenance``."""
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


# ------------------------------------------------------------------------------------------- Python API
def evaluate_checkpoint(ckpt_path: str | os.PathLike, episodes: int | None = None, videos: int = 0,
                        deterministic: bool | None = None, start_seed: int | None = None,
                        batch_size: int | None = None, output_dir: str | os.PathLike | None = None,
                        export_episodes: bool = False, algorithm: type | None = None,
                        progress_bar: bool = False) -> dict[str, Any]:
    """Evaluate a checkpoint from Python, as ``lit-marl test`` does, and return its ``eval_info``.

    ``episodes``, ``deterministic``, ``start_seed`` and ``batch_size`` default to the checkpoint's
    ``test_episodes``, ``evaluation_deterministic``, ``evaluation_seed`` and ``evaluation_batch_size``. The
    result is also written to a new folder (``<run>/eval/<timestamp>/`` by default): ``result["folder"]``.

    Examples:
        >>> info = evaluate_checkpoint("runs/quickstart/version_0/checkpoints/last.ckpt", episodes=50)
        >>> info["aggregated"]["return"]["iqm"]  # {"value": ..., "ci_low": ..., "ci_high": ...}
    """
    from lit_marl.checkpoint import read_checkpoint

    meta = read_checkpoint(ckpt_path)["lit_marl"]
    cls = algorithm or algorithm_class(meta["algorithm"])
    overrides: dict[str, Any] = {}
    if episodes is not None:
        overrides["test_episodes"] = episodes
    if deterministic is not None:
        overrides["evaluation_deterministic"] = bool(deterministic)
    if start_seed is not None:
        overrides["evaluation_seed"] = int(start_seed)
    if batch_size is not None:
        overrides["evaluation_batch_size"] = batch_size
    module = cls.load_from_checkpoint(str(ckpt_path), map_location="cpu", weights_only=True, **overrides)
    report = EvaluationReport(videos=videos, output_dir=None if output_dir is None else str(output_dir),
                              export_episodes=export_episodes, checkpoint=str(ckpt_path))
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=progress_bar,
                         enable_model_summary=False, callbacks=[report], accelerator="cpu", devices=1,
                         default_root_dir=str(Path(ckpt_path).resolve().parent))
    trainer.test(module, verbose=False)
    result = dict(report.result)
    result["folder"] = str(report.folder)
    return result


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


def compare_checkpoints(a: str | os.PathLike, b: str | os.PathLike, episodes: int = 100, **kwargs: Any) -> dict[str, Any]:
    """Evaluate two checkpoints on the same seeds and compare them (:func:`compare`)."""
    kwargs.setdefault("start_seed", 10_000)
    kwargs.setdefault("batch_size", episodes)
    info_a = evaluate_checkpoint(a, episodes=episodes, **kwargs)
    info_b = evaluate_checkpoint(b, episodes=episodes, **kwargs)
    return compare(info_a, info_b)


def main(argv: list[str]) -> int:
    """``lit-marl compare A B [--out FILE]``: paired comparison of two ``eval_info.json`` (or their folders)."""
    import argparse

    parser = argparse.ArgumentParser(prog="lit-marl compare", description=compare.__doc__.split("\n\n")[0])
    parser.add_argument("a", help="eval_info.json of A (or its folder)")
    parser.add_argument("b", help="eval_info.json of B (or its folder)")
    parser.add_argument("--out", default=None, help="also write the result to this JSON file (a new file)")
    args = parser.parse_args(argv)
    result = compare(args.a, args.b)
    diff = result["mean_difference"]
    print(f"A - B mean return difference over {result['episodes']} paired episodes: {diff['value']:.4f} "
          f"[{diff['ci_low']:.4f}, {diff['ci_high']:.4f}] ({CONFIDENCE:.0%} CI); A better in "
          f"{result['a_better_fraction']:.0%} of episodes")
    verdict = "A beats B" if diff["ci_low"] > 0 else "B beats A" if diff["ci_high"] < 0 else "no clear difference"
    print(verdict)
    if args.out:
        write_json(args.out, result)
    return 0
