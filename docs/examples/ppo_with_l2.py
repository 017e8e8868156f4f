"""A new algorithm: MAPPO whose policy loss carries an L2 penalty on the actor's weights.

Two classes. The learner (what one agent group learns) subclasses the PPO family's learner, declares its one new
argument and adds one loss term. The run (the LightningModule) pairs that learner with the centralised critic that
makes PPO MAPPO; giving it an ``algorithm_name`` registers it and gives it one flat constructor: the learner's
arguments, its loop's and the run's.

Run it: ``python docs/examples/ppo_with_l2.py`` (one short run on VMAS balance, on a CPU).
"""

from __future__ import annotations

from typing import Any, ClassVar

from tensordict import TensorDictBase
from typing_extensions import override

from lit_marl.algorithms import PPO, MarlAlgorithm
from lit_marl.errors import non_negative_float


class RegularisedPPO(PPO):
    """PPO with ``actor_l2`` times the squared norm of the policy's weights added to the loss.

    Args:
        actor_l2: weight of the L2 penalty on the policy network's parameters (0: plain PPO).
    """

    def __init__(self, task, group, run, actor_l2: float = 1e-4, **kwargs: Any) -> None:
        # check and store the new argument (refused by name), then PPO and GroupLearner take the rest and build the
        # networks: a learner's own attributes must exist before super().__init__ builds anything
        self.actor_l2 = non_negative_float("actor_l2", actor_l2)
        super().__init__(task, group, run, **kwargs)

    @override
    def loss(self, batch: TensorDictBase) -> TensorDictBase:
        terms = super().loss(batch)  # torchrl's ClipPPOLoss: loss_objective, loss_critic, ...
        # every "loss_*" entry is summed into the objective and every scalar is logged as train/<group>/<name>
        terms["loss_actor_l2"] = self.actor_l2 * sum(p.square().sum() for p in self.policy.parameters())
        return terms


class RegularisedMAPPO(MarlAlgorithm):
    """MAPPO (decentralised actors, a centralised critic) trained with :class:`RegularisedPPO` learners."""

    algorithm_name: ClassVar[str] = "regularised_mappo"  # written into checkpoints; registers the class
    learner_class = RegularisedPPO
    learner_settings: ClassVar[dict[str, Any]] = {"centralised_critic": True}  # fixed by the algorithm, as MAPPO


if __name__ == "__main__":
    import lightning.pytorch as pl

    from lit_marl.envs import VmasTask
    from lit_marl.models import Mlp

    model = RegularisedMAPPO(
        task=VmasTask("balance", max_steps=20, scenario_kwargs={"n_agents": 2}),
        actor_l2=1e-3,  # the learner's new argument, beside PPO's, the loop's and the run's
        actor_model=Mlp(num_cells=[32, 32]),
        critic_model=Mlp(num_cells=[32, 32]),
        frames_per_batch=200, num_envs=10, minibatch_size=100, n_minibatch_iters=4, max_frames=400,
        evaluation_episodes=2, lr=1e-3,
    )
    trainer = pl.Trainer(max_epochs=-1, gradient_clip_val=5.0, num_sanity_val_steps=0, enable_progress_bar=False,
                         logger=pl.loggers.CSVLogger("runs", name="regularised_mappo"))
    trainer.fit(model)  # two iterations of 200 frames: the frame budget stops it
    print({name: round(float(value), 4) for name, value in trainer.logged_metrics.items()
           if name.startswith("train/")})
