"""Suite-wide setup, two rules.

- The interrupt tests send SIGINT, so a run started where SIGINT arrives ignored (a background
  job of a script, nohup) restores the handler a terminal gives. The simulator itself leaves
  an ignored SIGINT ignored (``rdu_sim.interrupts.install``); the tests' subprocesses start
  with the default disposition once this process has a handler.
- Under ``-n auto --dist loadscope`` the files holding a test marked ``slow`` (the wheel
  build, the docs' slow quotes, the notebooks: a minute or two each) go to the workers first.
  pytest-xdist hands out files largest first by their count of tests, which sent those
  files, holding few tests, last, and one worker ran a two-minute test alone at the end.
"""

from __future__ import annotations

import signal

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order set below
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with a slow test first, each file's tests in their order (a stable sort:
    every worker collects the same order, as pytest-xdist requires)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)
