"""A callback that records, per DDP process, what the scale-out tests check (imported by class path in a config)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import lightning.pytorch as pl
import torch


class RankProbe(pl.Callback):
    """Writes ``<folder>/rank<r>.json`` at the end of training: frames, this process's collected frames, its first
    observation, a digest of the weights, its replay buffer lengths and its share of the last evaluation."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.collected = 0
        self.first_observation: list[float] | None = None
        self.evaluated = 0
        self.seeds: list[int] = []

    def on_batch_collected(self, trainer, module, batch) -> None:
        self.collected += batch.numel()
        if self.first_observation is None:
            self.first_observation = batch.get(("agents", "observation"))[..., 0, :, :].flatten()[:8].tolist()

    def on_evaluation_end(self, trainer, module, episodes) -> None:
        self.evaluated = sum(int(rollout.batch_size[0]) for rollout in episodes)
        self.seeds = [int(b["seed"]) for b in module.val_dataloader()]

    def on_train_end(self, trainer, module) -> None:
        weights = b"".join(p.detach().cpu().numpy().tobytes() for p in module.parameters())
        record = {
            "rank": trainer.global_rank, "frames": module.frames, "collected": self.collected,
            "first_observation": self.first_observation, "weights": hashlib.sha256(weights).hexdigest(),
            "evaluated": self.evaluated, "seeds": self.seeds, "global_step": trainer.global_step,
            "buffers": {g: len(b) for g, b in module.replay_buffers().items()}
            if hasattr(module, "replay_buffers") else {},
        }
        Path(self.folder).mkdir(parents=True, exist_ok=True)
        tmp = Path(self.folder) / f".rank{trainer.global_rank}.json.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, Path(self.folder) / f"rank{trainer.global_rank}.json")
        if torch.distributed.is_initialized():
            torch.distributed.barrier()
