"""The BenchMARL side of the differential harness: runs in BenchMARL 1.5.2's own venv (``setup.sh``), never imports
lit-marl, and writes what BenchMARL computes for one algorithm on vmas/balance with its default configuration:

- the networks: every parameter tensor of the torchrl loss by the loss attribute that holds it (``actor_network_params``,
  ``mixer_network_params``, targets…), in order, with the initial values;
- the first collected batch, raw (before ``process_batch``) and as ``process_batch`` leaves it;
- one update on a fixed minibatch of that batch (indices from a seeded permutation): every loss term, the outputs the
  loss writes (values, TD errors, advantages), the gradients after BenchMARL's own clipping (``Experiment._grad_clip``),
  the weights after its optimizers' steps, the target networks after its target updater's step, and both again after
  20 more updates on minibatches from a seeded generator (Adam's state and the target updater carried along);
- exploration: epsilon or the noise scale at each iteration of a whole anneal, and the actions the collection policy
  (exploration included) takes for 50 observations of the batch, from a seeded generator;
- the environment: 250 steps of BenchMARL's own training env (10 envs, its task config) from a seeded reset, with
  actions from a seeded generator (:func:`env_rollout`): observations, rewards, done and terminated, resets included.

    .venv-benchmarl/bin/python benchmarks/vs_benchmarl/reference.py --algorithm qmix --out ref_qmix.pt

The file holds only tensors, numbers, strings and lists (``torch.load(weights_only=True)`` reads it).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

#: algorithm name → (BenchMARL config class name, continuous actions)
ALGORITHMS = {
    "mappo": ("MappoConfig", True), "ippo": ("IppoConfig", True), "maddpg": ("MaddpgConfig", True),
    "iddpg": ("IddpgConfig", True), "masac": ("MasacConfig", True), "isac": ("IsacConfig", True),
    "masac_discrete": ("MasacConfig", False), "isac_discrete": ("IsacConfig", False),
    "qmix": ("QmixConfig", False), "vdn": ("VdnConfig", False), "iql": ("IqlConfig", False),
}
MINIBATCH_SEED = 1234
ACTION_SEED = 7
MORE_UPDATES = 20
GROUP = "agents"
ENV_SEED, ENV_ACTION_SEED, ENV_STEPS, ENV_COUNT = 11, 5, 250, 10


def env_rollout(env, continuous: bool) -> dict[str, torch.Tensor]:
    """``ENV_STEPS`` steps of ``env`` (``ENV_COUNT`` vectorised envs) from a reset seeded with ``ENV_SEED``, each
    agent's action drawn uniformly from its action space by a generator seeded with ``ENV_ACTION_SEED``; episodes
    that end are reset by the rollout. Shared by both sides: compare.py imports it (it needs torch only)."""
    spec = env.full_action_spec[GROUP, "action"]
    generator = torch.Generator().manual_seed(ENV_ACTION_SEED)

    def policy(td):
        if continuous:
            low, high = spec.space.low, spec.space.high
            action = low + (high - low) * torch.rand(spec.shape, generator=generator)
        else:
            action = torch.randint(0, spec.space.n, spec.shape, generator=generator)
        td.set((GROUP, "action"), action)
        return td

    env.set_seed(ENV_SEED)
    rollout = env.rollout(max_steps=ENV_STEPS, policy=policy, break_when_any_done=False)
    keys = [(GROUP, "observation"), (GROUP, "action"), ("next", GROUP, "reward"), ("next", GROUP, "observation"),
            ("next", "done"), ("next", "terminated")]
    return {"/".join(k): rollout.get(k).clone() for k in keys}


def flat(td) -> dict[str, torch.Tensor]:
    """A TensorDict as ``{"a/b/c": tensor}`` (plain data for the other venv)."""
    return {"/".join(k if isinstance(k, tuple) else (k,)): v.detach().clone()
            for k, v in td.items(include_nested=True, leaves_only=True) if isinstance(v, torch.Tensor)}


def loss_params(loss) -> dict[str, list[torch.Tensor]]:
    """Every parameter tensor of a torchrl loss, by the attribute that holds it, in order (copies)."""
    return {name: [t.detach().clone() for t in tensors] for name, tensors in loss_params_live(loss).items()}


def experiment(algorithm: str, max_frames: int, folder: Path, callbacks=None, max_n_iters: int | None = None,
               updates: int | None = None):
    """BenchMARL's Experiment for ``algorithm`` on vmas/balance at its defaults (seed 0, CPU, no evaluation or
    checkpoints); ``max_n_iters`` stops it after that many iterations while exploration still anneals over a third of
    ``max_frames``; ``updates`` replaces the optimizer steps per iteration (off-policy) or the epochs (on-policy)."""
    from benchmarl import algorithms
    from benchmarl.environments import VmasTask
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig

    config_name, continuous = ALGORITHMS[algorithm]
    config = ExperimentConfig.get_from_yaml()
    config.loggers, config.create_json, config.save_folder = [], False, str(folder)
    config.max_n_frames, config.checkpoint_interval, config.checkpoint_at_end = max_frames, 0, False
    config.evaluation = False
    config.prefer_continuous_actions = continuous
    config.sampling_device = config.train_device = "cpu"
    if updates is not None:
        config.off_policy_n_optimizer_steps = config.on_policy_n_minibatch_iters = updates
    if max_n_iters is not None:
        config.max_n_iters, config.exploration_anneal_frames = max_n_iters, max_frames // 3
    return Experiment(task=VmasTask.BALANCE.get_from_yaml(), algorithm_config=getattr(algorithms, config_name)
                      .get_from_yaml(), model_config=MlpConfig.get_from_yaml(),
                      critic_model_config=MlpConfig.get_from_yaml(), seed=0, config=config,
                      callbacks=callbacks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithm", required=True, choices=sorted(ALGORITHMS))
    parser.add_argument("--max_frames", type=int, default=120_000, help="sets the exploration anneal (a third)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import benchmarl
    import torchrl

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        exp = experiment(args.algorithm, args.max_frames, Path(folder))
        loss = exp.losses[GROUP]
        initial = loss_params(loss)
        raw = next(iter(exp.collector)).detach()
        # what the collection policy does (exploration included, at the start of its anneal) with 50 observations
        from torchrl.envs.utils import ExplorationType, set_exploration_type

        observations = raw[:, :5].reshape(-1).select((GROUP, "observation")).clone()
        torch.manual_seed(ACTION_SEED)
        with set_exploration_type(ExplorationType.RANDOM), torch.no_grad():
            acted = exp.group_policies[GROUP](observations.clone())
        group_batch = raw.exclude(*exp._get_excluded_keys(GROUP))
        processed = exp.algorithm.process_batch(GROUP, group_batch.clone())
        if exp.on_policy:  # what BenchMARL trains on: the processed batch, flattened, minibatches without replacement
            size = exp.config.train_minibatch_size(exp.on_policy)
        else:
            size = exp.config.train_batch_size(exp.on_policy)
        flat_batch = processed.reshape(-1)
        generator = torch.Generator().manual_seed(MINIBATCH_SEED)
        indices = torch.randperm(flat_batch.shape[0], generator=generator)[:size]
        minibatch = flat_batch[indices].clone()

        # one update, through BenchMARL's own loss, loss processing, optimizers, clipping and target updater
        torch.manual_seed(MINIBATCH_SEED)  # the same draws on both sides for losses that sample (SAC)
        loss_vals = loss(minibatch)
        terms = {k: v.detach().clone() for k, v in loss_vals.items()}
        loss_vals = exp.algorithm.process_loss_vals(GROUP, loss_vals)
        grads, norms = {}, {}
        for loss_name, value in loss_vals.items():
            if loss_name not in exp.optimizers[GROUP]:
                continue
            optimizer = exp.optimizers[GROUP][loss_name]
            value.backward()
            norms[loss_name] = float(exp._grad_clip(optimizer))
            for attr, tensors in loss_params_live(loss).items():
                grads.setdefault(attr, [None] * len(tensors))
                for i, t in enumerate(tensors):
                    if t.grad is not None and grads[attr][i] is None:
                        grads[attr][i] = t.grad.detach().clone()
            optimizer.step()
            optimizer.zero_grad()
        if exp.target_updaters[GROUP] is not None:
            exp.target_updaters[GROUP].step()
        after = loss_params(loss)

        # MORE_UPDATES further updates on minibatches drawn by a seeded generator: Adam's state and the target
        # updater's counters carried from step to step
        for _ in range(MORE_UPDATES):
            batch = flat_batch[torch.randint(flat_batch.shape[0], (size,), generator=generator)].clone()
            loss_vals = exp.algorithm.process_loss_vals(GROUP, loss(batch))
            for loss_name, value in loss_vals.items():
                if loss_name in exp.optimizers[GROUP]:
                    value.backward()
                    exp._grad_clip(exp.optimizers[GROUP][loss_name])
                    exp.optimizers[GROUP][loss_name].step()
                    exp.optimizers[GROUP][loss_name].zero_grad()
            if exp.target_updaters[GROUP] is not None:
                exp.target_updaters[GROUP].step()
        after_more = loss_params(loss)

        # exploration over a whole anneal (one step per iteration, after its training, as BenchMARL's loop does)
        policy = exp.group_policies[GROUP]
        explore = policy[-1] if hasattr(policy, "__getitem__") else policy
        schedule = {"frames": [], "value": []}
        for attr in ("eps", "sigma"):
            if hasattr(explore, attr) and hasattr(explore, "step"):
                frames_per_batch = exp.config.collected_frames_per_batch(exp.on_policy)
                for i in range(args.max_frames // frames_per_batch + 2):
                    schedule["frames"].append(i * frames_per_batch)
                    schedule["value"].append(float(getattr(explore, attr)))
                    explore.step(frames_per_batch)
                schedule["name"] = attr
                break
        env = exp.task.get_env_fun(num_envs=ENV_COUNT, continuous_actions=ALGORITHMS[args.algorithm][1], seed=0,
                                   device="cpu")()
        rollout = env_rollout(env, ALGORITHMS[args.algorithm][1])
        env.close()
        hyper = {k: v for k, v in vars(exp.config).items() if isinstance(v, (int, float, bool, str)) or v is None}
        hyper.update({f"algorithm.{k}": v for k, v in vars(exp.algorithm_config).items()
                      if isinstance(v, (int, float, bool, str)) or v is None})
        exp.close()
    torch.save({
        "meta": {"algorithm": args.algorithm, "benchmarl": str(benchmarl.__version__), "torchrl": str(torchrl.__version__),
                 "torch": str(torch.__version__), "group": GROUP, "on_policy": exp.on_policy,
                 "continuous": ALGORITHMS[args.algorithm][1], "loss_class": type(loss).__name__,
                 "config": {k: v for k, v in hyper.items() if v is not None}},
        "params": initial, "raw_batch": flat(raw), "processed_batch": flat(processed), "indices": indices,
        "minibatch_out": flat(minibatch), "loss_terms": terms, "grad_norms": norms,
        "grads": {k: [g if g is not None else torch.zeros(0) for g in v] for k, v in grads.items()},
        "params_after": after, "params_after_more": after_more, "exploration": schedule, "observations": flat(observations),
        "collection_actions": acted.get((GROUP, "action")).clone(), "env_rollout": rollout,
    }, args.out)
    print(f"{args.algorithm}: {args.out}")


def loss_params_live(loss) -> dict[str, list[torch.Tensor]]:
    """Like :func:`loss_params`, the live tensors (to read their ``.grad``)."""
    from tensordict.nn import TensorDictParams

    out = {}
    for name, value in vars(loss)["_modules"].items():
        if isinstance(value, TensorDictParams):
            out[name] = list(value.flatten_keys().values())
    for name, value in vars(loss)["_parameters"].items():
        if value is not None:
            out[name] = [value]
    return out


if __name__ == "__main__":
    main()
