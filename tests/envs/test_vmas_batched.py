"""Batched VMAS resets (lit_marl.envs.vmas_batched): for every scenario VMAS ships, a partial reset leaves the unfinished
environments bitwise as they were and gives the finished ones exactly what VMAS's own batched reset gives them, and
both go on as VMAS would; scenarios where that cannot hold reset per environment, named in PER_ENV_SCENARIOS."""

from __future__ import annotations

import warnings

import pytest
import torch
from tensordict import TensorDict
from vmas.simulator.environment.environment import Environment

from lit_marl.envs import VMAS_SCENARIOS, VmasTask, vmas_batched
from lit_marl.envs.vmas_batched import PER_ENV_SCENARIOS, BatchedResetVmasEnv, SimulatorState

N_ENVS, STEPS_BEFORE, STEPS_AFTER = 6, 7, 5
FINISHED = torch.tensor([True, False, True, False, False, True])


def _vmas_rng() -> list:
    torch_state, np_state, py_state = Environment.vmas_random_state
    return [torch_state.clone(), np_state, py_state]


def _lockstep(envs, call):
    """``call(env)`` for each env from the same VMAS random state (VMAS keeps one for the whole process)."""
    start, out = _vmas_rng(), []
    for env in envs:
        Environment.vmas_random_state[:] = [start[0].clone(), start[1], start[2]]
        out.append(call(env))
    return out


def _random_actions(env, generator: torch.Generator) -> TensorDict:
    actions = env.full_action_spec.zero()
    for key, spec in env.full_action_spec.items(True, True):
        if hasattr(spec.space, "n"):
            actions.set(key, torch.randint(0, spec.space.n, spec.shape, generator=generator))
        else:
            low, high = spec.space.low, spec.space.high
            actions.set(key, low + (high - low) * torch.rand(spec.shape, generator=generator))
    return actions


def _leaves(td) -> dict:
    return dict(td.items(True, True))


