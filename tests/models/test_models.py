"""Model configs (Mlp, Cnn, DeepSets, Gnn, Sequence): shapes, gradient flow, invariance/equivariance
properties, training inside the algorithms, and bad input."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn
from torchrl.data import Unbounded
from torchrl.envs import Transform, TransformedEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lit_marl.algorithms import IQL, MADDPG, MAPPO
from lit_marl.envs import VmasTask
from lit_marl.errors import ConfigError
from lit_marl.export import export_policy, load_exported
from lit_marl.models import Cnn, DeepSets, Gnn, Gru, Lstm, Mlp, ModelInputs, Sequence
from tests.helpers.tiny import ddpg_kwargs, tiny_kwargs, tiny_task, tiny_trainer


def test_multi_agent_mlp_shapes_and_sharing():
    config = Mlp(num_cells=[16, 16], activation_class="ReLU")
    shared = config.build_multi_agent(5, 3, n_agents=4, centralised=False, share_params=True)
    separate = config.build_multi_agent(5, 3, n_agents=4, centralised=False, share_params=False)
    assert shared(torch.randn(7, 4, 5)).shape == (7, 4, 3)
    assert sum(p.numel() for p in separate.parameters()) == 4 * sum(p.numel() for p in shared.parameters())
    assert any(isinstance(m, nn.ReLU) for m in shared.modules())


def test_layer_norm_and_single_network():
    net = Mlp(num_cells=[8, 4], layer_norm=True).build_single(3, 2)
    norms = [m for m in net.modules() if isinstance(m, nn.LayerNorm)]
    assert [n.normalized_shape for n in norms] == [(8,), (4,)]
    assert net(torch.randn(6, 3)).shape == (6, 2)


def test_bad_model_config_names_field():
    with pytest.raises(ConfigError, match="activation_class: 'Tanhh'"):
        Mlp(activation_class="Tanhh")
    with pytest.raises(ConfigError, match=r"num_cells: .*\[64, 0\]"):
        Mlp(num_cells=[64, 0])


# ---------------------------------------------------------------------------------------------- model zoo
def _inputs(*shapes, n_agents=3, keys=None, spec=None, field="actor_model"):
    keys = keys or [("agents", f"in{i}") for i in range(len(shapes))]
    return ModelInputs(group="agents", n_agents=n_agents, keys=keys, shapes=[torch.Size(s) for s in shapes],
                       spec=spec, field=field)


def _run(module, **entries):
    td = TensorDict({("agents", k): v for k, v in entries.items()}, batch_size=next(iter(entries.values())).shape[:1])
    return module(td)


def _grads_reach_every_parameter(module, out):
    out.square().sum().backward()
    params = [p for p in module.parameters() if p.requires_grad]
    assert params and all(p.grad is not None and p.grad.abs().sum() > 0 for p in params)


@pytest.mark.parametrize("centralised", [False, True])
def test_cnn_reads_images_and_flat_entries(centralised):
    torch.manual_seed(0)
    model = Cnn(cnn_num_cells=[4, 4], cnn_kernel_sizes=[3, 2], mlp_num_cells=[8])
    module = model.build_module(_inputs((7, 6, 2), (2,)), [("agents", "out")], 5, centralised=centralised,
                                share_params=False)
    td = _run(module, in0=torch.rand(4, 3, 7, 6, 2), in1=torch.rand(4, 3, 2))
    assert td["agents", "out"].shape == (4, 3, 5)
    _grads_reach_every_parameter(module, td["agents", "out"])


def test_cnn_refuses_vector_observations_and_layers_too_big_for_the_image():
    with pytest.raises(ConfigError, match=r"critic_model: Cnn needs an image entry.*\[18\]"):
        Cnn().build_module(_inputs((18,), field="critic_model"), [("agents", "out")], 1, False, True)
    with pytest.raises(ConfigError, match="do not fit an image of 3x3"):
        Cnn(cnn_num_cells=[4, 4], cnn_kernel_sizes=3).build_module(_inputs((3, 3, 1)), [("agents", "o")], 1, False, True)
    with pytest.raises(ConfigError, match="cnn_strides"):
        Cnn(cnn_num_cells=[4, 4], cnn_strides=[1])


def test_centralised_deepsets_ignores_the_order_of_agents():
    torch.manual_seed(0)
    module = DeepSets(local_nn_num_cells=[16], local_nn_out_features=8, global_nn_num_cells=[16]).build_module(
        _inputs((5,), n_agents=4), [("agents", "out")], 2, centralised=True, share_params=True)
    x = torch.randn(6, 4, 5)
    out = _run(module, in0=x)["agents", "out"]
    permuted = _run(module, in0=x[:, torch.tensor([2, 0, 3, 1])])["agents", "out"]
    torch.testing.assert_close(out, permuted)
    torch.testing.assert_close(out[:, 0], out[:, 3])  # shared rho: one value for all agents
    assert not torch.allclose(out, _run(module, in0=x + 0.5)["agents", "out"])  # still reads its input
    _grads_reach_every_parameter(module, out)


def test_decentralised_deepsets_pools_each_agents_own_set():
    torch.manual_seed(0)
    module = DeepSets(local_nn_num_cells=[16], local_nn_out_features=8, global_nn_num_cells=[16],
                      aggregation="mean").build_module(_inputs((6, 4), (2,), n_agents=3), [("agents", "out")], 2,
                                                      centralised=False, share_params=False)
    sets, action = torch.randn(5, 3, 6, 4), torch.randn(5, 3, 2)
    out = _run(module, in0=sets, in1=action)["agents", "out"]
    shuffled = _run(module, in0=sets[:, :, torch.randperm(6)], in1=action)["agents", "out"]
    torch.testing.assert_close(out, shuffled)  # order of elements inside a set does not matter
    other = sets.clone()
    other[:, 1] += 1.0  # only agent 1's set changes
    changed = _run(module, in0=other, in1=action)["agents", "out"]
    torch.testing.assert_close(changed[:, [0, 2]], out[:, [0, 2]])
    assert not torch.allclose(changed[:, 1], out[:, 1])
    with pytest.raises(ConfigError, match=r"actor_model: a decentralised DeepSets needs per-agent sets.*\[18\]"):
        DeepSets().build_module(_inputs((18,)), [("agents", "o")], 1, centralised=False, share_params=True)
    with pytest.raises(ConfigError, match="aggregation: 'median'"):
        DeepSets(aggregation="median")


def _position_spec(n_agents=4, obs=5):
    from torchrl.data import Composite, Unbounded
    return Composite({"agents": Composite({"observation": Unbounded((n_agents, obs)), "pos": Unbounded((n_agents, 2))},
                                          shape=(n_agents,))})


@pytest.mark.parametrize("gnn", [
    Gnn(topology="full"),
    Gnn(topology="from_pos", edge_radius=1.0, position_key="pos", gnn_class="GATv2Conv",
        gnn_kwargs={"heads": 2, "concat": False}),
])
def test_gnn_is_equivariant_to_permuting_the_agents(gnn):
    torch.manual_seed(0)
    keys = [("agents", "observation")]
    module = gnn.build_module(_inputs((5,), n_agents=4, keys=keys, spec=_position_spec()), [("agents", "out")], 3,
                              centralised=False, share_params=True)
    obs, pos = torch.randn(8, 4, 5), torch.rand(8, 4, 2)
    out = _run(module, observation=obs, pos=pos)["agents", "out"]
    order = torch.tensor([3, 1, 0, 2])
    permuted = _run(module, observation=obs[:, order], pos=pos[:, order])["agents", "out"]
    torch.testing.assert_close(permuted, out[:, order])
    _grads_reach_every_parameter(module, out)


def test_gnn_from_pos_connects_only_agents_within_the_radius():
    torch.manual_seed(0)
    module = Gnn(topology="from_pos", edge_radius=0.5, position_key="observation", position_slice=[0, 2]).build_module(
        _inputs((5,), n_agents=3, keys=[("agents", "observation")], spec=_position_spec(3)), [("agents", "out")], 2,
        centralised=False, share_params=True)
    obs = torch.randn(1, 3, 5)
    obs[0, :, :2] = torch.tensor([[0.0, 0.0], [0.3, 0.0], [5.0, 5.0]])  # agents 0 and 1 close, 2 far away
    out = _run(module, observation=obs)["agents", "out"]
    far = obs.clone()
    far[0, 2, 2:] += 1.0  # agent 2's features change: only agent 2's output may move
    moved = _run(module, observation=far)["agents", "out"]
    torch.testing.assert_close(moved[0, :2], out[0, :2])
    near = obs.clone()
    near[0, 1, 2:] += 1.0  # agent 1 changes: its neighbour 0 sees it
    assert not torch.allclose(_run(module, observation=near)["agents", "out"][0, 0], out[0, 0])


def test_gnn_bad_input_names_the_field():
    with pytest.raises(ConfigError, match="edge_radius"):
        Gnn(topology="from_pos", position_key="pos")
    with pytest.raises(ConfigError, match="position_key: 'pos' is not an entry of group 'agents'; allowed: observation"):
        spec = _position_spec()
        del spec["agents", "pos"]
        Gnn(topology="from_pos", edge_radius=1.0, position_key="pos").build_module(
            _inputs((5,), n_agents=4, keys=[("agents", "observation")], spec=spec), [("agents", "o")], 1, False, True)
    with pytest.raises(ConfigError, match="share_params"):
        Gnn().build_module(_inputs((5,)), [("agents", "o")], 1, centralised=False, share_params=False)
    with pytest.raises(ConfigError, match="critic_model: a centralised network must see every agent"):
        Gnn(topology="empty").build_module(_inputs((5,), field="critic_model"), [("agents", "o")], 1, True, True)
    with pytest.raises(ConfigError, match="gnn_class: 'NoSuchConv'"):
        Gnn(gnn_class="NoSuchConv").build_module(_inputs((5,)), [("agents", "o")], 1, False, True)


def test_sequence_chains_models_through_intermediate_entries():
    torch.manual_seed(0)
    model = Sequence(layers=[Gnn(topology="full"), Mlp(num_cells=[8])], intermediate_sizes=[6])
    module = model.build_module(_inputs((5,), n_agents=3, keys=[("agents", "observation")], spec=_position_spec(3)),
                                [("agents", "state_value")], 1, centralised=True, share_params=True)
    td = _run(module, observation=torch.randn(4, 3, 5))
    assert td["agents", "state_value_0"].shape == (4, 3, 6) and td["agents", "state_value"].shape == (4, 3, 1)
    _grads_reach_every_parameter(module, td["agents", "state_value"])
    config = model.to_config()
    assert [layer["class_path"] for layer in config["init_args"]["layers"]] == ["lit_marl.models.gnn.Gnn",
                                                                                  "lit_marl.models.mlp.Mlp"]
    with pytest.raises(ConfigError, match="intermediate_sizes: needs 1 positive integers"):
        Sequence(layers=[Mlp(), Mlp()], intermediate_sizes=[4, 4])


# ------------------------------------------------------------------------------------- inside algorithms
class _ImageObservation(Transform):
    """Shows VMAS's flat observation [14] as a [2, 7, 1] image, to run Cnn through training."""

    def __init__(self, group: str = "agents") -> None:
        super().__init__(in_keys=[(group, "observation")], out_keys=[(group, "observation")])

    def _apply_transform(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.unflatten(-1, (2, 7)).unsqueeze(-1)

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec):
        spec = observation_spec[self.in_keys[0]]
        observation_spec[self.in_keys[0]] = Unbounded((*spec.shape[:-1], 2, 7, 1), device=spec.device)
        return observation_spec


