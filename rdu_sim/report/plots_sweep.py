"""A design-space plot: one metric of a sweep against one of its axes, a line per group.

Sweep axes are stored as the spec gave them (``"1.8 TB/s"``, ``"256 KiB"``, ``2``), so the x
axis is categorical, ordered by the quantity each label stands for and labelled with the
spec's own strings: what the reader typed is what the reader sees.

:func:`sweep_plot` picks what :func:`design_space` needs from a sweep database's frame
(``rdu_sim.sweep.load`` records the spec's axes in ``frame.attrs["axes"]``): the x axis (the
first swept axis that is a quantity), the metric, and a line per value of every other swept
axis that is not tied to the x axis or to an earlier line axis (a ``zip`` of ``parallelism.tp``
with ``hw.system.sockets`` is one axis, not two). That is ``rdu-sim plot sweep DB``. The x
axis is named in words with its unit (``config.field_docs``) over its path; the title names
the sweep and the model and hardware its points ran (``frame.attrs``, read off each point's
resolved config).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from rdu_sim.config import units
from rdu_sim.config.field_docs import axis_label
from rdu_sim.report.plots_data import PlotInputError, RunPoint, as_runs, lookup, number
from rdu_sim.report.plots_style import color_for, figure_title, legend_outside, new_figure
from rdu_sim.report.sweep_frame import cell_key as _key
from rdu_sim.report.sweep_frame import swept_axes

__all__ = [
    "DEFAULT_METRICS",
    "METRIC_LABELS",
    "axis_title",
    "design_space",
    "quantity",
    "sweep_plot",
    "swept_axes",
]

METRIC_LABELS: dict[str, tuple[str, float]] = {
    "decode_tokens_per_s": ("decode throughput (tokens/s)", 1.0),
    "steady_decode_tokens_per_s": ("decode throughput, all slots busy (tokens/s)", 1.0),
    "batch_capacity": ("batch capacity (slots)", 1.0),
    "batch_slots": ("batch slots", 1.0),
    "prefill_s": ("prefill time (ms)", 1e3),
    "ttft_s.p50": ("TTFT p50 (ms)", 1e3),
    "ttft_s.p90": ("TTFT p90 (ms)", 1e3),
    "ttft_s.p99": ("TTFT p99 (ms)", 1e3),
    "tpot_s.p50": ("TPOT p50 (ms)", 1e3),
    "tpot_s.p90": ("TPOT p90 (ms)", 1e3),
    "tpot_s.p99": ("TPOT p99 (ms)", 1e3),
}
"""Axis label and scale of common metrics (seconds shown in ms, bytes in GiB)."""

_PARSERS: tuple[Callable[[Any], float], ...] = (
    float,
    units.parse_bandwidth,
    units.parse_bytes,
    units.parse_flops,
    units.parse_seconds,
)


def quantity(value: Any) -> float:
    """The number an axis value stands for ("1.8 TB/s" -> 1.8e12), to order the x axis."""
    for parse in _PARSERS:
        try:
            return float(parse(value))
        except (TypeError, ValueError):
            continue
    raise PlotInputError(f"axis value {value!r} is neither a number nor a unit string")


def _order(value: Any) -> tuple[int, float, str]:
    """Sort key of a group value: quantities by size, then anything else by name."""
    try:
        return (0, quantity(value), "")
    except PlotInputError:
        return (1, 0.0, str(value))


def _label(metric: str) -> tuple[str, float]:
    if metric in METRIC_LABELS:
        return METRIC_LABELS[metric]
    if metric.endswith("_bytes"):
        return f"{metric} (GiB)", 1.0 / 2**30
    if metric.endswith("per_s"):  # a rate, not a time
        return f"{metric} (per s)", 1.0
    if metric.endswith("_s"):
        return f"{metric} (ms)", 1e3
    return metric, 1.0


def design_space(
    results: Any, x: str, y: str, *, by: Sequence[str] = (), title: str | None = None
) -> Figure:
    """Metric ``y`` vs sweep axis ``x``, one line per combination of the ``by`` columns.

    Args:
        results: a sweep DataFrame (``rdu_sim.sweep.load``) or runs carrying the columns.
        x: the axis column (e.g. ``hw.socket.hbm.bandwidth``).
        y: the metric column (e.g. ``decode_tokens_per_s``); seconds are shown in ms and
            ``*_bytes`` in GiB.
        by: columns that split the rows into lines (e.g. ``hw.system.sockets``).

    Returns:
        The figure; one line per group. Rows of a group that share an ``x`` value (axes not
        named in ``by``) are averaged, and the legend says so.
    """
    runs = as_runs(results)
    shown: dict[str, Any] = {}  # a cell's hashable key (_key: dicts, NaN) -> the cell

    def cell(run: RunPoint, column: str) -> str:
        value = lookup(run, column)
        key = _key(value)
        shown.setdefault(key, None if key == "null" else value)
        return key

    groups: dict[tuple[str, ...], list[RunPoint]] = {}
    for run in runs:
        groups.setdefault(tuple(cell(run, column) for column in by), []).append(run)
    xs_all = sorted({cell(r, x) for r in runs}, key=lambda k: _order(shown[k]))
    position = {value: i for i, value in enumerate(xs_all)}
    ylabel, scale = _label(y)
    fig, (ax,) = new_figure()
    averaged = False
    for i, (key, members) in enumerate(
        sorted(groups.items(), key=lambda kv: [_order(shown[v]) for v in kv[0]])
    ):
        values: dict[str, list[float]] = {}
        for run in members:
            values.setdefault(cell(run, x), []).append(number(lookup(run, y), y) * scale)
        averaged |= any(len(v) > 1 for v in values.values())
        order = sorted(values, key=lambda k: _order(shown[k]))
        label = ", ".join(
            f"{c.rsplit('.', 1)[-1]}={_tick(shown[v])}" for c, v in zip(by, key, strict=True)
        )
        ax.plot(
            [position[v] for v in order],
            [float(np.mean(values[v])) for v in order],
            marker="o",
            label=label or y,
            color=color_for(label, i),
        )
    ax.set_xticks(range(len(xs_all)), [_tick(shown[v]) for v in xs_all])
    ax.set_xlabel(axis_title(x))
    ax.set_ylabel(ylabel + (" (mean over other axes)" if averaged else ""))
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if by:
        legend_outside(fig, ax)
    ax.margins(x=0.1)
    default = f"{ylabel} vs {x.rsplit('.', 1)[-1]}"
    figure_title(fig, title or default[0].upper() + default[1:])
    return fig


DEFAULT_METRICS = (
    "decode_tokens_per_s",
    "batch_capacity",
    "tpot_s.p50",
    "ttft_s.p50",
)
"""What ``rdu-sim plot sweep`` shows when no metric is named: the first of these a sweep
stored."""


_BOOKKEEPING = frozenset(
    {"key", "sweep", "status", "error", "wall_s", "started", "finished", "attempts"}
    | {"version", "worker"}
)
"""Columns of a sweep row that are not metrics (rdu_sim.sweep.load's leading and trailing)."""


def _tick(value: Any) -> str:
    """An axis value as the spec wrote it; a mapping as its items (``draft=..., k=2``)."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={_tick(v)}" for k, v in value.items())
    return "none" if value is None else str(value)


def _follows(frame: Any, lead: str, other: str) -> bool:
    """True when each value of ``lead`` comes with one value of ``other`` (a zipped axis)."""
    seen: dict[str, set[str]] = {}
    for a, b in zip(frame[lead], frame[other], strict=True):
        seen.setdefault(_key(a), set()).add(_key(b))
    return all(len(values) == 1 for values in seen.values())


def _is_quantity(values: Any) -> bool:
    try:
        for value in values:
            quantity(value)
    except PlotInputError:
        return False
    return True


def axis_title(path: str) -> str:
    """A swept axis in words with its unit, over the path a user types to set it (the path
    alone when its field has no description)."""
    words = axis_label(path)
    return path if words == path else f"{words}\n{path}"


def _single(frame: Any, column: str) -> str | None:
    """The one value of ``column`` in every row (else the one name ``rdu_sim.sweep.load``
    read off every point's resolved config), else None."""
    if column in frame.columns:
        values = {str(v) for v in frame[column] if v is not None and _key(v) != "null"}
    else:
        values = {str(v) for v in getattr(frame, "attrs", {}).get(column) or []}
    return values.pop() if len(values) == 1 else None


def sweep_plot(
    frame: Any,
    *,
    x: str | None = None,
    y: str | None = None,
    by: Sequence[str] | None = None,
) -> Figure:
    """``y`` along swept axis ``x`` of a sweep database's frame, a line per ``by`` group.

    Defaults: ``x`` the first swept axis whose values are quantities (else the first swept
    axis), ``y`` the first of :data:`DEFAULT_METRICS` the sweep stored, ``by`` every other
    swept axis not tied to ``x`` or to an earlier ``by`` axis. The title names the sweep,
    the model and the hardware when the rows say them.

    Raises:
        PlotInputError: the frame sweeps nothing, or ``x``, ``y`` or a ``by`` column is not
            in it (the message lists what is).
    """
    if not hasattr(frame, "columns"):
        raise PlotInputError("a sweep plot reads a sweep database (rdu_sim.sweep.load)")
    axes = swept_axes(frame)
    if x is None:
        if not axes:
            raise PlotInputError(
                "the sweep's points differ in no axis; name the x axis with --x COLUMN"
            )
        x = next((a for a in axes if _is_quantity(frame[a])), axes[0])
    for column in (x, *(by or ())):
        if column not in frame.columns:
            shown = ", ".join(axes) or "none"
            raise PlotInputError(f"the sweep has no column {column!r}; its swept axes: {shown}")
    if y is None:
        y = next((m for m in DEFAULT_METRICS if m in frame.columns), None)
        if y is None:
            raise PlotInputError(
                f"the sweep stored none of {', '.join(DEFAULT_METRICS)}; name one with --y"
            )
    elif y not in frame.columns:
        metrics = [c for c in frame.columns if c not in (*axes, *_BOOKKEEPING)]
        raise PlotInputError(f"the sweep has no metric {y!r}; its columns: {', '.join(metrics)}")
    if by is None:
        lines: list[str] = []
        for axis in axes:
            if axis != x and not any(_follows(frame, lead, axis) for lead in (x, *lines)):
                lines.append(axis)
        by = lines
    ylabel, _ = _label(y)
    what = " on ".join(v for v in (_single(frame, "model"), _single(frame, "hardware")) if v)
    name = _single(frame, "sweep")
    head = f"{ylabel} vs {x.rsplit('.', 1)[-1]}"
    title = (f"{name}: " if name else "") + head + (f" — {what}" if what else "")
    return design_space(frame, x, y, by=by, title=title)
