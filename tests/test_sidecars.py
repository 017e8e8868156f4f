"""The replay buffers' files beside checkpoints (lit_marl/sidecars.py); their round trip through fit and resume is
tested with the off-policy algorithms (tests/algorithms/test_off_policy.py) and under DDP (tests/test_ddp.py)."""

from __future__ import annotations

import torch

from lit_marl.sidecars import SidecarLinks


def test_a_sidecar_is_linked_only_for_the_same_training_state(tmp_path):
    links, buffers = SidecarLinks(), {"agents": {"data": {"x": torch.arange(4.0)}}}
    links.save(buffers, tmp_path / "a", "run1:f100s8")
    links.save(buffers, tmp_path / "b", "run1:f100s8")  # the same run and counters: linked
    links.save({"agents": {"data": {"x": torch.zeros(4)}}}, tmp_path / "c", "run1:f100s9")  # a step later
    links.save(buffers, tmp_path / "d", "run2:f100s9")  # another run's buffers at the same counters: written
    links.save(buffers, tmp_path / "e", None)  # state unknown: written
    links.save(buffers, tmp_path / "g", None)
    ino = {name: (tmp_path / name).stat().st_ino for name in "abcdeg"}
    assert ino["a"] == ino["b"] and len({ino[name] for name in "acdeg"}) == 5
    assert torch.equal(torch.load(tmp_path / "c", weights_only=True)["agents"]["data"]["x"], torch.zeros(4))
    # the earlier file gone (its checkpoint removed): written again, not a dangling link
    links.save(buffers, tmp_path / "c2", "run1:f100s9")
    (tmp_path / "c2").unlink()
    links.save(buffers, tmp_path / "f", "run1:f100s9")
    assert torch.equal(torch.load(tmp_path / "f", weights_only=True)["agents"]["data"]["x"], torch.arange(4.0))
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary left behind
