"""Differential harness: does lit-marl compute what BenchMARL 1.5.2 computes? (issue 21)

For each algorithm, ``reference.py`` runs in BenchMARL's own venv (``setup.sh``) and writes what BenchMARL computes
on vmas/balance at its defaults; this script builds the same algorithm from lit-marl's shipped config
(``configs/<algorithm>_vmas_balance.yaml``, through the CLI's parser), loads BenchMARL's initial weights into it,
feeds it BenchMARL's collected batch and minibatch, and compares, check by check:

- ``networks``: the torchrl loss's parameter tensors by attribute (actor, critic, mixer, targets…), shapes in order;
- ``process_batch``: the keys both sides train on (team reward/done, value targets, advantages);
- ``loss terms`` and the loss's ``outputs`` (values, TD errors) on the same weights and minibatch;
- ``grads``: every gradient after clipping; ``weights after``: after the optimizer step and the target update, and
  again after 20 more updates on minibatches from a seeded generator (Adam's state and the target updater carried);
- ``exploration``: epsilon / noise scale at every iteration of a whole anneal, and the actions the collection policy
  takes (exploration included) for the same observations and random draws;
- ``env``: 250 steps of lit-marl's training env for the config's task against BenchMARL's, from the same seeded reset
  with the same actions (``reference.env_rollout``): observations, rewards, done and terminated, resets included.

    python benchmarks/vs_benchmarl/compare.py --algorithms qmix maddpg      # runs setup.sh and reference.py too
    python benchmarks/vs_benchmarl/compare.py --all

Tolerance: float32 closeness, ``rtol=1e-5, atol=1e-6`` (torchrl 0.11 and 0.14 may order sums differently, and
lit-marl's fused Adam rounds its last bits differently: never more). Writes benchmarks/out/vs_benchmarl/<algorithm>.json
and exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the checkout this script sits in, whichever lit-marl is installed
sys.path.insert(0, str(Path(__file__).resolve().parent))  # reference.env_rollout, shared by both sides
OUT = ROOT / "benchmarks" / "out" / "vs_benchmarl"
VENV = Path(os.environ.get("LIT_MARL_BENCHMARL_VENV", ROOT / ".venv-benchmarl"))
RTOL, ATOL = 1e-5, 1e-6
MINIBATCH_SEED, ACTION_SEED, MORE_UPDATES = 1234, 7, 20  # reference.py's
GROUP = "agents"

#: algorithm → (lit-marl config, extra command-line arguments)
LIT_MARL = {
    "mappo": ("mappo_vmas_balance.yaml", []), "ippo": ("ippo_vmas_balance.yaml", []),
    "maddpg": ("maddpg_vmas_balance.yaml", []), "iddpg": ("iddpg_vmas_balance.yaml", []),
    "masac": ("masac_vmas_balance.yaml", []), "isac": ("isac_vmas_balance.yaml", []),
    "masac_discrete": ("masac_vmas_balance.yaml", ["--model.init_args.task.init_args.continuous_actions", "false"]),
    "isac_discrete": ("isac_vmas_balance.yaml", ["--model.init_args.task.init_args.continuous_actions", "false"]),
    "qmix": ("qmix_vmas_balance.yaml", []), "iql": ("iql_vmas_balance.yaml", []),
    "vdn": ("qmix_vmas_balance.yaml", ["--model.class_path", "lit_marl.algorithms.VDN"]),
}
#: BenchMARL's key → lit-marl's key, where the two name the same quantity differently (team entries of mixers)
TEAM = f"{GROUP}_team"
KEY_MAP = {
    "next/reward": f"next/{TEAM}/reward", "next/done": f"next/{TEAM}/done",
    "next/terminated": f"next/{TEAM}/terminated", "chosen_action_value": f"{TEAM}/global_value",
    "td_error": f"{TEAM}/td_error", f"{GROUP}/log_prob": f"{GROUP}/action_log_prob",
}
#: keys of BenchMARL's collected batch that lit-marl's policies write under another name (the sample's log-prob:
#: BenchMARL names it itself, lit-marl keeps torchrl's default)
RAW_KEY_MAP = {f"{GROUP}/log_prob": f"{GROUP}/action_log_prob"}


def reference(algorithm: str, max_frames: int) -> dict[str, Any]:
    """BenchMARL's numbers for ``algorithm`` (made by reference.py in BenchMARL's venv, cached by algorithm)."""
    # cached per version of reference.py: a changed reference script makes new numbers
    version = hashlib.sha256((ROOT / "benchmarks" / "vs_benchmarl" / "reference.py").read_bytes()).hexdigest()[:10]
    path = OUT / f"ref_{algorithm}_{max_frames}_{version}.pt"
    if not path.is_file():
        subprocess.run(["bash", str(ROOT / "benchmarks" / "vs_benchmarl" / "setup.sh")], check=True)
        OUT.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(VENV / "bin" / "python"), str(ROOT / "benchmarks" / "vs_benchmarl" / "reference.py"),
                        "--algorithm", algorithm, "--max_frames", str(max_frames), "--out", str(path)], check=True,
                       env=dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1")))
    return torch.load(path, weights_only=True)


#: BenchMARL resets finished VMAS environments one at a time (torchrl's VmasEnv); lit-marl's batched resets draw the
#: finished environments' starts differently from the same seed, so the checks step lit-marl's env the same way
#: (the run-level differential can instead give BenchMARL's side batched resets: ``run_compare.py --batched_resets``)
PER_ENV_RESETS = ["--model.init_args.task.init_args.batched_resets", "false"]


def lit_marl_model(algorithm: str, max_frames: int, more: list[str] = (), batched_resets: bool = False):
    """lit-marl's shipped config for ``algorithm`` through its CLI's parser; per-environment resets unless
    ``batched_resets`` (the shipped default)."""
    from lit_marl.cli import LitMarlCLI

    config, extra = LIT_MARL[algorithm]
    resets = [] if batched_resets else PER_ENV_RESETS
    cli = LitMarlCLI(args=["--config", str(ROOT / "configs" / config), "--model.init_args.max_frames", str(max_frames),
                           "--trainer.logger", "false", *extra, *resets, *more], run=False)
    return cli.model, cli.trainer


#: buffers lit-marl's networks hold that BenchMARL's hold elsewhere: the action bounds of the DDPG actor's tanh head
#: (``TanhBounded``; torchrl's ``TanhModule`` keeps them outside the loss's parameters). No arithmetic differs.
BOUNDS = ("low", "high")


def live_params(loss) -> dict[str, list[torch.Tensor]]:
    """Every parameter tensor of a torchrl loss by the attribute that holds it, in order (as reference.py), less
    the action bounds (:data:`BOUNDS`)."""
    from tensordict.nn import TensorDictParams

    out = {name: [t for k, t in value.flatten_keys().items() if k.rpartition(".")[2] not in BOUNDS]
           for name, value in vars(loss)["_modules"].items() if isinstance(value, TensorDictParams)}
    out.update({name: [value] for name, value in vars(loss)["_parameters"].items() if value is not None})
    return out


def unflatten(flat: dict[str, torch.Tensor], batch_dims: int):
    from tensordict import TensorDict

    shape = next(iter(flat.values())).shape[:batch_dims]
    td = TensorDict(batch_size=shape)
    for key, value in flat.items():
        td.set(tuple(key.split("/")), value.clone())
    # the group's entries have the agent dimension in their batch, as the env's do (exploration draws per agent)
    n_agents = flat[f"{GROUP}/observation"].shape[batch_dims]
    for key in (GROUP, ("next", GROUP)):
        if key in td.keys(include_nested=True):
            td.get(key).batch_size = torch.Size([*shape, n_agents])
    return td


class Checks:
    """Named comparisons, each recorded with its largest absolute difference."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def close(self, name: str, lit: torch.Tensor, ref: torch.Tensor, rtol: float = RTOL, atol: float = ATOL) -> None:
        if lit.shape != ref.shape:
            self.rows.append({"check": name, "ok": False, "detail": f"shape {tuple(lit.shape)} vs {tuple(ref.shape)}"})
            return
        lit, ref = lit.detach().double(), ref.detach().double()
        diff = (lit - ref).abs().max().item() if lit.numel() else 0.0
        ok = bool(torch.allclose(lit, ref, rtol=rtol, atol=atol))
        self.rows.append({"check": name, "ok": ok, "max_abs_diff": diff})

    def note(self, name: str, detail: str) -> None:
        """A difference that changes no trained number (said in the report, not a failure)."""
        self.rows.append({"check": name, "ok": True, "note": detail})

    def equal(self, name: str, lit: Any, ref: Any) -> None:
        self.rows.append({"check": name, "ok": lit == ref, "detail": "" if lit == ref else f"{lit!r} vs {ref!r}"})

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if not r["ok"]]


