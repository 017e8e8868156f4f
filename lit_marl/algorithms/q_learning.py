"""Value-based MARL: IQL, VDN and QMIX (discrete actions).

IQL (Tan, 1993) trains each agent's Q-function on its own TD error. VDN (Sunehag et al., 2018) sums the
chosen-action values of a group's agents into a team value; QMIX (Rashid et al., 2018) mixes them with a
monotonic hypernetwork conditioned on the global state (or, where the task has none, on the group's
concatenated observations). Both are trained on the team reward (the mean of the agents' rewards) with
torchrl's ``QMixerLoss`` (``MixerLoss``: it also reports the team value, its target and their gap); IQL uses
``DQNLoss``. Exploration is epsilon-greedy, annealed over frames.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Literal

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from tensordict.utils import unravel_key
from torch import nn
from torchrl.envs.utils import step_mdp
from torchrl.modules import EGreedyModule, QMixer, QValueModule, VDNMixer
from torchrl.objectives import DQNLoss, QMixerLoss, ValueEstimators
from torchrl.objectives.value import TD0Estimator
from typing_extensions import override

from lit_marl.algorithms.common import MaskGuard
from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.algorithms.off_policy import AnnealedExploration
from lit_marl.errors import ConfigError, one_of, positive_int
from lit_marl.models import ModelInputs

#: what a Q-learning group mixes its agents' values with: None (independent), "vdn" or "qmix"
MIXERS = (None, "vdn", "qmix")


class QLearning(AnnealedExploration):
    """What one group learns with Q-learning: the learner of :class:`IQL`, :class:`VDN` and :class:`QMIX`. Its
    network is the actor (``actor_model``: observation → one value per action); it explores epsilon-greedily, epsilon
    annealed from ``exploration_eps_init`` to ``exploration_eps_end``.

    Args:
        loss_function: ``l2``, ``l1`` or ``smooth_l1`` distance of the TD error.
        delay_value: use a target Q-network (and target mixer) for the TD targets.
        double_dqn: double Q-learning (van Hasselt et al., 2016): the TD target's next actions are the online
            network's greedy ones, valued by the target network (and, for VDN and QMIX, mixed by the target mixer);
            EPyMARL's ``double_q``, on in its QMIX, VDN and IQL configs. Needs ``delay_value``.
        mixing_embed_dim: QMIX only: width of the mixing network.
        mixer_input: QMIX only: what the mixer is conditioned on: ``state`` (the task's global state),
            ``observations`` (the group's concatenated observations) or ``auto`` (the state where there is one).
        hypernet_layers: QMIX only: layers of the hypernetworks that give the mixing weights from the state: 1
            (torchrl's and BenchMARL's ``QMixer``: one linear map) or 2 (EPyMARL's default, ``hypernet_layers: 2``:
            linear, ReLU, linear).
        hypernet_embed: QMIX only, with ``hypernet_layers: 2``: width of their hidden layer (EPyMARL's 64).
        standardise_rewards: train on rewards standardised by their running mean and standard deviation over every
            sampled minibatch so far (EPyMARL's ``standardise_rewards``, on in its QMIX, VDN and IQL configs): rare,
            small rewards then stand out of the TD targets' noise. The statistics are the learner's buffers (saved
            in checkpoints; under several processes every process's minibatches count, so all keep the same ones);
            logged rewards and returns stay as collected.
    """

    supports_continuous_actions: ClassVar[bool] = False
    has_critic: ClassVar[bool] = False

    def __init__(
        self,
        task,
        group,
        run,
        mixer: str | None = None,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "l2",
        delay_value: bool = True,
        double_dqn: bool = False,
        mixing_embed_dim: int = 32,
        mixer_input: Literal["auto", "state", "observations"] = "auto",
        hypernet_layers: int = 1,
        hypernet_embed: int = 64,
        standardise_rewards: bool = False,
        **kwargs: Any,
    ) -> None:
        #: None (independent), "vdn" or "qmix"
        self.mixer = one_of("mixer", mixer, MIXERS)
        self.loss_function = one_of("loss_function", loss_function, ("l2", "l1", "smooth_l1"))
        self.delay_value = bool(delay_value)
        self.double_dqn = bool(double_dqn)
        if self.double_dqn and not self.delay_value:
            raise ConfigError("double_dqn: True needs target networks to value the online network's choice, but "
                              "delay_value is False; set delay_value: true or double_dqn: false")
        self.mixing_embed_dim = positive_int("mixing_embed_dim", mixing_embed_dim)
        if mixer_input not in ("auto", "state", "observations"):
            raise ConfigError(f"mixer_input: {mixer_input!r} is not one of 'auto', 'state', 'observations'")
        self.mixer_input = mixer_input
        self.hypernet_layers = one_of("hypernet_layers", hypernet_layers, (1, 2))
        self.hypernet_embed = positive_int("hypernet_embed", hypernet_embed)
        if self.mixer != "qmix" and (self.hypernet_layers, self.hypernet_embed) != (1, 64):
            raise ConfigError(f"hypernet_layers/hypernet_embed: QMIX's mixer settings, but this algorithm's mixer is "
                              f"{self.mixer!r} (it has no hypernetworks); leave them at 1 and 64, or use QMIX")
        self.standardise_rewards = bool(standardise_rewards)
        super().__init__(task, group, run, **kwargs)
        if self.standardise_rewards and group is not None:
            self.reward_statistics = RunningMoments()

    @override
    def validate(self) -> None:
        super().validate()
        if self.mixer_input == "state" and self.mixer == "qmix" and not self.task.has_state:
            raise ConfigError(
                f"mixer_input: 'state' but the task {self.task.name!r} has no global state; allowed: "
                f"'observations' or 'auto' (the group's concatenated observations)"
            )

    # ------------------------------------------------------------------ networks
    @override
    def build_policy(self) -> TensorDictSequential:
        """Q-values of every action, then the greedy action: ``(group, "action_value")``,
        ``(group, "action")`` and ``(group, "chosen_action_value")``."""
        group = self.group
        action_spec = self.task.specs.group_action_spec(group)
        q_values = self.actor_model.build_module(ModelInputs.of(self.task, group), [(group, "action_value")],
                                                 action_spec.space.n, centralised=False,
                                                 share_params=self.share_policy_params)
        mask_key = self.task.action_mask_key(group)  # illegal actions are never the argmax, nor a target's max
        modules = [MaskGuard(self.task, group)] if mask_key is not None else []
        return TensorDictSequential(
            *modules,
            q_values,
            QValueModule(action_value_key=(group, "action_value"), spec=action_spec[0],  # one agent's spec
                         action_mask_key=mask_key,
                         out_keys=[(group, "action"), (group, "action_value"), (group, "chosen_action_value")]),
        )

    @override
    def build_exploration(self) -> EGreedyModule:
        group = self.group
        return EGreedyModule(spec=self.task.specs.group_action_spec(group), eps_init=self.exploration_eps_init,
                             eps_end=self.exploration_eps_end, annealing_num_steps=self.anneal_frames,
                             action_key=(group, "action"), action_mask_key=self.task.action_mask_key(group))

    def build_mixer(self) -> TensorDictModule:
        """VDN's sum or QMIX's monotonic mixing network of the group's chosen-action values."""
        group = self.group
        n_agents = self.task.specs.n_agents(group)
        out = [(_team(group), "global_value")]
        if self.mixer == "vdn":
            return TensorDictModule(VDNMixer(n_agents, device="cpu"), in_keys=[(group, "chosen_action_value")],
                                    out_keys=out)
        if self.task.has_state and self.mixer_input != "observations":
            state_key, state_shape = self.task.state_key, tuple(self.task.specs.state_spec.shape)
        else:  # no global state: condition the mixer on the group's concatenated observations
            state_key = (group, "observation")
            state_shape = tuple(self.task.specs.observation_spec[group, "observation"].shape)
        mixer = HypernetQMixer(state_shape=state_shape, mixing_embed_dim=self.mixing_embed_dim, n_agents=n_agents,
                               device="cpu", hypernet_layers=self.hypernet_layers,
                               hypernet_embed=self.hypernet_embed)
        return TensorDictModule(mixer, in_keys=[(group, "chosen_action_value"), state_key], out_keys=out)

    @override
    def build_objective(self) -> DQNLoss | QMixerLoss:
        group = self.group
        action_spec = self.task.specs.group_action_spec(group)
        if self.mixer is None:
            loss = DQNLoss(self.policy, loss_function=self.loss_function, delay_value=self.delay_value,
                           double_dqn=self.double_dqn, action_space=action_spec)
            loss.set_keys(action_value=(group, "action_value"), action=(group, "action"),
                          value=(group, "chosen_action_value"), reward=(group, "reward"), done=(group, "done"),
                          terminated=(group, "terminated"), priority=(group, "td_error"))
        else:
            loss_class = DoubleQMixerLoss if self.double_dqn else MixerLoss
            loss = loss_class(self.policy, self.build_mixer(), loss_function=self.loss_function,
                              delay_value=self.delay_value, action_space=action_spec)
            team = _team(group)
            loss.set_keys(action_value=(group, "action_value"), local_value=(group, "chosen_action_value"),
                          global_value=(team, "global_value"), action=(group, "action"), reward=(team, "reward"),
                          done=(team, "done"), terminated=(team, "terminated"), priority=(team, "td_error"))
        loss.make_value_estimator(ValueEstimators.TD0, gamma=self.gamma)
        return loss

    @override
    def loss(self, batch: TensorDictBase) -> TensorDictBase:
        """The TD loss; with ``standardise_rewards`` on the minibatch's rewards standardised by the running moments
        (updated with them first), the collected ones put back afterwards (the loss writes its TD errors into
        ``batch``, so it is the same TensorDict)."""
        if not self.standardise_rewards:
            return super().loss(batch)
        key = unravel_key(("next", self.objective.tensor_keys.reward))
        raw = batch.get(key)
        batch.set(key, self.reward_statistics.update_and_standardise(raw))
        try:
            return super().loss(batch)
        finally:
            batch.set(key, raw)

    @override
    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        groups = {"actor": list(self.policy.parameters())}
        if self.mixer is not None:
            groups["mixer"] = list(self.objective.mixer_network_params.values(True, True))
        return groups

    @override
    def clip_group(self, role: str) -> str:
        """One loss, one clipping: the Q-network and the mixer are clipped by their joint gradient norm (BenchMARL's
        QMIX/VDN optimise ``loss.parameters()`` as one group and clip its norm; clipping each part to the norm
        alone let a step move them up to sqrt(2) times as far)."""
        return "loss"

    # ------------------------------------------------------------------ data
    @override
    def process_batch(self, batch: TensorDictBase) -> TensorDictBase:
        """Per-group done flags; for mixers also the team's reward (mean over agents) and done flags at
        ``("next", "<group>_team", …)``, where the mixed value's TD target reads them."""
        batch = super().process_batch(batch)
        if self.mixer is None:
            return batch
        nxt, group = batch.get("next"), self.group
        team = _team(group)
        nxt.set((team, "reward"), nxt.get((group, "reward")).mean(-2))
        for key in ("done", "terminated"):
            nxt.set((team, key), nxt.get((group, key)).any(-2))
        return batch

    @override
    def training_keys(self) -> list:
        keys = super().training_keys()
        if self.mixer is not None:  # the mixer's TD target reads the team's entries
            keys += [("next", _team(self.group), k) for k in ("reward", "done", "terminated")]
        return list(dict.fromkeys(keys))

    @override
    def priorities(self, sample: TensorDictBase) -> torch.Tensor:
        if self.mixer is None:
            return super().priorities(sample)
        return sample.get((_team(self.group), "td_error")).reshape(-1)  # one TD error per transition: the team's


class HypernetQMixer(QMixer):
    """torchrl's ``QMixer`` whose two weight hypernetworks (the state's map to the first mixing layer's weights and to
    the final layer's) have ``hypernet_layers`` layers: 1 is torchrl's mixer as it is; 2 puts a ReLU layer of
    ``hypernet_embed`` units before each map, as EPyMARL's QMIX (``hypernet_layers: 2``) and PyMARL's do. The
    mixing itself (absolute weights, ELU, the state's bias and V(s)) is torchrl's. On LBF 8x8-2p-2f-coop, whose
    observations run to 7, the one-layer mixer starts with a team value ~285 times the agents' values (measured) and
    QMIX earned nothing there in 700k frames (four runs); with two layers it starts at ~75 times and leaves zero,
    slowly (``docs/results/beside-epymarl-and-harl.md``)."""

    def __init__(self, state_shape: tuple[int, ...], mixing_embed_dim: int, n_agents: int, device: Any,
                 hypernet_layers: int = 1, hypernet_embed: int = 64) -> None:
        super().__init__(state_shape=state_shape, mixing_embed_dim=mixing_embed_dim, n_agents=n_agents, device=device)
        if hypernet_layers == 2:
            def two_layers(out: int) -> nn.Sequential:
                return nn.Sequential(nn.Linear(self.state_dim, hypernet_embed, device=self.device), nn.ReLU(),
                                     nn.Linear(hypernet_embed, out, device=self.device))

            self.hyper_w_1 = two_layers(self.embed_dim * self.n_agents)
            self.hyper_w_final = two_layers(self.embed_dim)


class MixerLoss(QMixerLoss):
    """torchrl's ``QMixerLoss`` whose output also reports the mixed values it trained on, averaged over the minibatch:
    ``q_taken_mean`` (the mixer's team value of the taken actions), ``target_mean`` (its TD target) and
    ``td_error_abs`` (their mean absolute difference), in the units of the rewards the loss read (standardised ones
    with ``standardise_rewards``). EPyMARL logs the same three; a team value far above any return the task can pay
    (a value that diverges) shows there first. The loss itself, its priorities and its estimator's maths are
    torchrl's: the estimator only keeps the two tensors it already holds."""

    @override
    def make_value_estimator(self, value_type: ValueEstimators | None = None, **hyperparams: Any) -> None:
        super().make_value_estimator(value_type, **hyperparams)
        if type(self._value_estimator) is TD0Estimator:
            self._value_estimator.__class__ = _RecordingTD0

    @override
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        terms = super().forward(tensordict)
        recorded = getattr(self._value_estimator, "recorded", None)
        if recorded is not None:  # a TD(0) estimator (the one lit-marl builds) kept its prediction and target
            self._value_estimator.recorded = None
            taken, target = (value.detach().reshape(-1) for value in recorded)
            terms.set("q_taken_mean", taken.mean())
            terms.set("target_mean", target.mean())
            terms.set("td_error_abs", (taken - target).abs().mean())
        return terms


class DoubleQMixerLoss(MixerLoss):
    """torchrl's ``QMixerLoss`` with double Q-learning in its TD target: the next step's actions are the online
    Q-network's greedy ones (masked like the policy's), their values come from the target Q-network, and the target
    mixer mixes them; torchrl's loss takes the target network's own greedy actions. Everything else (the predicted
    team value, the TD(0) return, the distance, the priorities) is torchrl's: only the next value handed to its
    value estimator differs, as ``DQNLoss(double_dqn=True)`` does it for one agent. Reports what :class:`MixerLoss`
    reports."""

    @override
    def make_value_estimator(self, value_type: ValueEstimators | None = None, **hyperparams: Any) -> None:
        if value_type not in (None, ValueEstimators.TD0):
            raise ConfigError(f"double Q-learning's mixed target is a TD(0) one here; got {value_type}")
        super().make_value_estimator(ValueEstimators.TD0, **hyperparams)
        # torchrl's TD(0) estimator as QMixerLoss wired it (keys, gamma, network), recording as MixerLoss's does and
        # asking this loss for next values
        self._value_estimator.__class__ = _NextValueFromLoss
        self._value_estimator.next_value = self.double_q_next_value

    def double_q_next_value(self, tensordict: TensorDictBase, target_params: TensorDictBase) -> torch.Tensor:
        """The target mixer's team value of the next step at the online network's greedy actions."""
        keys = self.tensor_keys
        nxt = step_mdp(tensordict, keep_other=False)
        with torch.no_grad():
            with self.local_value_network_params.data.to_module(self.local_value_network,
                                                                preserve_module_state=False):
                greedy = self.local_value_network(nxt.clone(False)).get(keys.action)
            with target_params["module", "0"].to_module(self.local_value_network, preserve_module_state=False):
                q_target = self.local_value_network(nxt.clone(False)).get(keys.action_value)
            if self.action_space == "categorical":
                chosen = torch.gather(q_target, -1, greedy if greedy.ndim == q_target.ndim else greedy.unsqueeze(-1))
            else:  # one-hot actions
                chosen = (q_target * greedy.to(q_target.dtype)).sum(-1, keepdim=True)
            nxt.set(keys.local_value, chosen)
            with target_params["module", "1"].to_module(self.mixer_network, preserve_module_state=False):
                self.mixer_network(nxt)
        return nxt.get(keys.global_value)


class _RecordingTD0(TD0Estimator):
    """torchrl's TD(0) estimator that keeps, until its loss reads them, the value it was handed to predict (the
    mixer's team value of the taken actions, which the loss wrote before asking for its target) and the target it
    returned. Nothing it computes changes."""

    recorded: tuple[torch.Tensor, torch.Tensor] | None = None

    @override
    def value_estimate(self, tensordict, target_params=None, next_value=None, **kwargs):
        target = super().value_estimate(tensordict, target_params=target_params, next_value=next_value, **kwargs)
        self.recorded = (tensordict.get(self.tensor_keys.value), target)
        return target


class _NextValueFromLoss(_RecordingTD0):
    """torchrl's TD(0) estimator whose next-step value is ``next_value(tensordict, target_params)``."""

    next_value: Callable[[TensorDictBase, TensorDictBase], torch.Tensor]

    @override
    def _next_value(self, tensordict, target_params, kwargs):
        return self.next_value(tensordict, target_params)


class RunningMoments(nn.Module):
    """The running mean and variance of every value passed to :meth:`update_and_standardise`, merged batch by batch
    (Chan et al.'s parallel update). They start as mean 0 and variance 1 with a weight of ``prior_count`` values, as
    EPyMARL's running statistics do, so the first batches are not divided by a variance of a few values. Kept in
    float64 buffers; under ``torch.distributed`` each batch's count, sum and sum of squares are summed over the
    processes first, so every process holds the same moments."""

    def __init__(self, prior_count: float = 1e-4, min_std: float = 1e-8) -> None:
        super().__init__()
        self.min_std = min_std
        self.register_buffer("mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("var", torch.ones((), dtype=torch.float64))
        self.register_buffer("count", torch.full((), prior_count, dtype=torch.float64))

    @torch.no_grad()
    def update(self, values: torch.Tensor) -> None:
        x = values.detach().to(self.mean.device, torch.float64).reshape(-1)
        totals = torch.stack([torch.tensor(float(x.numel()), dtype=torch.float64, device=x.device), x.sum(),
                              x.square().sum()])
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(totals)
        n, total, total_sq = totals.unbind()
        batch_mean = total / n
        batch_var = (total_sq / n - batch_mean.square()).clamp_min(0)
        merged = self.count + n
        delta = batch_mean - self.mean
        self.var.copy_((self.var * self.count + batch_var * n + delta.square() * self.count * n / merged) / merged)
        self.mean.add_(delta * n / merged)
        self.count.copy_(merged)

    def standardise(self, values: torch.Tensor) -> torch.Tensor:
        std = self.var.sqrt().clamp_min(self.min_std)
        return ((values - self.mean) / std).to(values.dtype)

    def update_and_standardise(self, values: torch.Tensor) -> torch.Tensor:
        self.update(values)
        return self.standardise(values)


def _team(group: str) -> str:
    """Root-level key of a group's team entries (reward, done, mixed value): shape ``[*B, 1]``."""
    return f"{group}_team"


class IQL(MarlAlgorithm):
    """Independent Q-learning (Tan, 1993): every agent learns its own Q-function from its own reward.

    Examples:
        Discrete-action VMAS *balance*, one iteration at toy sizes (BenchMARL's: ``configs/iql_vmas_balance.yaml``):

        >>> import lightning.pytorch as pl
        >>> from lit_marl.algorithms import IQL
        >>> from lit_marl.envs import VmasTask
        >>> task = VmasTask("balance", max_steps=10, continuous_actions=False, n_agents=2)
        >>> model = IQL(task, num_envs=2, frames_per_batch=20, max_frames=20, memory_size=1_000,
        ...            n_optimizer_steps=2, train_batch_size=16, evaluation_episodes=1)
        >>> pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model)
    """

    algorithm_name: ClassVar[str] = "iql"
    learner_class = QLearning
    learner_settings: ClassVar[dict[str, Any]] = {"mixer": None}


class VDN(MarlAlgorithm):
    """Value decomposition networks (VDN; Sunehag et al., 2018): the team value is the sum of the agents'
    chosen-action values.

    Examples:
        Discrete-action VMAS *balance*, one iteration at toy sizes (BenchMARL's: ``configs/vdn_vmas_navigation.yaml``):

        >>> import lightning.pytorch as pl
        >>> from lit_marl.algorithms import VDN
        >>> from lit_marl.envs import VmasTask
        >>> task = VmasTask("balance", max_steps=10, continuous_actions=False, n_agents=2)
        >>> model = VDN(task, num_envs=2, frames_per_batch=20, max_frames=20, memory_size=1_000,
        ...            n_optimizer_steps=2, train_batch_size=16, evaluation_episodes=1)
        >>> pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model)
    """

    algorithm_name: ClassVar[str] = "vdn"
    learner_class = QLearning
    learner_settings: ClassVar[dict[str, Any]] = {"mixer": "vdn"}


class QMIX(MarlAlgorithm):
    """QMIX (Rashid et al., 2018): a monotonic hypernetwork mixes the agents' chosen-action values, conditioned on the
    global state (or the group's observations where the task has no state), trained on the team reward.

    Examples:
        Discrete-action VMAS *balance*, one iteration at toy sizes (BenchMARL's: ``configs/qmix_vmas_balance.yaml``):

        >>> import lightning.pytorch as pl
        >>> from lit_marl.algorithms import QMIX
        >>> from lit_marl.envs import VmasTask
        >>> task = VmasTask("balance", max_steps=10, continuous_actions=False, n_agents=2)
        >>> model = QMIX(task, mixing_embed_dim=8, num_envs=2, frames_per_batch=20, max_frames=20, memory_size=1_000,
        ...             n_optimizer_steps=2, train_batch_size=16, evaluation_episodes=1)
        >>> pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model)
        >>> model.frames
        20
    """

    algorithm_name: ClassVar[str] = "qmix"
    learner_class = QLearning
    learner_settings: ClassVar[dict[str, Any]] = {"mixer": "qmix"}
