"""An error at a field an override set names where the override was given: the command
line's ``--set``, or the Python API's ``overrides`` argument (``config.overrides.given_at``).
It said ``(from --set ...)`` to an API caller who had passed a dict."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.compiler.errors import SlotsCapacityError
from rdu_sim.config.errors import ConfigError
from rdu_sim.scenario import load_scenario

LLAMA = str(Path(__file__).resolve().parents[1] / "workloads" / "llama3.1-8b-1socket.yaml")


def _cli(*args: str) -> str:
    result = CliRunner().invoke(cli, ["run", LLAMA, *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


def test_a_field_rule_names_the_api_argument_or_the_flag() -> None:
    with pytest.raises(ConfigError) as caught:
        api.run(LLAMA, {"serving.batch_slots": -1})
    (issue,) = caught.value.issues
    assert (issue.field, issue.line) == ("serving.batch_slots", None)
    assert issue.message.endswith("got -1 (from overrides: serving.batch_slots)")
    said = _cli("--set", "serving.batch_slots=-1")
    assert said.startswith("error: ")
    assert said.endswith("got -1 (from --set serving.batch_slots)")


def test_a_rule_checked_before_the_run_names_the_api_argument_or_the_flag() -> None:
    """The run's memory refusal (``Scenario.at_field``), far from where the overrides were
    applied, reads the origin the scenario recorded."""
    sets = {"serving.batch_slots": 100000, "serving.requests": 2}
    with pytest.raises(SlotsCapacityError) as caught:
        api.run(LLAMA, sets)
    api_said = str(caught.value)
    assert api_said.endswith("(from overrides: serving.batch_slots)")
    said = _cli("--set", "serving.batch_slots=100000", "--set", "serving.requests=2")
    assert said.endswith("(from --set serving.batch_slots)")
    # the same refusal otherwise, word for word
    flag_said = api_said.replace("(from overrides: ", "(from --set ")
    assert said == "error: " + " ".join(flag_said.split())


def test_an_override_that_is_no_path_value_is_refused_at_the_argument() -> None:
    with pytest.raises(ConfigError) as caught:
        api.load(LLAMA, ["serving.requests"])
    (issue,) = caught.value.issues
    assert (issue.file, issue.field) == ("overrides", "serving.requests")
    assert issue.message == "an override must look like field.path=value"


def test_earlier_overrides_keep_their_origin_when_more_are_added() -> None:
    """``api.load(scenario, more)``: the slots a ``--set`` gave still name ``--set``, the
    requests the API added name ``overrides``."""
    flagged = load_scenario(LLAMA, ["serving.batch_slots=100000"])
    both = api.load(flagged, {"serving.requests": 2})
    assert both.overrides == {"serving.batch_slots": 100000, "serving.requests": 2}
    with pytest.raises(SlotsCapacityError, match=r"\(from --set serving\.batch_slots\)$"):
        api.run(both)
    with pytest.raises(SlotsCapacityError, match=r"\(from overrides: serving\.batch_slots\)$"):
        api.run(api.load(both, {"serving.batch_slots": 200000}))
