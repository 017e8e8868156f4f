"""``lit-marl`` and ``python -m lit_marl``: the command line, with a Ctrl-C during start-up (importing torch,
Lightning and torchrl takes seconds) ending as quietly as one later on (exit 130, no traceback)."""

from __future__ import annotations

import sys


def main(args: list[str] | None = None) -> None:
    try:
        from lit_marl.cli import main as cli_main
    except KeyboardInterrupt:
        print("lit-marl: stopped by Ctrl-C while starting; nothing was written", file=sys.stderr)
        raise SystemExit(130) from None
    cli_main(args)


if __name__ == "__main__":
    main()