class ImageSpreadTask(VmasTask):
    def _make_env(self, num_envs, seed, device):
        return TransformedEnv(super()._make_env(num_envs, seed, device), _ImageObservation())


def _fit_briefly(tmp_path, model) -> set[str]:
    """One iteration; the names of the weights it changed."""
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = tiny_trainer(tmp_path, max_epochs=1)
    trainer.fit(model)
    assert model.frames == 40 and trainer.callback_metrics["val/return"].isfinite()
    return {k for k, v in model.state_dict().items() if k in before and not torch.equal(v, before[k])}


def test_mappo_trains_with_gnn_then_mlp_actor_and_deepsets_critic(tmp_path):
    actor = Sequence(layers=[Gnn(topology="from_pos", edge_radius=1.0, position_key="observation",
                                 position_slice=[0, 2], velocity_key="observation", velocity_slice=[2, 4],
                                 gnn_class="GATv2Conv"), Mlp(num_cells=[16])], intermediate_sizes=[8])
    critic = DeepSets(local_nn_num_cells=[16], local_nn_out_features=8, global_nn_num_cells=[16])
    model = MAPPO(tiny_task(), **tiny_kwargs(actor_model=actor, critic_model=critic))
    changed = _fit_briefly(tmp_path, model)
    assert any("conv" in k for k in changed) and any(".rho." in k for k in changed)


