"""``lit-marl export``: each group's deterministic policy as a TorchScript, ONNX or torch.export file that chooses the
module's actions on the same observations, with a manifest; bad input refused by name before anything is written."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lit_marl import export as export_module
from lit_marl.algorithms import IQL, MADDPG, MAPPO, MASAC
from lit_marl.cli import main
from lit_marl.errors import ConfigError
from lit_marl.export import FORMATS, MANIFEST, export_checkpoint, export_policy, load_exported
from lit_marl.models import Gru, Mlp
from tests.helpers.tiny import tiny_kwargs, tiny_task
from tests.algorithms.test_action_masks import MaskedSpread
from tests.helpers.runs import fit_config, run_dirs, tiny_balance

HAS_ONNXRUNTIME = importlib.util.find_spec("onnxruntime") is not None


def _observed(module, steps: int = 6, num_envs: int = 3) -> TensorDict:
    """Real observations: a deterministic rollout of the module's own policy, flattened to ``[num_envs * steps]``."""
    env = module.collection.make_env(num_envs, seed=1)
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        rollout = env.rollout(steps, policy=module.policy, break_when_any_done=False)
    env.close()
    return rollout.reshape(-1)


def _module_actions(module, group: str, observed: TensorDict) -> torch.Tensor:
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        return module.policies[group](observed.clone()).get((group, "action"))


def _inputs(folder: Path, group: str, observed: TensorDict) -> list[torch.Tensor]:
    manifest = json.loads((folder / MANIFEST).read_text())
    return [observed.get(tuple(i["key"]) if len(i["key"]) > 1 else i["key"][0])
            for i in manifest["groups"][group]["inputs"]]


@pytest.mark.parametrize("format", list(FORMATS))
def test_exported_policy_takes_the_modules_actions_on_the_same_observations(tmp_path, format):
    if format == "onnx" and not HAS_ONNXRUNTIME:
        pytest.skip("onnxruntime is not installed: the ONNX file cannot be run here")
    pl.seed_everything(0)
    # separate actor parameters per agent (vmap inside torchrl's MultiAgentMLP) and a tanh-normal's mode
    module = MAPPO(tiny_task("balance"), **tiny_kwargs(share_policy_params=False))
    folder = export_policy(module, tmp_path / "deploy", format)
    assert sorted(p.name for p in folder.iterdir()) == sorted([MANIFEST, f"agents{FORMATS[format]}"])
    observed = _observed(module)  # 18 observations: another batch size than the one traced
    expected = _module_actions(module, "agents", observed)
    actions = load_exported(folder / f"agents{FORMATS[format]}")(*_inputs(folder, "agents", observed))
    assert actions.shape == expected.shape == (18, 3, 2)
    if format == "onnx":  # ONNX Runtime's kernels round differently in the last bits
        torch.testing.assert_close(actions, expected, rtol=0, atol=1e-5)
    else:
        assert torch.equal(actions, expected)
    assert expected.std() > 0.01  # not a constant policy
    manifest = json.loads((folder / MANIFEST).read_text())
    entry = manifest["groups"]["agents"]
    spec = module.task.specs.group_action_spec("agents")
    assert entry["inputs"] == [{"name": "observation", "key": ["agents", "observation"], "shape": ["batch", 3, 16],
                                "dtype": "float32"}]
    assert entry["outputs"] == [{"name": "action", "key": ["agents", "action"], "shape": ["batch", 3, 2],
                                 "dtype": "float32"}]
    assert entry["action"] == {"type": "continuous", "low": spec.space.low.tolist(), "high": spec.space.high.tolist()}
    assert entry["action"]["low"][0] == [-1.0, -1.0] and entry["action"]["high"][0] == [1.0, 1.0]
    assert entry["verified"]["checked"] and entry["verified"]["max_abs_diff"] <= (1e-5 if format == "onnx" else 0)
    assert manifest["format"] == format and manifest["deterministic"] and manifest["algorithm"] == "mappo"
    low, high = torch.tensor(entry["action"]["low"]), torch.tensor(entry["action"]["high"])
    assert bool(((actions >= low) & (actions <= high)).all())


