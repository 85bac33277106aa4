"""What a sweep's plots and table tell a reader (issue 46): legends that name what ran, a
numeric axis spaced by its numbers (log-2 where they double), the steady window's throughput
by default with the whole run's (ramp-up and drain) marked beside it, and a note for every
``-`` in the table.

One real sweep (Llama 3.1 8B on a socket, 16 closed-loop requests a point) over three
contexts x two batch sizes: 16 requests give 4 slots a steady window and 8 slots none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rdu_sim.report import plots
from rdu_sim.report.plots_style import NO_WINDOW_LABEL, WHOLE_RUN_LABEL
from rdu_sim.report.plots_sweep import x_positions
from rdu_sim.report.sweep_table import sweep_tables, table_notes
from rdu_sim.sweep import load, run_sweep

ROOT = Path(__file__).resolve().parents[1]
METRICS = ["batch_capacity", "decode_tokens_per_s", "steady_decode_tokens_per_s", "ttft_s.p50"]


@pytest.fixture(scope="module")
def frame(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("sweep")
    spec = {
        "name": "contexts",
        "base": str(ROOT / "workloads" / "llama3.1-8b-1socket.yaml"),
        "set": {
            "serving.requests": 16,
            "serving.arrival": {"process": "closed_loop"},
            "serving.prompt_tokens": 512,
            "serving.output_tokens": 64,
        },
        "axes": {"serving.max_context": [2048, 4096, 8192], "serving.batch_slots": [4, 8]},
        "metrics": METRICS,
    }
    (folder / "s.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    summary = run_sweep(folder / "s.yaml", db=folder / "s.sqlite")
    assert summary.failed == 0
    return load(folder / "s.sqlite")


def legend_texts(figure: Any) -> list[str]:
    return [t.get_text() for legend in figure.legends for t in legend.get_texts()]


def test_legends_name_the_policy_a_sweep_ran(frame: Any) -> None:
    """The sweep neither varied nor stored the KV policy: the legend still names it (it
    said "?")."""
    assert "kv_policy" not in frame.columns and frame.attrs["kv_policy"] == ["full"]
    capacity = plots.plot("capacity", frame)
    assert legend_texts(capacity) == ["full"]
    for figure in (capacity, plots.plot("throughput", frame)):
        assert not any("?" in text for text in legend_texts(figure))


def test_an_axis_of_quantities_is_numeric_and_log2_where_they_double(frame: Any) -> None:
    figure = plots.sweep_plot(frame)
    ax = figure.axes[0]
    assert ax.get_xscale() == "log"
    assert list(ax.get_xticks()) == [2048, 4096, 8192]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2048", "4096", "8192"]
    line = next(line for line in ax.get_lines() if line.get_label() == "serving.batch_slots=4")
    assert list(line.get_xdata()) == [2048, 4096, 8192]
    # numbers that do not double sit on a linear axis, at their values; names stay categories
    assert x_positions(["0.8 TB/s", "1.6 TB/s", "2.4 TB/s"]) == ([0.8e12, 1.6e12, 2.4e12], False)
    assert x_positions([1, 2, 4, 8]) == ([1.0, 2.0, 4.0, 8.0], True)
    assert x_positions(["full", "snapstream"]) is None


def _lines(figure: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """(solid lines, faint whole-run lines, hollow markers) of a throughput figure."""
    lines = [line for line in figure.axes[0].get_lines() if len(line.get_xdata())]
    solid = [line for line in lines if line.get_marker() == "o" and line.get_linestyle() != "None"]
    faint = [line for line in lines if line.get_marker() == "x"]
    hollow = [line for line in lines if line.get_markerfacecolor() == "none"]
    return solid, faint, hollow


@pytest.mark.parametrize("kind", ["sweep", "throughput"])
def test_throughput_is_the_steady_windows_with_the_whole_run_beside_it(
    frame: Any, kind: str
) -> None:
    """4 slots: the steady rate solid, the whole run's faint; 8 slots (16 requests are too
    few for a window) hollow at the whole run's rate; the legend says which is which."""
    figure = plots.plot(kind, frame)
    solid, faint, hollow = _lines(figure)
    rows = frame.sort_values("serving.max_context")
    four, eight = rows[rows["serving.batch_slots"] == 4], rows[rows["serving.batch_slots"] == 8]
    assert four["steady_decode_tokens_per_s"].notna().all()
    assert eight["steady_decode_tokens_per_s"].isna().all()
    (steady,) = solid
    assert list(steady.get_ydata()) == list(four["steady_decode_tokens_per_s"])
    whole = sorted(tuple(line.get_ydata()) for line in faint)
    assert whole == sorted(
        [tuple(four["decode_tokens_per_s"]), tuple(eight["decode_tokens_per_s"])]
    )
    (marked,) = hollow
    assert list(marked.get_ydata()) == list(eight["decode_tokens_per_s"])
    texts = legend_texts(figure)
    assert WHOLE_RUN_LABEL in texts and NO_WINDOW_LABEL in texts


def test_every_dash_in_the_sweep_table_has_a_note(frame: Any) -> None:
    columns = [c for table in sweep_tables(frame, METRICS) for c in table.columns]
    steady = next(c for c in columns if c.header == "steady_decode_tokens_per_s")
    assert "-" in list(steady.cells)
    notes = table_notes(frame, METRICS)
    (note,) = [n for n in notes if n.startswith("- in ")]
    assert note.startswith("- in steady_decode_tokens_per_s: no steady window")
    assert "at least 3 requests per batch slot" in note
