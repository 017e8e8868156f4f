"""PPO's GAE values come from one critic call (``ppo.state_values_in_one_call``): over every step's inputs and only
the next inputs that differ from the following step's, with the same values, advantages and targets as torchrl's
two calls (every step's inputs, then every step's next inputs)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from lit_marl.algorithms import IPPO, MAPPO, ppo
from tests.algorithms.test_global_state import SpreadWithState
from tests.helpers.tiny import tiny_kwargs, tiny_task

KEYS = ("state_value", ("next", "state_value"), "advantage", "value_target")


def _batch_and_learner(algorithm, task):
    # 8 steps a batch, episodes of 5 steps: every env's episode ends inside the batch, one more runs past its end
    model = algorithm(task, **tiny_kwargs(frames_per_batch=32, num_envs=4))
    batch = model.collection.collect()
    model.teardown("fit")
    return batch, model.learners["agents"]


def _group_key(key):
    return ("next", "agents", key[1]) if isinstance(key, tuple) else ("agents", key)


@pytest.mark.parametrize("algorithm, task", [
    (MAPPO, tiny_task("balance", max_steps=5)),            # a centralised critic over the agents' observations
    (IPPO, tiny_task("balance", max_steps=5)),             # a critic per agent
    (MAPPO, SpreadWithState("simple_spread", max_steps=5)),  # a critic of the global state
], ids=["mappo", "ippo", "mappo-state"])
def test_one_call_gives_torchrls_values_advantages_and_targets(algorithm, task, monkeypatch):
    batch, learner = _batch_and_learner(algorithm, task)
    assert batch.batch_size == (4, 8)
    ended = batch.get(("next", "done"))[:, :-1].squeeze(-1)
    assert ended.sum() == 4  # each env's episode ended once before the batch's last step

    rows = []
    critic_forward = learner.critic.forward
    monkeypatch.setattr(learner.critic, "forward", lambda td, *a, **k: rows.append(td.batch_size[0])
                        or critic_forward(td, *a, **k))
    with torch.no_grad():
        one = learner.process_batch(batch.clone())
    monkeypatch.setattr(ppo, "state_values_in_one_call", lambda *args: False)
    with torch.no_grad():
        two = learner.process_batch(batch.clone())

    # one call over the 32 steps, the 4 next steps after an episode's end and the 4 past the batch's end
    assert rows[0] == 32 + 4 + 4
    for key in KEYS:
        torch.testing.assert_close(one.get(_group_key(key)), two.get(_group_key(key)), rtol=1e-5, atol=1e-6)
    # an ended step's next value is its final observation's, not the following (reset) step's
    t = ended.nonzero()[0]
    final = one.get(("next", "agents", "state_value"))[t[0], t[1]]
    following = one.get(("agents", "state_value"))[t[0], t[1] + 1]
    assert not torch.allclose(final, following)


def test_next_inputs_that_differ_without_an_episode_end_get_their_own_values():
    """Exact for any env or transform: the inputs are compared, no done flag is read."""
    torch.manual_seed(0)
    critic = TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["state_value"])
    observation = torch.randn(2, 6, 3)
    following = torch.cat([observation[:, 1:], torch.randn(2, 1, 3)], 1)
    following[1, 2] += 1.0  # an env that changed its observation between steps without ending anything
    batch = TensorDict({"observation": observation, "next": {"observation": following}}, [2, 6])
    with torch.no_grad():
        assert ppo.state_values_in_one_call(critic, batch, "state_value")
        torch.testing.assert_close(batch.get("state_value"), critic.module(observation), rtol=0, atol=1e-7)
        torch.testing.assert_close(batch.get(("next", "state_value")), critic.module(following), rtol=0, atol=1e-7)


def test_another_layout_is_left_to_torchrl():
    critic = TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["state_value"])
    batch = TensorDict({"observation": torch.randn(6, 3), "next": {"observation": torch.randn(6, 3)}}, [6])
    assert not ppo.state_values_in_one_call(critic, batch, "state_value")
    assert "state_value" not in batch.keys()


def test_a_batch_of_one_step_and_a_missing_next_input():
    critic = TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["state_value"])
    one_step = TensorDict({"observation": torch.randn(4, 1, 3), "next": {"observation": torch.randn(4, 1, 3)}}, [4, 1])
    with torch.no_grad():
        assert ppo.state_values_in_one_call(critic, one_step, "state_value")
        torch.testing.assert_close(one_step.get(("next", "state_value")),
                                   critic.module(one_step.get(("next", "observation"))), rtol=0, atol=1e-7)
    no_next = TensorDict({"observation": torch.randn(4, 5, 3), "next": {"reward": torch.zeros(4, 5, 1)}}, [4, 5])
    assert not ppo.state_values_in_one_call(critic, no_next, "state_value")
    assert "state_value" not in no_next.keys()