def compare(algorithm: str, max_frames: int) -> Checks:
    ref = reference(algorithm, max_frames)
    checks = Checks()
    torch.manual_seed(0)
    model, _ = lit_marl_model(algorithm, max_frames)
    loss = model.losses[GROUP]
    # the torchrl loss lit-marl's is or extends (VDN/QMIX: MixerLoss, a QMixerLoss that also reports its values)
    torchrl_class = next(c for c in type(loss).__mro__ if c.__module__.startswith("torchrl."))
    checks.equal("loss class", torchrl_class.__name__, ref["meta"]["loss_class"])

    # networks: the same tensors by attribute, shapes in order; then BenchMARL's initial values into lit-marl
    params = live_params(loss)
    checks.equal("networks: loss attributes", sorted(params), sorted(ref["params"]))
    for attr in sorted(set(params) & set(ref["params"])):
        checks.equal(f"networks: {attr} shapes", [tuple(t.shape) for t in params[attr]],
                     [tuple(t.shape) for t in ref["params"][attr]])
        if [t.shape for t in params[attr]] == [t.shape for t in ref["params"][attr]]:
            with torch.no_grad():
                for mine, theirs in zip(params[attr], ref["params"][attr]):
                    mine.copy_(theirs)

    # the collection policy (exploration at the start of its anneal) on the same observations and random draws
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    if "collection_actions" in ref:
        observations = unflatten(ref["observations"], batch_dims=1)
        torch.manual_seed(ACTION_SEED)
        with set_exploration_type(ExplorationType.RANDOM), torch.no_grad():
            acted = model.collection.policy()(observations.clone())
        checks.close("exploration: actions of the collection policy", acted.get((GROUP, "action")),
                     ref["collection_actions"])

    # process_batch on BenchMARL's raw batch
    raw = unflatten({RAW_KEY_MAP.get(k, k): v for k, v in ref["raw_batch"].items()}, batch_dims=2)
    with torch.no_grad():
        processed = model.process_batch(raw.clone())
    ours = {"/".join(k if isinstance(k, tuple) else (k,)): v
            for k, v in processed.items(include_nested=True, leaves_only=True)}
    for key, value in ref["processed_batch"].items():
        if key in ref["raw_batch"] and torch.equal(ref["raw_batch"][key], value):
            continue  # untouched by BenchMARL's process_batch
        mine = ours.get(KEY_MAP.get(key, key))
        if mine is None:
            checks.equal(f"process_batch: {key}", "missing", "present")
            continue
        checks.close(f"process_batch: {key}", mine.reshape(value.shape) if mine.numel() == value.numel() else mine,
                     value)

    # one update on the same minibatch
    minibatch = processed.reshape(-1)[ref["indices"]].clone()
    optimizer = model.configure_optimizers()
    optimizer.zero_grad()
    torch.manual_seed(MINIBATCH_SEED)  # as reference.py: the same draws for losses that sample (SAC)
    terms = model.loss(GROUP, model.group_batch(_keyed(minibatch), GROUP) if not model.on_policy else minibatch)
    for name, value in ref["loss_terms"].items():
        mine = terms.get(name, None)
        trained = name == "loss" or name.startswith("loss_")
        if mine is None and trained and not value.any():
            checks.note(f"loss term {name}", "BenchMARL's is 0 (a coefficient of 0); lit-marl leaves the term out")
        elif trained:
            checks.close(f"loss term {name}", mine if mine is not None else torch.tensor(float("nan")), value)
        elif mine is None or mine.shape != value.shape:  # a diagnostic torchrl 0.11 and 0.14 report differently
            checks.note(f"loss diagnostic {name}", "not computed by lit-marl" if mine is None else
                        f"shape {tuple(mine.shape)} vs {tuple(value.shape)} (torchrl 0.14 vs 0.11)")
        else:
            checks.close(f"loss diagnostic {name}", mine, value)
    written = {"/".join(k if isinstance(k, tuple) else (k,)): v
               for k, v in minibatch.items(include_nested=True, leaves_only=True)}
    for key, value in ref["minibatch_out"].items():
        if key in ref["processed_batch"]:
            continue  # an input, compared above
        mine = written.get(KEY_MAP.get(key, key))
        if mine is not None:
            checks.close(f"loss output {key}", mine.reshape(value.shape) if mine.numel() == value.numel() else mine,
                         value)
    total = sum(v for k, v in terms.items() if k == "loss" or k.startswith("loss_"))
    total.backward()
    model.configure_gradient_clipping(optimizer, gradient_clip_val=float(ref["meta"]["config"]["clip_grad_val"]),
                                      gradient_clip_algorithm="norm")
    for attr, grads in ref["grads"].items():
        for i, (mine, theirs) in enumerate(zip(params.get(attr, []), grads)):
            if theirs.numel():
                checks.close(f"grad {attr}[{i}] after clipping", mine.grad, theirs)
    optimizer.step()
    updater = getattr(model.learners[GROUP], "target_updater", None)  # off-policy learners have one
    if updater is not None:
        updater.step()
    for attr, tensors in ref["params_after"].items():
        for i, (mine, theirs) in enumerate(zip(params.get(attr, []), tensors)):
            checks.close(f"weights after: {attr}[{i}]", mine, theirs)

    # 20 more updates on minibatches from the same seeded generator (Adam's state, target updater carried along)
    generator = torch.Generator().manual_seed(MINIBATCH_SEED)
    flat_batch = processed.reshape(-1)
    torch.randperm(flat_batch.shape[0], generator=generator)  # as reference.py drew the first minibatch
    size = len(ref["indices"])
    for _ in range(MORE_UPDATES):
        batch = flat_batch[torch.randint(flat_batch.shape[0], (size,), generator=generator)].clone()
        optimizer.zero_grad()
        terms = model.loss(GROUP, model.group_batch(_keyed(batch), GROUP) if not model.on_policy else batch)
        sum(v for k, v in terms.items() if k == "loss" or k.startswith("loss_")).backward()
        model.configure_gradient_clipping(optimizer, gradient_clip_val=float(ref["meta"]["config"]["clip_grad_val"]),
                                          gradient_clip_algorithm="norm")
        optimizer.step()
        if updater is not None:
            updater.step()
    for attr, tensors in ref["params_after_more"].items():
        for i, (mine, theirs) in enumerate(zip(params.get(attr, []), tensors)):
            checks.close(f"weights after {MORE_UPDATES + 1} updates: {attr}[{i}]", mine, theirs)

    # the environment: lit-marl's task (the config's) against BenchMARL's, the same seeded reset and actions
    from reference import ENV_COUNT, env_rollout

    env = model.task.make_env(num_envs=ENV_COUNT, seed=0, device="cpu")
    rollout = env_rollout(env, ref["meta"]["continuous"])
    env.close()
    for key, value in ref["env_rollout"].items():
        checks.close(f"env: {key} over {value.shape[1]} steps", rollout[key], value)

    # exploration over a whole anneal
    schedule = ref["exploration"]
    if schedule.get("frames"):
        module = model.learners[GROUP].exploration
        values = []
        frames_per_batch = schedule["frames"][1] - schedule["frames"][0]
        for _ in schedule["frames"]:
            values.append(float(getattr(module, schedule["name"])))
            model.learners[GROUP].after_collection(frames_per_batch)
        checks.close(f"exploration: {schedule['name']} by iteration", torch.tensor(values),
                     torch.tensor(schedule["value"]))
    return checks


