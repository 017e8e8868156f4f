"""MAgent2 through PettingZooTask: two teams as groups, image observations for Cnn and (flattened) Mlp networks."""

from __future__ import annotations

import csv
import importlib
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from torchrl.modules import MultiAgentConvNet

from lit_marl.algorithms import MAPPO
from lit_marl.envs import PettingZooTask
from lit_marl.errors import ConfigError
from lit_marl.models import Cnn, Mlp
from tests.helpers.tiny import tiny_kwargs, tiny_trainer

# magent2 is in the dev extra: where it is missing these tests must fail, not skip
import magent2  # noqa: E402,F401


def _battle(**kwargs) -> PettingZooTask:
    return PettingZooTask("battle", max_steps=10, task_kwargs={"map_size": 12}, **kwargs)  # 2 agents per team


def _rows(run_dir: Path) -> list[dict]:
    (metrics,) = run_dir.rglob("metrics.csv")
    return list(csv.DictReader(open(metrics)))


def test_battle_teams_are_groups_with_image_observations():
    task = _battle()
    assert task.name == "pettingzoo/battle" and not task.continuous_actions and task.state_key is None
    assert task.group_map == {"red": ["red_0", "red_1"], "blue": ["blue_0", "blue_1"]}
    for team in ("red", "blue"):
        assert task.specs.observation_spec[team, "observation"].shape == (2, 13, 13, 5)  # [agents, H, W, C]
        assert task.specs.group_action_spec(team).space.n == 21
    rollout = task.make_env(num_envs=2, seed=0).rollout(10, break_when_any_done=False)
    assert rollout["red", "observation"].shape == (2, 10, 2, 13, 13, 5)
    assert rollout["red", "observation"].dtype == torch.float32 and rollout["red", "observation"].max() > 0
    pursuit = PettingZooTask("adversarial_pursuit", max_steps=10, task_kwargs={"map_size": 12})
    assert set(pursuit.group_map) == {"predator", "prey"}  # teams of different sizes and views
    assert pursuit.specs.observation_spec["predator", "observation"].shape[1:] == (10, 10, 5)
    assert pursuit.specs.observation_spec["prey", "observation"].shape[1:] == (9, 9, 5)


def test_mappo_with_flattening_mlps_trains_both_teams_and_logs_each(tmp_path):
    pl.seed_everything(0)
    model = MAPPO(_battle(), **tiny_kwargs(max_frames=120, evaluation_episodes=2))
    assert set(model.policies) == {"red", "blue"}
    before = {g: [p.detach().clone() for p in model.policies[g].parameters()] for g in model.groups}
    tiny_trainer(tmp_path, max_epochs=3).fit(model)
    rows = _rows(tmp_path)
    assert max(float(r["counters/frames"]) for r in rows if r.get("counters/frames")) == 120
    for team in ("red", "blue"):
        for name in (f"train/{team}/loss_objective", f"train/{team}/loss_critic",
                     f"collection/{team}/reward/episode_reward_mean", f"val/{team}/return"):
            assert any(r.get(name) for r in rows), name
        assert any(not torch.equal(b, p) for b, p in zip(before[team], model.policies[team].parameters())), team
    # the first layer of each actor reads the flattened 13 x 13 x 5 window
    first = next(p for p in model.policies["red"].parameters() if p.dim() == 2)
    assert first.shape[-1] == 13 * 13 * 5


def test_a_cnn_actor_reads_the_images(tmp_path):
    pl.seed_everything(0)
    model = MAPPO(_battle(), **tiny_kwargs(actor_model=Cnn(cnn_num_cells=[8, 8], mlp_num_cells=[16]),
                                           critic_model=Mlp([32]), max_frames=80, evaluation_episodes=2))
    assert any(isinstance(m, MultiAgentConvNet) for m in model.policies["blue"].modules())
    before = [p.detach().clone() for p in model.policies["blue"].parameters()]
    tiny_trainer(tmp_path, max_epochs=2).fit(model)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.policies["blue"].parameters()))
    assert any(r.get("val/blue/return") for r in _rows(tmp_path))


def test_a_missing_magent2_names_its_extra(monkeypatch):
    real = importlib.import_module

    def no_magent2(name, *args, **kwargs):
        if name.startswith("magent2"):
            raise ModuleNotFoundError("No module named 'magent2'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", no_magent2)
    with pytest.raises(ConfigError, match=r"task.task: 'battle' needs magent2 .*pip install -e \"\.\[magent2\]\""):
        PettingZooTask("battle")
