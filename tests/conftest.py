"""Suite-wide setup, one rule: the interrupt tests send SIGINT, so a run started where SIGINT
arrives ignored (a background job of a script, nohup) restores the handler a terminal gives.

The simulator itself leaves an ignored SIGINT ignored (``rdu_sim.interrupts.install``); the
tests' subprocesses start with the default disposition once this process has a handler.
"""

from __future__ import annotations

import signal

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
