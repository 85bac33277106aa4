"""`rdu-sim sweep` ends with a table of its swept axes and headline metrics per point (the
database's rows, in the spec's grid order) and says where the database is."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

from click.testing import CliRunner
from rich.console import Console

from rdu_sim import human
from rdu_sim.cli.main import cli
from rdu_sim.report.sweep_table import format_metric, sweep_tables
from rdu_sim.sweep import load

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"

SPEC = """
axes:
  serving.batch_slots: [1, 2, 4, 8]
  serving.max_context: [4096, 8192]
metrics: [decode_tokens_per_s, ttft_s.p50, memory.hbm.kv_bytes]
evaluator: {name: synthetic, options: {fail_when: {serving.batch_slots: 2}}}
"""


def _rows(stdout: str, first: str) -> list[list[str]]:
    """The table's body rows: lines whose first cell is an axis value, split on 2+ spaces."""
    rows = []
    for line in stdout.splitlines():
        cells = [c for c in line.strip().split("  ") if c.strip()]
        if cells and cells[0].strip() in first.split():
            rows.append([c.strip() for c in cells])
    return rows


def test_sweep_ends_with_the_points_table_and_the_database(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"base: {BASE}\n" + textwrap.dedent(SPEC).lstrip("\n"))
    db = tmp_path / "out.sqlite"
    result = CliRunner().invoke(cli, ["sweep", str(spec), "--workers", "1", "--db", str(db)])
    assert result.exit_code == 1  # one axis value fails on purpose: its rows say why
    out = result.stdout
    assert "spec: results" in out
    for column in ("serving.batch_slots", "serving.max_context", "ttft_s.p50", "status"):
        assert column in out
    assert "failed: RuntimeError: synthetic failure" in out
    assert f"database: {db} (rdu-sim plot sweep {db}; --export FILE for CSV)" in out
    assert "serving.max_context: longest sequence a slot holds (tokens)" in out
    assert "serving.batch_slots: static batch slots" in out
    grid = [[str(s), str(c)] for s in (1, 2, 4, 8) for c in (4096, 8192)]
    printed = [cells[:2] for cells in _rows(out, "1 2 4 8")]
    assert printed[: len(grid)] == grid  # the spec's grid order (each table repeats it)
    assert len(printed) % len(grid) == 0
    # every cell, from one table wide enough for all of them (rows in the frame's order;
    # the command loads them in the spec's grid order)
    frame = load(db)
    metrics = ["decode_tokens_per_s", "ttft_s.p50", "memory.hbm.kv_bytes"]
    (table,) = sweep_tables(frame, metrics, width=300)
    text = io.StringIO()
    Console(file=text, width=300).print(table)
    rows = _rows(text.getvalue(), "1 2 4 8")
    assert len(rows) == len(frame) == 8
    by_point = {
        (int(r["serving.batch_slots"]), int(r["serving.max_context"])): r
        for _, r in frame.iterrows()
    }
    order = [
        (int(r["serving.batch_slots"]), int(r["serving.max_context"])) for _, r in frame.iterrows()
    ]
    for cells, point in zip(rows, order, strict=True):  # the frame's order
        record = by_point[point]
        assert cells[:2] == [str(point[0]), str(point[1])]
        if point[0] == 2:
            assert record["status"] == "failed"
            assert cells[2:5] == [human.MISSING] * 3 and cells[5].startswith("failed: ")
            continue
        assert cells[2:] == [
            format_metric("decode_tokens_per_s", record["decode_tokens_per_s"]),
            format_metric("ttft_s.p50", record["ttft_s.p50"]),
            format_metric("memory.hbm.kv_bytes", record["memory.hbm.kv_bytes"]),
            "done",
        ]


def test_metric_units_follow_their_names() -> None:
    assert format_metric("ttft_s.p50", 0.0123) == "12.3 ms"
    assert format_metric("memory.hbm.kv_bytes", 3 * 2**30) == "3 GiB"
    assert format_metric("kv_bytes_per_slot", 2**30) == "1 GiB"
    assert format_metric("decode_tokens_per_s", 1374.2) == "1,374"
    assert format_metric("batch_slots", 686) == "686"
    assert format_metric("kv_policy", "snapstream") == "snapstream"
    assert format_metric("slo_met", True) == "True"
    assert format_metric("steady_decode_tokens_per_s", float("nan")) == human.MISSING
    assert format_metric("x", None) == human.MISSING


def test_metrics_that_do_not_fit_go_to_a_further_table_repeating_the_axes(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"base: {BASE}\n" + textwrap.dedent(SPEC).lstrip("\n"))
    db = tmp_path / "out.sqlite"
    CliRunner().invoke(cli, ["sweep", str(spec), "--workers", "1", "--db", str(db)])
    frame = load(db)
    metrics = ["decode_tokens_per_s", "ttft_s.p50", "memory.hbm.kv_bytes"]
    (whole,) = sweep_tables(frame, metrics, width=200)
    parts = sweep_tables(frame, metrics, width=70)
    assert len(parts) > 1
    axes = ["serving.batch_slots", "serving.max_context"]
    headers = [[str(c.header) for c in table.columns] for table in parts]
    assert all(h[:2] == axes for h in headers)
    spread = [name for h in headers for name in h[2:]]
    assert spread == [str(c.header) for c in whole.columns][2:]  # each once, in order
    assert spread[-1] == "status"


