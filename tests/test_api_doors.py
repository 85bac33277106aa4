"""The doors of the Python API a trial found ajar: ``api.default_step_shape`` refused a
path, ``validate.run_suite`` read a string of overrides a character at a time (and a dict's
keys alone) and blamed ``--set``, a ``SweepSummary``'s repr ran to kilobytes a point,
``run_sweep`` of a dict failed inside pathlib, ``PlotInputError`` was no ``InputError``,
warnings named rdu-sim's own line instead of the caller's, and ``shipped.folder("hardware")``
returned a folder that does not exist."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import rdu_sim
from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.config import shipped
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.overrides import UnreadFieldWarning
from rdu_sim.kv.policies import UnreadKVFieldWarning
from rdu_sim.report.plots_data import PlotInputError
from rdu_sim.sweep import run_sweep
from rdu_sim.sweep.run import SweepSummary
from rdu_sim.validate.suite import run_suite, suite_overrides

W = "llama3.1-8b-1socket"


def test_default_step_shape_takes_a_path_as_every_api_function_does() -> None:
    shape = api.default_step_shape(W, "decode")
    assert shape == api.default_step_shape(api.load(W), "decode")
    assert shape.batch == 16  # the workload's slots


def test_suite_overrides_take_a_mapping_or_texts_and_refuse_a_string() -> None:
    texts = suite_overrides({"serving.requests": 8, "hw.socket.hbm.bandwidth": "2 TB/s"}, "x")
    assert texts == ["serving.requests=8", "hw.socket.hbm.bandwidth=2 TB/s"]
    assert [t.source for t in texts] == ["overrides", "overrides"]  # (GivenText)
    assert suite_overrides(("serving.requests=8",), "x") == ["serving.requests=8"]
    with pytest.raises(TypeError, match=r"^overrides must be a mapping .* not str 'a=b'"):
        run_suite(overrides="a=b")
    with pytest.raises(TypeError, match=r"^scaling_overrides: each .* not int 3"):
        run_suite(scaling_overrides=[3])  # type: ignore[list-item]


def test_an_error_at_a_suite_override_from_python_names_the_argument() -> None:
    with pytest.raises(ConfigError, match=r"\(from overrides: serving.requests\)") as caught:
        run_suite(overrides={"serving.requests": -1}, quick=False)
    assert "--set" not in str(caught.value)


def test_a_sweep_summary_has_a_short_repr() -> None:
    summary = SweepSummary(
        "s", Path("s.sqlite"), 1000, 0, 0, ran=1000, done=1000, keys=("k" * 64,) * 1000
    )
    shown = repr(summary)
    assert len(shown) < 200, shown
    assert shown.startswith("SweepSummary(name='s', db='s.sqlite', points=1000, ran=1000")


def test_run_sweep_of_a_mapping_is_a_type_error_naming_the_spec() -> None:
    with pytest.raises(TypeError, match=r"^spec must be a sweep spec file's path .* not dict"):
        run_sweep({"base": W})  # type: ignore[arg-type]


def test_a_plot_input_error_is_an_input_error_and_the_cli_says_one_line(
    tmp_path: Path, monkeypatch: Any
) -> None:
    assert issubclass(PlotInputError, rdu_sim.InputError)
    assert issubclass(PlotInputError, ValueError)  # (as it was: except ValueError holds)
    monkeypatch.chdir(tmp_path)
    run = api.run(W, {"serving.requests": 2}).to_dict()
    del run["batch_capacity"]
    (tmp_path / "NOCAP").write_text(json.dumps(run))
    done = CliRunner().invoke(cli, ["plot", "capacity", "NOCAP", "-o", "x.png"])
    assert done.exit_code == 2, done.output
    (line,) = done.output.splitlines()
    assert line.startswith("error: NOCAP: ") and "batch capacity" in line


def test_a_warning_names_the_callers_line() -> None:
    """UnreadKVFieldWarning was attributed to scenario.py's line that called build_scenario."""
    with pytest.warns(UnreadKVFieldWarning) as caught:
        api.load(W, {"kv.budget": 1000})
    assert caught[0].filename == __file__
    with pytest.warns(UnreadFieldWarning) as caught:
        api.run(W, {"serving.requests": 2, "serving.arrival.concurrency": 3})
    assert caught[0].filename == __file__


def test_shipped_folder_takes_a_folder_or_a_kind_and_refuses_others() -> None:
    assert shipped.folder("hardware") == shipped.folder("hw_configs")
    assert (shipped.folder("hardware") / "sn40l.yaml").is_file()
    assert shipped.folder("workloads/sweeps") == shipped.folder("sweep")
    with pytest.raises(shipped.UnknownFolderError, match=r"no shipped folder 'hardwares'"):
        shipped.folder("hardwares")
    assert issubclass(shipped.UnknownFolderError, rdu_sim.InputError)
