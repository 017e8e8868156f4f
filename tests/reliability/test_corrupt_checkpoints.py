"""Corrupt or foreign checkpoints are refused by name (exit code 2, nothing written), never a crash inside
``torch.load`` or ``load_state_dict``; the same holds for the replay-buffer sidecar."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from functools import partial
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from lit_marl.algorithms import IQL, MAPPO
from lit_marl.checkpoint import AtomicCheckpointIO, read_checkpoint
from lit_marl.cli import main
from lit_marl.errors import CheckpointError
from lit_marl.models import Mlp
from tests.helpers.tiny import tiny_kwargs, tiny_task, tiny_trainer
from tests.reliability.helpers import QUIET, expect_exit, run_dirs, tiny_config, tiny_off_policy_config


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny MAPPO run through the CLI: (its config.yaml, its last.ckpt)."""
    root = tmp_path_factory.mktemp("trained")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        main(["fit", "--config", str(tiny_config(root / "tiny.yaml")), *QUIET])
        (run,) = run_dirs()
    finally:
        os.chdir(cwd)
    return root / run / "config.yaml", root / run / "checkpoints" / "last.ckpt"


def _resume(capsys, trained, ckpt: Path, *fragments: str, extra=()) -> str:
    config, _ = trained
    return expect_exit(capsys, ["fit", "--config", str(config), "--ckpt_path", str(ckpt), *QUIET, *extra], 2,
                       "ckpt_path", *fragments)


@pytest.mark.parametrize("keep", [0, 1, 100, 0.5, -1])
def test_truncated_checkpoint_is_refused(capsys, trained, tmp_path, keep):
    data = trained[1].read_bytes()
    n = keep if isinstance(keep, int) and keep >= 0 else (int(len(data) * keep) if keep > 0 else len(data) - 1)
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(data[:n])
    _resume(capsys, trained, cut, "cut.ckpt", "truncated or corrupt")


@pytest.mark.parametrize("seed", range(40))
def test_random_bytes_are_refused_by_name(tmp_path, seed):
    rng = torch.Generator().manual_seed(seed)
    noise = tmp_path / "noise.ckpt"
    size = int(torch.randint(1, 20_000, (1,), generator=rng))
    data = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=rng).numpy().tobytes()
    if seed % 2:  # half of them look like a zip archive (torch.save's format) at first sight
        data = b"PK\x03\x04" + data
    noise.write_bytes(data)
    for load in (read_checkpoint, AtomicCheckpointIO().load_checkpoint):
        with pytest.raises(CheckpointError, match="noise.ckpt.*truncated or corrupt"):
            load(noise)


def test_random_bytes_and_foreign_files_are_refused(capsys, trained, tmp_path):
    noise = tmp_path / "noise.ckpt"
    noise.write_bytes(os.urandom(4096))
    _resume(capsys, trained, noise, "noise.ckpt", "truncated or corrupt")
    pickled = tmp_path / "pickled.ckpt"  # a pickle that weights_only=True must not execute
    pickled.write_bytes(pickle.dumps({"lit_marl": {"format_version": 1}, "hook": os.getcwd}))
    _resume(capsys, trained, pickled, "pickled.ckpt", "weights_only=True")
    plain = tmp_path / "plain.ckpt"  # a torch file, but not lit-marl's
    torch.save({"state_dict": {}}, plain)
    _resume(capsys, trained, plain, "plain.ckpt", "not a lit-marl checkpoint")
    _resume(capsys, trained, tmp_path, "does not exist (or is not a file)")


def test_bytes_changed_inside_a_checkpoint_are_refused(capsys, trained, tmp_path):
    """Issue 48: bytes changed inside a weight's member pass torch.load(weights_only=True), as other weights; its
    CRC-32 does not match."""
    damaged = tmp_path / "damaged.ckpt"
    damaged.write_bytes(_bytes_inside(trained[1].read_bytes()))
    torch.load(damaged, weights_only=True)  # what torch.load alone lets through
    for load in (read_checkpoint, AtomicCheckpointIO().load_checkpoint):
        with pytest.raises(CheckpointError, match=r"damaged.ckpt' is damaged: its member .* fails its CRC-32 check"):
            load(damaged)
    _resume(capsys, trained, damaged, "damaged.ckpt' is damaged", "an earlier checkpoint of the run")


