"""A design-space plot: one metric of a sweep against one of its axes, a line per group.

Sweep axes are stored as the spec gave them (``"1.8 TB/s"``, ``"256 KiB"``, ``2``). An axis
whose values are all quantities is numeric: each point sits at the number it stands for,
on a log-2 scale when the values double (8,192 ... 131,072), with a tick at each value
labelled with the spec's own string: what the reader typed is what the reader sees. Any
other axis is categorical, in the spec's order of quantities, then by name.

Throughput defaults to the steady window (``steady_decode_tokens_per_s``: the slots kept
full), with the whole run's rate (ramp-up and drain included) faint beside it; a point
without a steady window (too few requests per slot, or an open loop) is a hollow marker at
its whole-run rate, and the legend says so.

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

import math
import textwrap
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from rdu_sim.config import units
from rdu_sim.config.field_docs import axis_label
from rdu_sim.config.overrides import HW_PREFIX
from rdu_sim.report.bound import LABELS
from rdu_sim.report.plots_data import (
    PlotInputError,
    RunPoint,
    as_runs,
    lookup,
    number,
    short_names,
)
from rdu_sim.report.plots_style import (
    figure_title,
    legend_outside,
    legible_xticks,
    line_style,
    new_figure,
    plot_steady,
    whole_run_key,
)
from rdu_sim.report.summary import UTILIZATION_LABELS
from rdu_sim.report.sweep_companions import OFFER_MORE, OFFERED_LOAD, THROUGHPUTS
from rdu_sim.report.sweep_frame import cell_key as _key
from rdu_sim.report.sweep_frame import swept_axes
from rdu_sim.report.sweep_table import failure_words

__all__ = [
    "DEFAULT_METRICS",
    "METRIC_LABELS",
    "axis_title",
    "check_columns",
    "default_x",
    "design_space",
    "left_out_note",
    "line_axes",
    "point_counts",
    "quantity",
    "short_names",
    "sweep_plot",
    "swept_axes",
    "value_order",
    "value_tick",
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
    "occupancy": ("batch slots occupied, mean (%)", 100.0),
    **{f"utilization.{k}": (f"{words} (%)", 100.0) for k, words in UTILIZATION_LABELS.items()},
}
"""Axis label and scale of common metrics (seconds shown in ms, bytes in GiB, a share of a
whole in %: a run's utilization, with the words every command gives it)."""

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


def value_order(value: Any) -> tuple[int, float, str]:
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
    if metric.endswith(("_share", "_fraction", ".fraction")):  # a share of a whole
        return f"{metric} (%)", 100.0
    if metric.endswith("per_s"):  # a rate, not a time
        return f"{metric} (per s)", 1.0
    if metric.endswith("_s"):
        return f"{metric} (ms)", 1e3
    return metric, 1.0


SECONDS_ABOVE_S = 10.0
"""A time metric whose largest value reaches this many seconds is drawn in s, not ms (a TTFT
of 40,000 ms reads better as 40 s)."""

YLABEL_WIDTH = 44
"""Characters of a y label per line before it wraps (what the default axes' height holds)."""


def _scaled_label(metric: str, runs: Sequence[RunPoint]) -> tuple[str, float]:
    """:func:`_label`, with a time metric in seconds when its largest value reaches
    :data:`SECONDS_ABOVE_S`."""
    label, scale = _label(metric)
    if scale != 1e3 or not label.endswith("(ms)"):
        return label, scale
    values = [v for run in runs if (v := _value(run, metric, 1.0)) is not None]
    if values and max(values) >= SECONDS_ABOVE_S:
        return label.removesuffix("(ms)") + "(s)", 1.0
    return label, scale


def _wrapped(label: str, note: str) -> str:
    """``label`` and its ``note`` on one line, or the note on a line of its own when together
    they pass :data:`YLABEL_WIDTH` (a label longer than that wraps between words)."""
    lines = textwrap.wrap(label, YLABEL_WIDTH) or [label]
    if note and len(lines[-1]) + 1 + len(note) <= YLABEL_WIDTH:
        lines[-1] += f" {note}"
    elif note:
        lines.append(note)
    return "\n".join(lines)


def _policy_last(by: Sequence[str], key: Sequence[str]) -> str:
    """A line's group values joined as ``plots_style.line_style`` reads a label (the KV
    policy last), so a policy keeps its colour across plots."""
    pairs = list(zip(by, key, strict=True))
    ordered = [v for c, v in pairs if c != POLICY_COLUMN] + [
        v for c, v in pairs if c == POLICY_COLUMN
    ]
    return " · ".join(ordered)


POLICY_COLUMN = "kv.policy"


def x_positions(values: Sequence[Any]) -> tuple[list[float], bool] | None:
    """Where each x value sits when every one is a quantity, and whether on a log-2 scale
    (the values are positive and each at least :data:`DOUBLING` times the one before);
    None for a categorical axis."""
    try:
        numbers = [quantity(v) for v in values]
    except PlotInputError:
        return None
    ordered = sorted(set(numbers))
    doubling = ordered[0] > 0 and all(b >= DOUBLING * a for a, b in pairwise(ordered))
    return numbers, doubling and len(ordered) > 1


DOUBLING = 1.9
"""Successive axis values at least this far apart (8k, 16k, 32k ...) go on a log-2 axis."""


def _value(run: RunPoint, column: str, scale: float) -> float | None:
    """A point's metric, scaled; None when the point has no value (an empty cell)."""
    raw = lookup(run, column, None)
    value = None if raw is None else number(raw, column)
    return None if value is None or math.isnan(value) else value * scale


def design_space(
    results: Any,
    x: str,
    y: str,
    *,
    by: Sequence[str] = (),
    title: str | None = None,
    whole_run: str | None = None,
    marks: bool = False,
) -> Figure:
    """Metric ``y`` vs sweep axis ``x``, one line per combination of the ``by`` columns.

    Args:
        results: a sweep DataFrame (``rdu_sim.sweep.load``) or runs carrying the columns.
        x: the axis column (e.g. ``hw.socket.hbm.bandwidth``); numeric when its values are
            quantities (log-2 when they double), else categorical.
        y: the metric column (e.g. ``decode_tokens_per_s``); seconds are shown in ms and
            ``*_bytes`` in GiB.
        by: columns that split the rows into lines (e.g. ``hw.system.sockets``).
        whole_run: a metric drawn faint beside ``y`` in each line's colour (the whole run's
            rate beside the steady window's: ``plots_style.plot_steady``); a point with no
            ``y`` is a hollow marker at its value.
        marks: name each point's decode-step bound over it (or, for a throughput, the
            offered load where it set it, said in a note over the axes too) and the batch
            limits along a batch-slots axis, where the rows carry them (:func:`mark_bounds`,
            :func:`offered_load_note`, :func:`mark_batch_limits`).

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
    xs_all = sorted({cell(r, x) for r in runs}, key=lambda k: value_order(shown[k]))
    numeric = x_positions([shown[k] for k in xs_all])
    position = {k: (numeric[0][i] if numeric else float(i)) for i, k in enumerate(xs_all)}
    ylabel, scale = _scaled_label(y, runs)
    names = short_names([x, *by])
    fig, (ax,) = new_figure()
    averaged = hollow = False
    drawn = 0
    left_out: list[RunPoint] = []  # points with no value to draw (failed, or without y)
    ordered = sorted(groups.items(), key=lambda kv: [value_order(shown[v]) for v in kv[0]])
    styles = [_policy_last(by, [value_tick(shown[v]) for v in key]) for key, _ in ordered]
    for i, (key, members) in enumerate(ordered):
        values: dict[str, list[float]] = {}
        whole: dict[str, list[float]] = {}
        for run in members:
            value = _value(run, y, scale)
            if value is not None:
                values.setdefault(cell(run, x), []).append(value)
            other = _value(run, whole_run, scale) if whole_run else None
            if other is not None:
                whole.setdefault(cell(run, x), []).append(other)
            if value is None and other is None:
                left_out.append(run)
        averaged |= any(len(v) > 1 for v in (*values.values(), *whole.values()))
        label = ", ".join(
            f"{names[c]}={value_tick(shown[v])}" for c, v in zip(by, key, strict=True)
        )
        order = sorted({*values, *whole}, key=lambda k: value_order(shown[k]))
        drawn += len(order)
        mean = {k: float(np.mean(v)) for k, v in values.items()}
        whole_mean = {k: float(np.mean(v)) for k, v in whole.items()}
        hollow |= plot_steady(
            ax,
            [position[v] for v in order],
            [mean.get(v) for v in order],
            [whole_mean.get(v) for v in order],
            label=label or ylabel,
            **line_style(styles[i], i, styles),
        )
    if drawn == 0:
        raise PlotInputError(f"no point of the sweep has a value of {y!r}")
    marked = marks and mark_bounds(
        ax, [m for _, m in ordered], y, scale, lambda run: position[cell(run, x)]
    )
    if marks and x == BATCH_AXIS:
        mark_batch_limits(ax, runs)
    ticks = [position[v] for v in xs_all]
    if numeric and numeric[1]:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(ticks, [value_tick(shown[v]) for v in xs_all])
    ax.set_xlabel(axis_title(x))
    ax.set_ylabel(_wrapped(ylabel, "(mean over other axes)" if averaged else ""))
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if whole_run:
        whole_run_key(ax, hollow)
    if by or whole_run or marked:
        legend_outside(fig, ax)
    ax.margins(x=0.1)
    total, not_run = point_counts(results, len(runs))
    offered = offered_load_note(runs, y) if marks else ""
    if left_out or not_run or offered:  # over the axes: a footnote would share the bottom
        left = left_out_note(left_out, total, y, names, not_run=not_run)  # with a legend
        note = "; ".join(part for part in (left, offered) if part)
        ax.set_title(textwrap.fill(note, NOTE_CHARS), fontsize=7, color="dimgray", loc="left")
    default = f"{ylabel} vs {names[x]}"
    figure_title(fig, title or default[0].upper() + default[1:])
    legible_xticks(fig, ax)  # values close on a linear axis would run into one number
    return fig


BATCH_AXIS = "serving.batch_slots"
"""The axis along which a sweep's batch limits are marked (:func:`mark_batch_limits`)."""


def bound_mark(bound: str, binds: Any) -> str:
    """A point's bound in a plot's words, by the step report's rule (a run's
    ``decode_step.binds``, ``report.bound.bound_label``): ``HBM-bound`` when the resource
    binds the step, ``largest: HBM`` when it is only the step's largest part."""
    word = LABELS.get(bound, bound)
    return f"{word}-bound" if binds is None or bool(binds) else f"largest: {word}"


BOUND_MARKERS = ("s", "^", "D", "v", "P", "X", "h", "<", ">", "*", "p")
"""A marker shape per resource, in the order of ``report.bound.LABELS``."""


OFFERED_LOAD_MARK = "offered-load-bound"
"""A throughput point's mark where the offered load set it (``throughput_bound``
``offered_load``): its decode step's bound says nothing of its throughput then."""


def offered_load_bound(run: RunPoint, y: str) -> bool:
    """Whether ``y`` is a throughput the offered load set at this point, not the machine
    (``report.sweep_companions``; a row stored without ``throughput_bound`` never is)."""
    return y in THROUGHPUTS and lookup(run, "throughput_bound", None) == OFFERED_LOAD


def offered_load_note(runs: Sequence[RunPoint], y: str) -> str:
    """The note over a throughput plot some of whose points the offered load bound (''
    when none: a row stored without ``throughput_bound`` says nothing), so a line that
    falls with more slots or bandwidth is not read as the machine's answer."""
    offered = sum(offered_load_bound(run, y) for run in runs)
    if not offered:
        return ""
    return (
        f"{offered} of {len(runs)} points' {y} is set by the offered load, not the machine "
        f"(throughput_bound {OFFERED_LOAD}; marked {OFFERED_LOAD_MARK}); to compare the "
        f"machines, offer more: {OFFER_MORE}"
    )


def mark_bounds(
    ax: Any,
    lines: Sequence[Sequence[RunPoint]],
    y: str,
    scale: float,
    at: Callable[[RunPoint], float],
) -> bool:
    """On each point of each line (the rows of one line of the plot) with a ``y`` and a
    ``decode_step.bound``, a black marker whose shape names the resource, filled where it
    binds the step and hollow where it is only the step's largest part (:func:`bound_mark`),
    or a filled circle, :data:`OFFERED_LOAD_MARK`, on a throughput the offered load set
    (:func:`offered_load_bound`), each kind once in the legend; nothing where several rows
    of one line share an x position (an average has no one bound). Whether it marked any."""
    placed: dict[tuple[int, float], list[tuple[float, str, str]]] = {}
    for i, members in enumerate(lines):
        for run in members:
            value = _value(run, y, scale)
            bound = lookup(run, "decode_step.bound", None)
            if offered_load_bound(run, y):
                bound, label = OFFERED_LOAD, OFFERED_LOAD_MARK
            elif bound is not None:
                label = bound_mark(str(bound), lookup(run, "decode_step.binds", None))
            if value is None or bound is None:
                continue
            placed.setdefault((i, at(run)), []).append((value, str(bound), label))
    kinds: dict[str, tuple[str, list[float], list[float]]] = {}
    for (_, position), points in sorted(placed.items()):
        if len(points) == 1:
            value, bound, label = points[0]
            kinds.setdefault(label, (bound, [], []))[1].append(position)
            kinds[label][2].append(value)
    shapes = dict(zip(LABELS, BOUND_MARKERS, strict=True))
    for label, (bound, xs, ys) in sorted(kinds.items()):
        filled = label.endswith("-bound")
        ax.scatter(
            xs,
            ys,
            marker=shapes.get(bound, "o"),
            s=16 if filled else 60,
            facecolors="black" if filled else "none",
            edgecolors="black",
            linewidths=1,
            zorder=5,
            label=label,
        )
    return bool(kinds)


def mark_batch_limits(ax: Any, runs: Sequence[RunPoint]) -> None:
    """Along a batch-slots axis, a dotted line at the slots memory holds
    (``memory_capacity``) and one at the batch ``auto`` runs (``batch_capacity``) with the
    rule that cut it there (``capacity_limit``: the stack's ``batch_programs`` or
    ``max_batch_slots``), where every row says the same (a run's JSON keys)."""

    def single(column: str) -> Any:
        values = {str(lookup(run, column, None)) for run in runs}
        return None if len(values) != 1 or values == {"None"} else lookup(runs[0], column)

    holds, runs_at, limit = (
        single(c) for c in ("memory_capacity", "batch_capacity", "capacity_limit")
    )
    lines: dict[float, str] = {}
    if holds is not None:
        lines[float(holds)] = f"memory holds {int(holds):,}"
    if runs_at is not None and limit is not None and limit != "memory":
        lines[float(runs_at)] = f"'auto' runs {int(runs_at):,} ({limit})"
    for slots, words in lines.items():
        ax.axvline(slots, color="gray", linestyle=":", linewidth=1)
        ax.annotate(
            words,
            (slots, 0),
            xycoords=("data", "axes fraction"),
            xytext=(-3, 4),
            textcoords="offset points",
            rotation=90,
            ha="right",
            va="bottom",
            fontsize=6,
            color="gray",
        )


REASON_CHARS = 110
"""Characters of a failed point's error the note quotes (its first clause, as the sweep's
table says it: ``sweep_table.failure_words``)."""

NOTE_CHARS = 100
"""Characters of 7-point text a line of the note over the axes holds (their width)."""


def point_counts(results: Any, rows: int) -> tuple[int, int]:
    """How many points the sweep's spec has and how many of them have no stored row (an
    interrupted sweep's: ``rdu_sim.sweep.load``'s ``spec_points`` and ``stored_points``);
    ``rows`` and none for results that do not say."""
    attrs = getattr(results, "attrs", None) or {}
    total, stored = attrs.get("spec_points"), attrs.get("stored_points")
    if not isinstance(total, int) or not isinstance(stored, int):
        return rows, 0
    return total, max(0, total - stored)


def left_out_note(
    left_out: Sequence[RunPoint],
    total: int,
    y: str,
    names: dict[str, str],
    *,
    not_run: int = 0,
) -> str:
    """The note of a plot that leaves points out: how many the sweep has not run yet (an
    interrupted sweep: ``not_run``), how many failed (all at the plotted axes' values they
    share, with the first one's error) and how many have no ``y``, so a gap in a line, or
    a plot of a few points, is never silent."""
    failed = [r for r in left_out if lookup(r, "status", None) == "failed"]
    empty = len(left_out) - len(failed)
    parts = []
    if not_run:
        parts.append(f"{not_run} of {total} points not run yet")
    if failed:
        shared = []
        for column, name in names.items():
            values = {value_tick(lookup(r, column, None)) for r in failed}
            if len(values) == 1:
                shared.append(f"{name}={values.pop()}")
        where = f", all at {', '.join(shared)}" if shared else ""
        error = str(lookup(failed[0], "error", "") or "").strip()
        reason = failure_words(error, REASON_CHARS) if error else ""
        first = "" if len(failed) == 1 else "the first: "
        parts.append(
            f"{len(failed)} of {total} points failed and are not drawn{where}"
            + (f" ({first}{reason})" if reason else "")
        )
    if empty:
        parts.append(f"{empty} of {total} points have no {y} value and are not drawn")
    return "; ".join(parts)


DEFAULT_METRICS = (
    "steady_decode_tokens_per_s",
    "decode_tokens_per_s",
    "batch_capacity",
    "tpot_s.p50",
    "ttft_s.p50",
)
"""What ``rdu-sim plot sweep`` shows when no metric is named: the first of these a sweep
stored with a value at some point."""

WHOLE_RUN = {"steady_decode_tokens_per_s": "decode_tokens_per_s"}
"""A steady-window metric -> the whole run's, drawn faint beside it (ramp-up marked)."""


_BOOKKEEPING = frozenset(
    {"key", "sweep", "status", "error", "wall_s", "started", "finished", "attempts"}
    | {"version", "worker"}
)
"""Columns of a sweep row that are not metrics (rdu_sim.sweep.load's leading and trailing)."""


def value_tick(value: Any) -> str:
    """An axis value as the spec wrote it; a mapping as its items (``draft=..., k=2``)."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={value_tick(v)}" for k, v in value.items())
    return "none" if value is None else str(value)


def _follows(frame: Any, lead: str, other: str) -> bool:
    """True when each value of ``lead`` comes with one value of ``other`` (a zipped axis):
    over the spec's points where the frame has them (``attrs["axis_points"]``,
    ``rdu_sim.sweep.load``: a stopped sweep's few stored rows can pair two crossed axes
    one to one), else over its rows."""
    planned = (getattr(frame, "attrs", None) or {}).get("axis_points")
    if planned and all(lead in point and other in point for point in planned):
        pairs = [(point[lead], point[other]) for point in planned]
    else:
        pairs = list(zip(frame[lead], frame[other], strict=True))
    seen: dict[str, set[str]] = {}
    for a, b in pairs:
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


def _has_values(frame: Any, column: str) -> bool:
    """Whether the frame has ``column`` with a value at some point."""
    return column in frame.columns and bool(frame[column].notna().any())


def line_axes(frame: Any, x: str) -> list[str]:
    """The swept axes that split a plot along ``x`` into lines: every other swept axis not
    tied to ``x`` or to an earlier line axis (a ``zip`` of ``kv.policy`` with ``kv.budget``
    is one line axis, not two)."""
    lines: list[str] = []
    for axis in swept_axes(frame):
        if axis != x and not any(_follows(frame, lead, axis) for lead in (x, *lines)):
            lines.append(axis)
    return lines


def default_x(frame: Any) -> str:
    """The axis a sweep's plot goes along unless told: the first swept axis whose values
    are quantities, else the first swept axis."""
    axes = swept_axes(frame)
    if not axes:
        raise PlotInputError(
            "the sweep's points differ in no axis; name the x axis with --x COLUMN"
        )
    return next((a for a in axes if _is_quantity(frame[a])), axes[0])


def check_columns(frame: Any, x: str, by: Sequence[str] | None) -> None:
    """Refuse an ``x`` or ``by`` column the frame lacks (naming its swept axes), and ``x``
    among ``by`` (each of its lines, or columns, would be one point)."""
    if by and x in by:
        raise PlotInputError(
            f"--by {x} is the x axis: each of its lines would be one point; name another "
            "column, or leave --by out for the other swept axes"
        )
    for column in (x, *(by or ())):
        if column not in frame.columns:
            shown = ", ".join(swept_axes(frame)) or "none"
            raise PlotInputError(f"the sweep has no column {column!r}; its swept axes: {shown}")


def throughput_metric(frame: Any) -> str:
    """The throughput a sweep's plot shows: the steady window's when the sweep stored it at
    some point, else the whole run's."""
    steady = "steady_decode_tokens_per_s"
    return steady if _has_values(frame, steady) else "decode_tokens_per_s"


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
    x = x if x is not None else default_x(frame)
    check_columns(frame, x, by)
    if y is None:
        y = next((m for m in DEFAULT_METRICS if _has_values(frame, m)), None)
        if y is None:
            raise PlotInputError(
                f"the sweep stored none of {', '.join(DEFAULT_METRICS)}; name one with --y"
            )
    elif y not in frame.columns:
        metrics = [c for c in frame.columns if c not in (*axes, *_BOOKKEEPING)]
        raise PlotInputError(f"the sweep has no metric {y!r}; its columns: {', '.join(metrics)}")
    if by is None:
        by = line_axes(frame, x)
    ylabel, _ = _label(y)
    hardware = _single(frame, "hardware")
    varied = [a.removeprefix(HW_PREFIX) for a in axes if a.startswith(HW_PREFIX)]
    if hardware and varied:  # the file's name, not the machine each point ran on
        hardware += f" ({', '.join(varied)} swept)"
    what = " on ".join(v for v in (_single(frame, "model"), hardware) if v)
    name = _single(frame, "sweep")
    head = f"{ylabel} vs {short_names([x, *by])[x]}"
    title = (f"{name}: " if name else "") + head + (f" — {what}" if what else "")
    whole = WHOLE_RUN.get(y)
    if whole is not None and not _has_values(frame, whole):
        whole = None
    return design_space(frame, x, y, by=by, title=title, whole_run=whole, marks=True)
