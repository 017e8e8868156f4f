"""Resume continues exactly: counters, optimizer steps and (with no episode in flight) weights."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_marl.algorithms import MAPPO
from tests.helpers.tiny import tiny_kwargs, tiny_task, tiny_trainer


def _fit(tmp_path, name, max_epochs, ckpt_path=None):
    pl.seed_everything(0)
    model = MAPPO(tiny_task(), **tiny_kwargs())  # frames_per_batch = num_envs × max_steps
    checkpoint = ModelCheckpoint(dirpath=tmp_path / name, save_last=True, every_n_epochs=1,
                                 save_on_train_epoch_end=True)
    trainer = tiny_trainer(tmp_path / name, max_epochs=max_epochs, callbacks=[checkpoint],
                           check_val_every_n_epoch=2)
    trainer.fit(model, ckpt_path=ckpt_path)
    return model, trainer


def test_resume_continues_counters_and_weights_bitwise(tmp_path):
    straight, straight_trainer = _fit(tmp_path, "straight", max_epochs=4)
    _, first_half = _fit(tmp_path, "first", max_epochs=2)
    resumed, resumed_trainer = _fit(tmp_path, "resumed", max_epochs=4,
                                    ckpt_path=tmp_path / "first" / "last.ckpt")

    assert first_half.global_step == 2 * 4  # 2 iterations × (2 epochs × 2 minibatches)
    assert resumed.frames == straight.frames == 4 * 40
    assert resumed.iteration == straight.iteration == 4
    assert resumed_trainer.global_step == straight_trainer.global_step == 16
    straight_state, resumed_state = straight.state_dict(), resumed.state_dict()
    assert straight_state.keys() == resumed_state.keys()
    for key in straight_state:
        assert torch.equal(straight_state[key], resumed_state[key]), key
    # optimizer moments too
    s_opt = straight_trainer.optimizers[0].state_dict()["state"]
    r_opt = resumed_trainer.optimizers[0].state_dict()["state"]
    for idx in s_opt:
        assert torch.equal(s_opt[idx]["exp_avg"], r_opt[idx]["exp_avg"])
        assert s_opt[idx]["step"] == r_opt[idx]["step"]


def test_checkpoint_loads_weights_only(tmp_path):
    _fit(tmp_path, "run", max_epochs=1)
    checkpoint = torch.load(tmp_path / "run" / "last.ckpt", weights_only=True)
    meta = checkpoint["lit_marl"]
    assert meta["frames"] == 40 and meta["iteration"] == 1 and meta["algorithm"] == "mappo"
    assert meta["task"]["init_args"]["scenario"] == "simple_spread"