def test_maddpg_trains_with_a_gnn_q_function_and_mappo_with_a_cnn(tmp_path):
    maddpg = MADDPG(tiny_task(), **ddpg_kwargs(critic_model=Gnn(topology="full")))
    changed = _fit_briefly(tmp_path / "maddpg", maddpg)
    gnn_weights = {k for k in maddpg.state_dict() if k.startswith("learners.agents.critic.module.conv.")}
    assert gnn_weights and gnn_weights <= changed  # every graph convolution of the Q-function was trained
    cnn = Cnn(cnn_num_cells=[4], cnn_kernel_sizes=2, mlp_num_cells=[16])
    mappo = MAPPO(ImageSpreadTask("simple_spread", max_steps=10), **tiny_kwargs(actor_model=cnn, critic_model=cnn))
    changed = _fit_briefly(tmp_path / "mappo", mappo)
    convolutions = {k for k in mappo.state_dict()
                    if k.startswith(("learners.agents.policy.", "learners.agents.critic.")) and ".conv." in k}
    assert len(convolutions) == 4 and convolutions <= changed  # the actor's and the critic's convolutions trained


def test_a_model_that_cannot_read_the_task_stops_before_training():
    with pytest.raises(ConfigError, match="actor_model: a decentralised DeepSets"):
        kwargs = ddpg_kwargs(actor_model=DeepSets())
        del kwargs["critic_model"]  # value-based: no critic
        IQL(tiny_task(continuous_actions=False), **kwargs)
    with pytest.raises(ConfigError, match="critic_model: Cnn needs an image entry"):
        MAPPO(tiny_task(), **tiny_kwargs(critic_model=Cnn()))