def _edited(trained, tmp_path, edit) -> Path:
    checkpoint = torch.load(trained[1], weights_only=True)
    edit(checkpoint)
    path = tmp_path / "edited.ckpt"
    torch.save(checkpoint, path)
    return path


@pytest.mark.parametrize(("version", "fragments"), [
    (4, ["format_version 4", "newer lit-marl", "reads format 1, 2, 3"]),
    (0, ["format_version 0", "another lit-marl", "reads format 1, 2, 3"]),
    (None, ["format_version None", "reads format 1, 2, 3"]),
])
def test_checkpoint_of_another_format_version_is_refused(capsys, trained, tmp_path, version, fragments):
    ckpt = _edited(trained, tmp_path, lambda c: c["lit_marl"].update(format_version=version))
    _resume(capsys, trained, ckpt, *fragments)


def test_checkpoint_of_another_algorithm_task_or_group_layout_is_refused(capsys, trained, tmp_path):
    _resume(capsys, trained, trained[1], "algorithm 'mappo'", "'ippo'",
            extra=["--model.class_path", "lit_marl.algorithms.IPPO"])
    _resume(capsys, trained, trained[1], "checkpoint is for task", "n_agents",
            extra=["--model.init_args.task.init_args.scenario_kwargs", "{n_agents: 3}"])
    regrouped = _edited(trained, tmp_path, lambda c: c["lit_marl"].update(
        group_map={"blue": ["agent_0", "agent_1"], "red": ["agent_2", "agent_3"]}))
    _resume(capsys, trained, regrouped, "agent groups", "'blue'", "task.agent_groups")


def test_checkpoint_of_other_networks_is_refused_before_load_state_dict(capsys, trained):
    err = _resume(capsys, trained, trained[1], "networks do not fit the model", "another shape", "[32,",
                  extra=["--model.init_args.actor_model.init_args.num_cells", "[32, 32]"])
    assert "Traceback" not in err
    _resume(capsys, trained, trained[1], "networks do not fit the model", "[64, 16] in the checkpoint, [4, 64, 16]",
            extra=["--model.init_args.share_policy_params", "false"])


def test_python_api_refuses_other_networks_by_name(trained, tmp_path):
    task = tiny_task("balance", scenario_kwargs={"n_agents": 4, "package_mass": 5, "random_package_pos_on_line": True})
    model = MAPPO(task, **tiny_kwargs(actor_model=Mlp([8])))
    with pytest.raises(CheckpointError, match="networks do not fit the model"):
        model.on_load_checkpoint(torch.load(trained[1], weights_only=True))
    # and Trainer.fit(ckpt_path=…) with a foreign checkpoint stops with the same error, not inside PyTorch
    with pytest.raises(CheckpointError, match="checkpoint is for task|networks do not fit"):
        tiny_trainer(tmp_path).fit(MAPPO(tiny_task(), **tiny_kwargs()), ckpt_path=trained[1])


@pytest.fixture(scope="module")
def off_policy_checkpoint(tmp_path_factory) -> Path:
    """An IQL checkpoint with its replay-buffer sidecar."""
    root = tmp_path_factory.mktemp("iql")
    pl.seed_everything(0)
    model = IQL(tiny_task(continuous_actions=False), actor_model=Mlp([16]), frames_per_batch=40, num_envs=4,
                n_optimizer_steps=2, train_batch_size=16, memory_size=200, max_frames=400, evaluation_episodes=2)
    trainer = tiny_trainer(root, max_epochs=1, check_val_every_n_epoch=5)
    trainer.fit(model)
    path = root / "iql.ckpt"
    trainer.save_checkpoint(path)
    return path


