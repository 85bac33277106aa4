"""The lazy import graph: a command imports what it runs, no more (docs/performance.md, "The
CLI's start"). Each command runs in a fresh interpreter and reports the heavy packages it
loaded; this checks modules, not milliseconds, so load on the machine cannot fail it."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

HEAVY = ("numpy", "networkx", "pandas", "matplotlib", "dask", "distributed", "scipy", "rich")
"""Packages that cost a command's start tens of milliseconds each."""

_LOADED = (
    "import sys\n"
    "from rdu_sim.cli.main import main\n"
    "sys.argv = ['rdu-sim', *sys.argv[1:]]\n"
    "try:\n"
    "    main()\n"
    "except SystemExit as exit:\n"
    "    assert not exit.code, exit.code\n"
    "print(*sorted(sys.modules), file=sys.stderr)\n"
)
STEP = ("step", "deepseek-r1-128k-snapstream", "--json")


@functools.cache
def _loaded(*args: str) -> frozenset[str]:
    """Every module a fresh interpreter had loaded when ``rdu-sim ARGS`` ended."""
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return frozenset(done.stderr.split())


def _heavy_loaded(*args: str) -> set[str]:
    return {m.split(".")[0] for m in _loaded(*args)} & set(HEAVY)


@pytest.mark.parametrize(
    ("args", "allowed"),
    [
        # a step builds a graph (no networkx), simulates it and prints JSON (no rich)
        (STEP, set()),
        # check plans capacity and memory as a run does (serving.run, whose requests and
        # speculation draw with numpy)
        (("check", "workloads/deepseek-r1-128k-snapstream.yaml"), {"numpy", "rich"}),
        (("inspect", "graph", "deepseek-r1-128k-snapstream", "--json"), {"rich"}),
        # serving samples requests with numpy; no plots, no DataFrames, no Dask
        (
            ("run", "llama3.1-8b-1socket", "--set", "serving.requests=8", "--json"),
            {"numpy", "rich"},
        ),
    ],
)
def test_a_command_loads_only_what_it_runs(args: tuple[str, ...], allowed: set[str]) -> None:
    assert _heavy_loaded(*args) <= allowed


def test_the_package_alone_loads_nothing_heavy() -> None:
    """``import rdu_sim.api`` (what a notebook or a sweep worker starts with)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys, rdu_sim.api; print(*sorted(set(sys.modules) & {set(HEAVY)!r}))",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


def test_an_sn40l_step_loads_no_gpu_engine() -> None:
    """The GPU engine is imported for GPU hardware only (``engine.for_hardware``)."""
    loaded = _loaded(*STEP)
    assert "rdu_sim.engine.engine" in loaded
    assert not {m for m in loaded if m.startswith("rdu_sim.engine.gpu")}


STEP_NEEDS_NONE_OF = ("sqlite3", "difflib")
"""Standard-library modules a step has no use for (a sweep's store, the "did you mean" of an
unknown field), ~2 ms of its start together."""


def test_a_step_loads_no_stdlib_module_it_does_not_use() -> None:
    assert _loaded(*STEP) & set(STEP_NEEDS_NONE_OF) == set()


def test_the_step_models_annotations_are_types_not_strings() -> None:
    """pydantic compiles and evaluates a string annotation (``from __future__ import
    annotations``) when the model class is made; the models a step validates have none."""
    import typing

    from pydantic import BaseModel

    import rdu_sim.config.hardware_file  # noqa: F401  (the GPU hardware models)
    from rdu_sim.config.workload import WorkloadConfig

    def models(cls: type) -> set[type]:
        found = {cls}
        for sub in cls.__subclasses__():
            found |= models(sub)
        return found

    step_models = {
        m
        for m in models(BaseModel)
        if m.__module__.startswith("rdu_sim.config.")
        and m.__module__.split(".")[-1] not in ("cluster", "plan")  # not a step's files
    }
    assert WorkloadConfig in step_models
    strings = {
        f"{m.__module__}.{m.__qualname__}.{name}"
        for m in step_models
        for name, annotation in vars(m).get("__annotations__", {}).items()
        if isinstance(annotation, str | typing.ForwardRef)
    }
    assert strings == set()