def test_mlp_resolves_activation_names_to_torch_nn():
    # torch.nn.Tanh itself: a faster tanh-through-sigmoid (2e-7 off) changed MADDPG's learning (docs/results/speed.md, the speed levers)
    net = Mlp([8, 8]).build_single(3, 2)
    assert sum(type(m) is torch.nn.Tanh for m in net.modules()) == 2
    assert sum(isinstance(m, torch.nn.ReLU) for m in Mlp([8], activation_class="ReLU").build_single(3, 2).modules()) == 1
    with pytest.raises(ConfigError, match="activation_class: 'Tahn'"):
        Mlp(activation_class="Tahn")


@pytest.mark.parametrize("centralised", [False, True])
@pytest.mark.parametrize("layer_norm", [False, True])
def test_the_lean_shared_mlp_is_torchrls_to_the_bit_also_under_swapped_parameters(centralised, layer_norm):
    from tensordict import TensorDict as TD
    from torchrl.modules import MultiAgentMLP

    from lit_marl.models.mlp import LeanMultiAgentMLP

    torch.manual_seed(0)
    lean = Mlp([32, 32], layer_norm=layer_norm).build_multi_agent(18, 4, 4, centralised, share_params=True)
    assert isinstance(lean, LeanMultiAgentMLP) and lean._lean_layers() is not None  # the lean path runs
    reference = MultiAgentMLP(18, 4, 4, centralized=centralised, share_params=True, **Mlp([32, 32], layer_norm=layer_norm)._layer_kwargs())
    assert list(reference.state_dict()) == list(lean.state_dict())  # checkpoints load either way
    reference.load_state_dict(lean.state_dict())
    x = torch.randn(5, 7, 4, 18)
    out, expected = lean(x), reference(x)
    assert torch.equal(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(lean.parameters(), reference.parameters()))
    # torchrl losses swap target parameters in with to_module: the lean forward must read them
    target = TD.from_module(lean).detach().clone().apply(lambda t: t * 0.5 + 0.1)
    with target.to_module(lean):
        swapped = lean(x)
    with target.to_module(reference):
        assert torch.equal(swapped, reference(x)) and not torch.equal(swapped, out)


