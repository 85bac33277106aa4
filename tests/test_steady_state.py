"""The steady-state decode rate (`rdu_sim.serving.steady`): one implementation behind the
run's JSON (`steady_decode_tokens_per_s`, `steady_window_s`), the console report and the
calibration's `rdu_sim.validate.measure.steady_state`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

from rdu_sim import api, human
from rdu_sim.cli.main import cli
from rdu_sim.config import ConfigError
from rdu_sim.report.console import render
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.steady import (
    MIN_TURNOVERS,
    NoSteadyWindow,
    SteadyState,
    find_steady_state,
    min_requests,
    steady_state,
)
from rdu_sim.serving.step_cache import PS_PER_S
from rdu_sim.validate import measure

LLAMA = Path(__file__).resolve().parents[1] / "workloads" / "llama3.1-8b-1socket.yaml"
SMALL = [
    "serving.batch_slots=4",
    "serving.prompt_tokens=512",
    "serving.output_tokens={dist: uniform, low: 16, high: 128}",
]
CLOSED = ["serving.arrival.process=closed_loop", "serving.requests=24", *SMALL]
POISSON = [
    "serving.arrival.process=poisson",
    "serving.arrival.rate=2.0",
    "serving.requests=24",
    *SMALL,
]
MS = PS_PER_S // 1000


@pytest.fixture(scope="module")
def closed() -> api.RunResult:
    return api.run(LLAMA, CLOSED)


@pytest.fixture(scope="module")
def poisson() -> api.RunResult:
    return api.run(LLAMA, POISSON)


def _records(rows: list[tuple[int, int, int, int, int]]) -> ServingRecords:
    """Records of completed requests from (output tokens, admit, first token, finish, slot),
    times in milliseconds (prompt 8 tokens, arrival 0)."""
    records = ServingRecords(
        np.full(len(rows), 8, dtype=np.int64), np.array([r[0] for r in rows], dtype=np.int64)
    )
    records.arrival_ps[:] = 0
    for i, (_, admit, first, finish, slot) in enumerate(rows):
        records.admit_ps[i] = admit * MS
        records.first_token_ps[i] = first * MS
        records.finish_ps[i] = finish * MS
        records.slot[i] = slot
    records.counts.tokens_generated = int(records.output_tokens.sum())
    return records


# Two slots, six requests. Completions at 100, 140, 240, 250, 300, 400 ms: the window is
# [completion 2 = 140 ms, completion 4 = 250 ms] (also the last admission).
HAND = [
    (10, 0, 10, 100, 0),  # ends before the window: nothing
    (13, 10, 20, 140, 1),  # ends at the window's start: nothing
    (16, 100, 110, 250, 0),  # 15 decode tokens over 140 ms, 110 ms inside; first token before
    (10, 140, 150, 240, 1),  # wholly inside: first token + 9 decode tokens
    (4, 240, 250, 400, 1),  # first token at the window's end (excluded); decode after it
    (5, 250, 260, 300, 0),  # the last admission: everything after the window
]


def test_hand_made_records_arithmetic() -> None:
    found = find_steady_state(_records(HAND), 2, closed_loop=True)
    assert isinstance(found, SteadyState)
    assert found.start_s == 0.14 and found.end_s == 0.25
    tokens = 15 * 110 / 140 + 1 + 9
    assert found.tokens == pytest.approx(tokens, rel=1e-12)
    assert found.tokens_per_s == pytest.approx(tokens / 0.110, rel=1e-12)
    assert steady_state(_records(HAND), 2, closed_loop=True) == found


def test_requests_in_cohorts_are_measured_over_whole_turnovers() -> None:
    """Fixed lengths: each generation of two requests is admitted in one prefill phase (10
    ms a prompt) and finishes at one moment, every 100 ms: 2 x 10 tokens a cycle, 200
    tokens/s. The window is generation 2's whole cycle, [100, 200] ms; one ending at the
    last admission (210 ms) would add generation 3's prefill phase and read 182."""
    cohorts = [
        (10, 100 * g + 10 * i, 100 * g + 10 * (i + 1), 100 * (g + 1), i)
        for g in range(3)
        for i in range(2)
    ]
    found = find_steady_state(_records(cohorts), 2, closed_loop=True)
    assert isinstance(found, SteadyState)
    assert (found.start_s, found.end_s) == (0.1, 0.2)
    assert found.tokens == pytest.approx(20.0, rel=1e-12)
    assert found.tokens_per_s == pytest.approx(200.0, rel=1e-12)


