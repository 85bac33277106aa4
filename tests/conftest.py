"""Suite-wide setup, three rules.

- The interrupt tests send SIGINT, so a run started where SIGINT arrives ignored (a background
  job of a script, nohup) restores the handler a terminal gives. The simulator itself leaves
  an ignored SIGINT ignored (``rdu_sim.interrupts.install``); the tests' subprocesses start
  with the default disposition once this process has a handler.
- Under ``-n auto --dist loadscope`` the files holding a test marked ``slow`` (the wheel
  build, the docs' slow quotes, the notebooks: a minute or two each) go to the workers first.
  pytest-xdist hands out files largest first by their count of tests, which sent those
  files, holding few tests, last, and one worker ran a two-minute test alone at the end.
- Where ``PYTHONDONTWRITEBYTECODE`` is set (this project's CI machine sets it) and no
  ``PYTHONPYCACHEPREFIX`` is, the suite and every process it starts (CLI runs, pool workers,
  notebook kernels: hundreds) cache bytecode in one temporary folder outside the checkout,
  removed at the end, as ``benchmarks.cases`` does for its runs. Without it each of them
  compiled every rdu_sim module it imported from source, and each worker rewrote every test
  module's asserts. Nothing is written into the checkout either way.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile

import pytest


def _cache_bytecode_outside_the_checkout(config: pytest.Config) -> None:
    """The third rule of the module docstring (in the process that starts pytest-xdist's
    workers, before it starts them: they inherit the environment)."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    if hasattr(config, "workerinput"):  # a worker of a run whose controller did not set it
        return
    folder = tempfile.mkdtemp(prefix="rdu-sim-tests-pycache-")
    dont_write = os.environ.pop("PYTHONDONTWRITEBYTECODE")
    os.environ["PYTHONPYCACHEPREFIX"] = folder
    sys.pycache_prefix, sys.dont_write_bytecode = folder, False

    def restore() -> None:  # as it was, for a next run in this process (an IDE's)
        os.environ.pop("PYTHONPYCACHEPREFIX", None)
        os.environ["PYTHONDONTWRITEBYTECODE"] = dont_write
        sys.pycache_prefix, sys.dont_write_bytecode = None, True
        shutil.rmtree(folder, ignore_errors=True)

    config.add_cleanup(restore)


def pytest_configure(config: pytest.Config) -> None:
    _cache_bytecode_outside_the_checkout(config)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order set below
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with a slow test first, each file's tests in their order (a stable sort:
    every worker collects the same order, as pytest-xdist requires)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)
