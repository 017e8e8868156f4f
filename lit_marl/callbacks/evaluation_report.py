"""The in-training and test-time writer of ``eval_info.json``: :class:`EvaluationReport`.

At the end of a test (``Trainer.test`` / ``lit-marl test``) it turns the evaluation rollouts into per-episode
records, aggregates them with bootstrap CIs, renders the first ``videos`` episodes to mp4 (encoded in a background
thread), optionally exports the episodes as a memory-mapped TensorDict, and writes everything into a new folder
``<run>/eval/<timestamp>/``::

    eval/20260101-120000/
        eval_info.json          per_episode, aggregated, provenance
        videos/episode_0000.mp4
        episodes/               TensorDict.load_memmap(...) (with export_episodes)

During training it renders validation videos (``val_video_every``). What it writes is built by
:mod:`lit_marl.evaluation` (offline results: :func:`~lit_marl.evaluation.build_eval_info`, the statistics, the video
encoder); :func:`lit_marl.evaluate.evaluate_checkpoint` runs it from Python.
"""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.utilities import rank_zero_warn
from tensordict import TensorDictBase
from typing_extensions import override

from lit_marl.callbacks.hooks import MarlCallback
from lit_marl.errors import ConfigError, non_negative_int, positive_int
from lit_marl.evaluation.episodes import episode_records
from lit_marl.evaluation.eval_info import EVAL_INFO, build_eval_info, export_rollouts
from lit_marl.evaluation.io import new_folder, write_json
from lit_marl.evaluation.statistics import CONFIDENCE, N_RESAMPLES, scipy_stats
from lit_marl.evaluation.video import VideoWriter, require_encoder, require_renderer
from lit_marl.lightning_adapter import attached_trainer, logged_step


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
        self.n_resamples = positive_int("evaluation.n_resamples", n_resamples)  # scipy's bootstrap, after the episodes
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
        """Before any test episode: refuse by name videos that cannot be written (no video encoder, a task that cannot
        render here) and a missing ``scipy`` for the statistics, then start the clock."""
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
        """Before training: refuse validation videos (``val_video_every``) for a task that cannot render here."""
        require_renderer("evaluation.val_video_every", self.val_video_every, pl_module.task)

    @override
    def on_test_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                          batch_idx: int, dataloader_idx: int = 0) -> None:
        """Show the running mean return (and success rate) on Lightning's test progress bar."""
        evaluation = getattr(pl_module, "evaluation", None)
        rollouts = evaluation.rollouts if evaluation is not None else None
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
    return module.evaluation.evaluator.render(module.evaluation.policy, batch["seed"], batch["num_envs"], env_indices,
                                   module.evaluation_deterministic)


def _checkpoint_file(ckpt_path: Any) -> str | None:
    return str(ckpt_path) if ckpt_path and Path(str(ckpt_path)).is_file() else None


def _log_videos(pl_module: pl.LightningModule, paths: list[Path], frames: list[list], fps: int,
                key: str = "test/video") -> None:
    """Send the videos to loggers that take video, at the step of the evaluation's metrics: W&B (``log_video``
    with the mp4 files), TensorBoard (an animated GIF image summary, what ``SummaryWriter.add_video`` writes,
    without its moviepy dependency) and MLflow (the mp4 files as artifacts of the run under ``<key>/``)."""
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
