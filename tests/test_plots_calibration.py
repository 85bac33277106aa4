"""The calibration plot: one axes per figure, the verdict in the marker's colour, every input.

Rows come from hand-made ``Measurements`` through ``rdu_sim.validate.evaluate`` (the suite's
own comparison, nothing simulated), so the pass/fail of each figure is known here. The plot
reads them as ``Row`` objects, as a ``SuiteResult``, as the JSON ``rdu-sim validate --json``
prints (also through ``rdu-sim plot calibration FILE``) and as a DataFrame.
"""

from __future__ import annotations

import io
import json
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner
from matplotlib.axes import Axes
from matplotlib.colors import same_color
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from test_validate import published_measurements

from rdu_sim.cli.main import cli
from rdu_sim.report import plots
from rdu_sim.report.plots_calibration import (
    FAIL_COLOR,
    PASS_COLOR,
    calibration,
    calibration_rows,
)
from rdu_sim.report.plots_data import PlotInputError
from rdu_sim.validate import FIGURES, Row, evaluate
from rdu_sim.validate.suite import RunMeasurement, SuiteResult

FAILING = "decode_throughput_snapstream"


def _rows() -> list[Row]:
    """The SnapStream throughput 83% high (the ratio kept at 4.3x): only it fails (the
    single-stream speed inside both per-user figures' bands)."""
    rows = evaluate(
        published_measurements(
            decode_tokens_per_s_snapstream=3348.0,
            decode_tokens_per_s_full=3348.0 / 4.3,
            single_stream_tokens_per_s=226.0,
        )
    )
    assert [r.figure.name for r in rows if not r.passed] == [FAILING]
    return rows


def _render(make: Callable[[], Figure]) -> Figure:
    """Build the figure and write it as PNG with every warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = make()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
    assert buffer.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    return fig


def _markers(ax: Axes) -> list[Line2D]:
    """The simulated-value markers of one panel."""
    return [line for line in ax.get_lines() if line.get_marker() == "o"]


def _check_colors(fig: Figure, rows: list[Row]) -> None:
    """One axes per figure, in order; each marker in its verdict's colour."""
    assert len(fig.axes) == len(FIGURES) == len(rows)
    for ax, row in zip(fig.axes, rows, strict=True):
        assert ax.get_title(loc="left").startswith(row.figure.name + ":")
        (marker,) = _markers(ax)
        expected = PASS_COLOR if row.passed else FAIL_COLOR
        assert same_color(marker.get_color(), expected), row.figure.name
        assert marker.get_xdata()[0] == pytest.approx(
            row.simulated * (100 if row.figure.unit == "fraction" else 1)
        )
        assert same_color(_verdict(ax).get_color(), expected)


def _verdict(ax: Axes) -> Text:
    """The right-hand title (the simulated value and pass/FAIL) as a Text artist."""
    title = ax.get_title(loc="right")
    (text,) = [t for t in ax.findobj(Text) if t.get_text() == title]
    return text


def test_one_axes_per_figure_and_the_failing_one_in_the_fail_color() -> None:
    rows = _rows()
    fig = _render(lambda: calibration(rows))
    _check_colors(fig, rows)
    failing = fig.axes[[r.figure.name for r in rows].index(FAILING)]
    assert "FAIL" in failing.get_title(loc="right")
    texts = [t.get_text() for t in failing.texts]
    assert "+82.8%" in texts  # the relative error, annotated at the marker
    n = len(FIGURES)
    assert f"{n - 1} of {n} inside tolerance" in fig.get_suptitle()


def test_band_spans_low_to_high_and_fractions_show_in_percent() -> None:
    rows = _rows()
    fig = calibration(rows)
    prefill = fig.axes[[r.figure.name for r in rows].index("prefill_increase")]
    (band,) = prefill.patches
    assert isinstance(band, Rectangle)  # axvspan: data x, axes y
    assert (band.get_x(), band.get_x() + band.get_width()) == pytest.approx((2.0, 5.0))
    assert prefill.get_xlabel() == "%"
    lo, hi = prefill.get_xlim()
    assert lo < 2.0 and hi > 5.0


def test_suite_result_json_and_dataframe_give_the_same_plot() -> None:
    rows = _rows()
    run = RunMeasurement(
        "w", "snapstream", 160, 160, 480, 3348.0, (1.0, 2.0), 3000.0, 40000, 1.035, 0.1
    )
    suite = SuiteResult(run, run, published_measurements(), rows)
    as_json = json.loads(json.dumps([r.to_dict() for r in rows]))
    for results in (suite, as_json, pd.DataFrame(as_json)):
        fig = _render(lambda results=results: plots.plot("calibration", results))
        _check_colors(fig, rows)


