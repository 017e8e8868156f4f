"""``lit-marl`` as the docs tests run it (put first on PATH as ``lit-marl``): the command as written, with what keeps
it small appended (tests/helpers/docs_examples.py says what). Run as ``python lit_marl_small.py <lit-marl arguments>``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.helpers.docs_examples import small_fit_overrides  # noqa: E402


def _value(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def small(args: list[str]) -> list[str]:
    """What is appended to ``lit-marl args``."""
    if not args or {"-h", "--help"} & set(args) or any(a.startswith("--print_config") for a in args):
        return []
    command = args[0]
    if command == "fit":
        config = _value(args, "--config")
        if _value(args, "--ckpt_path"):  # a resume of a docs run (20 frames): one more iteration
            return ["--model.init_args.max_frames", "40"]
        return small_fit_overrides(Path(config)) if config else []
    if command == "test":
        extra = ["--model.init_args.test_episodes", "2", "--model.init_args.evaluation_batch_size", "2"]
        return extra + (["--evaluation.videos", "1"] if _value(args, "--evaluation.videos") else [])
    if command == "validate":
        return ["--model.init_args.evaluation_episodes", "1"]
    if command in ("benchmark", "tune") and "--status" not in args:
        return ["--dry_run"]
    return []


if __name__ == "__main__":
    arguments = sys.argv[1:]
    os.execv(sys.executable, [sys.executable, "-m", "lit_marl", *arguments, *small(arguments)])
