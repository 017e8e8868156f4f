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

Recorded per iteration: the collected batch (observations, actions, rewards, done and terminated), the mean of every
loss term over the iteration's optimizer steps and the first step's terms, every parameter tensor of the loss
(online and target networks) at the iteration's end, and the exploration value (noise scale or epsilon) the
collection used. The initial weights are recorded too: lit-marl's side starts from them.

    .venv-benchmarl/bin/python benchmarks/vs_benchmarl/run_reference.py --algorithm iddpg --iterations 5 \
        --reset_seeds 123 456 ... [--updates 100] --out run_iddpg.pt
"""

from __future__ import annotations

import argparse
import random
import tempfile
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
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
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
                         "updates": args.updates},
                "params": initial, "iterations": recorder.records}, args.out)
    print(f"{args.algorithm}: {len(recorder.records)} iterations -> {args.out}")


if __name__ == "__main__":
    main()
