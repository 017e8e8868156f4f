"""The BenchMARL side of the run-level differential (issue 32): BenchMARL 1.5.2's own training loop
(``Experiment._collection_loop``) for a few whole iterations on vmas/balance at its defaults, with every random draw
injected at the same points as ``run_compare.py`` injects them on lit-marl's side. Runs in BenchMARL's venv
(``setup.sh``), never imports lit-marl.

The draws, per iteration ``i`` (the same on both sides):

- the global torch generator is seeded with ``COLLECT_SEED + i`` right before the iteration's collection: the
  exploration noise or sampled actions, epsilon draws and the environments' partial resets during it draw from it;
- where every environment ended its episode on the last step of the previous batch (and at the first iteration),
  the environments are re-seeded with ``reset_seeds[i]`` and reset before collecting, inside a saved and restored
  generator state: lit-marl's rule for re-seeding (its ``Sampler``), patched into BenchMARL's collector here;
- the global generator is seeded with ``TRAIN_SEED + i`` right after the collection (BenchMARL's
  ``on_batch_collected`` callback): replay-buffer sampling, minibatch permutations and the losses' own draws (SAC's
  sampled actions) come from it.

The environments' partial resets are torchrl 0.11's (``VmasEnv._reset``: VMAS's ``reset_at`` for each finished
environment, one at a time), or with ``--batched_resets`` lit-marl's default way, patched into torchrl's ``VmasEnv``
here by the harness's own equivalent (:func:`patch_batched_resets`): every batch-dimension tensor of the VMAS objects
captured, VMAS's own batched ``Environment.reset()`` of all environments, then each captured tensor put back as
``torch.where(finished, after_reset, before)``. The two ways draw the finished environments' starts differently from
the same VMAS random state, so each side of the differential must reset the same way.

Recorded per iteration: the collected batch (observations, actions, rewards, done and terminated), the mean of every
loss term over the iteration's optimizer steps and the first step's terms, every parameter tensor of the loss
(online and target networks) at the iteration's end, and the exploration value (noise scale or epsilon) the
collection used. The initial weights are recorded too: lit-marl's side starts from them.

    .venv-benchmarl/bin/python benchmarks/vs_benchmarl/run_reference.py --algorithm iddpg --iterations 5 \
        --reset_seeds 123 456 ... [--updates 100] [--batched_resets] --out run_iddpg.pt
"""

from __future__ import annotations

import argparse
import random
import tempfile
import types
from pathlib import Path

import numpy as np
import torch

from benchmarl.experiment.callback import Callback
from reference import ALGORITHMS, GROUP, experiment, loss_params

COLLECT_SEED, TRAIN_SEED = 100_000, 200_000
#: the entries of a collected batch compared, by their BenchMARL name
BATCH_KEYS = [(GROUP, "observation"), (GROUP, "action"), ("next", GROUP, "reward"), ("next", GROUP, "observation"),
              ("next", "done"), ("next", "terminated")]
#: what the collection policy wrote beside the action, where it writes it (PPO's sample log-probability)
POLICY_KEYS = [(GROUP, "log_prob")]


def exploration_value(policy) -> float | None:
    """The noise scale or epsilon of a group's collection policy (None where it explores by sampling only)."""
    layer = policy[-1] if hasattr(policy, "__getitem__") else policy
    for attr in ("sigma", "eps"):
        if hasattr(layer, attr) and hasattr(layer, "step"):
            return float(getattr(layer, attr))
    return None


def _walked(cls: type) -> bool:
    """Whether the capture walks into a value of this class: lists, tuples and dicts; VMAS's objects (a scenario's
    class is loaded from its file, its base class is VMAS's); any other plain object with attributes (not a class,
    module or function)."""
    if issubclass(cls, (list, tuple, dict)) or any((c.__module__ or "").startswith("vmas.") for c in cls.__mro__[:-1]):
        return True
    return getattr(cls, "__dictoffset__", 0) != 0 and not issubclass(
        cls, (type, types.ModuleType, types.FunctionType, types.MethodType))


