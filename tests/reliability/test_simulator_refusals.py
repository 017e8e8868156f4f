"""A simulator's own refusal of a task's arguments (VMAS's bare ``assert self.n_agents > 1``, a ``TypeError`` for an
unknown keyword) is a ConfigError naming the task field, the arguments and the simulator's message: exit code 2
through the CLI with no traceback and nothing written, and the same ConfigError from Python.

The table covers every Task family with a wrong count, a wrong type and an unknown keyword; its rows run the CLI in
this process (``main(args)``: the ``lit-marl`` script's code path, exit code and stderr), and two rows also run the
real ``lit-marl`` command (``test_the_lit_marl_command_prints_no_traceback``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import yaml

from lit_marl import envs
from lit_marl.algorithms import MAPPO
from lit_marl.envs import Task
from lit_marl.errors import ConfigError
from tests.helpers.tiny import CONFIGS, ROOT
from tests.helpers.custom_envs import PointsGymEnv
from tests.reliability.helpers import expect_exit

#: a registered Gymnasium env with a count argument (the built-in ones have none)
gym.register("LitMarlPoints-v0", entry_point=PointsGymEnv, max_episode_steps=10)


def _task(cls: str, **init_args: Any) -> dict[str, Any]:
    return {"class_path": f"lit_marl.envs.{cls}", "init_args": init_args}


def _custom(env: str, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    return _task("CustomTask", env_class=f"tests.helpers.custom_envs.{env}", max_steps=10, env_kwargs=env_kwargs)


#: (task config, the field the message must name, the arguments as shown, the simulator's words)
CASES = {
    # VMAS scenario_kwargs
    "vmas-count": (_task("VmasTask", scenario="balance", scenario_kwargs={"n_agents": 0}),
                   "task.scenario_kwargs", "{'n_agents': 0}", "assert self.n_agents > 1"),
    "vmas-type": (_task("VmasTask", scenario="balance", scenario_kwargs={"n_agents": "three"}),
                  "task.scenario_kwargs", "{'n_agents': 'three'}", "TypeError: '>' not supported"),
    "vmas-unknown": (_task("VmasTask", scenario="balance", scenario_kwargs={"n_agent": 3}),
                     "task.scenario_kwargs", "{'n_agent': 3}", "passed but not used by the scenario"),
    # issue 34: VMAS integrated a negative mass (forces pushed the package the wrong way) and trained on it
    "vmas-negative-mass": (_task("VmasTask", scenario="balance", scenario_kwargs={"package_mass": -5}),
                           "task.scenario_kwargs", "{'package_mass': -5}", "entity 'package' with mass -5"),
    # PettingZoo (MPE) task_kwargs
    "pettingzoo-count": (_task("PettingZooTask", task="simple_spread", task_kwargs={"N": 0}),
                         "task.task_kwargs", "{'N': 0}", "ValueError: zero-size array"),
    "pettingzoo-type": (_task("PettingZooTask", task="simple_spread", task_kwargs={"N": "three"}),
                        "task.task_kwargs", "{'N': 'three'}", "TypeError: 'str' object cannot be interpreted"),
    "pettingzoo-unknown": (_task("PettingZooTask", task="simple_spread", task_kwargs={"n_agents": 3}),
                           "task.task_kwargs", "{'n_agents': 3}", "unexpected keyword argument 'n_agents'"),
    # MAgent2 (through PettingZooTask) map sizes
    "magent2-count": (_task("PettingZooTask", task="battle", task_kwargs={"map_size": 3}),
                      "task.task_kwargs", "{'map_size': 3}", "size of map must be at least 12"),
    "magent2-type": (_task("PettingZooTask", task="adversarial_pursuit", task_kwargs={"map_size": "big"}),
                     "task.task_kwargs", "{'map_size': 'big'}", "TypeError: '>=' not supported"),
    "magent2-unknown": (_task("PettingZooTask", task="battle", task_kwargs={"mapsize": 45}),
                        "task.task_kwargs", "{'mapsize': 45}", "unexpected keyword argument 'mapsize'"),
    # Gymnasium env_kwargs
    "gymnasium-count": (_task("GymnasiumTask", env_id="LitMarlPoints-v0", env_kwargs={"n_points": 0}),
                        "task.env_kwargs", "{'n_points': 0}", "assert n_points >= 1"),
    "gymnasium-type": (_task("GymnasiumTask", env_id="Pendulum-v1", env_kwargs={"g": "strong"}),
                       "task.env_kwargs", "{'g': 'strong'}", "TypeError: unsupported operand"),
    "gymnasium-unknown": (_task("GymnasiumTask", env_id="Pendulum-v1", env_kwargs={"gravity": 3}),
                          "task.env_kwargs", "{'gravity': 3}", "unexpected keyword argument 'gravity'"),
    # CustomTask env_kwargs: torchrl, PettingZoo and Gymnasium classes
    "custom-count": (_custom("LineWalkEnv", {"n_agents": 0}), "task.env_kwargs", "{'n_agents': 0}",
                     "IndexError: index 0 is out of bounds"),
    "custom-type": (_custom("LineWalkEnv", {"n_agents": "two"}), "task.env_kwargs", "{'n_agents': 'two'}",
                    "TypeError: 'str' object cannot be interpreted"),
    "custom-unknown": (_custom("LineWalkEnv", {"nagents": 2}), "task.env_kwargs", "{'nagents': 2}",
                       "unexpected keyword argument 'nagents'"),
    "custom-pettingzoo-count": (_custom("MatchParallelEnv", {"n_symbols": 0}), "task.env_kwargs", "{'n_symbols': 0}",
                                "ValueError: high <= 0"),
    "custom-aec-unknown": (_custom("NimAECEnv", {"piles": 3}), "task.env_kwargs", "{'piles': 3}",
                           "unexpected keyword argument 'piles'"),
    "custom-gymnasium-type": (_custom("ReachGymEnv", {"goal": "far"}), "task.env_kwargs", "{'goal': 'far'}",
                              "TypeError: '>=' not supported"),
    # LBF, RWARE and MaMuJoCo env_kwargs
    "lbf-count": (_task("LbfTask", env_kwargs={"min_player_level": 0}), "task.env_kwargs",
                  "{'min_player_level': 0}", "ValueError: low >= high"),
    "lbf-type": (_task("LbfTask", env_kwargs={"max_player_level": "high"}), "task.env_kwargs",
                 "{'max_player_level': 'high'}", "max_player_level must be a scalar or a list"),
    "lbf-unknown": (_task("LbfTask", env_kwargs={"colour": 1}), "task.env_kwargs", "{'colour': 1}",
                    "unexpected keyword argument 'colour'"),
    "rware-count": (_task("RwareTask", env_kwargs={"request_queue_size": 0}), "task.env_kwargs",
                    "requests 0 shelves", "request_queue_size >= 1"),
    "rware-type": (_task("RwareTask", env_kwargs={"request_queue_size": "many"}), "task.env_kwargs",
                   "requests 'many' shelves", "request_queue_size >= 1"),
    "rware-unknown": (_task("RwareTask", env_kwargs={"colour": 1}), "task.env_kwargs", "{'colour': 1}",
                      "unexpected keyword argument 'colour'"),
    "mamujoco-count": (_task("MaMuJoCoTask", env_kwargs={"frame_skip": 0}), "task.env_kwargs",
                       "{'frame_skip': 0}", "ZeroDivisionError"),
    "mamujoco-type": (_task("MaMuJoCoTask", env_kwargs={"forward_reward_weight": "strong"}), "task.env_kwargs",
                      "{'forward_reward_weight': 'strong'}", "TypeError: can't multiply sequence"),
    "mamujoco-unknown": (_task("MaMuJoCoTask", env_kwargs={"colour": 1}), "task.env_kwargs", "{'colour': 1}",
                         "unexpected keyword argument 'colour'"),
    # Melting Pot: its simulator arguments are the players' roles
    "meltingpot-count": (_task("MeltingPotTask", roles=["default"] * 3), "task.roles",
                         "roles=['default', 'default', 'default']", "ValueError: Failed to start"),
    # (a role of another type is the CLI parser's to refuse: roles is list[str])
    "meltingpot-type": (_task("MeltingPotTask", roles=[""]), "task.roles", "['']",
                        "are not roles of collaborative_cooking__asymmetric"),
    "meltingpot-unknown": (_task("MeltingPotTask", roles=["nobody", "nobody"]), "task.roles",
                           "['nobody', 'nobody']", "are not roles of collaborative_cooking__asymmetric"),
}
#: every concrete Task family lit-marl exports
TASK_FAMILIES = {cls for cls in map(envs.__dict__.get, envs.__all__)
                 if isinstance(cls, type) and issubclass(cls, Task) and cls is not Task}


@pytest.fixture
def no_training_env(monkeypatch):
    """Only the probe may be built: a training or evaluation env (Task.make_env) fails the test."""
    def refuse(self, *args, **kwargs):
        pytest.fail("a training env was built before the task's arguments were checked")

    monkeypatch.setattr(Task, "make_env", refuse)


def _config(path: Path, task: dict[str, Any]) -> Path:
    """configs/quickstart.yaml with another task."""
    config = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    config["model"]["init_args"]["task"] = task
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize(("task", "field", "arguments", "words"), list(CASES.values()), ids=list(CASES))
def test_a_simulator_refusal_is_a_config_error(capsys, tmp_path, no_training_env, task, field, arguments, words):
    err = expect_exit(capsys, ["fit", "--config", str(_config(tmp_path / "bad.yaml", task))], 2,
                      f"lit-marl: error: {field}: ", arguments, words)
    assert "Traceback" not in err and "Union subtypes" not in err, err
    # the same ConfigError from Python, with the same message
    with pytest.raises(ConfigError) as raised:
        MAPPO(task=task, frames_per_batch=40, num_envs=4, minibatch_size=20)
    assert err.rstrip().endswith(f"lit-marl: error: {raised.value}"), (err, str(raised.value))


def test_case_table_covers_every_task_family():
    """Each family lit-marl exports (read from ``lit_marl.envs``, not listed here) has a wrong count, a wrong type
    and an unknown argument in the table."""
    kinds: dict[str, set[str]] = {}
    for name, (task, *_) in CASES.items():
        kinds.setdefault(task["class_path"].rsplit(".", 1)[1], set()).add(name.rsplit("-", 1)[1])
    assert set(kinds) == {cls.__name__ for cls in TASK_FAMILIES}
    for family, found in kinds.items():
        assert {"count", "type", "unknown"} <= found, (family, found)
    # every concrete Task in lit_marl.envs names the init argument it reports probe failures under
    for cls in TASK_FAMILIES:
        assert cls.simulator_arguments, cls


class _NewFamily(Task):
    """A Task family as a new one would be written (say, MeltingPot): only simulator_arguments is set."""

    simulator_arguments = "substrate_kwargs"

    def __init__(self, substrate_kwargs: dict[str, Any] | None = None) -> None:
        self.substrate_kwargs = dict(substrate_kwargs or {})
        self._max_steps, self._continuous_actions = 10, False

    @property
    def name(self) -> str:
        return "new/substrate"

    def _make_env(self, num_envs, seed, device):
        PointsGymEnv(**self.substrate_kwargs)  # the simulator refuses every substrate_kwargs of these tests
        raise AssertionError("unreachable")


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"n_points": 0}, "AssertionError at "),
    ({"n_points": 0}, "custom_envs.py:"),
    ({"n_points": 0}, "assert n_points >= 1"),
    ({"colour": "red"}, "TypeError: PointsGymEnv.__init__() got an unexpected keyword argument 'colour'"),
])
def test_a_new_task_family_gets_it_from_the_base_class(kwargs, words):
    with pytest.raises(ConfigError) as raised:
        MAPPO(_NewFamily(kwargs), frames_per_batch=40, num_envs=4, minibatch_size=20)
    message = str(raised.value)
    prefix = f"task.substrate_kwargs: new/substrate failed to build with substrate_kwargs={kwargs!r}: "
    assert message.startswith(prefix), message
    assert words in message, message
    assert isinstance(raised.value.__cause__, (AssertionError, TypeError))  # Python keeps the simulator's traceback


def test_without_simulator_arguments_the_message_names_the_task():
    class Unnamed(_NewFamily):
        simulator_arguments = None

    with pytest.raises(ConfigError, match=r"^task: new/substrate failed to build with Unnamed\(substrate_kwargs="
                                          r"\{'colour': 'red'\}\): TypeError"):
        _ = Unnamed({"colour": "red"}).specs


@pytest.mark.parametrize(("config", "override", "words"), [
    ("mappo_vmas_balance.yaml", ["--model.init_args.task.init_args.scenario_kwargs", "{n_agents: 0}"],
     # the command line's dict merged into the config's (package_mass, random_package_pos_on_line kept)
     ["task.scenario_kwargs: vmas/balance failed to build with scenario_kwargs={'n_agents': 0, 'package_mass': 5, "
      "'random_package_pos_on_line': True}: AssertionError at ", "balance.py:", "assert self.n_agents > 1"]),
    ("mappo_mpe_simple_spread.yaml", ["--model.init_args.task.init_args.task_kwargs", "{n_agents: 3}"],
     ["task.task_kwargs: pettingzoo/simple_spread failed to build with task_kwargs={'N': 3, 'local_ratio': 0.5, "
      "'n_agents': 3}: ",
      "unexpected keyword argument 'n_agents'"]),
], ids=["vmas", "pettingzoo"])
def test_the_lit_marl_command_prints_no_traceback(tmp_path, config, override, words):
    """The real ``lit-marl`` command (issue 17's reproduction): exit 2, the message, no traceback, nothing written."""
    command = [shutil.which("lit-marl")] if shutil.which("lit-marl") else [sys.executable, "-m", "lit_marl.cli"]
    done = subprocess.run([*command, "fit", "--config", str(CONFIGS / config), *override], check=False,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "Traceback" not in output and "Union subtypes" not in output, output[-3000:]
    for fragment in ["lit-marl: error: ", *words]:
        assert fragment in done.stderr, (fragment, output[-3000:])
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_simulator_argument_from_a_config_file_is_refused_before_any_env(value, tmp_path, capsys):
    """Issue 34: ``.nan`` in a config *file* reached VMAS (a bare AssertionError at the first step, 39 s in)."""
    config = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    config["model"]["init_args"]["task"]["init_args"]["scenario_kwargs"]["package_mass"] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    from lit_marl.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(path), "--trainer.default_root_dir", str(tmp_path / "runs")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"task.scenario_kwargs.package_mass: {value!r} is not a finite number" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*.yaml"))
    with pytest.raises(ConfigError, match=r"task.scenario_kwargs.targets\[1\]: nan is not a finite number"):
        envs.VmasTask("balance", scenario_kwargs={"targets": [1.0, float("nan")]}).specs
