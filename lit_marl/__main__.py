"""``lit-marl`` and ``python -m lit_marl``: the command line, with a Ctrl-C during start-up (importing torch,
Lightning and torchrl takes seconds) ending as quietly as one later on (exit 130, no traceback)."""

from __future__ import annotations

import signal
import threading

from lit_marl.sigint import exit_interrupted


def main(args: list[str] | None = None) -> None:
    pressed: list[int] = []
    previous = None
    if threading.current_thread() is threading.main_thread():

        def handler(signum, frame):
            pressed.append(signum)
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGINT, handler)
    try:
        from lit_marl.cli import main as cli_main
    except BaseException as err:
        # a Ctrl-C here raises KeyboardInterrupt inside some import; a library that catches and drops it can leave a
        # module half-imported and fail later with another error (numpy's RecursionError): the user pressed Ctrl-C
        if not pressed and not isinstance(err, KeyboardInterrupt):
            raise
        exit_interrupted("lit-marl: stopped by Ctrl-C while starting; nothing was written")
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    cli_main(args)


if __name__ == "__main__":
    main()
