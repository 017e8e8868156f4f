"""Standalone evaluation: per-episode records agree with a hand-computed rollout, only real steps count, seeds
reproduce episodes, eval_info.json is complete and never overwritten, videos are valid mp4, episodes export."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from lit_marl.algorithms import IPPO, MAPPO
from lit_marl.callbacks import EvaluationReport
from lit_marl.errors import ConfigError
from lit_marl.evaluate import evaluate_checkpoint
from lit_marl.evaluation import compare, load_episodes, read_eval_info
from lit_marl.evaluation.io import sha256
from tests.helpers.tiny import tiny_kwargs, tiny_task
from tests.helpers.tiny_env import CountdownTask, first_episode


def _test(module, **report_kwargs) -> EvaluationReport:
    report = EvaluationReport(**{"output_dir": "eval", **report_kwargs})
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[report])
    trainer.test(module, verbose=False)
    return report


def test_per_episode_numbers_match_a_hand_computed_rollout():
    # 7 episodes in batches of 3 (seeds 5, 6, 7): lengths 2..4 in a 5-step rollout, so every env keeps
    # stepping after its episode ended (and then earns 1000 per step: any leak shows)
    module = MAPPO(CountdownTask(max_steps=5), **tiny_kwargs(test_episodes=7, evaluation_batch_size=3,
                                                              evaluation_seed=5))
    info = _test(module).result
    records = info["per_episode"]
    assert [r["episode"] for r in records] == list(range(7))
    assert [(r["seed"], r["env_index"]) for r in records] == [(5, 0), (5, 1), (5, 2), (6, 0), (6, 1), (6, 2), (7, 0)]
    for r in records:
        length, sign = first_episode(r["seed"], r["env_index"])
        agent_0 = sign * sum(t for t in range(1, length + 1))
        agent_1 = sign * sum(t + 1 for t in range(1, length + 1))
        assert r["length"] == length
        assert r["return_per_agent"] == {"agent_0": agent_0, "agent_1": agent_1}
        assert r["return_per_group"] == {"agents": (agent_0 + agent_1) / 2} and r["return"] == (agent_0 + agent_1) / 2
        # team step reward s * (t + 0.5): its maximum over real steps only
        assert r["reward_max"] == (length + 0.5 if sign > 0 else -1.5)
        assert r["reward_mean"] == pytest.approx(sign * ((length + 1) / 2 + 0.5))
        assert r["success"] is (sign > 0)
    negative = [r for r in records if first_episode(r["seed"], r["env_index"])[1] < 0]
    assert negative and all(r["reward_max"] < 0 and r["return"] < 0 for r in negative)

    returns = np.array([r["return"] for r in records])
    aggregated = info["aggregated"]
    assert aggregated["episodes"] == 7
    assert aggregated["return"]["mean"]["value"] == pytest.approx(returns.mean())
    assert aggregated["return"]["median"]["value"] == pytest.approx(np.median(returns))
    assert aggregated["return"]["mean"]["ci_low"] < returns.mean() < aggregated["return"]["mean"]["ci_high"]
    assert aggregated["success_rate"] == pytest.approx(np.mean([r["success"] for r in records]))
    assert aggregated["length_mean"] == pytest.approx(np.mean([r["length"] for r in records]))
    assert aggregated["eval_s"] > 0 and aggregated["eval_s_per_episode"] == pytest.approx(aggregated["eval_s"] / 7)
    assert info["provenance"]["versions"]["torch"] == torch.__version__
    assert info["provenance"]["config"]["model"]["init_args"]["test_episodes"] == 7


def test_eval_info_is_written_to_a_new_folder_and_never_overwritten():
    module = MAPPO(CountdownTask(), **tiny_kwargs(test_episodes=2))
    first = _test(module)
    written = (first.folder / "eval_info.json").read_bytes()
    second = _test(module)
    assert second.folder != first.folder and second.folder.parent == first.folder.parent
    assert (first.folder / "eval_info.json").read_bytes() == written
    assert json.loads((second.folder / "eval_info.json").read_text())["per_episode"] == json.loads(written)["per_episode"]


@pytest.mark.parametrize("deterministic", [True, False])
def test_seeds_reproduce_the_same_episodes(deterministic):
    module = MAPPO(tiny_task(), **tiny_kwargs(evaluation_deterministic=deterministic, test_episodes=3))
    first = _test(module).result["per_episode"]
    again = _test(module).result["per_episode"]
    assert first == again
    module.evaluation_seed += 1
    other = _test(module).result["per_episode"]
    assert [r["return"] for r in other] != [r["return"] for r in first]


def test_stochastic_actions_differ_from_deterministic_ones():
    deterministic = MAPPO(tiny_task(), **tiny_kwargs(test_episodes=2))
    stochastic = MAPPO(tiny_task(), **tiny_kwargs(test_episodes=2, evaluation_deterministic=False))
    stochastic.load_state_dict(deterministic.state_dict())
    a, b = _test(deterministic).result, _test(stochastic).result
    assert a["deterministic"] is True and b["deterministic"] is False
    assert [r["return"] for r in a["per_episode"]] != [r["return"] for r in b["per_episode"]]


def test_videos_are_valid_mp4_with_one_frame_per_step_and_episodes_export():
    av = pytest.importorskip("av")
    module = MAPPO(tiny_task(max_steps=6), **tiny_kwargs(test_episodes=3, evaluation_batch_size=2))
    report = _test(module, videos=3, export_episodes=True)
    records = report.result["per_episode"]
    assert [r["video"] for r in records] == [f"videos/episode_{i:04d}.mp4" for i in range(3)]
    for r in records:
        with av.open(str(report.folder / r["video"])) as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        assert len(frames) == r["length"] == 6 == r["video_frames"]
        assert frames[0].shape == (700, 700, 3) and frames[0].std() > 0  # a picture, not a blank
    exported = load_episodes(report.folder / report.result["episodes_export"])
    assert exported.batch_size == torch.Size([3, 6])
    assert exported.get(("episode", "index"))[:, 0].tolist() == [0, 1, 2]
    assert exported.get(("episode", "seed"))[:, 0].tolist() == [module.evaluation_seed] * 2 + [module.evaluation_seed + 1]
    mask = exported.get(("episode", "mask"))
    group_return = (exported.get(("next", "agents", "reward")).squeeze(-1) * mask.unsqueeze(-1)).sum(1).mean(-1)
    assert group_return.tolist() == pytest.approx([r["return"] for r in records], rel=1e-5)


def test_videos_without_an_encoder_name_the_package_to_install(monkeypatch):
    real_import = builtins.__import__

    def no_av(name, *args, **kwargs):
        if name == "av":
            raise ImportError("No module named 'av'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_av)
    with pytest.raises(ConfigError, match=r"evaluation.videos: 2 videos.*pip install av"):
        EvaluationReport(videos=2)
    EvaluationReport(videos=0)  # no videos, no encoder needed


def test_videos_of_a_task_that_cannot_render_are_refused_before_evaluating():
    module = MAPPO(CountdownTask(), **tiny_kwargs(test_episodes=2))
    with pytest.raises(ConfigError, match=r"evaluation.videos.*CountdownTask.*cannot render"):
        _test(module, videos=1)
    assert not Path("eval").exists() or not any(Path("eval").iterdir())


def test_compare_pairs_episodes_and_refuses_other_seeds(tmp_path):
    trainer = pl.Trainer(logger=False, max_epochs=1, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path, num_sanity_val_steps=0, limit_val_batches=0)
    module = MAPPO(tiny_task(), **tiny_kwargs())
    trainer.fit(module)
    ckpt = tmp_path / "a.ckpt"
    trainer.save_checkpoint(ckpt)
    a = evaluate_checkpoint(ckpt, episodes=6, start_seed=0, output_dir=tmp_path / "eval")
    assert a["provenance"]["checkpoint_sha256"] == sha256(ckpt)
    assert Path(a["folder"]).parent == tmp_path / "eval"
    b = read_eval_info(a["folder"])
    # B: the same episodes with every return lowered by 1 → A beats B by exactly 1
    for record in b["per_episode"]:
        record["return"] -= 1.0
    result = compare(a, b)
    assert result["mean_difference"] == {"value": pytest.approx(1.0), "ci_low": pytest.approx(1.0),
                                         "ci_high": pytest.approx(1.0)}
    assert result["a_better_fraction"] == 1.0 and result["episodes"] == 6
    c = evaluate_checkpoint(ckpt, episodes=4, start_seed=3, output_dir=tmp_path / "eval")
    with pytest.raises(ConfigError, match=r"not on the same episodes.*only in A: \[\(0, 0\)"):
        compare(a, c)
    folders = sorted((tmp_path / "eval").iterdir())
    with pytest.raises(ConfigError, match=r"checkpoint is for algorithm 'mappo', but the model is 'ippo'"):
        evaluate_checkpoint(ckpt, episodes=2, algorithm=IPPO, output_dir=tmp_path / "eval")
    assert sorted((tmp_path / "eval").iterdir()) == folders  # nothing written


def test_validation_records_a_video_every_n_evaluations(tmp_path):
    av = pytest.importorskip("av")
    trainer = pl.Trainer(max_epochs=3, logger=pl.loggers.CSVLogger(tmp_path, name="run"), enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, check_val_every_n_epoch=1,
                         callbacks=[EvaluationReport(val_video_every=2)], enable_checkpointing=False)
    trainer.fit(MAPPO(tiny_task(), **tiny_kwargs()))
    videos = sorted((Path(trainer.log_dir) / "videos").iterdir())
    assert [v.name for v in videos] == ["val_frames_000000040.mp4", "val_frames_000000120.mp4"]  # evaluations 1, 3
    with av.open(str(videos[0])) as container:
        assert sum(1 for _ in container.decode(video=0)) == 10


def test_test_progress_bar_shows_the_running_mean_return_and_success(capsys):
    module = MAPPO(CountdownTask(), **tiny_kwargs(test_episodes=4, evaluation_batch_size=2, evaluation_seed=0))
    report = EvaluationReport(output_dir="eval")
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_model_summary=False, callbacks=[report])
    trainer.test(module, verbose=False)
    records = report.result["per_episode"]
    postfix = trainer.progress_bar_callback.test_progress_bar.postfix
    mean = sum(r["return"] for r in records) / 4
    success = sum(r["success"] for r in records) / 4
    assert postfix == f"return={mean:.3f}, success={success:.2f}"


def test_training_collections_export_and_reload(tmp_path):
    from lit_marl.callbacks import CollectionExport
    from lit_marl.evaluation import load_collections

    collected = []

    class Keep(pl.Callback):
        def on_batch_collected(self, trainer, pl_module, batch):
            collected.append(batch.clone())

    trainer = pl.Trainer(max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, limit_val_batches=0, default_root_dir=tmp_path,
                         callbacks=[Keep(), CollectionExport(str(tmp_path / "collections"), every_n=2)])
    trainer.fit(MAPPO(tiny_task(), **tiny_kwargs()))
    assert sorted(p.name for p in (tmp_path / "collections").iterdir()) == ["iteration_000000", "iteration_000002"]
    data = load_collections(tmp_path / "collections")
    assert data.batch_size == torch.Size([8, 10])
    expected = torch.cat([collected[0], collected[2]], 0)
    assert torch.equal(data.get(("next", "agents", "reward")), expected.get(("next", "agents", "reward")))
    assert torch.equal(data.get(("agents", "action")), expected.get(("agents", "action")))


def test_validation_videos_reach_tensorboard(tmp_path):
    pytest.importorskip("av")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = pl.loggers.TensorBoardLogger(tmp_path, name="tb")
    trainer = pl.Trainer(max_epochs=1, logger=logger, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, enable_checkpointing=False,
                         callbacks=[EvaluationReport(val_video_every=1)])
    trainer.fit(MAPPO(tiny_task(), **tiny_kwargs()))
    events = EventAccumulator(logger.log_dir, size_guidance={"images": 0})
    events.Reload()
    assert "val/video/0" in events.Tags()["images"]
    (image,) = events.Images("val/video/0")
    assert image.encoded_image_string[:6] == b"GIF89a" and (image.width, image.height) == (700, 700)


def test_the_callbacks_that_moved_keep_their_old_names():
    """Configs and benchmark folders written before the move name ``lit_marl.evaluation.<callback>`` (class paths
    that jsonargparse imports as module + attribute): they resolve to the callbacks now in ``lit_marl.callbacks``."""
    import importlib

    import lit_marl.callbacks as callbacks

    evaluation = importlib.import_module("lit_marl.evaluation")
    for name in ("EvaluationReport", "MarlEvalJson", "CollectiveReward", "CollectionExport"):
        assert getattr(evaluation, name) is getattr(callbacks, name)
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchCallback'"):
        evaluation.NoSuchCallback  # noqa: B018
