"""The documentation's examples, as a test runs them: which fenced blocks of ``docs/**/*.md`` run, how a page's
Python blocks are joined, how a ``lit-marl`` line is made small, and the placeholders a command may use.

The rules a page's author follows (also on the contributing page):

* every ````` ```python ````` block runs; a page's Python blocks run in order in one fresh process (one namespace);
* in ````` ```bash ````` blocks every line that starts with ``lit-marl`` runs (a line ending in ``\\`` is joined
  with the next), through bash, so pipes, ``&&`` and redirections work as written;
* both run in a fresh folder holding ``configs/`` (a link to the repository's); ``runs/<run>``, ``runs/<a>`` and
  ``runs/<b>`` name real finished runs, ``<eval>`` and ``<eval_b>`` the folders ``lit-marl test`` wrote for
  ``runs/<a>`` and ``runs/<b>`` (the same seeded episodes); the folder a ``lit-marl report`` line names, where it
  does not exist, is a finished tiny benchmark (two seeds of MAPPO on a two-robot balance);
* ``lit-marl fit`` runs one small iteration (:func:`small_fit_overrides` are appended: they win), ``test`` and
  ``validate`` evaluate two episodes, ``benchmark`` and ``tune`` check their grid or space and list the runs
  (``--dry_run``); everything else runs as written;
* ``<!-- docs-test: skip REASON -->`` on the line before a block's opening fence leaves that block out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s+(?P<reason>\S.*?)\s*-->")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    skip: str | None  # the reason, where the page leaves the block out

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """The README and the documentation's Markdown pages (not the generated ones, nor the build)."""
    return [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md")
                                        if not {"_build", "_generated"} & set(p.relative_to(DOCS).parts))]


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page`` (language = the fence's first word)."""
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, info = match["fence"], match["info"].strip()
        start, i = i, i + 1
        body = []
        while i < len(lines) and not (lines[i].strip().startswith(fence) and lines[i].strip().strip(fence[0]) == ""):
            body.append(lines[i][len(match["indent"]):])
            i += 1
        i += 1
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        skip = SKIP.search(previous)
        language = info.split()[0] if info else ""
        found.append(Block(page, start + 1, language, "\n".join(body) + "\n", skip["reason"] if skip else None))
    return found


def python_pages() -> dict[Path, list[Block]]:
    """Pages with Python blocks to run, and those blocks."""
    result = {}
    for page in pages():
        run = [b for b in blocks(page) if b.language == "python" and b.skip is None]
        if run:
            result[page] = run
    return result


def commands(block: Block) -> list[str]:
    """The ``lit-marl`` lines of a bash block, continuation lines joined."""
    joined, current = [], ""
    for line in block.text.splitlines():
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip().startswith("lit-marl"):
            joined.append(current.strip())
        current = ""
    return joined


def command_lines() -> list[tuple[Block, str]]:
    """Every ``lit-marl`` command line the docs show in a bash block that is not left out, each distinct command
    once (where several pages show the same line, the first place)."""
    seen: dict[str, Block] = {}
    for page in pages():
        for block in blocks(page):
            if block.language in ("bash", "sh", "shell") and block.skip is None:
                for command in commands(block):
                    seen.setdefault(" ".join(command.split("#")[0].split()), block)
    return [(block, command) for command, block in seen.items()]


#: ``lit-marl fit --config configs/<name>.yaml`` and nothing else: exactly what ``tests/test_cli.py``'s every-config
#: test runs (the same config, the same small sizes), so the docs test checks only that it names a shipped config
PLAIN_FIT = re.compile(r"lit-marl fit --config configs/(?P<config>[\w.-]+\.yaml)")


def plain_fit(command: str) -> str | None:
    """The shipped config a command trains as it is, or None for any other command."""
    match = PLAIN_FIT.fullmatch(command.split("#")[0].strip())
    return match["config"] if match else None


def skipped_blocks() -> list[Block]:
    """Every block a page leaves out, with its reason."""
    return [block for page in pages() for block in blocks(page) if block.skip is not None]


#: a small first iteration of any config: 2 envs of 10-step episodes, one evaluation episode; the config's own batch
#: sizes, warm-up and windows cut to fit (a key is set only where the config sets it)
SMALL = {"num_envs": 2, "frames_per_batch": 20, "evaluation_episodes": 1, "max_frames": 20,
         "task.init_args.max_steps": 10}
SMALL_IF_SET = {"minibatch_size": 20, "train_batch_size": 16, "init_random_frames": 0, "n_step": 2,
                "sequence_length": 5, "n_optimizer_steps": 2, "memory_size": 1000, "n_minibatch_iters": 1}
#: where that does not fit (the names of configs/ files): as the every-config test does
SMALLER = {"ippo_meltingpot_commons_harvest.yaml": {"num_envs": 1, "frames_per_batch": 10, "minibatch_size": 10,
                                                    "max_frames": 10},
           "mappo_classic_connect_four.yaml": {"task.init_args.max_steps": 42, "frames_per_batch": 84,
                                               "minibatch_size": 84, "max_frames": 84}}


def small_fit_overrides(config: Path) -> list[str]:
    """What a docs test appends to ``lit-marl fit --config config``: one small iteration (see :data:`SMALL`)."""
    data = yaml.safe_load(config.read_text()) or {}
    init_args = (data.get("model") or {}).get("init_args") or {}
    values = {**SMALL, **{k: v for k, v in SMALL_IF_SET.items() if k in init_args}, **SMALLER.get(config.name, {})}
    return [arg for key, value in values.items() for arg in (f"--model.init_args.{key}", str(value))]
