"""VmasTask: specs, groups, seeding, configuration round trip, bad input."""

from __future__ import annotations

import pytest
import torch

from lit_marl.envs import VMAS_SCENARIOS, CustomTask, PettingZooTask, Task, VmasTask
from lit_marl.errors import ConfigError
from lit_marl.utils import instantiate


def test_balance_specs_as_benchmarl_configures_it():
    task = VmasTask("balance", max_steps=100, n_agents=4, package_mass=5, random_package_pos_on_line=True)
    specs = task.specs
    assert task.name == "vmas/balance" and task.max_steps == 100 and task.continuous_actions
    assert specs.group_map == {"agents": [f"agent_{i}" for i in range(4)]}
    assert specs.observation_spec["agents", "observation"].shape == (4, 16)
    assert specs.group_action_spec("agents").shape == (4, 2)
    assert not task.has_state and specs.state_spec is None


def test_discrete_actions_and_two_groups():
    tag = VmasTask("simple_tag", max_steps=25, continuous_actions=False)
    assert tag.group_map == {"adversary": ["adversary_0", "adversary_1", "adversary_2"], "agent": ["agent_0"]}
    assert tag.specs.group_action_spec("adversary").space.n == 9  # VMAS 1.5: 3 x 3 discrete moves
    assert VmasTask("simple_tag", agent_groups="one_group_per_agent").group_map["agent_0"] == ["agent_0"]


def test_make_env_is_reproducible_from_its_seed_and_tracks_episode_reward():
    task = VmasTask("balance", max_steps=20, n_agents=2)
    first = task.make_env(num_envs=3, seed=7).reset()
    second = task.make_env(num_envs=3, seed=7).reset()
    assert torch.equal(first["agents", "observation"], second["agents", "observation"])
    assert ("agents", "episode_reward") in first.keys(include_nested=True)
    env = task.make_env(num_envs=3, seed=7)
    rollout = env.rollout(5)
    assert rollout.batch_size == (3, 5)
    torch.testing.assert_close(rollout["next", "agents", "episode_reward"][:, -1],
                               rollout["next", "agents", "reward"].sum(1))


def test_config_round_trip_rebuilds_the_same_task():
    task = VmasTask("navigation", max_steps=50, continuous_actions=False, scenario_kwargs={"n_agents": 2})
    config = task.to_config()
    assert config == {"class_path": "lit_marl.envs.vmas.VmasTask",
                      "init_args": {"scenario": "navigation", "max_steps": 50, "continuous_actions": False,
                                    "scenario_kwargs": {"n_agents": 2}, "agent_groups": None,
                                    "batched_resets": True}}
    rebuilt = instantiate(config, Task, "task")
    assert rebuilt.to_config() == config and rebuilt.group_map == task.group_map


def test_every_vmas_scenario_is_accepted_and_unknown_ones_are_named():
    assert {"balance", "navigation", "simple_tag", "transport"} <= set(VMAS_SCENARIOS)
    with pytest.raises(ConfigError, match=r"task.scenario: unknown VMAS scenario 'balanse'; did you mean 'balance'.*\? "
                                         r"allowed: .*balance"):
        VmasTask("balanse")
    with pytest.raises(ConfigError, match="task.max_steps"):
        VmasTask("balance", max_steps=0)
    with pytest.raises(ConfigError, match="task.agent_groups: unknown grouping 'teams'"):
        VmasTask("balance", agent_groups="teams")


def test_instantiate_names_the_field_of_a_bad_class_path():
    with pytest.raises(ConfigError, match="task: cannot import class_path 'lit_marl.envs.Nope'"):
        instantiate({"class_path": "lit_marl.envs.Nope"}, Task, "task")
    with pytest.raises(ConfigError, match="is not a subclass of Task"):
        instantiate({"class_path": "lit_marl.models.Mlp"}, Task, "task")


GROUPING_TASKS = {
    "vmas": (lambda groups: VmasTask("balance", agent_groups=groups), ["agent_0", "agent_1", "agent_2"]),
    "pettingzoo": (lambda groups: PettingZooTask("simple_spread", agent_groups=groups),
                   ["agent_0", "agent_1", "agent_2"]),
    "custom pettingzoo": (lambda groups: CustomTask("tests.helpers.custom_envs.MatchParallelEnv", 10,
                                                          agent_groups=groups),
                          ["player_0", "player_1"]),
}


@pytest.mark.parametrize("family", sorted(GROUPING_TASKS))
def test_every_family_checks_agent_groups_the_same_way_and_names_the_field(family):
    """One check (envs/grouping.py) for every family: a mapping that leaves an agent out is refused naming
    task.agent_groups and the agent (PettingZoo and VMAS blamed their simulator's arguments before), a malformed one
    before anything is built, and a complete mapping gives exactly those groups."""
    make, agents = GROUPING_TASKS[family]
    with pytest.raises(ConfigError, match=rf"task.agent_groups: .* does not put each agent in exactly one group "
                                          rf"\(in no group {agents[-1]}\)"):
        make({"first": agents[:-1]}).group_map
    with pytest.raises(ConfigError, match=r"task.agent_groups: group 'b' holds \[\], not a non-empty list"):
        make({"a": agents, "b": []})
    with pytest.raises(ConfigError, match=r"task.agent_groups: unknown grouping 'by_team'; allowed: null, "
                                          r"'all_in_one_group', 'one_group_per_agent'"):
        make("by_team")
    split = {"first": agents[:1], "rest": agents[1:]}
    assert make(split).group_map == split
    assert make("one_group_per_agent").group_map == {a: [a] for a in agents}
