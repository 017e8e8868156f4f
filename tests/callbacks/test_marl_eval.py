"""The marl-eval JSON callback: marl-eval's structure, per-episode returns per group, continued on resume, and
absolute metrics from the best policy on 10× the evaluation episodes."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
from lightning.pytorch.callbacks import Callback

from lit_marl.algorithms import MAPPO
from lit_marl.callbacks import MarlEvalJson
from tests.helpers.tiny import tiny_kwargs, tiny_task, tiny_trainer


class SigtermAfter(Callback):
    """SIGTERM to this process at the first minibatch of iteration ``iteration`` (1-based)."""

    def __init__(self, iteration: int):
        self.iteration = iteration

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.iteration + 1 == self.iteration and batch_idx == 0:
            os.kill(os.getpid(), signal.SIGTERM)


def test_marl_eval_json_has_the_protocol_structure_and_continues_on_resume(tmp_path):
    path = tmp_path / "marl_eval.json"
    kwargs = tiny_kwargs(evaluation_episodes=3, max_frames=80)
    # absolute metrics in batches of 3 like the evaluations, so its first 3 episodes are theirs
    trainer = tiny_trainer(tmp_path, max_epochs=-1, callbacks=[MarlEvalJson(str(path), absolute_batch_size=3)])
    trainer.fit(MAPPO(tiny_task(), **kwargs))
    first = json.loads(path.read_text())
    run = first["vmas"]["simple_spread"]["mappo"]["seed_0"]
    assert [run[f"step_{k}"]["step_count"] for k in range(2)] == [40, 80]
    assert len(run["step_0"]["return"]) == 3 and len(run["step_0"]["agents_return"]) == 3
    absolute = run["absolute_metrics"]
    assert len(absolute["return"]) == 30  # 10 × evaluation_episodes
    means = {run[k]["step_count"]: np.mean(run[k]["return"]) for k in ("step_0", "step_1")}
    assert absolute["step_count"] == max(means, key=means.get)  # the best evaluation's weights
    # the best policy's first 3 episodes are the evaluation episodes it was chosen on
    best_step = next(k for k in ("step_0", "step_1") if run[k]["step_count"] == absolute["step_count"])
    assert absolute["return"][:3] == run[best_step]["return"]

    ckpt = tmp_path / "last.ckpt"
    trainer.save_checkpoint(ckpt)
    resumed = tiny_trainer(tmp_path / "resumed", max_epochs=-1, callbacks=[MarlEvalJson(str(path))])  # one batch of 30
    resumed.fit(MAPPO(tiny_task(), **{**kwargs, "max_frames": 160}), ckpt_path=str(ckpt))
    run2 = json.loads(path.read_text())["vmas"]["simple_spread"]["mappo"]["seed_0"]
    assert [run2[f"step_{k}"]["step_count"] for k in range(4)] == [40, 80, 120, 160]
    assert run2["step_0"] == run["step_0"] and run2["step_1"] == run["step_1"]  # continued, not overwritten
    assert len(run2["absolute_metrics"]["return"]) == 30
    assert list(run2)[-1] == "absolute_metrics"  # after the resumed run's steps, where marl-eval looks for it


def test_a_run_stopped_by_a_signal_leaves_the_absolute_metrics_to_its_resumed_end(tmp_path):
    """SIGTERM (a scheduler's pre-emption) stops after the iteration and its last.ckpt; the 10x re-evaluation of the
    best policy is not run then (on RWARE 500k steps, past any grace period), but at the end the resume reaches."""
    path = tmp_path / "marl_eval.json"
    kwargs = tiny_kwargs(evaluation_episodes=3, max_frames=160)
    stopped = MAPPO(tiny_task(), **kwargs)
    trainer = tiny_trainer(tmp_path, max_epochs=-1, callbacks=[MarlEvalJson(str(path)), SigtermAfter(2)])
    trainer.fit(stopped)
    assert stopped.stopped_by_signal == signal.SIGTERM and stopped.frames == 80
    run = json.loads(path.read_text())["vmas"]["simple_spread"]["mappo"]["seed_0"]
    assert list(run) == ["step_0", "step_1"]  # evaluated at 40 and 80 frames, no absolute metrics yet

    ckpt = tmp_path / "last.ckpt"
    trainer.save_checkpoint(ckpt)
    resumed = tiny_trainer(tmp_path / "resumed", max_epochs=-1, callbacks=[MarlEvalJson(str(path))])
    resumed.fit(MAPPO(tiny_task(), **kwargs), ckpt_path=str(ckpt))
    run = json.loads(path.read_text())["vmas"]["simple_spread"]["mappo"]["seed_0"]
    assert list(run) == ["step_0", "step_1", "step_2", "step_3", "absolute_metrics"]
    assert len(run["absolute_metrics"]["return"]) == 30
