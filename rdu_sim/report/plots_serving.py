"""Serving plots from per-request records and the slot-occupancy series of a run.

Percentiles in a table hide the shape: a CDF of TTFT shows queueing (a long tail when slots
are scarce), a CDF of TPOT shows how much the batch and its caches slow each step, and the
occupancy timeline shows whether the static batch was actually kept full.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from numpy.typing import NDArray

from rdu_sim.report.plots_data import (
    PlotInputError,
    as_runs,
    find,
    group_runs,
    label_of,
    lookup,
    number,
)
from rdu_sim.report.plots_style import color_for, new_figure

__all__ = ["latency_distribution", "occupancy_series", "occupancy_timeline", "request_values"]

Series = NDArray[np.float64]

# Where runs keep them: as_runs() puts RunResult.requests() under "request_records" and
# RunResult.timeseries() under "slot_occupancy"; a run dict's own "requests" (a count) and
# "occupancy" (a mean) are scalars, skipped by _table().
_REQUEST_KEYS = ("request_records", "per_request", "requests")
_SERIES_KEYS = ("slot_occupancy", "timeseries", "occupancy")
_TIME_KEYS = ("time_s", "t", "time", "t_s")
_VALUE_KEYS = ("occupied", "occupied_slots", "busy_slots", "active", "active_slots", "slots")


def _table(run: Mapping[str, Any], keys: Sequence[str], what: str) -> Any:
    """The first of ``keys`` holding a table (columns or records), not a scalar."""
    for key in keys:
        value = lookup(run, key, None)
        if isinstance(value, Mapping) or (
            isinstance(value, Sequence) and not isinstance(value, str)
        ):
            return value
    raise PlotInputError(f"results have no {what}")


def request_values(run: Mapping[str, Any], field: str) -> NDArray[np.float64]:
    """The ``field`` (e.g. ``ttft_s``) of every completed request of a run, NaNs dropped.

    Records may be a list of dicts or a column mapping (``{"ttft_s": [...], ...}``).
    """
    records = _table(
        run,
        _REQUEST_KEYS,
        "per-request records (RunResult.requests(), or "
        "requests.csv beside result.json from `rdu-sim run --out DIR`)",
    )
    if isinstance(records, Mapping):
        column = records.get(field)
        if column is None:
            raise PlotInputError(f"per-request records have no {field!r} column")
        values = [number(v, field) if v is not None else np.nan for v in column]
    elif isinstance(records, Sequence) and not isinstance(records, str):
        if records and not all(isinstance(r, Mapping) and field in r for r in records):
            raise PlotInputError(f"per-request records lack {field!r}")
        values = [number(r[field], field) if r[field] is not None else np.nan for r in records]
    else:
        raise PlotInputError("per-request records must be a list of records or columns")
    array: NDArray[np.float64] = np.asarray(values, dtype=np.float64)
    finite: NDArray[np.float64] = array[np.isfinite(array)]
    return finite


def _cdf(ax: Any, values: NDArray[np.float64], label: str, color: str) -> None:
    xs = np.sort(values)
    ys = np.arange(1, len(xs) + 1) / len(xs)
    ax.step(
        xs,
        ys,
        where="post",
        label=f"{label} (p50 {np.median(xs):.3g} ms, p99 {np.percentile(xs, 99):.3g} ms)",
        color=color,
    )


def latency_distribution(
    results: Any, *, group_by: Sequence[str] = ("model", "kv_policy")
) -> Figure:
    """CDFs of time to first token and time per output token, in ms, one line per run.

    Left: TTFT (queueing plus prefill); right: TPOT (the mean decode step time a request
    saw). Several runs (full vs SnapStream) overlay; the legend gives p50 and p99.

    Returns:
        The figure: two axes with one line per run each.
    """
    runs = as_runs(results)
    fig, axes = new_figure(1, 2, width=5.0, height=4.0)
    labels = list(group_runs(runs, group_by))
    if len(labels) != len(runs):  # several runs share a label: fall back to numbering
        labels = [f"{label_of(r, group_by)} #{i}" for i, r in enumerate(runs)]
    for ax, field, name in zip(
        axes, ("ttft_s", "tpot_s"), ("time to first token", "time per output token"), strict=True
    ):
        for i, (run, label) in enumerate(zip(runs, labels, strict=True)):
            values = request_values(run, field) * 1e3
            if values.size == 0:
                raise PlotInputError(f"run {label!r} has no completed request with {field!r}")
            _cdf(ax, values, label, color_for(label, i))
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        ax.set_title(f"{'TTFT' if field == 'ttft_s' else 'TPOT'} distribution")
    fig.suptitle("Request latency")
    return fig


def occupancy_series(run: Mapping[str, Any]) -> tuple[Series, Series]:
    """(times in s, occupied slots) of a run's slot-occupancy series.

    The series may be ``{"time_s": [...], "occupied": [...]}`` or a list of records (or of
    ``[time, occupied]`` pairs); each value holds until the next time.
    """
    series = _table(
        run,
        _SERIES_KEYS,
        "slot-occupancy series (RunResult.timeseries(), or "
        "timeseries.csv beside result.json from `rdu-sim run --out DIR`)",
    )
    times: list[float]
    values: list[float]
    if isinstance(series, Mapping):
        tkey = next((k for k in _TIME_KEYS if k in series), None)
        vkey = next((k for k in _VALUE_KEYS if k in series), None)
        if tkey is None or vkey is None:
            raise PlotInputError(
                f"slot-occupancy series needs a time column ({_TIME_KEYS}) "
                f"and a value column ({_VALUE_KEYS}), got {sorted(series)}"
            )
        times = [number(t, "occupancy time") for t in series[tkey]]
        values = [number(v, "occupied slots") for v in series[vkey]]
    elif isinstance(series, Sequence) and not isinstance(series, str):
        times, values = [], []
        for item in series:
            if isinstance(item, Mapping):
                tkey = next((k for k in _TIME_KEYS if k in item), None)
                vkey = next((k for k in _VALUE_KEYS if k in item), None)
                if tkey is None or vkey is None:
                    raise PlotInputError(f"slot-occupancy record lacks time/value: {item!r}")
                times.append(number(item[tkey], "occupancy time"))
                values.append(number(item[vkey], "occupied slots"))
            elif isinstance(item, Sequence) and len(item) >= 2:
                times.append(number(item[0], "occupancy time"))
                values.append(number(item[1], "occupied slots"))
            else:
                raise PlotInputError(f"slot-occupancy entry not understood: {item!r}")
    else:
        raise PlotInputError("slot-occupancy series must be columns or a list of records")
    if len(times) != len(values) or not times:
        raise PlotInputError("slot-occupancy series is empty or its columns differ in length")
    return np.asarray(times, dtype=np.float64), np.asarray(values, dtype=np.float64)


def occupancy_timeline(results: Any, *, group_by: Sequence[str] = ("model", "kv_policy")) -> Figure:
    """Occupied batch slots over simulated time, one panel per run, with the static batch.

    The dashed line is the run's batch slots: the gap under it is capacity the server paid
    for (memory is allocated per slot) but did not use, at ramp-up, at drain, or when
    arrivals are too slow to keep the batch full.

    Returns:
        The figure: per axes, one step line (occupancy) plus one line for the batch slots.
    """
    runs = as_runs(results)
    fig, axes = new_figure(len(runs), 1, width=7.2, height=2.6, sharex=True)
    labels = [label_of(r, group_by) for r in runs]
    for i, (ax, run, label) in enumerate(zip(axes, runs, labels, strict=True)):
        times, occupied = occupancy_series(run)
        slots = number(
            find(run, "batch_slots", what="batch slots", default=max(occupied)), "batch_slots"
        )
        ax.step(
            times,
            occupied,
            where="post",
            color=color_for(label, i),
            label=f"occupied (mean {_time_mean(times, occupied):.1f})",
        )
        ax.axhline(
            slots, color="black", linestyle="--", linewidth=1, label=f"batch slots ({slots:g})"
        )
        ax.set_ylim(0, slots * 1.1 + 0.5)
        ax.set_ylabel("slots")
        ax.set_title(label, fontsize=10)
        ax.legend(fontsize=8, loc="best")
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("simulated time (s)")
    fig.suptitle("Batch slot occupancy")
    return fig


def _time_mean(times: NDArray[np.float64], values: NDArray[np.float64]) -> float:
    """Time-weighted mean of a step series (each value holds until the next time)."""
    if len(times) < 2 or times[-1] <= times[0]:
        return float(np.mean(values))
    widths = np.diff(times)
    return float(np.sum(values[:-1] * widths) / (times[-1] - times[0]))
