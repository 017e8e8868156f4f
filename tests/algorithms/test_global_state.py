"""MAPPO's critic reads the global state where the task provides one; IPPO's never does."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torchrl.data import Unbounded
from torchrl.envs import EnvBase, Transform, TransformedEnv

from lit_marl.algorithms import IPPO, MAPPO
from lit_marl.algorithms.common import FromState
from lit_marl.envs import VmasTask
from tests.helpers.tiny import tiny_kwargs, tiny_trainer


class _StateFromObservations(Transform):
    """Writes a root ``"state"``: all agents' observations, flattened."""

    def __init__(self) -> None:
        super().__init__(in_keys=[("agents", "observation")], out_keys=["state"])

    def _call(self, tensordict):
        tensordict.set("state", tensordict.get(("agents", "observation")).flatten(-2))
        return tensordict

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec):
        obs = observation_spec["agents", "observation"]
        observation_spec["state"] = Unbounded(shape=(*obs.shape[:-2], obs.shape[-2] * obs.shape[-1]),
                                              device=obs.device)
        return observation_spec


class SpreadWithState(VmasTask):
    """simple_spread with a global state (a stand-in for tasks such as SMAC or PettingZoo's state())."""

    state_key = "state"

    def _make_env(self, num_envs, seed, device) -> EnvBase:
        return TransformedEnv(super()._make_env(num_envs, seed, device), _StateFromObservations())


def test_mappo_critic_reads_the_state_and_trains(tmp_path):
    task = SpreadWithState("simple_spread", max_steps=10)
    assert task.has_state and task.specs.state_spec.shape == (3 * 14,)  # 3 agents x 14 features
    model = MAPPO(task, **tiny_kwargs())
    critic = model.critics["agents"]
    assert critic.in_keys == ["state"] and isinstance(critic.module, FromState)
    td = task.make_env(num_envs=2, seed=0).reset()
    values = critic(td.clone()).get(("agents", "state_value"))
    assert values.shape == (2, 3, 1)
    moved = td.clone()
    moved["state"][:, 0] += 1.0
    assert not torch.allclose(values, critic(moved).get(("agents", "state_value")))

    pl.seed_everything(0)
    before = [p.detach().clone() for p in critic.parameters()]
    tiny_trainer(tmp_path, max_epochs=1).fit(model)
    assert any(not torch.equal(b, p) for b, p in zip(before, critic.parameters()))


def test_ippo_critic_ignores_the_state():
    model = IPPO(SpreadWithState("simple_spread", max_steps=10), **tiny_kwargs())
    assert model.critics["agents"].in_keys == [("agents", "observation")]