def test_a_run_with_too_few_completions_says_so() -> None:
    """Six requests on two slots, the last three never finished: one turnover completed,
    none after it."""
    cohorts = [(10, 10 * i, 10 * i + 5, 100 + i, i % 2) for i in range(6)]
    records = _records(cohorts)
    records.finish_ps[3:] = -1
    found = find_steady_state(records, 2, closed_loop=True)
    assert isinstance(found, NoSteadyWindow)
    assert (
        found.message == "3 of 6 requests completed: no whole turnover of 2 slots after the first"
    )


def test_no_window_cases() -> None:
    records = _records(HAND)
    open_loop = find_steady_state(records, 2, closed_loop=False)
    assert isinstance(open_loop, NoSteadyWindow)
    assert open_loop.field == "serving.arrival.process"
    assert steady_state(records, 2, closed_loop=False) is None
    # 6 requests on 3 slots: fewer than MIN_TURNOVERS per slot.
    assert min_requests(3) == MIN_TURNOVERS * 3 == 9
    few = find_steady_state(records, 3, closed_loop=True)
    assert isinstance(few, NoSteadyWindow) and few.field == "serving.requests"
    assert "need at least 9" in few.message
    # Every request admitted before the second completion (one slot each, all at once).
    lockstep = _records([(4, 0, 10, 100 + i, i) for i in range(6)])
    late = find_steady_state(lockstep, 2, closed_loop=True)
    assert isinstance(late, NoSteadyWindow)
    assert "last admission before the first turnover" in late.message
    assert steady_state(lockstep, 2, closed_loop=True) is None


def test_run_json_matches_the_calibration_measure(closed: api.RunResult) -> None:
    data = closed.to_dict()
    steady = measure.steady_state(closed)  # the calibration's figure
    assert data["steady_decode_tokens_per_s"] == pytest.approx(steady.tokens_per_s, rel=1e-11)
    assert data["steady_window_s"] == pytest.approx([steady.start_s, steady.end_s], rel=1e-11)
    direct = steady_state(closed.records, closed.batch_slots, closed_loop=True)
    assert direct == steady
    # Ramp-up and drain leave slots empty: the aggregate is below the steady rate.
    assert data["steady_decode_tokens_per_s"] >= data["decode_tokens_per_s"] > 0
    start, end = data["steady_window_s"]
    assert 0 < start < end <= data["makespan_s"]


def test_poisson_run_has_no_steady_window(poisson: api.RunResult) -> None:
    data = poisson.to_dict()
    assert "steady_decode_tokens_per_s" in data and "steady_window_s" in data
    assert data["steady_decode_tokens_per_s"] is None and data["steady_window_s"] is None
    assert data["decode_tokens_per_s"] > 0
    with pytest.raises(ConfigError, match="the calibration measures a closed loop"):
        measure.steady_state(poisson)


def test_calibration_refuses_too_few_requests() -> None:
    short = api.run(LLAMA, ["serving.arrival.process=closed_loop", "serving.requests=8", *SMALL])
    assert short.to_dict()["steady_decode_tokens_per_s"] is None
    with pytest.raises(
        ConfigError, match="8 requests leave no steady window with 4 slots; need at least 12"
    ):
        measure.steady_state(short)


def test_console_line(closed: api.RunResult, poisson: api.RunResult) -> None:
    def text(result: api.RunResult) -> str:
        console = Console(width=200, record=True)
        console.print(render(result.summary()))
        return console.export_text()

    data = closed.to_dict()
    line = next(row for row in text(closed).splitlines() if "all slots busy" in row)
    assert f"{human.rate(data['steady_decode_tokens_per_s'], 'tok/s')} (" in line
    window = data["steady_window_s"]
    assert f"{human.duration(window[0])} to {human.duration(window[1])}" in line
    assert "not measured (open loop)" in text(poisson)


def test_cli_run_json_has_the_keys() -> None:
    args = ["run", str(LLAMA), "--json"]
    for override in CLOSED:
        args += ["--set", override]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["steady_decode_tokens_per_s"] > 0
    assert len(data["steady_window_s"]) == 2