def batched_reset_differences(scenario: str) -> list[str] | str:
    """Three environments of ``scenario`` stepped in lockstep with the same actions and random draws: A resets
    ``FINISHED`` through the batched path, B never resets, C resets all of them through VMAS's own batched reset.
    Returns what differs where it must not (A's unfinished environments against B, its finished ones against C): the
    simulator's state right after the reset, the observations the reset returns, and everything the next steps
    return; or the reason A fell back to per-environment resets."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b, c = (BatchedResetVmasEnv(scenario, num_envs=N_ENVS, seed=0, batched_resets=True) for _ in range(3))
    a.per_env_reason = None  # measure the batched path itself, whatever the list says
    generator = torch.Generator().manual_seed(1)
    for _ in range(STEPS_BEFORE):
        actions = _random_actions(a, generator)
        _lockstep([a, b, c], lambda env: env.step(actions.clone()))
    kept = ~FINISHED
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reset_a, reset_c = _lockstep([a, c], lambda env: env.reset(TensorDict(
            {"_reset": FINISHED.unsqueeze(-1)}, batch_size=[N_ENVS])) if env is a else env.reset())
    if a.per_env_reason is not None:
        return a.per_env_reason
    wrong = []
    state_a, state_b, state_c = (SimulatorState(env._env, N_ENVS, copy=False).batched for env in (a, b, c))
    assert state_a.keys() == state_b.keys() == state_c.keys()
    for path, (_, _, value) in state_a.items():
        if not torch.equal(value[kept], state_b[path][2][kept]):
            wrong.append(f"unfinished {path}")
        if not torch.equal(value[FINISHED], state_c[path][2][FINISHED]):
            wrong.append(f"finished {path}")
    for key, value in _leaves(reset_a).items():
        if not torch.equal(value[FINISHED], _leaves(reset_c)[key][FINISHED]):
            wrong.append(f"reset output {key}")
    for step in range(STEPS_AFTER):
        actions = _random_actions(a, generator)
        out_a, out_b, out_c = (_leaves(out["next"]) for out in _lockstep([a, b, c],
                                                                           lambda env: env.step(actions.clone())))
        for key, value in out_a.items():
            if not torch.equal(value[kept], out_b[key][kept]):
                wrong.append(f"step {step} unfinished {key}")
            if not torch.equal(value[FINISHED], out_c[key][FINISHED]):
                wrong.append(f"step {step} finished {key}")
    return wrong


@pytest.mark.parametrize("scenario", VMAS_SCENARIOS)
def test_batched_reset_is_vmas_reset_for_the_finished_and_nothing_for_the_others(scenario):
    result = batched_reset_differences(scenario)
    if scenario in PER_ENV_SCENARIOS:
        # the list is right: the batched path is wrong here (or it notices and falls back by itself)
        assert result, f"{scenario} resets correctly in one batch: remove it from PER_ENV_SCENARIOS"
    else:
        assert result == [], f"{scenario}: {result}"


def test_per_env_scenarios_fall_back_with_one_notice(monkeypatch):
    monkeypatch.setattr(vmas_batched, "_NOTICES", set())
    scenario = next(iter(PER_ENV_SCENARIOS))
    with pytest.warns(UserWarning, match=f"VMAS scenario '{scenario}' resets one environment at a time"):
        env = BatchedResetVmasEnv(scenario, num_envs=4, seed=0)
    assert env.per_env_reason == PER_ENV_SCENARIOS[scenario]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        BatchedResetVmasEnv(scenario, num_envs=4, seed=0)


def test_a_reset_that_changes_unbatched_state_is_undone_and_falls_back(monkeypatch):
    """A scenario whose reset changes a value without a batch dimension (here: a counter the test adds) is put back
    exactly as it was and reset per environment, with a notice naming the value."""
    monkeypatch.setattr(vmas_batched, "_NOTICES", set())
    env = BatchedResetVmasEnv("balance", num_envs=4, seed=0)
    scenario = env._env.scenario
    original = scenario.reset_world_at

    def counting_reset(env_index=None):
        scenario.resets += 1
        return original(env_index)

    scenario.reset_world_at, scenario.resets = counting_reset, 0
    env.rollout(3)
    scenario.resets = 0
    pos = scenario.world.agents[0].state.pos.clone()
    with pytest.warns(UserWarning, match=r"resets one environment at a time: .*resets \(changed in a reset: 0 -> 1\)"):
        env.reset(TensorDict({"_reset": torch.tensor([[True], [False], [False], [False]])}, batch_size=[4]))
    assert env.per_env_reason is not None and scenario.resets == 1  # undone, then one per-environment reset
    assert torch.equal(scenario.world.agents[0].state.pos[1:], pos[1:])


def test_task_option_and_default():
    task = VmasTask("balance", max_steps=20, n_agents=2)
    assert task.batched_resets and task.make_env(num_envs=2, seed=0).base_env.per_env_reason is None
    off = VmasTask("balance", max_steps=20, n_agents=2, batched_resets=False)
    assert off.make_env(num_envs=2, seed=0).base_env.per_env_reason == "task.batched_resets is false"
    assert "batched_resets" not in off.scenario_kwargs


def test_a_checkpoint_resumes_under_either_reset_mode_but_not_another_task():
    from lit_marl.checkpoint import CheckpointError, check_compatible, run_meta

    task = VmasTask("balance", max_steps=20, n_agents=2)
    meta = run_meta("mappo", VmasTask("balance", max_steps=20, n_agents=2, batched_resets=False), 0, 0)
    check_compatible(meta, "mappo", task.to_config(), "ckpt")
    old = {**meta, "task": {**meta["task"], "init_args": {k: v for k, v in meta["task"]["init_args"].items()
                                                        if k != "batched_resets"}}}  # written before the option
    check_compatible(old, "mappo", task.to_config(), "ckpt")
    with pytest.raises(CheckpointError, match="checkpoint is for task"):
        check_compatible(meta, "mappo", VmasTask("balance", max_steps=30, n_agents=2).to_config(), "ckpt")


SYNCS = ("__bool__", "item", "tolist", "__int__", "__float__", "__index__", "nonzero")


@pytest.fixture
def lit_marl_syncs(monkeypatch):
    """Counts the host synchronisations (a tensor read as a Python value) whose caller is lit-marl's code."""
    import traceback

    counted: list[str] = []
    for name in SYNCS:
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            caller = traceback.extract_stack(limit=2)[0]
            if "/lit_marl/" in caller.filename:
                counted.append(f"{_name} at {caller.filename}:{caller.lineno}")
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    return counted


def test_a_batched_reset_reads_no_tensor_on_the_host(lit_marl_syncs):
    env = VmasTask("balance", max_steps=20, n_agents=2).make_env(num_envs=4, seed=0)
    env.rollout(3)
    reset = TensorDict({"_reset": torch.tensor([[True], [False], [True], [False]])}, batch_size=[4])
    lit_marl_syncs.clear()
    env.reset(reset.clone())
    assert len(lit_marl_syncs) == 1  # the first: whether the reset changed a tensor without the batch dimension
    lit_marl_syncs.clear()
    env.reset(reset.clone())
    assert lit_marl_syncs == []


def test_a_collection_reads_one_tensor_on_the_host_per_batch(lit_marl_syncs):
    """lit-marl's part of a collection (its policy modules, the VMAS env's resets, the Sampler) reads a tensor on the
    host once per batch: whether every episode ended on its last step (torchrl's Collector and VMAS read more,
    theirs to change)."""
    from lit_marl.algorithms import MAPPO
    from tests.helpers.tiny import tiny_kwargs

    model = MAPPO(VmasTask("balance", max_steps=5, n_agents=2), **tiny_kwargs(frames_per_batch=4 * 12, num_envs=4))
    sampler = model.collection.get_sampler()
    sampler.collect(0)
    sampler.collect(1)
    lit_marl_syncs.clear()
    sampler.collect(2)  # 12 steps: two resets of every env in a batch
    assert len(lit_marl_syncs) <= 1, lit_marl_syncs
