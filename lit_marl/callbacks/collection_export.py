"""Training collections saved for offline use, as memory-mapped TensorDicts.

:class:`CollectionExport` writes every ``every_n``-th collected batch ``[num_envs, steps]`` (before
``process_batch``) to ``<folder>/iteration_<k>/`` (written to a temp folder, then renamed, so a kill never leaves
half a batch); :func:`lit_marl.evaluation.load_collections` reloads them as one TensorDict. Evaluation episodes are
exported by ``lit-marl test --evaluation.export_episodes true`` (:func:`lit_marl.evaluation.load_episodes`).
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from tensordict import TensorDictBase
from typing_extensions import override

from lit_marl.atomic import atomic_target
from lit_marl.callbacks.hooks import MarlCallback
from lit_marl.errors import ConfigError


class CollectionExport(MarlCallback):
    """Save collected training batches as memory-mapped TensorDicts.

    Args:
        folder: where ``iteration_<k>/`` folders go (default: ``<run>/collections``).
        every_n: save every ``every_n``-th iteration's batch.
    """

    def __init__(self, folder: str | None = None, every_n: int = 1) -> None:
        if not isinstance(every_n, int) or every_n <= 0:
            raise ConfigError(f"collection_export.every_n: must be a positive integer, got {every_n!r}")
        self.folder = folder
        self.every_n = every_n

    @override
    def on_batch_collected(self, trainer: pl.Trainer, pl_module, batch: TensorDictBase) -> None:
        if pl_module.iteration % self.every_n or not trainer.is_global_zero:
            return
        folder = Path(self.folder) if self.folder else Path(trainer.log_dir or trainer.default_root_dir) / "collections"
        target = folder / f"iteration_{pl_module.iteration:06d}"
        if target.exists():
            raise ConfigError(f"collection_export.folder: {str(target)!r} already exists and is not overwritten; "
                              f"allowed: a new folder")
        with atomic_target(target, overwrite=False) as tmp:
            batch.detach().to("cpu").memmap(prefix=tmp)
