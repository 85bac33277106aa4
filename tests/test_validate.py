"""`rdu-sim validate`: the calibration suite's contract (not whether the calibration passes).

One `--quick --json` run (the same code path as `rdu-sim run`, fewer requests) is shared by
the tests: its rows carry the keys of the contract, one per published figure, and the exit
status agrees with the pass flags. A deliberately broken figure (tolerance 0) exits 1 on the
same measurements; bad input exits 2 before anything is simulated.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from click.testing import CliRunner

import rdu_sim.validate as validate
from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.validate import FIGURES, Measurements, evaluate, with_tolerances
from rdu_sim.validate.sensitivity import VARIANTS
from rdu_sim.validate.suite import (
    FULL_WORKLOAD,
    SINGLE_STREAM,
    SNAPSTREAM_WORKLOAD,
    SuiteResult,
    tolerance_overrides,
)

KEYS = {"name", "published", "simulated", "relative_error", "tolerance", "pass"}


@pytest.fixture(scope="module")
def quick() -> tuple[int, list[dict[str, Any]], SuiteResult]:
    """One quick suite run through the CLI, and the SuiteResult it printed."""
    seen: list[SuiteResult] = []
    real = validate.run_suite

    def spy(**kwargs: Any) -> SuiteResult:
        result = real(**kwargs)
        seen.append(result)
        return result

    mp = pytest.MonkeyPatch()
    mp.setattr(validate, "run_suite", spy)
    try:
        out = CliRunner().invoke(cli, ["validate", "--quick", "--json"])
    finally:
        mp.undo()
    assert out.exit_code in (0, 1), out.output
    return out.exit_code, json.loads(out.stdout), seen[0]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_json_has_one_row_per_figure(
    quick: tuple[int, list[dict[str, Any]], SuiteResult],
) -> None:
    _, rows, _ = quick
    assert [row["name"] for row in rows] == [f.name for f in FIGURES]
    for row in rows:
        assert set(row) >= KEYS
        assert isinstance(row["pass"], bool)
        assert row["published"] == next(f.published for f in FIGURES if f.name == row["name"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_exit_status_matches_pass_flags(
    quick: tuple[int, list[dict[str, Any]], SuiteResult],
) -> None:
    code, rows, _ = quick
    assert code == (0 if all(row["pass"] for row in rows) else 1)
    for row in rows:
        if row["simulated"] is not None:
            err = (row["simulated"] - row["published"]) / abs(row["published"])
            assert row["relative_error"] == pytest.approx(err, abs=1e-5)
            assert row["pass"] == (abs(err) <= row["tolerance"] + 1e-6)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_measured_values_are_physical(quick: tuple[int, list[dict[str, Any]], SuiteResult]) -> None:
    _, _, result = quick
    m = result.measurements
    assert m.batch_capacity_snapstream > m.batch_capacity_full >= 1
    assert m.decode_tokens_per_s_snapstream > 0 and m.decode_tokens_per_s_full > 0
    assert m.prefill_prompt is not None and m.prefill_s_snapstream >= m.prefill_s_full > 0
    # one request alone decodes faster than each of the full run's 40 sharing the steps
    assert m.single_stream_tokens_per_s > m.decode_tokens_per_s_full / m.batch_capacity_full
    # and exactly at the rate of its one-slot decode step: prefills never land inside a
    # request's decode life when it is alone
    step = api.step(FULL_WORKLOAD, batch=1).step_s
    assert m.single_stream_tokens_per_s == pytest.approx(1 / step, rel=1e-6)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_broken_figure_exits_1(
    quick: tuple[int, list[dict[str, Any]], SuiteResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tolerance of 0 cannot be met by a measured ratio of 3.95 (or anything not exact)."""
    _, _, result = quick

    def replay(**kwargs: Any) -> SuiteResult:
        rows = evaluate(result.measurements, kwargs["figures"])
        return SuiteResult(result.snapstream, result.full, result.measurements, rows)

    monkeypatch.setattr(validate, "run_suite", replay)
    out = CliRunner().invoke(
        cli,
        [
            "validate",
            "--json",
            "--tolerance",
            "max_batch_ratio=0",
            "--tolerance",
            "prefill_increase=0",
        ],
    )
    assert out.exit_code == 1, out.output
    rows = {row["name"]: row for row in json.loads(out.stdout)}
    assert rows["max_batch_ratio"]["tolerance"] == 0
    assert rows["max_batch_ratio"]["pass"] is False
    out = CliRunner().invoke(cli, ["validate", "--tolerance", "max_batch_ratio=0"])
    assert out.exit_code == 1 and "FAIL" in out.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--tolerance", "no_such_figure=0.1"],
        ["--tolerance", "max_batch_ratio"],
        ["--tolerance", "max_batch_ratio=-1"],
        ["--set", "serving.arrival.process=all_at_once"],
        ["--set", "serving.requests=5"],
        ["--set", "serving.no_such_field=1"],
    ],
)
def test_bad_input_exits_2(args: list[str]) -> None:
    out = CliRunner().invoke(cli, ["validate", "--json", *args])
    assert out.exit_code == 2, out.output
    assert "error:" in out.stderr