def test_a_failed_points_status_ends_cleanly_and_the_export_keeps_the_error(
    tmp_path: Path,
) -> None:
    """The status cell was the error's first 60 characters, cut mid-word ("...fail_when
    (serv"); it is its first clause cut at a word, ending in "...", and a note says where
    the whole error is. The export keeps it whole."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"base: {BASE}\n" + textwrap.dedent(SPEC).lstrip("\n"))
    db, out = tmp_path / "out.sqlite", tmp_path / "out.csv"
    args = ["sweep", str(spec), "--workers", "1", "--db", str(db), "--export", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    error = "RuntimeError: synthetic failure requested by fail_when (serving.batch_slots=2)"
    status = "failed: RuntimeError: synthetic failure requested by fail_when..."
    lines = result.stdout.splitlines()
    cells = [line.rstrip() for line in lines if "failed: " in line]
    assert cells and all(line.endswith(status) for line in cells), cells
    assert any(
        line.startswith("... ends a shortened error: the whole one is in the error")
        for line in lines
    )
    assert error in out.read_text()  # the export loses nothing
    from rdu_sim.report.sweep_table import short_error

    assert (
        short_error("ValueError: bad\nTraceback (most recent call last):") == "ValueError: bad..."
    )
    assert short_error("CapacityError: too big; lower x") == "CapacityError: too big..."
    assert short_error("fits in the cell") == "fits in the cell"
    assert short_error("x" * 100) == "x" * 57 + "..."


def test_a_refusal_loses_its_workload_path_whole_and_nothing_after_it() -> None:
    """The ``does not fit`` cell drops the path a refusal starts with, spaces and line number
    included, and only that: a sentence that merely mentions a file keeps it."""
    from rdu_sim.report.sweep_table import _status

    sentence = "serving.batch_slots: the KV cache of 100,000 slots needs more"
    for path in ("/tmp/my runs/w.yaml:12", "w.yaml", "C:/x y/w.json:3"):
        record = {"status": "failed", "error": f"SlotsCapacityError: {path}: {sentence}"}
        assert _status(record).startswith("does not fit: serving.batch_slots: the KV cache")
    mentioned = {"status": "failed", "error": "CapacityError: weights: sn40l.yaml: too big"}
    assert _status(mentioned) == "does not fit: weights: sn40l.yaml: too big"


def test_a_sweep_without_metrics_shows_what_bound_each_point() -> None:
    """A spec without ``metrics:`` showed throughputs and latencies but not what bound
    each point (``throughput_bound``, ``decode_step.bound``); both are headline columns."""
    import pandas as pd

    frame = pd.DataFrame(
        {
            "hw.socket.hbm.bandwidth": [1.8e12, 3.6e12],
            "batch_slots": [16, 16],
            "decode_tokens_per_s": [1000.0, 1500.0],
            "throughput_bound": ["machine", "machine"],
            "decode_step.bound": ["hbm", "host"],
            "decode_step.binds": [True, True],
            "status": ["done", "done"],
        }
    )
    frame.attrs["axes"] = ["hw.socket.hbm.bandwidth"]
    (table,) = sweep_tables(frame, width=300)
    headers = [str(c.header) for c in table.columns]
    assert headers == [
        "hw.socket.hbm.bandwidth",
        "batch_slots",
        "decode_tokens_per_s",
        "throughput_bound",
        "decode_step.bound",
    ]
    assert list(table.columns[-1].cells) == ["hbm", "host"]


def test_a_table_that_fills_the_width_exactly_is_not_cut() -> None:
    """The columns' widths left out the table's edge: a table one character too wide for the
    console had its last cell (a failed point's status) cut with an ellipsis; it now goes
    to a further table, every cell whole."""
    import pandas as pd

    from rdu_sim.report.sweep_table import short_error

    error = "RuntimeError: " + " ".join(["word"] * 20)
    frame = pd.DataFrame(
        {
            "serving.batch_slots": [2, 100000],
            "decode_tokens_per_s": [143.0, None],
            "status": ["done", "failed"],
            "error": [None, error],
        }
    )
    frame.attrs["axes"] = ["serving.batch_slots"]
    status = "failed: " + short_error(error)
    narrowest = 1 + len("serving.batch_slots") + 3 + len(status) + 3  # status beside the axis
    for width in range(narrowest, narrowest + 40):
        text = io.StringIO()
        for table in sweep_tables(frame, ["decode_tokens_per_s"], width=width):
            Console(file=text, width=width).print(table)
        assert "…" not in text.getvalue(), width
        assert status in text.getvalue(), width
