"""The shipped SnapStream batch sweep (workloads/sweeps/deepseek-snapstream-batch.yaml,
docs/kv.md "SnapStream's batch"): run whole on one worker, its steady decode rate rises with
the batch up to what memory holds (past the batch SambaStack's programs run), where a named
resource binds the step; the point forced past memory's count is bound by another and serves
less."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from rdu_sim import api
from rdu_sim.compiler import batch_capacity
from rdu_sim.engine.timing import StepTiming
from rdu_sim.report.bound import RESOURCES, bound_label, step_bound
from rdu_sim.sweep import load, run_sweep

SPEC = (
    Path(__file__).resolve().parents[1] / "workloads" / "sweeps" / "deepseek-snapstream-batch.yaml"
)
WORKLOAD = "deepseek-r1-128k-snapstream"


def _memory_capacity() -> int:
    """The capacity of a stack that runs every batch: the most slots beside MLA's query
    weights held whole (136; memory holds 158 beside their slices, whose steps gather)."""
    return batch_capacity(api.load(WORKLOAD, {"stack.batch_programs": "any"}))


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The sweep's rows in batch order (11 points, a few seconds compiled)."""
    db = tmp_path_factory.mktemp("snapstream-batch") / "batch.sqlite"
    summary = run_sweep(SPEC, db=db, workers=1)
    assert summary.failed == 0
    frame = load(db).sort_values("serving.batch_slots")
    return list(frame.to_dict("records"))


def _rate(row: dict[str, Any]) -> float:
    return float(row["steady_decode_tokens_per_s"])


def test_the_sweep_reaches_the_capacity_and_one_point_past_it(rows: list[dict[str, Any]]) -> None:
    """The batch SambaStack runs (a power of two), what memory holds, and one point past."""
    runs, holds = batch_capacity(api.load(WORKLOAD)), _memory_capacity()
    slots = [int(r["serving.batch_slots"]) for r in rows]
    assert runs < holds < 2 * runs and runs & (runs - 1) == 0
    assert runs in slots and holds in slots
    assert [s for s in slots if s > holds] == [slots[-1]]


def test_throughput_never_falls_as_the_batch_grows_to_the_capacity(
    rows: list[dict[str, Any]],
) -> None:
    """Up to what memory holds each point's steady rate is above the one before; no steady
    rate beats its own decode step's (the window's prefills only stall the slots)."""
    capacity = _memory_capacity()
    within = [r for r in rows if r["serving.batch_slots"] <= capacity]
    rates = [_rate(r) for r in within]
    assert all(b > a for a, b in pairwise(rates)), rates
    for row in rows:
        assert _rate(row) <= row["serving.batch_slots"] / row["decode_step.step_s"]


def test_each_step_names_its_bound_and_the_top_points_differ(rows: list[dict[str, Any]]) -> None:
    """Every point names a resource, never one of less time than HBM's or the links'; at
    what memory holds HBM or the links (the attention's reduce-scatter) bind, past it the
    query gather makes the links bind, by more, and the rate falls."""
    for row in rows:
        bound = row["decode_step.bound"]
        assert bound in RESOURCES
        times = {"hbm": row["decode_step.hbm_s"], "link": row["decode_step.link_s"]}
        assert times.get(bound, max(times.values())) >= max(times.values())
    at_capacity, past = rows[-2], rows[-1]
    assert at_capacity["decode_step.bound"] in ("hbm", "link")
    assert past["decode_step.bound"] == "link"
    assert past["decode_step.link_s"] > 1.5 * at_capacity["decode_step.link_s"]
    assert _rate(past) < _rate(at_capacity)


def test_the_runs_decode_step_is_the_step_commands(rows: list[dict[str, Any]]) -> None:
    """Differential: the sweep's decode step at memory's count is `rdu-sim step --batch` of it."""
    row = rows[-2]
    scenario = api.load(WORKLOAD)
    timing = api.step(scenario, batch=int(row["serving.batch_slots"])).detail
    assert isinstance(timing, StepTiming)
    assert row["decode_step.step_s"] == pytest.approx(timing.step_s, rel=1e-11)
    assert row["decode_step.bound"] == step_bound(timing, scenario.hardware).bound


def test_each_row_says_what_limits_the_batch(rows: list[dict[str, Any]]) -> None:
    """Issue 42: the rows name what stops the rise: the slots memory holds, the batch the
    stack's programs run ('auto') and which rule cut it there, as the run's report does."""
    scenario = api.load(WORKLOAD)
    runs = batch_capacity(scenario)
    holds = batch_capacity(scenario, runnable=False)
    for row in rows:
        assert row["batch_capacity"] == runs
        assert row["memory_capacity"] == holds
        assert row["capacity_limit"] == scenario.stack.batch_limit(holds) == "batch_programs"
        assert row["throughput_bound"] == "machine"


def test_each_row_says_whether_its_bound_binds_as_the_step_report_does(
    rows: list[dict[str, Any]],
) -> None:
    """One slot's step is HBM's largest part, not bound by it (`rdu-sim step --batch 1`
    says "largest part"); the rows carry the same rule (`report.bound.bound_label`)."""
    scenario = api.load(WORKLOAD)
    for row in (rows[0], rows[-2]):
        timing = api.step(scenario, batch=int(row["serving.batch_slots"])).detail
        assert isinstance(timing, StepTiming)
        bound = step_bound(timing, scenario.hardware)
        assert row["decode_step.binds"] == (bound_label(bound.limit_s, bound.step_s) == "bound by")
    assert not rows[0]["decode_step.binds"]
    assert rows[-2]["decode_step.binds"]
