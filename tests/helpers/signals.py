"""A callback that sends this process a signal at a point a test chooses (deterministic, unlike a timed kill)."""

from __future__ import annotations

import os

from lightning.pytorch.callbacks import Callback


class SignalSelf(Callback):
    """Sends ``signum`` to this process at ``hook``: ``train_end`` (after the last iteration, as the fit ends) or
    ``test_batch`` (as ``lit-marl test`` starts its first batch of episodes)."""

    def __init__(self, signum: int, hook: str) -> None:
        self.signum, self.hook = signum, hook

    def on_train_end(self, trainer, pl_module) -> None:
        if self.hook == "train_end":
            os.kill(os.getpid(), self.signum)

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        if self.hook == "test_batch":
            os.kill(os.getpid(), self.signum)