def capture(root, num_envs: int, copy: bool) -> tuple[dict, dict]:
    """The state of a VMAS environment by path: ``batched`` tensors (first dimension the batch, each as
    ``(owner, key, tensor)``) and ``other`` values (tensors without the batch dimension, numbers, strings), copies
    with ``copy``. A tensor held in a tuple counts as ``other`` (it cannot be put back)."""
    batched, other, seen = {}, {}, set()

    def walk(obj, where: str) -> None:
        if id(obj) in seen or not _walked(type(obj)):
            return
        seen.add(id(obj))
        if isinstance(obj, (list, tuple)):
            items = [(i, i, v) for i, v in enumerate(obj)]
        elif isinstance(obj, dict):  # keys may be objects (VMAS maps entities to indices): named by position
            items = [(k if isinstance(k, (int, str)) else i, k, v) for i, (k, v) in enumerate(list(obj.items()))]
        else:
            items = [(k, k, v) for k, v in list(vars(obj).items())]
        for label, key, value in items:
            here = f"{where}.{label}"
            if isinstance(value, torch.Tensor):
                kept = value.detach().clone() if copy else value
                if value.dim() >= 1 and value.shape[0] == num_envs and not isinstance(obj, tuple):
                    batched[here] = (obj, key, kept)
                else:
                    other[here] = kept
            elif isinstance(value, (bool, int, float, str)) or value is None:
                other[here] = value
            else:
                walk(value, here)

    walk(root, type(root).__name__)
    return batched, other


def patch_batched_resets() -> None:
    """torchrl 0.11's ``VmasEnv._reset``, for a partial reset, resets all environments with VMAS's batched reset and
    puts the unfinished ones back (lit-marl's default resets, written anew here: this venv never imports lit-marl).
    Raises where the reset changes what cannot be put back per environment (a tensor appearing, or a value without
    the batch dimension changing): lit-marl would reset that scenario per environment instead."""
    from torchrl.envs.libs.vmas import VmasEnv

    original = VmasEnv._reset

    def _reset(self, tensordict=None, **kwargs):
        reset = None if tensordict is None else tensordict.get("_reset", None)
        if reset is None or self._env.grad_enabled:
            return original(self, tensordict, **kwargs)
        num_envs = self._env.num_envs
        before, before_other = capture(self._env, num_envs, copy=True)
        self._env.reset(return_observations=False)
        after, after_other = capture(self._env, num_envs, copy=False)
        if before.keys() != after.keys() or before_other.keys() != after_other.keys():
            raise RuntimeError(f"a batched reset changed the simulator's layout: {before.keys() ^ after.keys()} "
                               f"{before_other.keys() ^ after_other.keys()}")
        for path, value in before_other.items():
            now = after_other[path]
            same = torch.equal(value, now) if isinstance(value, torch.Tensor) and isinstance(now, torch.Tensor) \
                else type(value) is type(now) and value == now
            if not same:
                raise RuntimeError(f"a batched reset changed {path}, which has no batch dimension")
        finished = reset.reshape(-1)
        merged = {}
        for path, (owner, key, now) in after.items():
            if id(now) not in merged:  # two paths to one tensor: one result, still shared
                mask = finished.reshape(-1, *([1] * (now.dim() - 1)))
                merged[id(now)] = torch.where(mask, now, before[path][2])
            if isinstance(owner, (list, dict)):
                owner[key] = merged[id(now)]
            else:
                setattr(owner, key, merged[id(now)])
        # torchrl's own reading of observations, done and infos, with no environment left to reset
        return original(self, tensordict.clone(False).set("_reset", torch.zeros_like(reset)), **kwargs)

    VmasEnv._reset = _reset


class SeededCollector:
    """Stands in for BenchMARL's collector in its loop: seeds the global generator before each batch, re-seeds and
    resets the environments where every episode ended on the batch's last step (lit-marl's rule)."""

    def __init__(self, collector, reset_seeds: list[int]) -> None:
        self.collector = collector
        self.reset_seeds = reset_seeds
        self.iteration = 0
        self.at_boundary = True
        self.exploration: list[float | None] = []
        self.policies = None

    def __iter__(self):
        iterator = iter(self.collector)
        while True:
            torch.manual_seed(COLLECT_SEED + self.iteration)
            if self.at_boundary:
                saved = torch.get_rng_state(), np.random.get_state(), random.getstate()
                self.collector.env.set_seed(self.reset_seeds[self.iteration])
                self.collector.reset()
                torch.set_rng_state(saved[0])
                np.random.set_state(saved[1])
                random.setstate(saved[2])
            self.exploration.append(exploration_value(self.policies[GROUP]))
            batch = next(iterator)
            self.at_boundary = bool(batch[..., -1].get(("next", "done")).all())
            self.iteration += 1
            yield batch

    def update_policy_weights_(self, *args, **kwargs):
        return self.collector.update_policy_weights_(*args, **kwargs)

    def shutdown(self):
        return self.collector.shutdown()


