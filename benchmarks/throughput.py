"""Frames per second of lit-marl against bare, hand-written torchrl loops, in one run.

Each algorithm runs with BenchMARL's defaults on vmas/balance (4 agents, 10 envs, 6000 frames per iteration,
MLPs 256-256 Tanh, Adam 5e-5, per-loss gradient clipping at 5):

- MAPPO: 45 epochs of 400-frame minibatches (675 optimizer steps) per iteration;
- MADDPG / MASAC / QMIX: a 1M-transition replay buffer, 1000 optimizer steps of 128 transitions per iteration,
  soft target updates (tau 0.005); MADDPG with annealed Gaussian noise, MASAC with twin Q and learned alpha,
  QMIX on balance's discrete actions (9 moves) with epsilon-greedy exploration and a QMixer (embedding 32)
  conditioned on the agents' concatenated observations.

The bare loops are torchrl only (Collector, the same torchrl loss, Adam, replay buffer): no Lightning, no
lit-marl. Bare and lit-marl alternate (bare, lit, bare, lit, …) so drift of the machine hits both alike.

    python benchmarks/throughput.py --algorithms mappo maddpg masac qmix --iterations 3 --rounds 3 \
        [--threads 1] [--compile] [--profile]

Writes benchmarks/out/throughput.json: per algorithm, whole-run frames/s (the clock starts before the envs are
built on both sides) and steady-state collection/training seconds per iteration (median, first iteration
excluded). lit-marl runs as `lit-marl fit` would: CSV logger, progress bar, and `lit-marl fit`'s checkpoint
settings (every 20 iterations and `last.ckpt`, with the replay buffers).
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import io
import json
import pstats
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import lightning.pytorch as pl
import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, RandomSampler, TensorDictReplayBuffer
from torchrl.envs import RewardSum, TransformedEnv, VmasEnv
from torchrl.modules import (
    AdditiveGaussianModule,
    EGreedyModule,
    MultiAgentMLP,
    ProbabilisticActor,
    QMixer,
    QValueModule,
    TanhModule,
    TanhNormal,
)
from torchrl.objectives import ClipPPOLoss, DDPGLoss, QMixerLoss, SACLoss, SoftUpdate, ValueEstimators

from lit_marl.algorithms import MADDPG, MAPPO, MASAC, QMIX
from lit_marl.cli import CHECKPOINT_DEFAULTS
from lit_marl.envs import VmasTask

SCENARIO_KWARGS = {"n_agents": 4, "package_mass": 5, "random_package_pos_on_line": True}
FRAMES, ENVS, LR, EPS, CLIP, GAMMA = 6000, 10, 5e-5, 1e-6, 5.0, 0.99
EPOCHS, MINIBATCH = 45, 400  # on-policy
STEPS, BATCH, MEMORY, TAU = 1000, 128, 1_000_000, 0.005  # off-policy
G = "agents"
#: lit-marl fit's checkpoint settings (every 20 iterations and at the end: last.ckpt, with replay buffers)
CHECKPOINTS = {key.split(".", 1)[1]: value for key, value in CHECKPOINT_DEFAULTS.items()}
MLP = {"num_cells": [256, 256], "activation_class": nn.Tanh}


# ---------------------------------------------------------------------------------------------- bare loops
def _env(seed: int, continuous: bool = True):
    env = VmasEnv("balance", num_envs=ENVS, continuous_actions=continuous, max_steps=100, seed=seed,
                  scenario_kwargs=SCENARIO_KWARGS)
    env = TransformedEnv(env, RewardSum(in_keys=list(env.reward_keys), reset_keys=list(env.reset_keys)))
    obs = env.observation_spec[G, "observation"]
    return env, obs.shape[-2], obs.shape[-1], env.full_action_spec[G, "action"]


def _tanh_normal_actor(n_agents, obs_dim, action_spec):
    net = nn.Sequential(MultiAgentMLP(obs_dim, 2 * action_spec.shape[-1], n_agents, centralized=False,
                                      share_params=True, **MLP),
                        NormalParamExtractor(scale_mapping="biased_softplus_1.0"))
    return ProbabilisticActor(
        TensorDictModule(net, in_keys=[(G, "observation")], out_keys=[(G, "loc"), (G, "scale")]),
        spec=action_spec, in_keys=[(G, "loc"), (G, "scale")], out_keys=[(G, "action")], distribution_class=TanhNormal,
        distribution_kwargs={"low": action_spec.space.low[0], "high": action_spec.space.high[0]}, return_log_prob=True,
    )


def _q_critic(n_agents, obs_dim, action_dim):
    class Cat(nn.Module):
        def forward(self, obs, action):
            return torch.cat([obs, action], -1)

    return TensorDictSequential(
        TensorDictModule(Cat(), in_keys=[(G, "observation"), (G, "action")], out_keys=[(G, "obs_action")]),
        TensorDictModule(MultiAgentMLP(obs_dim + action_dim, 1, n_agents, centralized=True, share_params=True, **MLP),
                         in_keys=[(G, "obs_action")], out_keys=[(G, "state_action_value")]),
    )


def _expand_done(batch):
    nxt = batch.get("next")
    for key in ("done", "terminated"):
        nxt.set((G, key), nxt.get(key).unsqueeze(-2).expand(nxt.get((G, "reward")).shape))


def _optimizer_step(optimizer, groups, total):
    optimizer.zero_grad()
    total.backward()
    for params in groups:
        torch.nn.utils.clip_grad_norm_(params, CLIP)
    optimizer.step()


def _run(iterations, collector, train_iteration) -> dict[str, float]:
    collect, train, frames = [], [], 0
    iterator = iter(collector)
    for _ in range(iterations):
        t0 = time.perf_counter()
        batch = next(iterator)
        t1 = time.perf_counter()
        train_iteration(batch)
        train.append(time.perf_counter() - t1)
        collect.append(t1 - t0)
        frames += batch.numel()
    collector.shutdown()
    return {"frames": frames, "collect": collect, "train": train}


def bare_mappo(iterations: int, seed: int) -> dict:
    torch.manual_seed(seed)
    env, n, obs_dim, action_spec = _env(seed)
    policy = _tanh_normal_actor(n, obs_dim, action_spec)
    critic = TensorDictModule(MultiAgentMLP(obs_dim, 1, n, centralized=True, share_params=True, **MLP),
                              in_keys=[(G, "observation")], out_keys=[(G, "state_value")])
    loss = ClipPPOLoss(policy, critic, clip_epsilon=0.2, entropy_bonus=False, critic_coeff=1.0, loss_critic_type="l2",
                       normalize_advantage=False)
    loss.set_keys(reward=(G, "reward"), action=(G, "action"), done=(G, "done"), terminated=(G, "terminated"),
                  advantage=(G, "advantage"), value_target=(G, "value_target"), value=(G, "state_value"),
                  sample_log_prob=(G, "action_log_prob"))
    loss.make_value_estimator(ValueEstimators.GAE, gamma=GAMMA, lmbda=0.9)
    groups = [list(policy.parameters()), list(critic.parameters())]
    optimizer = torch.optim.Adam([{"params": p} for p in groups], lr=LR, eps=EPS)
    collector = Collector(env, policy, frames_per_batch=FRAMES, total_frames=-1, auto_register_policy_transforms=False)

    def train(batch):
        with torch.no_grad():
            _expand_done(batch)
            loss.value_estimator(batch, params=loss.critic_network_params,
                                 target_params=loss.target_critic_network_params)
        flat = batch.reshape(-1)
        for _ in range(EPOCHS):
            order = torch.randperm(flat.numel())
            for i in range(FRAMES // MINIBATCH):
                terms = loss(flat[order[i * MINIBATCH:(i + 1) * MINIBATCH]])
                _optimizer_step(optimizer, groups, terms["loss_objective"] + terms["loss_critic"])

    return _run(iterations, collector, train)


def _off_policy(iterations, env, policy, exploration, loss, groups, loss_names, before_extend=None):
    optimizer = torch.optim.Adam([{"params": p} for p in groups], lr=LR, eps=EPS)
    updater = SoftUpdate(loss, tau=TAU)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(MEMORY), sampler=RandomSampler())
    collection_policy = TensorDictSequential(policy, exploration) if exploration is not None else policy
    collector = Collector(env, collection_policy, frames_per_batch=FRAMES, total_frames=-1,
                          auto_register_policy_transforms=False)
    keys = list(dict.fromkeys(loss.in_keys))

    def train(batch):
        with torch.no_grad():
            _expand_done(batch)
            if before_extend is not None:
                before_extend(batch)
        buffer.extend(batch.select(*keys, strict=False).reshape(-1))
        for _ in range(STEPS):
            terms = loss(buffer.sample(BATCH))
            _optimizer_step(optimizer, groups, sum(terms[name] for name in loss_names))
            updater.step()
        if exploration is not None:
            exploration.step(batch.numel())

    return _run(iterations, collector, train)


def bare_maddpg(iterations: int, seed: int) -> dict:
    torch.manual_seed(seed)
    env, n, obs_dim, action_spec = _env(seed)
    actor = TensorDictSequential(
        TensorDictModule(MultiAgentMLP(obs_dim, action_spec.shape[-1], n, centralized=False, share_params=True, **MLP),
                         in_keys=[(G, "observation")], out_keys=[(G, "param")]),
        TanhModule(in_keys=[(G, "param")], out_keys=[(G, "action")], spec=action_spec[0]),
    )
    exploration = AdditiveGaussianModule(spec=action_spec[0], sigma_init=0.8, sigma_end=0.01, annealing_num_steps=10**6,
                                         action_key=(G, "action"))
    critic = _q_critic(n, obs_dim, action_spec.shape[-1])
    loss = DDPGLoss(actor, critic, loss_function="l2", delay_value=True)
    loss.set_keys(state_action_value=(G, "state_action_value"), reward=(G, "reward"), done=(G, "done"),
                  terminated=(G, "terminated"))
    loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
    groups = [list(actor.parameters()), list(critic.parameters())]
    return _off_policy(iterations, env, actor, exploration, loss, groups, ("loss_actor", "loss_value"))


def bare_masac(iterations: int, seed: int) -> dict:
    torch.manual_seed(seed)
    env, n, obs_dim, action_spec = _env(seed)
    actor = _tanh_normal_actor(n, obs_dim, action_spec)
    loss = SACLoss(actor, _q_critic(n, obs_dim, action_spec.shape[-1]), num_qvalue_nets=2, loss_function="l2",
                   target_entropy=-float(action_spec.shape[-1]), delay_qvalue=True)
    loss.set_keys(state_action_value=(G, "state_action_value"), action=(G, "action"), reward=(G, "reward"),
                  done=(G, "done"), terminated=(G, "terminated"), log_prob=(G, "action_log_prob"))
    loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
    groups = [list(actor.parameters()), list(loss.qvalue_network_params.values(True, True)), [loss.log_alpha]]
    return _off_policy(iterations, env, actor, None, loss, groups, ("loss_actor", "loss_qvalue", "loss_alpha"))


def bare_qmix(iterations: int, seed: int) -> dict:
    torch.manual_seed(seed)
    env, n, obs_dim, env_action_spec = _env(seed, continuous=False)
    action_spec = env_action_spec[0]  # the group's spec [n_agents] without the envs' batch dimension
    n_actions = action_spec.space.n
    policy = TensorDictSequential(
        TensorDictModule(MultiAgentMLP(obs_dim, n_actions, n, centralized=False, share_params=True, **MLP),
                         in_keys=[(G, "observation")], out_keys=[(G, "action_value")]),
        QValueModule(action_value_key=(G, "action_value"), spec=action_spec[0],
                     out_keys=[(G, "action"), (G, "action_value"), (G, "chosen_action_value")]),
    )
    exploration = EGreedyModule(spec=action_spec, eps_init=0.8, eps_end=0.01, annealing_num_steps=10**6,
                                action_key=(G, "action"))
    mixer = TensorDictModule(QMixer(state_shape=(n, obs_dim), mixing_embed_dim=32, n_agents=n, device="cpu"),
                             in_keys=[(G, "chosen_action_value"), (G, "observation")], out_keys=[("team", "global_value")])
    loss = QMixerLoss(policy, mixer, loss_function="l2", delay_value=True, action_space=action_spec)
    loss.set_keys(action_value=(G, "action_value"), local_value=(G, "chosen_action_value"),
                  global_value=("team", "global_value"), action=(G, "action"), reward=("team", "reward"),
                  done=("team", "done"), terminated=("team", "terminated"))
    loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)

    def team_entries(batch):  # the team's reward (mean over agents) and done flags, where the TD target reads them
        nxt = batch.get("next")
        nxt.set(("team", "reward"), nxt.get((G, "reward")).mean(-2))
        for key in ("done", "terminated"):
            nxt.set(("team", key), nxt.get((G, key)).any(-2))

    groups = [list(policy.parameters()), list(loss.mixer_network_params.values(True, True))]
    return _off_policy(iterations, env, policy, exploration, loss, groups, ("loss",), before_extend=team_entries)


# ---------------------------------------------------------------------------------------------- lit-marl
def lit_marl(algorithm: str, iterations: int, seed: int, workdir: Path, compile: bool = False) -> dict:
    """The lit-marl algorithm as `lit-marl fit` runs it: CSV logger, its checkpoint settings, progress bar, clipping."""
    pl.seed_everything(seed, verbose=False)
    task = VmasTask("balance", max_steps=100, scenario_kwargs=SCENARIO_KWARGS, continuous_actions=algorithm != "qmix")
    common = dict(frames_per_batch=FRAMES, num_envs=ENVS, lr=LR, adam_eps=EPS, seed=seed,
                  max_frames=FRAMES * iterations, **({"compile": True} if compile else {}))
    if algorithm == "mappo":
        model = MAPPO(task, n_minibatch_iters=EPOCHS, minibatch_size=MINIBATCH, **common)
    else:
        cls = {"maddpg": MADDPG, "masac": MASAC, "qmix": QMIX}[algorithm]
        model = cls(task, n_optimizer_steps=STEPS, train_batch_size=BATCH, memory_size=MEMORY, polyak_tau=TAU,
                    **common)
    trainer = pl.Trainer(max_epochs=-1, gradient_clip_val=CLIP, check_val_every_n_epoch=10_000, num_sanity_val_steps=0,
                         logger=pl.loggers.CSVLogger(workdir, name=f"throughput_{algorithm}"), default_root_dir=workdir,
                         callbacks=[pl.callbacks.ModelCheckpoint(**CHECKPOINTS)], enable_model_summary=False,
                         log_every_n_steps=1)
    trainer.fit(model)
    with open(Path(trainer.logger.log_dir) / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("timers/collection_time")]
    return {"frames": model.frames, "collect": [float(r["timers/collection_time"]) for r in rows],
            "train": [float(r["timers/training_time"]) for r in rows]}


BARE: dict[str, Callable[[int, int], dict]] = {"mappo": bare_mappo, "maddpg": bare_maddpg, "masac": bare_masac,
                                              "qmix": bare_qmix}


def _timed(fn: Callable[[], dict]) -> dict[str, float]:
    start = time.perf_counter()
    run = fn()
    wall = time.perf_counter() - start
    steady = slice(1, None) if len(run["collect"]) > 1 else slice(None)
    collect, train = statistics.median(run["collect"][steady]), statistics.median(run["train"][steady])
    return {"frames": run["frames"], "seconds": wall, "fps": run["frames"] / wall,
            "collection_s_per_iter": collect, "training_s_per_iter": train, "steady_fps": FRAMES / (collect + train)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--algorithms", nargs="+", default=["mappo", "maddpg", "masac", "qmix"], choices=sorted(BARE))
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, all cores)")
    parser.add_argument("--compile", action="store_true", help="lit-marl with compile: true")
    parser.add_argument("--sides", nargs="+", default=["bare", "lit_marl"], choices=["bare", "lit_marl"],
                        help="run one side only (e.g. to read its peak memory, printed at the end)")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="also profile one lit-marl run per algorithm")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    summary: dict = {"config": {"frames_per_batch": FRAMES, "num_envs": ENVS, "iterations_per_run": args.iterations,
                                "rounds": args.rounds, "torch_threads": torch.get_num_threads(),
                                "compile": args.compile}}
    for algorithm in args.algorithms:
        runs: dict[str, list[dict[str, float]]] = {side: [] for side in args.sides}
        for r in range(args.rounds):
            if "bare" in runs:
                runs["bare"].append(_timed(lambda: BARE[algorithm](args.iterations, r)))
            if "lit_marl" in runs:
                runs["lit_marl"].append(_timed(lambda: lit_marl(algorithm, args.iterations, r, out, args.compile)))
            print(f"{algorithm} round {r}: " + ", ".join(f"{side} {rs[-1]['fps']:.0f} fps" for side, rs in runs.items()),
                  file=sys.stderr)
        result = {name: {key: statistics.median(run[key] for run in rs) for key in rs[0]} for name, rs in runs.items()}
        if len(runs) == 2:
            result["ratio_fps_lit_over_bare"] = result["lit_marl"]["fps"] / result["bare"]["fps"]
            result["ratio_steady_fps_lit_over_bare"] = result["lit_marl"]["steady_fps"] / result["bare"]["steady_fps"]
        summary[algorithm] = result
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            lit_marl(algorithm, 2, 0, out)
            profiler.disable()
            stream = io.StringIO()
            pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(30)
            (out / f"profile_{algorithm}.txt").write_text(stream.getvalue())
        name = f"throughput_threads{args.threads or 'default'}_{'-'.join(args.algorithms)}.json"
        (out / name).write_text(json.dumps(summary, indent=2))
    summary["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # this process, all runs
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