def _keyed(minibatch):
    from tensordict import TensorDict

    return TensorDict({GROUP: minibatch}, batch_size=minibatch.batch_size)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithms", nargs="+", choices=sorted(LIT_MARL), default=[])
    parser.add_argument("--all", action="store_true", help="every algorithm")
    parser.add_argument("--max_frames", type=int, default=120_000, help="the budget (sets the exploration anneal)")
    args = parser.parse_args()
    algorithms = sorted(LIT_MARL) if args.all else args.algorithms
    if not algorithms:
        parser.error("name --algorithms or --all")
    failures = 0
    for algorithm in algorithms:
        checks = compare(algorithm, args.max_frames)
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / f"{algorithm}.json").write_text(json.dumps(checks.rows, indent=1))
        worst = max((r.get("max_abs_diff", 0.0) for r in checks.rows), default=0.0)
        print(f"{algorithm}: {len(checks.rows) - len(checks.failed)}/{len(checks.rows)} checks agree "
              f"(largest difference {worst:.3g})")
        for row in checks.failed:
            print(f"  DIFFERS {row['check']}: {row.get('detail') or row.get('max_abs_diff')}")
        for row in checks.rows:
            if row.get("note"):
                print(f"  note: {row['check']}: {row['note']}")
        failures += bool(checks.failed)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
