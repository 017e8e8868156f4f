"""A NaN/Inf in a loss term or a gradient stops training with a message naming group, term and iteration, before
any weight changes, and leaves the last checkpoint as it was; ``nan_policy="skip"`` skips such updates instead and
counts them in ``train/skipped_updates``."""

from __future__ import annotations

import hashlib
import inspect
import math

import lightning.pytorch as pl
import pytest
import torch
import yaml
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lit_marl.errors import ConfigError, NumericalError
from tests.helpers.tiny import tiny_kwargs, tiny_task, tiny_trainer
from tests.reliability.faulty import FaultyMAPPO
from tests.reliability.helpers import QUIET, expect_exit, rows, run_dirs, tiny_config


class Snapshots(Callback):
    """The module's weights at the end of every training epoch (= iteration)."""

    def __init__(self):
        self.weights = []

    def on_train_epoch_end(self, trainer, pl_module):
        self.weights.append({k: v.detach().clone() for k, v in pl_module.state_dict().items()})


def _fit(tmp_path, max_epochs=3, nan_policy=None, **fault):
    pl.seed_everything(0)
    model = FaultyMAPPO(tiny_task(), **tiny_kwargs(), **fault)
    if nan_policy is not None:
        model.nan_policy = nan_policy
    snapshots = Snapshots()
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True, every_n_epochs=1,
                                 save_on_train_epoch_end=True)
    trainer = tiny_trainer(tmp_path, max_epochs=max_epochs, callbacks=[snapshots, checkpoint],
                           check_val_every_n_epoch=10)
    return model, trainer, snapshots


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(("fault", "fragments"), [
    ("nan_loss", ["loss term agents/loss_critic is nan", "iteration 2 (frames 80), minibatch 0"]),
    ("inf_loss", ["loss term agents/loss_objective is inf", "iteration 2 (frames 80), minibatch 0"]),
    ("nan_grad", ["gradient of agents/actor is nan", "iteration 2 (frames 80), minibatch 0"]),
])
def test_fault_stops_training_and_keeps_the_last_good_checkpoint(tmp_path, fault, fragments):
    model, trainer, snapshots = _fit(tmp_path, fault_iterations=[2], fault=fault)
    last = tmp_path / "ckpt" / "last.ckpt"
    with pytest.raises(NumericalError) as err:
        trainer.fit(model)
    for fragment in [*fragments, "last checkpoint is kept", "nan_policy='skip'"]:
        assert fragment in str(err.value), (fragment, str(err.value))
    # iteration 1 was checkpointed; the faulty iteration 2 changed no weight and wrote no checkpoint
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["epoch=0-step=4.ckpt", "last.ckpt"]
    saved = torch.load(last, weights_only=True)
    assert saved["lit_marl"]["iteration"] == 1
    for key, value in model.state_dict().items():
        assert torch.isfinite(value).all(), key
        assert torch.equal(value, saved["state_dict"][key]), key
    assert len(snapshots.weights) == 1


def test_skip_policy_skips_and_counts_the_bad_updates(tmp_path):
    # every one of iteration 2's 4 optimizer steps (2 epochs × 2 minibatches) has a NaN loss term
    model, trainer, snapshots = _fit(tmp_path, nan_policy="skip", fault_iterations=[2])
    trainer.fit(model)
    assert model.iteration == 3
    # iteration 2 skipped all of its 4 updates: the weights (and Adam's state) did not move
    for key in snapshots.weights[0]:
        assert torch.equal(snapshots.weights[0][key], snapshots.weights[1][key]), key
    assert not all(torch.equal(snapshots.weights[1][k], snapshots.weights[2][k]) for k in snapshots.weights[1])
    metrics = rows(tmp_path / "run" / "version_0")
    skipped = [float(r["train/skipped_updates"]) for r in metrics if r.get("train/skipped_updates")]
    assert skipped == [0.0, 4.0, 0.0]
    for r in metrics:  # the skipped steps' NaN terms are not averaged into the logged losses
        for name, value in r.items():
            if value and name.startswith("train/"):
                assert math.isfinite(float(value)), (name, value)


def test_skip_policy_with_a_nan_gradient_leaves_adam_untouched(tmp_path):
    model, trainer, snapshots = _fit(tmp_path, max_epochs=2, nan_policy="skip", fault_iterations=[2],
                                     fault="nan_grad")
    trainer.fit(model)
    for key in snapshots.weights[0]:
        assert torch.equal(snapshots.weights[0][key], snapshots.weights[1][key]), key
    state = trainer.optimizers[0].state_dict()["state"]
    assert {int(s["step"]) for s in state.values()} == {4}  # only iteration 1's 4 steps


def test_unknown_nan_policy_is_refused_by_name(tmp_path):
    model, trainer, _ = _fit(tmp_path, nan_policy="ignore", fault_iterations=[1])
    with pytest.raises(ValueError, match="nan_policy: 'ignore' is not one of 'stop', 'skip'"):
        trainer.fit(model)


def test_nan_policy_is_an_argument_of_every_algorithm_refused_by_name_before_any_env(monkeypatch):
    from lit_marl.algorithms import MAPPO, QMIX, Ensemble
    from lit_marl.envs.base import Task

    assert {inspect.signature(cls).parameters["nan_policy"].default for cls in (MAPPO, QMIX, Ensemble)} == {"stop"}
    model = MAPPO(tiny_task(), **tiny_kwargs(nan_policy="skip"))
    assert model.nan_policy == "skip" and model.hparams["nan_policy"] == "skip"
    monkeypatch.setattr(Task, "_make_env", lambda *a, **k: pytest.fail("an environment was built before the check"))
    with pytest.raises(ConfigError, match="nan_policy: must be one of 'stop', 'skip', got 'ignore'"):
        MAPPO(tiny_task(), **tiny_kwargs(nan_policy="ignore"))


