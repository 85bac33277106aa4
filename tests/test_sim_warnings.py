"""rdu-sim's warnings: one base class a script filters (``rdu_sim.RduSimWarning``), and a
run's report ``warnings`` and its Python warnings from one rule (``report.summary.
run_warnings``): a run that spilled weights to DDR said so in ``to_dict()["warnings"]`` only,
while other conditions raised warning classes."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

import rdu_sim
from rdu_sim import api, sim_warnings
from rdu_sim.cli.main import cli
from rdu_sim.compiler.placement import WeightsSpilledWarning

ROOT = Path(__file__).resolve().parents[1]
W = "llama3.1-8b-1socket"
QWEN32 = ROOT / "tests" / "models" / "qwen3-32b" / "config.json"
HOT_SET = {"memory.weights": "hot_set", "memory.hot_set_fraction": 0.9}
SPILLS = {"model": {"config_json": str(QWEN32)}, "serving.requests": 4, **HOT_SET}
"""The trial's run: Qwen3-32B's weights on one socket beside 16 slots' KV caches, with a hot
set of 90% of HBM that the slots push out (``memory.weights: hbm`` refuses those slots)."""
HOT_SET_ARGS = [f"--set=memory.{k.split('.')[1]}={v}" for k, v in HOT_SET.items()]


def _warning_classes() -> dict[str, type[Warning]]:
    found: dict[str, type[Warning]] = {}
    for info in pkgutil.walk_packages(rdu_sim.__path__, "rdu_sim."):
        if ".data" in info.name:
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional dependency (dask, a plotting backend) not installed
            continue
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, Warning)
                and value.__module__ == info.name
            ):
                found[f"{info.name}.{name}"] = value
    return found


def test_every_warning_class_is_rdu_sims_and_listed() -> None:
    classes = _warning_classes()
    assert "rdu_sim.compiler.placement.WeightsSpilledWarning" in classes  # the walk finds them
    assert "rdu_sim.serving.limits.UnchunkedPromptWarning" in classes
    listed = " ".join((sim_warnings.__doc__ or "").split())
    for name, kind in classes.items():
        assert issubclass(kind, rdu_sim.RduSimWarning), name
        if kind is not rdu_sim.RduSimWarning:
            assert kind.__name__ in listed, f"{name} is not in rdu_sim/sim_warnings.py's list"
    assert rdu_sim.RduSimWarning is sim_warnings.RduSimWarning
    assert issubclass(rdu_sim.RduSimWarning, UserWarning)


def test_a_run_that_spills_weights_warns_as_its_report_says() -> None:
    with pytest.warns(WeightsSpilledWarning) as caught:
        result = api.run(W, SPILLS)
    said = [w for w in caught if issubclass(w.category, rdu_sim.RduSimWarning)]
    reported = result.to_dict()["warnings"]
    assert reported and reported[0].startswith("serving.batch_slots 16 leaves HBM room for")
    file = result.scenario.workload_file
    assert [str(w.message) for w in said] == [f"{file}: {text}" for text in reported]
    assert said[0].filename == __file__  # the caller's line, not the api's


def test_a_script_filters_every_rdu_sim_warning_by_the_base_class() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", rdu_sim.RduSimWarning)
        with pytest.raises(WeightsSpilledWarning, match="of them from there"):
            api.run(W, SPILLS)


def test_a_run_without_warnings_warns_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", rdu_sim.RduSimWarning)
        result = api.run(W, {"serving.requests": 4})
    assert result.to_dict()["warnings"] == []


def test_the_cli_prints_the_spill_as_one_warning_line() -> None:
    args = ["run", W, "--json", "--set", f"model.config_json={QWEN32}", *HOT_SET_ARGS]
    done = CliRunner().invoke(cli, [*args, "--set", "serving.requests=4"])
    assert done.exit_code == 0, done.output
    lines = [line for line in done.stderr.splitlines() if "of them from there" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: "), done.stderr


def test_the_text_report_says_the_spill_once() -> None:
    """`rdu-sim run` without --json: the report's warning line, not a second one on stderr
    (the trial's DeepSeek run at 256 slots printed it twice, with and without the file)."""
    args = ["run", W, "--set", f"model.config_json={QWEN32}", "--set", "serving.requests=4"]
    args += HOT_SET_ARGS
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    said = [
        line
        for line in (*done.stdout.splitlines(), *done.stderr.splitlines())
        if "leaves HBM room" in line
    ]
    assert len(said) == 1 and said[0].lstrip().startswith("warning: "), said
