"""Checkpoints written by earlier lit-marl still load and resume: lit-marl as it was on 2026-12-04 (commit 5f9fc39,
before algorithms were split into learners; taken from this repository's git history) writes checkpoints of MAPPO,
MADDPG, MASAC, QMIX and an ensemble and the weights one more iteration gives (``tests/fixtures/make_checkpoints.py``);
today's code must load each and continue it to the same weights, bitwise."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from lit_marl.checkpoint import migrate_state_dict
from tests.helpers.tiny import ROOT
from tests.fixtures.make_checkpoints import NAMES, build, fit

#: the last commit before the learner split
OLD = "5f9fc39"
#: runs whose next iteration today's code computes with sums in another order, so its weights match the old code's to
#: float rounding, not bitwise: PPO's GAE values come from one critic call over the steps and the next steps that
#: differ (``ppo.state_values_in_one_call``, 2026-12-06; 1.5e-8 at most measured), where the old code made two calls
#: vmapped over a stack of the parameters. A resume that lost the optimizer's or the random state would differ by the
#: order of one Adam step (MAPPO's lr 5e-5), hundreds of times the tolerance.
SUMMED_DIFFERENTLY = {"mappo"}


@pytest.fixture(scope="module")
def old_runs(tmp_path_factory) -> Path:
    """The old code's checkpoints and weights, written by that code (from ``git archive``) into a temporary folder."""
    present = subprocess.run(["git", "cat-file", "-e", f"{OLD}^{{commit}}"], cwd=ROOT, capture_output=True)
    if present.returncode != 0:  # a shallow clone, or a copy without .git; under CI this skip fails the run
        pytest.skip(f"commit {OLD} (the old code that writes these checkpoints) is not in this clone's history: "
                    f"git fetch --unshallow")
    work = tmp_path_factory.mktemp("old")
    archive = subprocess.run(["git", "archive", "--format=tar", OLD, "lit_marl"], cwd=ROOT, capture_output=True)
    assert archive.returncode == 0, f"commit {OLD} is needed from git history: {archive.stderr.decode()}"
    (work / "code.tar").write_bytes(archive.stdout)
    with tarfile.open(work / "code.tar") as tar:
        tar.extractall(work / "code", filter="data")
    env = {**os.environ, "PYTHONPATH": str(work / "code")}
    made = subprocess.run([sys.executable, str(ROOT / "tests" / "fixtures" / "make_checkpoints.py"), str(work / "out")],
                          env=env, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    return work / "out"


def _copy(old_runs: Path, name: str, to: Path) -> Path:
    for path in old_runs.glob(f"{name}.ckpt*"):
        shutil.copy(path, to / path.name)
    return to / f"{name}.ckpt"


def test_the_checkpoints_were_made_by_the_old_code(old_runs):
    made_by = json.loads((old_runs / "made_by.json").read_text())
    assert made_by["lit_marl"].startswith(str(old_runs.parent / "code"))
    assert set(made_by["runs"]) == set(NAMES)
    assert torch.load(old_runs / "mappo.ckpt", weights_only=True)["lit_marl"]["format_version"] == 1


@pytest.mark.parametrize("name", NAMES)
def test_old_checkpoint_resumes_to_the_same_weights(old_runs, tmp_path, name):
    ckpt = _copy(old_runs, name, tmp_path)
    expected = torch.load(old_runs / f"{name}.after_one_more.pt", weights_only=True)
    model, trainer = fit(name, tmp_path / "resumed", max_epochs=3, ckpt_path=ckpt)
    assert (model.frames, model.iteration, trainer.global_step) == \
        (expected["frames"], expected["iteration"], expected["global_step"])
    state = model.state_dict()
    renamed = {"lit_marl": {"format_version": 1}, "state_dict": expected["state_dict"]}
    migrate_state_dict(renamed)  # the names weights had before learners, as today's code reads them
    old = renamed["state_dict"]
    assert sorted(state) == sorted(old)
    for key, value in old.items():
        if name in SUMMED_DIFFERENTLY:
            torch.testing.assert_close(state[key], value, rtol=0, atol=1e-7, msg=key)
        else:
            assert torch.equal(state[key], value), key


@pytest.mark.parametrize("name", NAMES)
def test_old_checkpoint_loads_for_inference(old_runs, name):
    model = type(build(name)).load_from_checkpoint(old_runs / f"{name}.ckpt", weights_only=True)
    assert model.iteration == 2 and model.frames == 80
    batch = model.task.make_env(num_envs=2, seed=0, device="cpu").reset()
    out = model.policy(batch)
    for group in model.groups:
        assert torch.isfinite(out.get((group, "action")).float()).all()


@pytest.mark.parametrize("agents", [2, 3])
def test_a_centralised_critic_that_read_every_agents_id_loads_as_the_same_function(agents):
    """Before format 3 a centralised shared network with ``agent_id`` read ``[x_1, id_1, x_2, id_2, …]``: one value for
    the group. Today's reads the joint input and the agent's own id; the old first layer is folded into it (the
    constant ids into the bias, the own id weighed zero), so the old critic gives every agent the value it gave."""
    from tensordict import TensorDict

    from lit_marl.checkpoint import fold_constant_agent_ids
    from lit_marl.models import Mlp, ModelInputs
    from tests.helpers.tiny import tiny_task

    inputs = ModelInputs.of(tiny_task(n_agents=agents), "agents")
    features, n = inputs.flat_features, inputs.n_agents
    torch.manual_seed(0)
    # the old layout, as the old code built it: one network over every agent's input and id, in turn
    old = Mlp(num_cells=[16], agent_id=True).build_multi_agent(features + n, 1, n, centralised=True, share_params=True)
    new = Mlp(num_cells=[16], agent_id=True).build_module(inputs, [("agents", "value")], 1, centralised=True,
                                                          share_params=True)
    prefix = "learners.agents.objective.critic_network_params."  # as in a MAPPO checkpoint
    checkpoint = {"lit_marl": {"format_version": 2, "group_map": {"agents": [f"agent_{i}" for i in range(n)]}},
                  "state_dict": {f"{prefix}module.net.{k}": v.clone() for k, v in old.state_dict().items()}}
    current = {f"{prefix}{k}": v for k, v in new.state_dict().items()}
    assert fold_constant_agent_ids(checkpoint, current) == [f"{prefix}module.net.params.0.weight"]
    new.load_state_dict({k[len(prefix):]: v for k, v in checkpoint["state_dict"].items()})
    observation = torch.randn(6, n, features)
    before = old(torch.cat([observation, torch.eye(n).expand(6, n, n)], dim=-1))
    after = new(TensorDict({("agents", "observation"): observation}, batch_size=[6])).get(("agents", "value"))
    torch.testing.assert_close(after, before)  # every agent: the group's old value
    # today's checkpoints, and old ones of any other layout, are left as they are
    checkpoint["lit_marl"]["format_version"] = 3
    assert fold_constant_agent_ids(checkpoint, current) == []


def test_training_does_not_continue_from_a_folded_critic_but_evaluation_loads_it(tmp_path):
    """The folded layer is the same function, but its Adam moments belong to the old one: ``fit`` from such a
    checkpoint is refused by name before anything runs; loading it to evaluate or export works."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint

    from lit_marl.algorithms import MAPPO
    from lit_marl.errors import CheckpointError
    from lit_marl.models import Mlp
    from tests.helpers.tiny import tiny_kwargs, tiny_task, tiny_trainer

    def model() -> MAPPO:
        return MAPPO(tiny_task(), **tiny_kwargs(critic_model=Mlp(num_cells=[16], agent_id=True)))

    pl.seed_everything(0)
    tiny_trainer(tmp_path, max_epochs=1, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)]).fit(
        model())
    checkpoint = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    checkpoint["lit_marl"]["format_version"] = 2
    old_layout = [k for k, v in checkpoint["state_dict"].items() if k.endswith("params.0.weight") and "critic" in k]
    assert len(old_layout) == 2  # the critic and the loss's copy of its parameters
    for key in old_layout:  # 3 agents of 14 observations: [x_1, id_1, x_2, id_2, x_3, id_3]
        checkpoint["state_dict"][key] = torch.randn(16, 3 * (14 + 3))
    torch.save(checkpoint, tmp_path / "old.ckpt")
    loaded = MAPPO.load_from_checkpoint(tmp_path / "old.ckpt", weights_only=True)
    assert loaded.frames == checkpoint["lit_marl"]["frames"]
    with pytest.raises(CheckpointError, match="training cannot continue from it; allowed: lit-marl validate"):
        tiny_trainer(tmp_path / "resumed", max_epochs=2).fit(model(), ckpt_path=tmp_path / "old.ckpt")