@pytest.mark.parametrize("algorithm", [IQL, MASAC])
def test_masked_discrete_policy_takes_the_mask_as_an_input_and_never_an_illegal_action(tmp_path, algorithm):
    pl.seed_everything(0)
    task = MaskedSpread("simple_spread", max_steps=10, continuous_actions=False)
    extra = {} if algorithm is IQL else {"critic_model": Mlp([16])}
    module = algorithm(task, actor_model=Mlp([16]), frames_per_batch=40, num_envs=4, memory_size=1000, **extra)
    folder = export_policy(module, tmp_path / "deploy", "torchscript")
    entry = json.loads((folder / MANIFEST).read_text())["groups"]["agents"]
    assert [i["name"] for i in entry["inputs"]] == ["action_mask", "observation"]
    assert entry["inputs"][0]["dtype"] == "bool" and entry["inputs"][0]["shape"] == ["batch", 3, 9]
    assert entry["action"] == {"type": "discrete", "n": 9, "encoding": "index"}
    policy = load_exported(folder / "agents.pt")
    observed = _observed(module)
    mask, observation = _inputs(folder, "agents", observed)
    actions = policy(mask, observation)
    assert torch.equal(actions, _module_actions(module, "agents", observed))
    assert actions.dtype == torch.int64 and len(actions.unique()) > 1
    assert bool(mask.gather(-1, actions.unsqueeze(-1)).all())
    # the mask decides: forbid each chosen action and the exported policy picks another legal one
    narrowed = mask.scatter(-1, actions.unsqueeze(-1), False)
    narrowed[~narrowed.any(-1)] = mask[~narrowed.any(-1)]  # keep one legal action per agent
    changed = policy(narrowed, observation)
    assert bool(narrowed.gather(-1, changed.unsqueeze(-1)).all())
    assert not torch.equal(changed, actions)


def test_recurrent_policy_carries_its_hidden_state_through_an_episode(tmp_path):
    pl.seed_everything(0)
    module = MAPPO(tiny_task(max_steps=5), **tiny_kwargs(actor_model=Gru(hidden_size=8)))
    folder = export_policy(module, tmp_path / "deploy", "exported")
    entry = json.loads((folder / MANIFEST).read_text())["groups"]["agents"]
    assert [i["name"] for i in entry["inputs"]] == ["observation", "loc_hidden", "is_init"]
    assert [o["name"] for o in entry["outputs"]] == ["action", "next.loc_hidden"]
    assert entry["inputs"][1]["shape"] == ["batch", 3, 1, 8]
    policy = load_exported(folder / "agents.pt2")
    rollout = module.evaluate(seed=3, num_envs=2)  # [2 envs, 5 steps], the module's hidden states inside
    hidden = torch.zeros(2, 3, 1, 8)
    for t in range(5):
        step = rollout[:, t]
        action, hidden = policy(step.get(("agents", "observation")), hidden, step.get("is_init"))
        assert torch.equal(action, step.get(("agents", "action"))), t
        assert torch.equal(hidden, step.get(("next", "agents", "loc_hidden"))), t
    assert bool(rollout[:, 0].get("is_init").all()) and not bool(rollout[:, 1:].get("is_init").any())


