"""An error at a field an override set names where the override was given: the command
line's ``--set``, the Python API's ``overrides`` argument, or the tool that set it itself (a
study's batch, the validate suite's runs). Each override carries its origin
(``config.overrides.GivenText``, ``GivenOverrides``), so a list built from them, a pickle and
a worker process keep it. A ContextVar around each command named ``--set`` for every override
the command handed the API, its own included, and did not reach a worker process."""

from __future__ import annotations

import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim import api, studies
from rdu_sim.cli.main import cli
from rdu_sim.compiler.errors import SlotsCapacityError
from rdu_sim.config.errors import CombinationError, ConfigError
from rdu_sim.config.overrides import (
    API,
    SET,
    SUITE,
    GivenOverrides,
    GivenText,
    SetSource,
    given,
    origin_of,
)
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


def test_a_study_s_own_batch_and_point_name_the_study_not_the_caller() -> None:
    """``decode_step_timing(batch=...)`` sets the slots itself: its refusal names the study's
    batch, where a ContextVar door read ``overrides`` (and ``--set`` under the command line)."""
    with pytest.raises(SlotsCapacityError) as caught:
        studies.decode_step_timing(LLAMA, batch=100000)
    assert str(caught.value).endswith("(from the study's batch: serving.batch_slots)")
    with pytest.raises(CombinationError) as point:
        studies.decode_step_timing(LLAMA, context=10**7)
    assert str(point.value).endswith(
        "exceeds the model's maximum context of 131072 tokens "
        "(from the study's point: serving.max_context)"
    )


def test_plot_blames_its_study_s_context_on_the_study_and_a_set_on_the_flag(
    tmp_path: Path,
) -> None:
    plot = ["plot", "memory", LLAMA, "--policies", "full", "-o", str(tmp_path / "m.png")]
    result = CliRunner().invoke(cli, [*plot, "--contexts", "10000000"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert said.endswith("(from the study's point: serving.max_context)"), said
    assert "--set" not in said
    flagged = CliRunner().invoke(cli, [*plot, "--set", "serving.batch_slots=-1"])
    assert flagged.exit_code == 2, flagged.output
    assert " ".join(flagged.output.split()).endswith("(from --set serving.batch_slots)")


def test_each_override_keeps_its_origin_in_a_list_built_from_others() -> None:
    """A command's ``[*overrides, its own]``: the user's name ``--set``, the tool's its own,
    an unmarked one the door that received it (``api.load``: ``overrides``)."""
    flagged = given(["serving.batch_slots=-1"], SET)
    with pytest.raises(ConfigError, match=r"got -1 \(from --set serving\.batch_slots\)$"):
        api.load(LLAMA, [*flagged, *given(["serving.requests=2"], SUITE)])
    with pytest.raises(ConfigError, match=r"\(from the validate suite: serving\.requests\)$"):
        api.load(
            LLAMA, [*given(["serving.batch_slots=4"], SET), *given(["serving.requests=0"], SUITE)]
        )
    with pytest.raises(ConfigError, match=r"\(from overrides: serving\.requests\)$"):
        api.load(LLAMA, [*given(["serving.batch_slots=4"], SET), "serving.requests=0"])
    # the last text that sets a key gives its origin; one origin throughout is that origin
    assert origin_of([*flagged, "serving.batch_slots=8"], API) == API
    assert origin_of([*flagged, *given(["serving.requests=2"], SET)], API) == SET
    mixed = origin_of([*flagged, *given(["serving.requests=2"], SUITE)], API)
    assert isinstance(mixed, SetSource) and mixed == API
    assert mixed.origins == {
        "serving.batch_slots": "--set serving.batch_slots",
        "serving.requests": "the validate suite: serving.requests",
    }
    # a malformed text is refused at its own origin
    with pytest.raises(ConfigError) as caught:
        api.load(LLAMA, given(["serving.requests"], SET))
    assert caught.value.issues[0].file == SET


def test_the_validate_suite_s_own_runs_name_the_suite() -> None:
    """The Kernel Looping steps set their model and sockets themselves: a refusal of one names
    the suite; the caller's ``--set`` before them still names the flag."""
    from rdu_sim.validate.decode_scaling import LLAMA_WORKLOAD, decode_overrides
    from rdu_sim.validate.suite import SINGLE_STREAM, THROUGHPUT

    assert {text.source for text in (*SINGLE_STREAM, *THROUGHPUT)} == {SUITE}
    user = given(["hw.socket.hbm.capacity=1 GB"], SET)
    with pytest.raises(ConfigError) as caught:
        api.load(LLAMA_WORKLOAD, [*user, *decode_overrides("llama-9b", 8, True)])
    said = str(caught.value)
    assert said.endswith("(from the validate suite: model)"), said
    with pytest.raises(ConfigError) as flagged:
        api.load(
            LLAMA_WORKLOAD,
            [*given(["hw.system.sockets=0"], SET), *decode_overrides("llama-3.1-8b", 8, True)[:1]],
        )
    assert str(flagged.value).endswith("(from --set hw.system.sockets)"), str(flagged.value)


def test_marked_overrides_pickle_with_their_origin() -> None:
    texts = [*given(["serving.batch_slots=4"], SET), "serving.requests=2"]
    back = pickle.loads(pickle.dumps(texts))
    assert back == texts and isinstance(back[0], GivenText) and back[0].source == SET
    assert type(back[1]) is str
    assert origin_of(back, API).origins == origin_of(texts, API).origins
    mapping = pickle.loads(
        pickle.dumps(GivenOverrides({"serving.batch_slots": 4}, "the study's batch"))
    )
    assert mapping == {"serving.batch_slots": 4} and mapping.source == "the study's batch"


def test_a_worker_process_names_the_origin_the_caller_gave() -> None:
    """A spawned worker (the validate suite's, a calibration's) reads the same origin: it
    travels with the overrides, not in the parent's context."""
    texts = given(["serving.batch_slots=-1"], SET)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert pool.submit(origin_of, texts, API).result() == SET
        with pytest.raises(ConfigError) as caught:
            pool.submit(api.load, LLAMA, texts).result()
    assert str(caught.value).endswith("got -1 (from --set serving.batch_slots)")
