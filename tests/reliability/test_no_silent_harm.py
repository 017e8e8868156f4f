"""Settings that would train silently wrong are refused by name, or mean what Lightning means (issue 22).

Gradient clipping: lit-marl clips each parameter group itself (``configure_gradient_clipping``), so it must read
``gradient_clip_val`` as Lightning does — ``None`` or ``0`` is no clipping — and refuse a negative value, which
``clip_grads_with_norm_`` would turn into a sign flip of every gradient (gradient ascent)."""

from __future__ import annotations

import pytest
import torch

from lit_marl.algorithms import MAPPO
from lit_marl.errors import ConfigError
from tests.helpers.tiny import tiny_kwargs, tiny_task, tiny_trainer
from tests.reliability.helpers import QUIET, expect_exit, tiny_config


def _trained(tmp_path, **trainer_overrides) -> tuple[dict, dict]:
    torch.manual_seed(0)
    model = MAPPO(tiny_task(), **tiny_kwargs(max_frames=40))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tiny_trainer(tmp_path, max_epochs=1, limit_val_batches=0, **trainer_overrides).fit(model)
    return before, {k: v.clone() for k, v in model.state_dict().items()}


def test_clip_value_zero_means_no_clipping(tmp_path):
    """Before the fix, 0 zeroed every gradient: the weights did not move in a whole iteration."""
    before, zero = _trained(tmp_path / "zero", gradient_clip_val=0)
    _, none = _trained(tmp_path / "none", gradient_clip_val=None)
    assert any(not torch.equal(before[k], zero[k]) for k in before), "clip 0 froze the weights"
    for key in none:  # the same run as with no clipping at all
        torch.testing.assert_close(zero[key], none[key], rtol=0, atol=0, msg=key)


def test_a_negative_clip_value_is_refused_before_training(tmp_path):
    """Before the fix, -1 trained by gradient ascent without a word."""
    model = MAPPO(tiny_task(), **tiny_kwargs(max_frames=40))
    with pytest.raises(ConfigError, match=r"gradient_clip_val: .*got -1\.0.*flip"):
        tiny_trainer(tmp_path, max_epochs=1, gradient_clip_val=-1.0).fit(model)
    assert model.frames == 0  # nothing was collected


@pytest.mark.parametrize("flags, fragment", [
    (["--trainer.gradient_clip_val", "-1"], "trainer.gradient_clip_val: must be a finite number >= 0, got -1"),
    (["--trainer.gradient_clip_algorithm", "foo"], "trainer.gradient_clip_algorithm: 'foo' is not supported"),
])
def test_bad_clipping_exits_2_naming_the_field(tmp_path, capsys, flags, fragment):
    config = tiny_config(tmp_path / "c.yaml")
    err = expect_exit(capsys, ["fit", "--config", str(config), *QUIET, *flags], 2, fragment)
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # refused before any run folder


def test_a_simulator_argument_of_the_wrong_type_fails_at_the_probe_naming_the_field(tmp_path, capsys, monkeypatch):
    """balance's ``package_mass`` is read only when VMAS steps: before the probe stepped, 'heavy' passed the probe
    and crashed inside VMAS at the first collection step with a TypeError, leaving an empty run folder."""
    from lit_marl.envs import Task

    monkeypatch.setattr(Task, "make_env", lambda *a, **k: pytest.fail("a training env was built"))
    config = tiny_config(tmp_path / "c.yaml")
    err = expect_exit(capsys, ["fit", "--config", str(config), *QUIET, "--model.init_args.task.init_args."
                               "scenario_kwargs", "{package_mass: heavy}"], 2,
                      "lit-marl: error: task.scenario_kwargs: vmas/balance failed to build with",
                      "'package_mass': 'heavy'")
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_scenario_kwargs_on_the_command_line_merge_into_the_config_files(tmp_path, capsys):
    """The config's balance sets n_agents, package_mass and random_package_pos_on_line; changing n_agents on the
    command line keeps the other two (jsonargparse alone replaced the dict, silently dropping them)."""
    from lit_marl.cli import LitMarlCLI

    config = tiny_config(tmp_path / "c.yaml")
    cli = LitMarlCLI(args=["--config", str(config), "--model.init_args.task.init_args.scenario_kwargs",
                           "{n_agents: 3}"], run=False)
    assert cli.model.task.scenario_kwargs == {"n_agents": 3, "package_mass": 5, "random_package_pos_on_line": True}
    assert "merged into the config file's" in capsys.readouterr().err
    inline = LitMarlCLI(args=["--config", str(config), "--model.init_args.task.init_args.scenario_kwargs="
                              "{package_mass: 2}"], run=False)
    assert inline.model.task.scenario_kwargs == {"n_agents": 4, "package_mass": 2, "random_package_pos_on_line": True}


def test_another_scenario_on_the_command_line_starts_from_its_own_defaults(tmp_path, capsys):
    """Issue 34: ``--model.init_args.task.init_args.scenario navigation`` on balance's config kept balance's
    scenario_kwargs and then failed on package_mass without saying where it came from. The file's dict belongs to
    its scenario: the chosen one starts from its defaults (said on stderr), or from the command line's dict as given."""
    from lit_marl.cli import LitMarlCLI

    config = tiny_config(tmp_path / "c.yaml")
    cli = LitMarlCLI(args=["--config", str(config), "--model.init_args.task.init_args.scenario", "navigation"],
                     run=False)
    assert (cli.model.task.scenario, cli.model.task.scenario_kwargs) == ("navigation", {})
    err = capsys.readouterr().err
    assert ("task.scenario_kwargs: the config file's {'n_agents': 4, 'package_mass': 5, 'random_package_pos_on_line': "
            "True} were written for 'balance'; the command line chose 'navigation'") in err
    short = LitMarlCLI(args=["--config", str(config), "--model.task.scenario=navigation", "--model.task.scenario_kwargs",
                             "{n_agents: 2}"], run=False)
    assert (short.model.task.scenario, short.model.task.scenario_kwargs) == ("navigation", {"n_agents": 2})
    mixed = LitMarlCLI(args=["--config", str(config), "--model.task.scenario", "navigation",  # the two forms mixed
                             "--model.init_args.task.init_args.scenario_kwargs", "{n_agents: 2}"], run=False)
    assert mixed.model.task.scenario_kwargs == {"n_agents": 2}
    assert "merged" not in capsys.readouterr().err
    same = LitMarlCLI(args=["--config", str(config), "--model.task.scenario", "balance"], run=False)
    assert same.model.task.scenario_kwargs == {"n_agents": 4, "package_mass": 5, "random_package_pos_on_line": True}


def test_a_run_refused_after_its_folder_was_made_leaves_no_folder(tmp_path, capsys, monkeypatch):
    """A refusal raised once the Trainer has made the run folder (here: the training data of the first iteration)
    exits 2 and removes the folder, which holds nothing but the run's config."""
    from lit_marl.errors import ConfigError as Refusal

    def refuse(self):
        raise Refusal("model.init_args.something: refused late; allowed: anything else")

    monkeypatch.setattr(MAPPO, "train_dataloader", refuse)
    config = tiny_config(tmp_path / "c.yaml")
    expect_exit(capsys, ["fit", "--config", str(config), *QUIET], 2, "refused late", unchanged=None)
    assert not list((tmp_path / "runs").glob("*/version_*"))
