"""Serving plots from per-request records and the slot-occupancy series of a run.

Percentiles in a table hide the shape: a CDF of TTFT shows queueing (a long tail when slots
are scarce), a CDF of TPOT shows how much the batch and its caches slow each step, and the
occupancy timeline shows whether the static batch was actually kept full.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from numpy.typing import NDArray

from rdu_sim import human
from rdu_sim.report.plots_data import (
    REQUEST_RECORDS,
    SLOT_OCCUPANCY,
    PlotInputError,
    RunPoint,
    as_runs,
    group_runs,
    label_of,
    titled,
)
from rdu_sim.report.plots_style import (
    BELOW,
    BESIDE,
    color_for,
    figure_title,
    new_figure,
    note_settings,
)

__all__ = ["latency_distribution", "occupancy_series", "occupancy_timeline", "request_values"]

Series = NDArray[np.float64]


def request_values(run: RunPoint, field: str) -> Series:
    """The ``field`` (e.g. ``ttft_s``) of every completed request of a run, NaNs dropped
    (its per-request columns: ``RunResult.requests()``, or ``requests.csv`` beside the
    result.json ``rdu-sim run --out DIR`` writes)."""
    if run.requests is None:
        raise PlotInputError(
            f"results have no per-request records ({REQUEST_RECORDS!r}: RunResult.requests(), "
            "or requests.csv beside result.json from `rdu-sim run --out DIR`)"
        )
    column = run.requests.get(field)
    if column is None:
        raise PlotInputError(f"per-request records have no {field!r} column")
    finite: Series = column[np.isfinite(column)]
    return finite


def _cdf(ax: Any, values: NDArray[np.float64], label: str, color: str) -> None:
    xs = np.sort(values)
    ys = np.arange(1, len(xs) + 1) / len(xs)
    ax.step(
        xs,
        ys,
        where="post",
        label=f"{label} (p50 {human.number(float(np.median(xs)))} ms, "
        f"p99 {human.number(float(np.percentile(xs, 99)))} ms)",
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
        ax.legend(fontsize=8, **BELOW)
        ax.set_title(f"{'TTFT' if field == 'ttft_s' else 'TPOT'} distribution")
    figure_title(fig, titled("Request latency", runs))
    note_settings(fig, runs)
    return fig


def occupancy_series(run: RunPoint) -> tuple[Series, Series]:
    """(times in s, occupied slots) of a run's slot-occupancy series (``time_s`` and
    ``occupied`` of ``RunResult.timeseries()``, or of ``timeseries.csv`` beside the
    result.json ``rdu-sim run --out DIR`` writes); each value holds until the next time."""
    series = run.occupancy
    if series is None:
        raise PlotInputError(
            f"results have no slot-occupancy series ({SLOT_OCCUPANCY!r}: "
            "RunResult.timeseries(), or timeseries.csv beside result.json from "
            "`rdu-sim run --out DIR`)"
        )
    for key in ("time_s", "occupied"):
        if key not in series:
            raise PlotInputError(f"the slot-occupancy series has no {key!r} column")
    times, occupied = series["time_s"], series["occupied"]
    if not len(times):
        raise PlotInputError("the slot-occupancy series is empty")
    return times, occupied


def occupancy_timeline(results: Any, *, group_by: Sequence[str] = ("model", "kv_policy")) -> Figure:
    """Occupied batch slots over simulated time, one panel per run, with the static batch.

    The dashed line is the run's batch slots: the gap under it is capacity the server paid
    for (memory is allocated per slot) but did not use, at ramp-up, at drain, or when
    arrivals are too slow to keep the batch full. The legend's mean is the run's
    ``occupancy`` (:func:`_occupied_label`), the figure the run report prints.

    Returns:
        The figure: per axes, one step line (occupancy) plus one line for the batch slots.
    """
    runs = as_runs(results)
    fig, axes = new_figure(len(runs), 1, width=7.2, height=2.6, sharex=True)
    labels = [label_of(r, group_by) for r in runs]
    for i, (ax, run, label) in enumerate(zip(axes, runs, labels, strict=True)):
        times, occupied = occupancy_series(run)
        slots = float(run.batch_slots if run.batch_slots is not None else max(occupied))
        ax.step(
            times,
            occupied,
            where="post",
            color=color_for(label, i),
            label=_occupied_label(run),
        )
        ax.axhline(
            slots,
            color="black",
            linestyle="--",
            linewidth=1,
            label=f"batch slots ({human.number(slots)})",
        )
        ax.set_ylim(0, slots * 1.1 + 0.5)
        ax.set_ylabel("slots")
        ax.set_title(label, fontsize=10)
        ax.legend(fontsize=8, **BESIDE)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("simulated time (s)")
    figure_title(fig, titled("Batch slot occupancy", runs))
    note_settings(fig, runs)
    return fig


def _occupied_label(run: RunPoint) -> str:
    """The occupancy line's legend: the run's own mean, its ``occupancy`` (the summary's one
    definition: slots held, time-weighted from the first arrival to the last token, which the
    run report prints as "batch slots occupied"), read rather than recomputed from the series,
    whose rows start at time 0, before the first arrival; without it, no mean."""
    share, slots = run.mean_occupancy, run.batch_slots
    if share is None:
        return "occupied"
    pct = human.percent(share)
    mean = pct if slots is None else f"{human.number(share * slots)} of {slots:,} slots ({pct})"
    return f"occupied: mean {mean}\nfrom the first arrival to the last token"
