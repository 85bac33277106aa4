"""The calibration plot: each published figure, its tolerance band and the simulated value.

``rdu-sim validate`` compares the simulator with the published figures of SambaNova's
SnapStream deployment (docs/calibration.md). Those figures have different units (ratios,
tokens/s, a fraction), so the plot gives each its own row of axes on its own scale: the
published value as a dashed line inside its shaded tolerance band (``low``..``high``), the
simulated value as a marker coloured by the suite's verdict (pass or fail), a line from
the published value to the marker the length of the error, and the relative error written
beside it.

It reads the comparison rows in any of the forms they come in: a ``SuiteResult``
(``rdu_sim.validate.run_suite``), its ``rows`` (``Row`` objects), the JSON list ``rdu-sim
validate --json`` prints (dicts with ``name``, ``published``, ``simulated``,
``relative_error``, ``tolerance``, ``pass``, ``unit``, ``low``, ``high``, ``bound``,
``stated``), or a DataFrame with those columns. A bound ("over X": ``bound`` ``at_least``,
a null ``high``) is one-sided: a line at its lowest passing value (``low``, the CLI's
``≥``) with an arrow and a shade towards the passing side, labelled as ``rdu-sim validate``
labels it. Nothing here imports ``rdu_sim.validate``: rows are read by their fields.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from rdu_sim import human
from rdu_sim.report.plots_data import PlotInputError, number
from rdu_sim.report.plots_style import new_figure

__all__ = [
    "BAND_COLOR",
    "FAIL_COLOR",
    "PASS_COLOR",
    "CalibrationRow",
    "calibration",
    "calibration_rows",
]

PASS_COLOR = "#55a868"
"""Colour of a simulated value inside its tolerance band."""

FAIL_COLOR = "#c44e52"
"""Colour of a simulated value outside its band (or not measured)."""

BAND_COLOR = "#d9d9d9"
"""Colour of the tolerance band around the published value."""


@dataclass(frozen=True)
class CalibrationRow:
    """One figure of the comparison, as the plot reads it (``Row.to_dict()``'s fields)."""

    name: str
    published: float
    simulated: float  # NaN when the suite could not measure it
    tolerance: float  # relative to |published|
    low: float
    high: float
    passed: bool
    unit: str
    at_least: bool = False  # a bound ("over X"): passes at ``low`` or above; ``high`` is inf
    stated: str | None = None  # the figure as its source states it ("over 4,500 tokens/s")

    @property
    def relative_error(self) -> float:
        """(simulated - published) / |published| (NaN when nothing was measured)."""
        return (
            (self.simulated - self.published) / abs(self.published) if self.published else math.nan
        )


def _records(results: Any) -> list[Any]:
    """The rows of ``results`` as a list of mappings or Row-like objects."""
    if results is None or isinstance(results, str | bytes):
        raise PlotInputError(
            "expected calibration rows (rdu-sim validate --json, a "
            f"SuiteResult or its rows), got {type(results).__name__}"
        )
    if hasattr(results, "to_dict") and hasattr(results, "columns"):  # a DataFrame
        return list(results.to_dict(orient="records"))
    if (
        not isinstance(results, Mapping) and hasattr(results, "rows") and not callable(results.rows)
    ):  # a SuiteResult
        return list(results.rows)
    if isinstance(results, Mapping):
        inner = results.get("rows", results.get("figures"))
        return list(inner) if isinstance(inner, list) else [results]
    if isinstance(results, Iterable):
        return list(results)
    raise PlotInputError(
        "expected calibration rows (rdu-sim validate --json, a SuiteResult "
        f"or its rows), got {type(results).__name__}"
    )


def _value(record: Mapping[str, Any], key: str, name: str) -> float:
    """A numeric field; None (the JSON of an unmeasured value) is NaN."""
    raw = record.get(key)
    return math.nan if raw is None else number(raw, f"{name}: {key}")


def _row(item: Any) -> CalibrationRow:
    """One record (a ``Row``, its ``to_dict()`` or a DataFrame row) as a CalibrationRow."""
    if not isinstance(item, Mapping) and hasattr(item, "figure") and hasattr(item, "to_dict"):
        item = item.to_dict()  # a rdu_sim.validate Row
    if not isinstance(item, Mapping):
        raise PlotInputError(
            "a calibration row must be a mapping with name, published, "
            f"simulated and tolerance; got {type(item).__name__}"
        )
    missing = [k for k in ("name", "published", "simulated", "tolerance") if k not in item]
    if missing:
        raise PlotInputError(
            f"calibration row {item.get('name', '?')!r} has no "
            f"{', '.join(missing)} (give what `rdu-sim validate --json` "
            "prints)"
        )
    name = str(item["name"])
    published = _value(item, "published", name)
    tolerance = _value(item, "tolerance", name)
    if not (math.isfinite(published) and math.isfinite(tolerance) and tolerance >= 0):
        raise PlotInputError(
            f"calibration row {name!r}: published and tolerance must be "
            f"finite (tolerance >= 0), got {published!r}, {tolerance!r}"
        )
    simulated = _value(item, "simulated", name)
    low = _value(item, "low", name)
    high = _value(item, "high", name)
    at_least = item.get("bound") == "at_least"  # "over X": no upper end
    if not math.isfinite(low):
        low = published - tolerance * abs(published)
    if at_least:  # one-sided: no upper end
        high = math.inf
    elif not math.isfinite(high):
        high = published + tolerance * abs(published)
    verdict = item.get("pass", item.get("passed"))
    if isinstance(verdict, bool):
        passed = verdict
    else:  # not given: the suite's test, |simulated - published| <= tolerance x |published|
        limit = tolerance * abs(published) * (1 + 1e-12)
        error = simulated - published
        passed = math.isfinite(simulated) and (error >= -limit if at_least else abs(error) <= limit)
    unit = item.get("unit")
    stated = item.get("stated")
    return CalibrationRow(
        name,
        published,
        simulated,
        tolerance,
        low,
        high,
        passed,
        "" if unit is None or unit != unit else str(unit),
        at_least,
        str(stated) if isinstance(stated, str) and stated else None,
    )


def calibration_rows(results: Any) -> list[CalibrationRow]:
    """The comparison rows of ``results`` (a SuiteResult, its rows, ``rdu-sim validate
    --json``'s list or a DataFrame with its columns), in the suite's order.

    Raises:
        PlotInputError: results that are not calibration rows, or are empty.
    """
    rows = [_row(item) for item in _records(results)]
    if not rows:
        raise PlotInputError("no calibration rows given: the results are empty")
    return rows


def _scale(unit: str) -> tuple[float, str]:
    """Display scale and axis label: fractions in percent, ratios as such, else the unit."""
    if unit == "fraction":
        return 100.0, "%"
    return 1.0, "ratio (x)" if unit == "x" else unit


def _fmt(value: float, unit: str, *, named: bool = True) -> str:
    """A value in the figure's unit as people read it (4x, 1,832 tokens/s, 3.5%); a unit
    spelt out in words is left off when ``named`` is False."""
    if not math.isfinite(value):
        return "n/a"
    return human.in_unit(value, unit if named or unit in ("fraction", "x") else "")


def _limits(row: CalibrationRow, scale: float) -> tuple[float, float]:
    """x limits holding the band, the published value and the simulated one, with room for
    the annotation."""
    values = [v for v in (row.low, row.high, row.published, row.simulated) if math.isfinite(v)]
    lo, hi = min(values) * scale, max(values) * scale
    span = hi - lo or abs(hi) or 1.0
    return lo - 0.12 * span, hi + 0.12 * span


def _draw(ax: Axes, row: CalibrationRow) -> None:
    """One figure's panel: band, published line, simulated marker, error annotation."""
    scale, unit = _scale(row.unit)
    color = PASS_COLOR if row.passed else FAIL_COLOR
    left, right = _limits(row, scale)
    if row.at_least:  # one-sided: the passing side of the lowest passing value
        ax.axvspan(row.low * scale, right, color=BAND_COLOR, alpha=0.5, zorder=0)
        ax.axvline(row.low * scale, color="0.3", linestyle="-", linewidth=1.5, zorder=1)
        ax.annotate(
            "",
            xy=(row.low * scale + 0.08 * (right - left), -0.6),
            xytext=(row.low * scale, -0.6),
            arrowprops={"arrowstyle": "->", "color": "0.3", "linewidth": 1.2},
            zorder=1,
        )
    else:
        ax.axvspan(row.low * scale, row.high * scale, color=BAND_COLOR, zorder=0)
    ax.axvline(row.published * scale, color="0.3", linestyle="--", linewidth=1.2, zorder=1)
    verdict = "pass" if row.passed else "FAIL"
    if math.isfinite(row.simulated):
        sim = row.simulated * scale
        ax.plot([row.published * scale, sim], [0, 0], color=color, linewidth=2, alpha=0.5, zorder=2)
        ax.plot(
            [sim],
            [0],
            marker="o",
            markersize=10,
            linestyle="none",
            color=color,
            markeredgecolor="black",
            markeredgewidth=0.6,
            zorder=3,
        )
        ax.annotate(
            f"{100 * row.relative_error:+.1f}%",
            (sim, 0),
            xytext=(0, 9),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=9,
            fontweight="bold",
            color=color,
        )
        result = f"simulated {_fmt(row.simulated, row.unit)} · {verdict}"
    else:
        ax.text(
            0.5,
            0.5,
            "not measured",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color=FAIL_COLOR,
            fontsize=9,
        )
        result = f"not measured · {verdict}"
    ax.set_xlim(left, right)
    ax.set_ylim(-1, 1)
    ax.set_yticks([])
    ax.set_xlabel(unit, fontsize=8, labelpad=1)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"{row.name}: published {_published_words(row)}", loc="left", fontsize=9)
    ax.set_title(result, loc="right", fontsize=9, color=color, fontweight="bold")