# ------------------------------------------------------------------------------------------------ agent ids (issue 36)
def _alike_observations(module, n_agents: int = 3, features: int = 14) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The module's output when every agent sees the same observation, and what its network was given."""
    seen = []
    net = module.module.net if hasattr(module.module, "net") else module.module
    handle = net.register_forward_pre_hook(lambda _, args: seen.append(args[0].detach().clone()))
    observation = torch.randn(features).expand(5, n_agents, features)
    out = module(TensorDict({("agents", "observation"): observation}, batch_size=[5])).get(("agents", "out"))
    handle.remove()
    return out, seen


@pytest.mark.parametrize("centralised", [False, True])
def test_agent_ids_reach_the_network_and_let_shared_weights_act_differently_on_alike_observations(centralised):
    """EPyMARL's obs_agent_id: each agent's input ends with its one-hot index among the group's agents, so one set of
    weights can act differently for agents that observe the same (without ids it cannot)."""
    inputs = ModelInputs.of(tiny_task(), "agents")  # balance, 3 agents of 14 observations
    outputs = {}
    for agent_id in (False, True):
        torch.manual_seed(0)
        module = Mlp(num_cells=[16], agent_id=agent_id).build_module(
            inputs, [("agents", "out")], 4, centralised=centralised, share_params=True)
        out, seen = _alike_observations(module)
        outputs[agent_id] = out
        if agent_id:
            (given,) = seen
            # centralised (EPyMARL's critic): all agents' observations, then the agent's own index
            assert given.shape == ((5, 3, 3 * 14 + 3) if centralised else (5, 3, 14 + 3))
            assert torch.equal(given[..., -3:], torch.eye(3).expand(5, 3, 3))  # agent i's row of the identity
            if centralised:
                assert torch.equal(given[:, 0, :-3], given[:, 2, :-3])  # every agent reads the same joint input
    assert torch.equal(outputs[False][:, 0], outputs[False][:, 1])  # one set of weights, one answer
    assert not torch.allclose(outputs[True][:, 0], outputs[True][:, 1])  # the id tells the agents apart


def test_a_centralised_shared_critic_with_ids_values_each_agent_from_the_joint_observation():
    """Without ids a centralised network shared by the agents gives each the group's one output; with them (EPyMARL's
    ``centralV`` critic: the joint input and the agent's index) each agent's output is its own, and each still
    depends on every agent's observation."""
    inputs = ModelInputs.of(tiny_task(), "agents")
    torch.manual_seed(0)
    module = Mlp(num_cells=[16], agent_id=True).build_module(inputs, [("agents", "out")], 1, centralised=True,
                                                             share_params=True)
    observation = torch.randn(5, 3, 14)
    value = module(TensorDict({("agents", "observation"): observation}, batch_size=[5])).get(("agents", "out"))
    assert value.shape == (5, 3, 1) and not torch.allclose(value[:, 0], value[:, 1])
    moved = observation.clone()
    moved[:, 2] += 1.0  # only agent 2's observation changes: every agent's value moves
    after = module(TensorDict({("agents", "observation"): moved}, batch_size=[5])).get(("agents", "out"))
    assert not torch.isclose(after, value).any()