class Recorder(Callback):
    """Records each iteration (batch, losses, weights) and seeds the training draws (BenchMARL pickles its callbacks:
    the class lives at module level)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict] = []

    def on_batch_collected(self, batch):
        self.records.append({"batch": {"/".join(k): batch.get(k).detach().clone() for k in BATCH_KEYS},
                             "policy": {"/".join(k): batch.get(k).detach().clone() for k in POLICY_KEYS
                                        if k in batch.keys(include_nested=True)}})
        torch.manual_seed(TRAIN_SEED + len(self.records) - 1)
        if self.experiment.on_policy:
            # torchrl's SamplerWithoutReplacement draws the next permutation as soon as one runs out, so BenchMARL's
            # first epoch of an iteration uses a permutation drawn at the end of the previous one (of the old batch's
            # positions, applied to the new batch: still a permutation); lit-marl draws each epoch's when it starts.
            # Dropped here, the first epoch's is drawn from this iteration's seeded stream, as lit-marl's is.
            for buffer in self.experiment.replay_buffers.values():
                if hasattr(buffer.sampler, "_sample_list"):
                    buffer.sampler._sample_list = None

    def on_train_end(self, training_td, group):
        terms = {k: v for k, v in training_td.items() if k.startswith("loss")}
        self.records[-1]["loss_mean"] = {k: v.float().mean().item() for k, v in terms.items()}
        self.records[-1]["loss_first"] = {k: v[0].float().item() for k, v in terms.items()}
        self.records[-1]["loss_steps"] = {k: v.detach().float().reshape(-1).clone() for k, v in terms.items()}
        self.records[-1]["params"] = loss_params(self.experiment.losses[GROUP])


def quiet_zero_entropy(loss) -> None:
    """BenchMARL's PPO losses keep torchrl's entropy bonus on at coefficient 0: the term adds nothing, but a TanhNormal
    has no closed-form entropy, so each step samples it from the global generator (lit-marl leaves the zero term
    out). Here the estimate runs on a forked generator: the same gradients, and the two sides' minibatch
    permutations come from the same draws."""
    coeff = getattr(loss, "entropy_coeff", None)
    if not getattr(loss, "entropy_bonus", False) or coeff is None or bool(torch.as_tensor(coeff).any()):
        return
    estimate = loss._get_entropy

    def forked(*args, **kwargs):
        with torch.random.fork_rng():
            return estimate(*args, **kwargs)

    loss._get_entropy = forked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithm", required=True, choices=sorted(ALGORITHMS))
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--max_frames", type=int, default=120_000, help="the budget whose third is the anneal")
    parser.add_argument("--reset_seeds", type=int, nargs="+", required=True, help="one per iteration")
    parser.add_argument("--updates", type=int, default=None,
                        help="optimizer steps per iteration (off-policy) or epochs (on-policy); default: BenchMARL's")
    parser.add_argument("--batched_resets", action="store_true",
                        help="partial resets as lit-marl's default: VMAS's batched reset, unfinished envs put back")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.batched_resets:
        patch_batched_resets()
    recorder = Recorder()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        exp = experiment(args.algorithm, args.max_frames, Path(folder), callbacks=[recorder],
                         max_n_iters=args.iterations, updates=args.updates)
        initial = loss_params(exp.losses[GROUP])
        quiet_zero_entropy(exp.losses[GROUP])
        seeded = SeededCollector(exp.collector, args.reset_seeds)
        seeded.policies = exp.group_policies
        exp.collector = seeded
        exp._collection_loop()
        exp.close()
    for record, value in zip(recorder.records, seeded.exploration):
        record["exploration"] = value
    torch.save({"meta": {"algorithm": args.algorithm, "iterations": args.iterations, "reset_seeds": args.reset_seeds,
                         "updates": args.updates,
                         "batched_resets": args.batched_resets},
                "params": initial, "iterations": recorder.records}, args.out)
    print(f"{args.algorithm}: {len(recorder.records)} iterations -> {args.out}")


if __name__ == "__main__":
    main()