def test_lit_marl_export_writes_a_new_folder_beside_the_run_and_refuses_bad_input_by_name(tmp_path, capsys):
    fit_config(tiny_balance(tmp_path / "tiny.yaml"))
    (run,) = run_dirs()
    ckpt = run / "checkpoints" / "last.ckpt"
    main(["export", "--ckpt_path", str(ckpt), "--format", "torchscript"])
    (folder,) = (run / "exports").iterdir()
    assert folder.name.startswith("torchscript-") and "same actions as the policy" in capsys.readouterr().out
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["task"] == "vmas/balance" and manifest["provenance"]["checkpoint"] == str(ckpt)
    module = MAPPO.load_from_checkpoint(str(ckpt), weights_only=True)
    observed = _observed(module)
    assert torch.equal(load_exported(folder / "agents.pt")(*_inputs(folder, "agents", observed)),
                       _module_actions(module, "agents", observed))
    files = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))

    def refused(*args: str, match: str) -> None:
        with pytest.raises(SystemExit) as exit_info:
            main(["export", *args])
        assert exit_info.value.code == 2
        assert match in capsys.readouterr().err

    refused("--ckpt_path", str(ckpt), "--format", "tflite", match="export.format: 'tflite' is not one of")
    refused("--ckpt_path", str(ckpt), "--format", "exported", "--out", str(folder),
            match=f"export.out: {str(folder)!r} already exists and is not overwritten")
    refused("--ckpt_path", str(ckpt), "--format", "exported", "--group", "adversary",
            match="export.group: ['adversary'] not among the checkpoint's agent groups; allowed: 'agents'")
    refused("--ckpt_path", str(tmp_path / "missing.ckpt"), "--format", "exported", match="does not exist")
    refused("--ckpt_path", str(ckpt), "--format", "exported", "--batch_size", "0",
            match="export.batch_size: must be a positive integer")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == files  # nothing written
    assert json.loads((folder / MANIFEST).read_text()) == manifest


def test_a_fixed_batch_size_is_written_into_the_manifest(tmp_path):
    module = MADDPG(tiny_task("balance"), actor_model=Mlp([8]), critic_model=Mlp([8]), frames_per_batch=40,
                    num_envs=4, memory_size=1000)
    folder = export_policy(module, tmp_path / "deploy", "exported", batch_size=5)
    entry = json.loads((folder / MANIFEST).read_text())["groups"]["agents"]
    assert entry["batch"] == 5 and entry["inputs"][0]["shape"] == [5, 3, 16] and entry["verified"]["batch"] == 5
    observed = _observed(module, steps=5, num_envs=1)
    assert torch.equal(load_exported(folder / "agents.pt2")(observed.get(("agents", "observation"))),
                       _module_actions(module, "agents", observed))


def test_a_failed_export_leaves_no_folder(tmp_path, monkeypatch):
    module = MAPPO(tiny_task(), **tiny_kwargs())

    def broken(*args, **kwargs):
        raise RuntimeError("export: agents.pt2 chose other actions than the policy on the same observations")

    monkeypatch.setattr(export_module, "_verify", broken)
    with pytest.raises(RuntimeError, match="chose other actions"):
        export_policy(module, tmp_path / "deploy", "exported")
    assert list(tmp_path.iterdir()) == []


def test_onnx_without_its_exporter_names_the_extra(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript" else real(name, *a))
    with pytest.raises(ConfigError, match=r"export.format: 'onnx' needs onnxscript .*pip install -e \"\.\[export\]\""):
        export_checkpoint(tmp_path / "never-read.ckpt", "onnx")
    assert list(tmp_path.iterdir()) == []


def test_a_policy_per_agent_exports_as_one_file_per_group(tmp_path):
    """HAPPO's and HASAC's policies (one network per agent, ``PerAgent``) export like any other group's."""
    from lit_marl.algorithms import HASAC
    from tests.helpers.tiny import ddpg_kwargs

    pl.seed_everything(0)
    module = HASAC(tiny_task("balance"), **ddpg_kwargs())
    folder = export_policy(module, tmp_path / "deploy", "torchscript")
    observed = _observed(module)
    expected = _module_actions(module, "agents", observed)
    actions = load_exported(folder / "agents.pt")(*_inputs(folder, "agents", observed))
    assert torch.equal(actions, expected) and expected.std() > 0.01
    assert json.loads((folder / MANIFEST).read_text())["algorithm"] == "hasac"