def test_a_bound_is_one_sided_at_the_clis_threshold_and_labelled_as_the_cli_does() -> None:
    """The trial: "over 4,500" was drawn as a band up to 7,835 (and "over 90%" under a
    "±0%: 90%..118%" label) while `rdu-sim validate` shows ``≥ 4,050``. A bound is a line at
    its lowest passing value, shaded towards the passing side only, and its title says the
    figure as stated and ``≥`` the threshold."""
    rows = evaluate(published_measurements(throughput_256_users=9000.0))
    as_json = json.loads(json.dumps([r.to_dict() for r in rows], allow_nan=False))
    parsed = {r.name: r for r in calibration_rows(as_json)}
    bound = parsed["decode_throughput_256_users"]
    assert bound.passed and bound.at_least and bound.low == pytest.approx(4050.0)
    assert bound.high == math.inf
    # without the suite's verdict the plot applies the bound itself
    below = {**next(r for r in as_json if r["name"] == "decode_throughput_256_users")}
    below.pop("pass")
    below["simulated"] = 4000.0
    assert not calibration_rows([below])[0].passed
    fig = _render(lambda: calibration(as_json))
    assert len(fig.axes) == len(FIGURES)
    names = [r["name"] for r in as_json]
    ax = fig.axes[names.index("decode_throughput_256_users")]
    assert ax.get_title(loc="left") == (
        "decode_throughput_256_users: published over 4,500 tokens/s (≥ 4,050 tokens/s)"
    )
    (shade,) = ax.patches
    _, hi = ax.get_xlim()
    assert shade.get_x() == pytest.approx(4050.0)
    assert shade.get_x() + shade.get_width() == pytest.approx(hi)  # open to the right
    upright = [
        line
        for line in ax.get_lines()
        if line.get_linestyle() == "-" and len(set(line.get_xdata())) == 1
    ]
    assert [line.get_xdata()[0] for line in upright] == [4050.0]
    share = fig.axes[names.index("peak_share_8_sockets")].get_title(loc="left")
    assert share == "peak_share_8_sockets: published over 90% (≥ 90%)"
    assert "±" not in share


def test_unmeasured_figure_fails_without_a_marker() -> None:
    rows = evaluate(published_measurements(prefill_prompt=None))
    as_json = json.loads(json.dumps([r.to_dict() for r in rows], allow_nan=False))
    parsed = calibration_rows(as_json)
    prefill = next(r for r in parsed if r.name == "prefill_increase")
    assert math.isnan(prefill.simulated) and not prefill.passed
    fig = _render(lambda: calibration(as_json))
    ax = fig.axes[[r.name for r in parsed].index("prefill_increase")]
    assert not _markers(ax)
    assert any(t.get_text() == "not measured" for t in ax.texts)
    assert same_color(_verdict(ax).get_color(), FAIL_COLOR)


@pytest.mark.parametrize(
    ("results", "message"),
    [
        ([], "empty"),
        ({"model": "x", "kv_policy": "full"}, "has no name"),
        ([{"name": "a", "published": 1.0, "simulated": 1.0}], "has no tolerance"),
        ("rows", "expected calibration rows"),
        (42, "expected calibration rows"),
    ],
)
def test_input_errors(results: Any, message: str) -> None:
    with pytest.raises(PlotInputError, match=message):
        plots.plot("calibration", results)


def test_cli_plots_validate_json(tmp_path: Path) -> None:
    source = tmp_path / "v.json"
    source.write_text(json.dumps([r.to_dict() for r in _rows()]))  # `rdu-sim validate --json`
    out = tmp_path / "cal.png"
    result = CliRunner().invoke(cli, ["plot", "calibration", str(source), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_cli_calibration_errors_exit_2(tmp_path: Path) -> None:
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"model": "x", "kv_policy": "full", "batch_capacity": 4}))
    workload = Path(__file__).resolve().parents[1] / "workloads" / "deepseek-r1-128k-full.yaml"
    for source, message in ((run, "has no name"), (workload, "rdu-sim validate --json")):
        result = CliRunner().invoke(
            cli, ["plot", "calibration", str(source), "-o", str(tmp_path / "x.png")]
        )
        assert result.exit_code == 2, result.output
        assert message in result.output
    assert not (tmp_path / "x.png").exists()
