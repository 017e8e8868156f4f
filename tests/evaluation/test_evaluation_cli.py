"""``lit-marl test`` writes eval_info.json (and videos) into ``<run>/eval/<timestamp>/`` beside the tested run."""

from __future__ import annotations

import json

import pytest

from lit_marl.cli import main
from lit_marl.evaluation.io import sha256
from tests.helpers.runs import fit_config, run_dirs, tiny_balance


def test_lit_marl_test_writes_eval_info_and_videos_beside_the_run(tmp_path, capsys):
    pytest.importorskip("av")
    fit_config(tiny_balance(tmp_path / "tiny.yaml"))
    (run,) = run_dirs()
    ckpt = run / "checkpoints" / "last.ckpt"
    args = ["test", "--config", str(run / "config.yaml"), "--ckpt_path", str(ckpt),
            "--model.init_args.test_episodes", "5", "--trainer.enable_progress_bar", "false"]
    main([*args, "--evaluation.videos", "2"])
    (folder,) = (run / "eval").iterdir()
    info = json.loads((folder / "eval_info.json").read_text())
    assert len(info["per_episode"]) == 5 and info["aggregated"]["episodes"] == 5
    assert [r["video"] for r in info["per_episode"]] == ["videos/episode_0000.mp4", "videos/episode_0001.mp4",
                                                         None, None, None]
    assert sorted(p.name for p in (folder / "videos").iterdir()) == ["episode_0000.mp4", "episode_0001.mp4"]
    assert info["provenance"]["checkpoint_sha256"] == sha256(ckpt) and info["weights"] == "checkpoint"
    assert info["provenance"]["versions"]["vmas"] and info["provenance"]["versions"]["torchrl"]
    assert info["provenance"]["config"]["model"]["class_path"] == "lit_marl.algorithms.ppo.MAPPO"
    assert set(info["aggregated"]["return"]) == {"mean", "median", "iqm"}
    # a second test never touches the first one's folder; videos asked for as the issue spells it, on the model
    main([*args, "--model.init_args.test_videos", "1"])
    assert len(list((run / "eval").iterdir())) == 2
    assert json.loads((folder / "eval_info.json").read_text()) == info
    second = next(p for p in (run / "eval").iterdir() if p != folder)
    assert sorted(p.name for p in (second / "videos").iterdir()) == ["episode_0000.mp4"]

    # the same checkpoint on the same seeds: a paired difference of exactly zero
    capsys.readouterr()
    main(["compare", str(folder), str(second), "--out", str(tmp_path / "compare.json")])
    out = capsys.readouterr().out
    assert "over 5 paired episodes: 0.0000 [0.0000, 0.0000]" in out and "no clear difference" in out
    assert json.loads((tmp_path / "compare.json").read_text())["episodes"] == 5


def test_lit_marl_test_without_a_checkpoint_says_it_evaluates_untrained_weights(tmp_path, capsys):
    """Issue 34: no --ckpt_path evaluates the config's freshly initialised weights: said on stderr and in
    eval_info.json, not silently."""
    config = tiny_balance(tmp_path / "tiny.yaml")
    main(["test", "--config", str(config), "--model.init_args.test_episodes", "2", "--trainer.enable_progress_bar",
          "false", "--trainer.default_root_dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert "lit-marl test: no --ckpt_path: evaluating the config's untrained" in err
    (info_file,) = (tmp_path / "runs").rglob("eval_info.json")
    info = json.loads(info_file.read_text())
    assert info["weights"].startswith("untrained") and info["provenance"]["checkpoint"] is None
