"""The summary reads the per-request times a column at a time (report.summary._latencies)
rather than building every per-request column at once; its figures must be the ones those
columns give, to the bit. A differential test against the columns, on an open- and a
closed-loop run; and the CSV files written a block of rows at a time."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from rdu_sim.report import files
from rdu_sim.report.files import write_outputs
from rdu_sim.report.percentiles import Percentiles
from rdu_sim.report.summary import _time_average, request_columns, series_columns
from tests.test_api_run import fake_run

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"


@pytest.mark.parametrize(
    "overrides",
    [
        {
            "serving.requests": 300,
            "serving.batch_slots": 7,
            "serving.arrival": {"process": "closed_loop"},
        },
        {"serving.requests": 200, "serving.batch_slots": 5},  # Poisson, a queue builds
    ],
)
def test_summary_equals_the_per_request_columns(overrides: dict[str, object]) -> None:
    result = fake_run(LLAMA, **overrides)
    summary = result.summary()
    cols = request_columns(result.records)
    done = result.records.completed
    tpot = cols["tpot_s"][done]
    tpot = tpot[np.isfinite(tpot)]
    assert summary.ttft_s == Percentiles.of(cols["ttft_s"][done])
    assert summary.queue_delay_s == Percentiles.of(cols["queue_delay_s"][done])
    assert summary.e2e_s == Percentiles.of(cols["e2e_s"][done])
    assert summary.tpot_s == Percentiles.of(tpot)
    assert summary.user_tokens_per_s == Percentiles.of(1.0 / tpot[tpot > 0])
    first_arrival = float(cols["arrival_s"].min())
    last_finish = float(cols["finish_s"][done].max())
    first_token = float(cols["first_token_s"][done].min())
    assert summary.makespan_s == pytest.approx(last_finish - first_arrival, rel=1e-11)
    assert summary.decode_tokens_per_s == pytest.approx(
        result.records.tokens_generated / (last_finish - first_token), rel=1e-11
    )
    series = series_columns(result.records, result.batch_slots)
    rows = result.records.series_array()
    assert (series["occupied"] == rows[:, 2] + rows[:, 3]).all()
    occupancy = _time_average(series["time_s"], series["occupancy"], first_arrival, last_finish)
    assert summary.occupancy == pytest.approx(occupancy, rel=1e-11)


def test_the_summary_holds_a_few_columns_not_a_dozen() -> None:
    """The metrics' working memory (numpy allocations traced while ``to_dict`` runs) stays
    within five float64 columns of the requests or four of the time series' rows, whichever
    is more; building every per-request column at once took ~190 bytes a request here."""
    requests = 20_000
    result = fake_run(
        LLAMA,
        **{
            "serving.requests": requests,
            "serving.batch_slots": 64,
            "serving.arrival": {"process": "closed_loop"},
        },
    )
    rows = len(result.records.series)
    tracemalloc.start()
    try:
        result.to_dict()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * max(5 * requests, 4 * rows) + 2**20, (peak, requests, rows)


def test_csv_written_a_block_at_a_time_is_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """requests.csv is computed and written a block of requests at a time, and both CSV files
    turn a block of rows at a time into Python values; the bytes must not depend on the
    block sizes (blocks of 6 requests and 7 rows against one block)."""
    result = fake_run(LLAMA, **{"serving.requests": 40, "serving.batch_slots": 3})
    whole = write_outputs(tmp_path / "whole", {}, result.requests(), result.timeseries())
    monkeypatch.setattr(files, "ROWS_PER_BLOCK", 7)
    blocks = write_outputs(
        tmp_path / "blocks", {}, lambda: result.request_blocks(6), result.timeseries
    )
    for one, other in zip(whole, blocks, strict=True):
        assert one.read_bytes() == other.read_bytes()
    assert len(whole[1].read_text().splitlines()) == 41
    with pytest.raises(ValueError, match="unequal lengths"):
        files.write_columns(tmp_path / "bad.csv", {"a": np.zeros(2), "b": np.zeros(3)})
