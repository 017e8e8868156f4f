"""Action masks end to end: no discrete algorithm ever takes an illegal action, and an agent with no legal
action stops with an error that names it."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from torchrl.data import Binary
from torchrl.envs import EnvBase, Transform, TransformedEnv

from lit_marl.algorithms import IPPO, IQL, ISAC, MAPPO, MASAC, QMIX, VDN
from lit_marl.callbacks import MarlCallback
from lit_marl.envs import VmasTask
from lit_marl.models import Mlp
from tests.helpers.tiny import tiny_trainer

N_ACTIONS = 9


class _MaskFromObservation(Transform):
    """``("agents", "action_mask")``: action ``a`` is illegal when ``a % 3 == floor(10 * obs_0) % 3``, so the
    legal set changes from step to step and agent to agent (six of nine actions stay legal)."""

    def __init__(self, forbid_all_for_agent: int | None = None) -> None:
        super().__init__(in_keys=[("agents", "observation")], out_keys=[("agents", "action_mask")])
        self.forbid_all_for_agent = forbid_all_for_agent

    def _call(self, tensordict):
        obs = tensordict.get(("agents", "observation"))
        banned = (obs[..., 0] * 10).floor().long().remainder(3)
        actions = torch.arange(N_ACTIONS, device=obs.device)
        mask = actions.remainder(3) != banned.unsqueeze(-1)
        if self.forbid_all_for_agent is not None:
            mask[..., self.forbid_all_for_agent, :] = False
        tensordict.set(("agents", "action_mask"), mask)
        return tensordict

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec):
        obs = observation_spec["agents", "observation"]
        observation_spec["agents", "action_mask"] = Binary(n=N_ACTIONS, shape=(*obs.shape[:-1], N_ACTIONS),
                                                           device=obs.device, dtype=torch.bool)
        return observation_spec


class MaskedSpread(VmasTask):
    forbid_all_for_agent: int | None = None

    def _make_env(self, num_envs, seed, device) -> EnvBase:
        return TransformedEnv(super()._make_env(num_envs, seed, device), _MaskFromObservation(self.forbid_all_for_agent))


def _illegal(td) -> int:
    action = td.get(("agents", "action"))
    mask = td.get(("agents", "action_mask"))
    return int((~mask.gather(-1, action.unsqueeze(-1))).sum())


ALGORITHMS = [MAPPO, IPPO, MASAC, ISAC, IQL, VDN, QMIX]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_no_masked_action_is_ever_taken(tmp_path, algorithm):
    counts = {"illegal": 0, "steps": 0}

    class Count(MarlCallback):
        def on_batch_collected(self, trainer, pl_module, batch):
            counts["illegal"] += _illegal(batch)
            counts["steps"] += batch.numel()

        def on_evaluation_end(self, trainer, pl_module, episodes):
            for rollout in episodes:
                counts["illegal"] += _illegal(rollout)

    task = MaskedSpread("simple_spread", max_steps=10, continuous_actions=False)
    kwargs = dict(actor_model=Mlp([32, 32]), frames_per_batch=40, num_envs=4, max_frames=400, evaluation_episodes=4,
                  lr=1e-3)
    if algorithm.on_policy:
        kwargs.update(n_minibatch_iters=2, minibatch_size=20)
    else:  # a random warm-up iteration too: it must respect the mask as well
        kwargs.update(n_optimizer_steps=4, train_batch_size=16, memory_size=1000, init_random_frames=40)
    pl.seed_everything(0)
    model = algorithm(task, **kwargs)
    tiny_trainer(tmp_path, max_epochs=3, callbacks=[Count()]).fit(model)
    assert counts["steps"] == 120
    assert counts["illegal"] == 0
    if not algorithm.on_policy:  # targets read the next state's mask: it is stored with the transitions
        assert ("next", "agents", "action_mask") in model.replay_buffers()["agents"].storage[:1].keys(True, True)


@pytest.mark.parametrize("algorithm", [MAPPO, IQL])
def test_an_agent_without_legal_actions_is_named(algorithm):
    task = MaskedSpread("simple_spread", max_steps=10, continuous_actions=False)
    task.forbid_all_for_agent = 1
    extra = {"minibatch_size": 20} if algorithm.on_policy else {"memory_size": 1000}
    model = algorithm(task, actor_model=Mlp([8]), frames_per_batch=40, num_envs=4, **extra)
    with pytest.raises(ValueError, match="agent 'agent_1' of group 'agents' has no legal action"):
        model.evaluate(seed=0, num_envs=2)
