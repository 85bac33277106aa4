"""A design-space plot: one metric of a sweep against one of its axes, a line per group.

Sweep axes are stored as the spec gave them (``"1.8 TB/s"``, ``"256 KiB"``, ``2``), so the x
axis is categorical, ordered by the quantity each label stands for and labelled with the
spec's own strings: what the reader typed is what the reader sees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from rdu_sim.config import units
from rdu_sim.report.plots_data import PlotInputError, RunPoint, as_runs, lookup, number
from rdu_sim.report.plots_style import color_for, new_figure

__all__ = ["METRIC_LABELS", "design_space", "quantity"]

METRIC_LABELS: dict[str, tuple[str, float]] = {
    "decode_tokens_per_s": ("decode throughput (tokens/s)", 1.0),
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
    units.parse_hertz,
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
    groups: dict[tuple[Any, ...], list[RunPoint]] = {}
    for run in runs:
        key = tuple(lookup(run, column) for column in by)
        groups.setdefault(key, []).append(run)
    xs_all = sorted({lookup(r, x) for r in runs}, key=quantity)
    position = {value: i for i, value in enumerate(xs_all)}
    ylabel, scale = _label(y)
    fig, (ax,) = new_figure()
    averaged = False
    for i, (key, members) in enumerate(
        sorted(groups.items(), key=lambda kv: [_order(v) for v in kv[0]])
    ):
        values: dict[Any, list[float]] = {}
        for run in members:
            values.setdefault(lookup(run, x), []).append(number(lookup(run, y), y) * scale)
        averaged |= any(len(v) > 1 for v in values.values())
        order = sorted(values, key=quantity)
        label = ", ".join(f"{c.rsplit('.', 1)[-1]}={v}" for c, v in zip(by, key, strict=True))
        ax.plot(
            [position[v] for v in order],
            [float(np.mean(values[v])) for v in order],
            marker="o",
            label=label or y,
            color=color_for(label, i),
        )
    ax.set_xticks(range(len(xs_all)), [str(v) for v in xs_all])
    ax.set_xlabel(x)
    ax.set_ylabel(ylabel + (" (mean over other axes)" if averaged else ""))
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.margins(x=0.1)
    default = f"{ylabel} vs {x.rsplit('.', 1)[-1]}"
    ax.set_title(title or default[0].upper() + default[1:])
    return fig