def _published_words(row: CalibrationRow) -> str:
    """The figure as ``rdu-sim validate`` prints it (as stated, else its value) and what
    passes: a bound's lowest passing value (``≥ 4,050 tokens/s``), a point's band
    (``±10%: 1,649..2,015 tokens/s``)."""
    published = row.stated or _fmt(row.published, row.unit)
    if row.at_least:
        return f"{published} (≥ {_fmt(row.low, row.unit)})"
    band = f"{_fmt(row.low, row.unit, named=False)}..{_fmt(row.high, row.unit)}"
    return f"{published} (±{human.percent(row.tolerance, 0)}: {band})"


def calibration(results: Any, *, title: str | None = None) -> Figure:
    """Published vs simulated, one row of axes per calibration figure.

    Each axes has the figure's own x scale (fractions in percent): the tolerance band
    shaded, the published value dashed, the simulated value a marker in :data:`PASS_COLOR`
    or :data:`FAIL_COLOR` (the suite's verdict) joined to the published value, and the
    relative error written above the marker. An unmeasured value (NaN, JSON null) fails and
    says so.

    Args:
        results: a ``SuiteResult``, its ``rows``, the list ``rdu-sim validate --json``
            prints, or a DataFrame with those columns.
        title: the figure's title (default: how many figures pass).

    Returns:
        The figure; ``fig.axes`` holds one axes per figure, in the suite's order.
    """
    rows = calibration_rows(results)
    fig, axes = new_figure(len(rows), 1, width=8.5, height=1.35)
    for ax, row in zip(axes, rows, strict=True):
        _draw(ax, row)
    passed = sum(row.passed for row in rows)
    fig.suptitle(
        title or f"Calibration: simulated vs published ({passed} of {len(rows)} inside tolerance)",
        fontsize=11,
    )
    bounds = (
        [Line2D([], [], color="0.3", linestyle="-", label="a bound's lowest passing value")]
        if any(row.at_least for row in rows)
        else []
    )
    fig.legend(
        handles=[
            Patch(color=BAND_COLOR, label="tolerance band"),
            Line2D([], [], color="0.3", linestyle="--", label="published"),
            *bounds,
            Line2D(
                [],
                [],
                marker="o",
                linestyle="none",
                color=PASS_COLOR,
                markeredgecolor="black",
                markeredgewidth=0.6,
                label="simulated: pass",
            ),
            Line2D(
                [],
                [],
                marker="o",
                linestyle="none",
                color=FAIL_COLOR,
                markeredgecolor="black",
                markeredgewidth=0.6,
                label="simulated: fail",
            ),
        ],
        loc="outside lower center",
        ncols=4 + len(bounds),
        fontsize=8,
        frameon=False,
    )
    return fig
