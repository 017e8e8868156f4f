"""Episode videos: frames rendered by the task, encoded to mp4 by PyAV in a background thread.

Frames are rendered by replaying an evaluation batch from its seed (the same seed, batch size and weights
give the same episodes; the replay's returns are checked against the evaluated ones), one frame per real
step: the state each action was chosen in. Encoding runs in a worker thread so evaluation does not wait on it.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lit_marl.atomic import atomic_target
from lit_marl.envs.base import Task
from lit_marl.errors import ConfigError
from lit_marl.evaluation.episodes import first_done, first_episode_mask

#: what to install for videos
INSTALL_HINT = "pip install av (or pip install 'lit-marl[eval]')"


def require_encoder(field: str, requested: int) -> None:
    """Raise a :class:`ConfigError` naming the fix when videos are asked for and PyAV is missing."""
    if requested <= 0:
        return
    try:
        import av  # noqa: F401
    except ImportError:
        raise ConfigError(f"{field}: {requested} videos asked for, but no mp4 encoder is installed; allowed: "
                          f"{field}=0, or {INSTALL_HINT}") from None


def require_renderer(field: str, requested: int, task: Task) -> None:
    """Raise a :class:`ConfigError` when videos are asked for and the task cannot render frames."""
    if requested > 0 and type(task).render is Task.render:
        raise ConfigError(f"{field}: {requested} videos asked for, but {type(task).__name__} ({task.name}) cannot "
                          f"render frames; allowed: {field}=0, or a task that implements Task.render (e.g. VmasTask)")


def encode_mp4(path: str | os.PathLike, frames: Sequence[np.ndarray], fps: int = 20) -> Path:
    """Encode RGB frames ``[H, W, 3] uint8`` to an H.264 mp4 (written to a temp file, then renamed)."""
    import av

    path = Path(path)
    if path.exists():
        raise ConfigError(f"videos: {str(path)!r} already exists and is not overwritten")
    height, width = frames[0].shape[:2]
    height, width = height + height % 2, width + width % 2  # yuv420p needs even sizes
    with atomic_target(path, overwrite=False) as tmp, av.open(str(tmp), mode="w") as container:
        stream = container.add_stream("libx264", rate=int(fps))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for frame in frames:
            frame = np.ascontiguousarray(frame[..., :3], dtype=np.uint8)
            if frame.shape[:2] != (height, width):
                frame = np.pad(frame, ((0, height - frame.shape[0]), (0, width - frame.shape[1]), (0, 0)))
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


class VideoWriter:
    """Encodes submitted episodes in a worker thread; :meth:`close` waits and re-raises its first error."""

    def __init__(self, fps: int = 20) -> None:
        self.fps = fps
        self._queue: queue.Queue = queue.Queue()
        self._errors: list[BaseException] = []
        self.written: list[Path] = []
        self._thread = threading.Thread(target=self._work, name="lit-marl-video", daemon=True)
        self._thread.start()

    def submit(self, path: str | os.PathLike, frames: list[np.ndarray]) -> None:
        self._queue.put((Path(path), frames))

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            path, frames = item
            try:
                self.written.append(encode_mp4(path, frames, self.fps))
            except BaseException as err:  # reported by close()
                self._errors.append(err)

    def close(self) -> list[Path]:
        self._queue.put(None)
        self._thread.join()
        if self._errors:
            raise self._errors[0]
        return self.written


def render_batch(module: Any, seed: int, num_envs: int, env_indices: Sequence[int]) -> tuple[dict[int, list], TensorDictBase]:
    """Replay the evaluation batch ``(seed, num_envs)`` of ``module`` and render ``env_indices``.

    Returns ``({env_index: frames}, rollout)``: each env is rendered until its first episode ends, one frame
    per real step, and the rollout carries ``("episode", "mask")`` so its returns can be checked against the
    evaluated ones. Uses a fresh env and the module's evaluation settings, inside the task's isolated RNG, as
    ``MarlAlgorithm.evaluate`` does.
    """
    task: Task = module.task
    mode = ExplorationType.DETERMINISTIC if module.evaluation_deterministic else ExplorationType.RANDOM
    frames: dict[int, list] = {i: [] for i in env_indices}
    alive = set(env_indices)
    with task.isolated_rng():
        env = module.make_env(num_envs, seed=module.evaluation_seed)  # + recurrent-state transforms
    try:
        with task.isolated_rng(seed), torch.no_grad(), set_exploration_type(mode):
            env.set_seed(seed)
            td = env.reset()
            for i in env_indices:
                frames[i].append(task.render(env, i))

            def render_next(_env, step: TensorDictBase) -> None:
                # called after every step but the last, once finished envs were reset
                done = first_done(env, step.get("next").unsqueeze(-1)).squeeze(-1)
                for i in sorted(alive):
                    if done[i]:
                        alive.discard(i)
                    else:
                        frames[i].append(task.render(env, i))

            rollout = env.rollout(task.max_steps, policy=module.evaluation_policy, tensordict=td, auto_reset=False,
                                  break_when_any_done=False, callback=render_next)
    finally:
        env.close()
    rollout.set(("episode", "mask"), first_episode_mask(env, rollout))
    return frames, rollout
