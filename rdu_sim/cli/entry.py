"""The `rdu-sim` console script's entry point (pyproject's ``[project.scripts]``).

A signal (SIGINT, SIGTERM) while the command's modules load (click, the error boundary:
~0.1 s, more on a busy machine) came out of an import as a KeyboardInterrupt traceback, or
ended the process without a word. :func:`main` holds the signals before those imports
and hands what it held to ``rdu_sim.cli.main.main``, which ends the command as a later
signal ends it: one line (``interrupted (SIGINT): ...``), status 128 + the signal. Only
``signal`` is imported before that; Python imports the ``rdu_sim`` package (the native
guard) first and cannot be asked otherwise, and a signal in the interpreter's own start-up
is still Python's.
"""

from __future__ import annotations

import signal
from types import FrameType

HELD = (signal.SIGINT, signal.SIGTERM)
"""The signals held while the command loads (``rdu_sim.interrupts.SIGNALS``)."""


def main() -> None:
    """Hold the signals (those not ignored: a background job's SIGINT stays ignored), load
    the command line, run it."""
    held: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        held.append(signum)

    for signum in HELD:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, hold)
    from rdu_sim.cli import main as command  # click, the error boundary, the commands' list

    command.main(held)  # the list still fills until it installs its own handlers


if __name__ == "__main__":  # python -m rdu_sim.cli.entry: as the console script runs
    main()
