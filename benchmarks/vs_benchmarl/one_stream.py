"""``lit-marl`` with one random stream for the training environments, as BenchMARL draws them (issue 32, item 3).

    python benchmarks/vs_benchmarl/one_stream.py fit --config configs/iddpg_vmas_balance.yaml ...

lit-marl's :class:`~lit_marl.algorithms.collection.Sampler` re-seeds the training environments from ``(seed, rank, iteration)``
whenever every episode ended on a batch's last step (so that a resume continues exactly). This variant seeds them
once, at the run's first collection, and lets the simulator's own generator run on from there for the rest of the
run: finished environments are reset by the collector as they end, from the one stream, as BenchMARL's are. It is a
benchmark arm, not an option: a resume of such a run is not bitwise (its environments' state and the simulator's
generator are not in the checkpoint), so it is used for fresh runs only (``learning.py run --side lit-marl-one-stream``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lit_marl.cli import main  # noqa: E402
from lit_marl.algorithms.collection import Sampler  # noqa: E402

_collect = Sampler.collect


def collect_on_one_stream(self: Sampler, iteration: int):
    """The first call seeds and resets as lit-marl does; every later one never re-seeds."""
    if getattr(self, "_one_stream_started", False):
        self._at_episode_boundary = False
    self._one_stream_started = True
    return _collect(self, iteration)


def install() -> None:
    """From now on every Sampler of this process seeds its environments once (undo: ``Sampler.collect = _collect``)."""
    Sampler.collect = collect_on_one_stream


if __name__ == "__main__":
    install()
    main()