def _faulty_config(path, **fault):
    config = yaml.safe_load(tiny_config(path).read_text())
    config["model"]["class_path"] = "tests.reliability.faulty.FaultyMAPPO"
    config["model"]["init_args"].update(max_frames=120, **fault)
    path.write_text(yaml.safe_dump(config))
    return path


def test_cli_exits_with_code_3_naming_the_fault(capsys, tmp_path):
    config = _faulty_config(tmp_path / "faulty.yaml", fault_iterations=[2])
    expect_exit(capsys, ["fit", "--config", str(config), *QUIET], 3, "lit-marl: error: loss term agents/loss_critic "
                "is nan at iteration 2", unchanged=None)
    (run,) = run_dirs()
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["lit_marl"]["iteration"] == 1
    assert {float(r["counters/frames"]) for r in rows(run) if r.get("counters/frames")} == {40.0}


def test_cli_nan_policy_skip_finishes_the_run(tmp_path):
    from lit_marl.cli import main

    config = _faulty_config(tmp_path / "faulty.yaml", fault_iterations=[2])
    main(["fit", "--config", str(config), *QUIET, "--nan_policy", "skip"])
    (run,) = run_dirs()
    assert yaml.safe_load((run / "config.yaml").read_text())["nan_policy"] == "skip"
    hparams = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["hyper_parameters"]
    assert hparams["nan_policy"] == "skip"  # the flag sets the model's argument, saved with the others
    skipped = [float(r["train/skipped_updates"]) for r in rows(run) if r.get("train/skipped_updates")]
    assert skipped == [0.0, 2.0, 0.0]  # iteration 2's 2 optimizer steps (1 epoch × 2 minibatches)


class PoisonWeights(Callback):
    """Writes +Inf into the first actor weight after the last optimizer step of iteration 2."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.iteration + 1 == 2 and batch_idx == 3:
            with torch.no_grad():
                next(pl_module.policies["agents"].parameters()).view(-1)[0] = float("inf")


def test_non_finite_weights_stop_before_the_iterations_checkpoint(tmp_path):
    model, trainer, _ = _fit(tmp_path)
    trainer.callbacks.insert(0, PoisonWeights())
    with pytest.raises(NumericalError, match=r"parameter learners\.agents\.policy\..* holds NaN/Inf after iteration 2"):
        trainer.fit(model)
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    assert saved["lit_marl"]["iteration"] == 1
    assert all(torch.isfinite(v).all() for v in saved["state_dict"].values())


class PriorityAndTargetWatch(Callback):
    """Per iteration, after its collection (first minibatch) and at its end: each group's priorities of the
    transitions stored before the iteration, its target networks and its target updater's step count."""

    def __init__(self):
        self.start, self.end = {}, {}

    def _state(self, pl_module, filled):
        state = {}
        for group, buffer in pl_module.replay_buffers().items():
            loss = pl_module.losses[group]
            targets = {k: v.detach().clone() for k, v in loss.named_buffers() if "target_" in k}
            updater = pl_module.learners[group].target_updater
            state[group] = (buffer.sampler.state_dict()["priority"][:filled].clone(), targets,
                            getattr(updater, "counter", None))
        return state

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == 0:
            self.filled = pl_module.frames - pl_module.frames_per_batch  # stored before this iteration
            self.start[pl_module.iteration + 1] = self._state(pl_module, self.filled)

    def on_train_epoch_end(self, trainer, pl_module):
        self.end[pl_module.iteration + 1] = self._state(pl_module, self.filled)


@pytest.mark.parametrize("algorithm", ["FaultyVDN", "FaultyQMIX", "FaultyMADDPG"])
def test_skipped_update_writes_no_priorities_and_moves_no_targets(tmp_path, algorithm):
    from tests.reliability import faulty

    pl.seed_everything(0)
    kwargs = dict(frames_per_batch=40, num_envs=4, n_optimizer_steps=3, train_batch_size=16, memory_size=1000,
                  max_frames=400, evaluation_episodes=4, use_prioritized_replay_buffer=True, fault_iterations=[2])
    if algorithm == "FaultyMADDPG":
        task, kwargs = tiny_task(), {**kwargs, "soft_target_update": True}
    else:
        task = tiny_task("navigation", continuous_actions=False)
    model = getattr(faulty, algorithm)(task, **kwargs)
    model.nan_policy = "skip"
    watch = PriorityAndTargetWatch()
    trainer = tiny_trainer(tmp_path, max_epochs=3, callbacks=[watch], check_val_every_n_epoch=10)
    trainer.fit(model)
    for group in model.groups:
        for iteration, moved in ((2, False), (3, True)):  # iteration 2 skipped every update, 3 did not
            (p0, t0, c0), (p1, t1, c1) = watch.start[iteration][group], watch.end[iteration][group]
            assert torch.equal(p0, p1) != moved, (iteration, "priorities")
            assert all(torch.equal(t0[k], t1[k]) for k in t0) != moved, (iteration, "targets")
            if c0 is not None:
                assert (c0 == c1) != moved, (iteration, "updater steps")