@pytest.mark.parametrize("centralised", [False, True])
@pytest.mark.parametrize("model", [Gru, Lstm])
def test_recurrent_agents_take_ids_too(model, centralised):
    """EPyMARL's agents are GRUs with ids: a shared recurrent network with ids tells agents that observe the same
    apart, from the first step (zero hidden states); centralised, it reads the joint input and the agent's index."""
    inputs = ModelInputs.of(tiny_task(), "agents")
    for agent_id in (False, True):
        torch.manual_seed(0)
        module = model(hidden_size=8, agent_id=agent_id).build_module(inputs, [("agents", "out")], 4,
                                                                      centralised=centralised, share_params=True)
        assert module.rnns[0].input_size == (3 * 14 + 3 * agent_id if centralised else 14 + 3 * agent_id)
        states = {key: torch.zeros(5, 3, 1, 8) for key in module.state_keys}
        batch = TensorDict({("agents", "observation"): torch.randn(14).expand(5, 3, 14), **states,
                            "is_init": torch.ones(5, 1, dtype=torch.bool)}, batch_size=[5])
        out = module(batch).get(("agents", "out"))
        assert torch.allclose(out[:, 0], out[:, 1]) is (not agent_id)


def test_a_shared_cnn_with_ids_tells_agents_with_the_same_image_apart():
    """Cnn's head reads each agent's id after the conv features (Melting Pot and MAgent2 policies share a Cnn)."""
    image = torch.rand(7, 6, 2).expand(4, 3, 7, 6, 2)  # every agent sees the same image
    for agent_id in (False, True):
        torch.manual_seed(0)
        module = Cnn(cnn_num_cells=[4], mlp_num_cells=[8], agent_id=agent_id).build_module(
            _inputs((7, 6, 2)), [("agents", "out")], 5, centralised=False, share_params=True)
        out = _run(module, in0=image)["agents", "out"]
        assert torch.allclose(out[:, 0], out[:, 1]) is (not agent_id)
        _grads_reach_every_parameter(module, out)


def test_agent_ids_where_no_input_is_per_agent_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"^agent_id: true, but this network reads no input per agent"):
        Mlp(agent_id=True).build_single(10, 2)
    with pytest.raises(ConfigError, match="agent_id"):
        Mlp(agent_id="yes")


def test_agent_ids_are_kept_in_the_checkpoint_and_the_exported_policy(tmp_path):
    """The model's ``agent_id`` travels with the run's hyper-parameters (a checkpoint rebuilds the same networks) and
    the exported policy computes the ids itself (its only input is still the observation)."""
    trainer = tiny_trainer(tmp_path, max_epochs=1)
    model = MAPPO(tiny_task(), **tiny_kwargs(actor_model=Mlp(num_cells=[16], agent_id=True),
                                             critic_model=Mlp(num_cells=[16], agent_id=True)))
    trainer.fit(model)
    trainer.save_checkpoint(tmp_path / "run.ckpt")
    loaded = MAPPO.load_from_checkpoint(tmp_path / "run.ckpt", weights_only=True)
    assert loaded.learners["agents"].actor_model.agent_id and loaded.learners["agents"].critic_model.agent_id
    observation = model.task.make_env(num_envs=4, seed=1, device="cpu").reset()
    with torch.no_grad():
        expected = model.policies["agents"](observation.clone()).get(("agents", "loc"))
        assert torch.equal(loaded.policies["agents"](observation.clone()).get(("agents", "loc")), expected)
    folder = export_policy(loaded, tmp_path / "deploy", "torchscript")
    policy = load_exported(folder / "agents.pt")
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        deterministic = loaded.policies["agents"](observation.clone()).get(("agents", "action"))
        assert torch.equal(policy(observation.get(("agents", "observation"))), deterministic)
