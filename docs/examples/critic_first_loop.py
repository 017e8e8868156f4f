"""A new training loop: each iteration trains the critics alone first, then PPO's usual passes over the batch.

A loop is what Lightning iterates for one iteration (one epoch): it collects through the run, then yields that
iteration's minibatches, one optimizer step each. Its length is the number of steps, so Lightning never fetches (and
so never collects) ahead of the last one. Here the first ``critic_epochs`` passes over the batch keep only the
critics' gradients, so the policies start PPO's passes against a critic fitted to the fresh batch.

A learner names its loop (``loop = CriticFirstLoop``); the run builds it with its sizes, which become arguments of
the algorithm. Run it: ``python docs/examples/critic_first_loop.py`` (one short run on VMAS balance, on a CPU).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from tensordict import TensorDictBase
from typing_extensions import override

from lit_marl.algorithms import PPO, MarlAlgorithm, OnPolicyLoop
from lit_marl.algorithms.loops import shuffled_minibatches
from lit_marl.errors import non_negative_int


class CriticFirstLoop(OnPolicyLoop):
    """``critic_epochs`` passes over each collected batch that train only the critics, then ``n_minibatch_iters``
    passes that train everything.

    Args:
        n_minibatch_iters: passes (PPO epochs) over each collected batch that train actors and critics.
        minibatch_size: frames per minibatch (one optimizer step each).
        critic_epochs: passes over each collected batch, before those, that train only the critics.
    """

    # The run takes a loop's sizes from the parameters of the loop's own __init__ (after ``run``): each is declared
    # here, the inherited ones included, and documented above.
    def __init__(self, run: Any, n_minibatch_iters: int = 45, minibatch_size: int = 400,
                 critic_epochs: int = 1) -> None:
        self.critic_epochs = non_negative_int("critic_epochs", critic_epochs)
        super().__init__(run, n_minibatch_iters, minibatch_size)
        #: whether the minibatch being trained trains only the critics (set as each minibatch is handed out)
        self.critic_only = False
        #: what each optimizer step of the current iteration trained, in order (``"critic"`` or ``"all"``)
        self.schedule: list[str] = []

    @override
    def __len__(self) -> int:
        return (self.critic_epochs + self.n_minibatch_iters) * self.minibatches_per_epoch()

    @override
    def __iter__(self) -> Iterator[TensorDictBase]:
        batch, size = self.prepare()  # collect through the run, process (GAE), keep the training keys, flatten
        self.schedule = []
        for critic_only, epochs in ((True, self.critic_epochs), (False, self.n_minibatch_iters)):
            for minibatch in shuffled_minibatches(batch, epochs, size):
                # Lightning asks for the next minibatch only after the last one's optimizer step (the loop is
                # sized), so this flag describes the minibatch being trained when after_backward runs
                self.critic_only = critic_only
                self.schedule.append("critic" if critic_only else "all")
                yield minibatch
        self.critic_only = False

    @override
    def after_backward(self) -> None:
        """Between backward and the optimizer step: in the critics' passes, drop every gradient but the critics'
        (Adam leaves a parameter without a gradient alone: no step from its moments either)."""
        if not self.critic_only:
            return
        for learner in self.run.learners.values():
            for role, params in learner.param_groups().items():
                if role != "critic":
                    for p in params:
                        p.grad = None


class CriticFirstPPO(PPO):
    """PPO trained by :class:`CriticFirstLoop`."""

    loop = CriticFirstLoop


class CriticFirstMAPPO(MarlAlgorithm):
    """MAPPO whose critics train alone on each batch before PPO's passes."""

    algorithm_name: ClassVar[str] = "critic_first_mappo"
    learner_class = CriticFirstPPO
    learner_settings: ClassVar[dict[str, Any]] = {"centralised_critic": True}


if __name__ == "__main__":
    import lightning.pytorch as pl

    from lit_marl.envs import VmasTask
    from lit_marl.models import Mlp

    model = CriticFirstMAPPO(
        task=VmasTask("balance", max_steps=20, scenario_kwargs={"n_agents": 2}),
        critic_epochs=2,  # the loop's new size, an argument of the algorithm
        n_minibatch_iters=2, minibatch_size=100,
        actor_model=Mlp(num_cells=[32, 32]), critic_model=Mlp(num_cells=[32, 32]),
        frames_per_batch=200, num_envs=10, max_frames=200, evaluation_episodes=2, lr=1e-3,
    )
    trainer = pl.Trainer(max_epochs=-1, num_sanity_val_steps=0, enable_progress_bar=False,
                         logger=pl.loggers.CSVLogger("runs", name="critic_first_mappo"))
    trainer.fit(model)
    print("optimizer steps:", trainer.global_step, "in order:", model.loop.schedule)