def _sidecar(ckpt: Path) -> Path:
    (sidecar,) = ckpt.parent.glob(f"{ckpt.name}.buffers-*")
    return sidecar


def _bytes_inside(data: bytes, seed: int = 0) -> bytes:
    """Up to 4 KiB of random bytes written over the largest tensor of a ``torch.save`` archive: its zip headers stay
    whole, so it passes ``zipfile.is_zipfile`` and ``torch.load(weights_only=True)``, with other values."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        member = max((info for info in archive.infolist() if "/data/" in info.filename),  # a tensor's bytes
                     key=lambda info: info.file_size)
    header = member.header_offset  # a local header: 30 bytes, then the name and the extra field, then the data
    start = header + 30 + int.from_bytes(data[header + 26:header + 28], "little") + \
        int.from_bytes(data[header + 28:header + 30], "little")
    size = min(4096, member.file_size)
    noise = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    return data[:start] + noise.numpy().tobytes() + data[start + size:]


@pytest.mark.parametrize("damage", ["missing", "truncated", "noise", "bytes inside"])
def test_missing_or_corrupt_buffer_sidecar_is_refused(off_policy_checkpoint, tmp_path, damage):
    """Issue 48: bytes changed inside the sidecar loaded before, as ~1000 other replay values (two non-finite)."""
    ckpt = tmp_path / "copy.ckpt"
    ckpt.write_bytes(off_policy_checkpoint.read_bytes())
    data = _sidecar(off_policy_checkpoint).read_bytes()
    sidecar = tmp_path / _sidecar(off_policy_checkpoint).name.replace(off_policy_checkpoint.name, ckpt.name)
    if damage == "truncated":
        sidecar.write_bytes(data[: len(data) // 2])
    elif damage == "noise":
        sidecar.write_bytes(os.urandom(len(data)))
    elif damage == "bytes inside":
        sidecar.write_bytes(_bytes_inside(data))
        torch.load(sidecar, weights_only=True)  # what torch.load alone lets through
    expected = {"missing": "are missing", "bytes inside": "are damaged: its member .* fails its CRC-32 check"}.get(
        damage, "truncated or corrupt")
    for load in (partial(read_checkpoint, verify_buffers=True), AtomicCheckpointIO().load_checkpoint):
        with pytest.raises(CheckpointError, match=expected) as err:
            load(ckpt)
        assert sidecar.name in str(err.value)


def test_a_resume_refuses_a_damaged_sidecar_and_names_its_hard_link(capsys, tmp_path, monkeypatch):
    """last.ckpt's sidecar is the periodic checkpoint's file under a second name: bytes changed in one are changed in
    both, and the refusal (exit 2, before the run starts) says so, and where to resume from instead."""
    monkeypatch.chdir(tmp_path)
    config = tiny_off_policy_config(tmp_path / "maddpg.yaml")
    main(["fit", "--config", str(config), *QUIET])
    (run,) = run_dirs()
    last = run / "checkpoints" / "last.ckpt"
    sidecar = _sidecar(last)
    (periodic,) = (run / "checkpoints").glob("frames_*80.ckpt.buffers-*")
    assert periodic.stat().st_ino == sidecar.stat().st_ino
    sidecar.write_bytes(_bytes_inside(sidecar.read_bytes()))  # in place: both names see it
    err = expect_exit(capsys, ["fit", "--config", str(run / "config.yaml"), "--ckpt_path", str(last), *QUIET], 2,
                      f"lit-marl: error: ckpt_path: the replay buffers of {str(last)!r} ({sidecar.name}) are damaged",
                      "fails its CRC-32 check", f"it is one file with {periodic.name} (a hard link",
                      "so those are damaged too", "resume from an earlier checkpoint whose replay buffers are whole")
    assert "Traceback" not in err


def test_intact_sidecar_loads(off_policy_checkpoint):
    checkpoint = AtomicCheckpointIO().load_checkpoint(off_policy_checkpoint)
    assert checkpoint["lit_marl"]["replay_buffers"]["agents"]["length"] == 40