def published_measurements(**change: Any) -> Measurements:
    """Every figure at its published value, except what ``change`` moves (shared with
    test_plots_calibration)."""
    base: dict[str, Any] = dict(
        batch_capacity_snapstream=160,
        batch_capacity_full=40,
        decode_tokens_per_s_snapstream=1832.0,
        decode_tokens_per_s_full=1832.0 / 4.3,
        prefill_prompt=40000,
        prefill_s_snapstream=1.035,
        prefill_s_full=1.0,
        single_stream_tokens_per_s=198.0,
    )
    base.update(change)
    return Measurements(**base)


def test_figures_at_the_published_values_pass() -> None:
    rows = evaluate(published_measurements())
    assert all(row.passed for row in rows)
    assert [row.relative_error for row in rows] == pytest.approx([0] * len(FIGURES), abs=1e-9)


def test_prefill_range_is_2_to_5_percent() -> None:
    fig = next(f for f in FIGURES if f.name == "prefill_increase")
    assert (fig.low, fig.high) == pytest.approx((0.02, 0.05))
    for increase, ok in ((0.019, False), (0.021, True), (0.049, True), (0.051, False)):
        row = evaluate(published_measurements(prefill_s_snapstream=1 + increase), [fig])[0]
        assert row.passed is ok, increase


def test_nothing_measured_fails_and_serializes_as_null() -> None:
    rows = evaluate(published_measurements(prefill_prompt=None, decode_tokens_per_s_full=0.0))
    by_name = {row.figure.name: row for row in rows}
    for name in ("prefill_increase", "decode_throughput_ratio"):
        assert math.isnan(by_name[name].simulated) and not by_name[name].passed
        assert by_name[name].to_dict()["simulated"] is None
    json.dumps([row.to_dict() for row in rows], allow_nan=False)


def test_tolerance_overrides() -> None:
    figures = with_tolerances(tolerance_overrides(["max_batch_ratio=0"]))
    assert figures[0].tolerance == 0 and figures[1:] == FIGURES[1:]
    with pytest.raises(ValueError, match="unknown figure"):
        with_tolerances({"nope": 0.1})
    with pytest.raises(ValueError, match="NAME=VALUE"):
        tolerance_overrides(["max_batch_ratio"])


def test_single_stream_speed_is_the_median_inverse_tpot() -> None:
    from types import SimpleNamespace

    import numpy as np

    from rdu_sim.validate.measure import single_stream_speed

    ps = 10**12
    records = SimpleNamespace(
        completed=np.array([True, True, True, False]),
        output_tokens=np.array([101, 11, 201, 50]),
        first_token_ps=np.array([0, 5 * ps, 10 * ps, 0]),
        finish_ps=np.array([1 * ps, 6 * ps, 12 * ps, 0]),  # 100, 10 and 100 tokens/s
    )
    assert single_stream_speed(SimpleNamespace(records=records, batch_slots=1)) == 100.0
    with pytest.raises(ValueError, match="1 batch slot"):
        single_stream_speed(SimpleNamespace(records=records, batch_slots=2))


@pytest.mark.parametrize("label, overrides", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_every_sensitivity_variant_loads_on_both_workloads(
    label: str, overrides: tuple[str, ...]
) -> None:
    """A renamed field would otherwise show only as a 'cannot run' row in the table."""
    for path in (SNAPSTREAM_WORKLOAD, FULL_WORKLOAD):
        api.load(path, list(overrides))


def test_single_stream_definition_matches_the_run_it_describes() -> None:
    fig = next(f for f in FIGURES if f.name == "decode_speed_batch1")
    assert "serving.batch_slots=1" in SINGLE_STREAM and "1 batch slot" in fig.definition
    for item in SINGLE_STREAM:
        if "tokens=" in item:
            assert f"{item.split('=')[1]}" in fig.definition
