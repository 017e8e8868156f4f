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

import numpy as np

from lit_marl.atomic import atomic_target
from lit_marl.envs.base import Task
from lit_marl.errors import ConfigError

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
    problem = task.renderer_problem() if requested > 0 else None
    if problem is not None:
        raise ConfigError(f"{field}: {requested} videos asked for, but {type(task).__name__} ({task.name}) cannot "
                          f"render frames on this machine: {problem}; allowed: {field}=0")


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
