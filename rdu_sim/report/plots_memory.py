"""Memory plots: what fills each tier of a socket, and how many batch slots fit, vs context.

These answer the first question about SnapStream: a full-attention slot grows with the
context, a SnapStream slot is capped at its budget, so at long context the same HBM holds
several times more slots. A sweep database's memory goes along the axis ``plot sweep``
goes along (any swept field: an HBM capacity, a TP degree), a column per value of the
sweep's other axes, with the sweep plot's note of the points it leaves out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from rdu_sim import human
from rdu_sim.report.plots_data import (
    GIB,
    MEMORY_PARTS,
    TIERS,
    PlotInputError,
    RunPoint,
    as_runs,
    group_runs,
    lookup,
    short_names,
    titled,
)
from rdu_sim.report.plots_style import (
    PART_COLORS,
    figure_title,
    hollow_key,
    legend_outside,
    line_style,
    new_figure,
    note_settings,
    plain_log2,
    use_token_axis,
)
from rdu_sim.report.plots_sweep import (
    axis_title,
    check_columns,
    default_x,
    left_out_note,
    line_axes,
    point_counts,
    value_order,
    value_tick,
)

__all__ = ["batch_capacity", "memory_footprint"]

_PART_LABELS = {
    "weights": "weights",
    "kv": "KV cache",
    "activations": "activations",
    "free": "free",
}


def _memory(run: RunPoint, tier: str) -> dict[str, float]:
    """Bytes of weights, KV, activations, free and the capacity of one tier of ``run``."""
    memory = run.need("memory")
    if tier not in memory:
        raise PlotInputError(f"results have no memory usage for tier {tier!r}")
    usage = memory[tier]
    return {
        "weights": usage.weights_bytes,
        "kv": usage.kv_bytes,
        "activations": usage.activations_bytes,
        "free": usage.free_bytes,
        "capacity": usage.capacity_bytes,
    }


def _tiers_in_use(runs: Sequence[RunPoint]) -> list[str]:
    """Tiers some run puts something in, plus HBM (the tier that decides the capacity)."""
    present = [t for t in TIERS if t in runs[0].need("memory")]
    used = [
        t
        for t in present
        if t == "hbm" or any(_memory(r, t)["capacity"] - _memory(r, t)["free"] > 0 for r in runs)
    ]
    return used or present


def _context(run: RunPoint) -> int:
    context: int = run.need("max_context")
    return context


def _bars_along(runs: Sequence[RunPoint]) -> tuple[Callable[[RunPoint], Any], str]:
    """What a column's bars go along, and its words: the batch slots when the runs share one
    context and differ in their batch (a sweep over the batch: "vs context" over bars of
    one context would be wrong), else the context."""
    contexts = {_context(r) for r in runs}
    batches = {r.batch_slots for r in runs}
    if len(contexts) == 1 and len(batches) > 1 and None not in batches:
        return _batch, "batch slots"
    return _context, "context"


def _batch(run: RunPoint) -> int:
    return int(run.batch_slots or 0)


CONTEXT_AXIS = "serving.max_context"
BATCH_AXIS = "serving.batch_slots"


class _Along:
    """What the bars of a column go along: the sort key of a run, the first line of its tick
    label, the x axis' label, the title's words and the sweep axes that make the columns."""

    def __init__(self, results: Any, runs: Sequence[RunPoint], x: str | None, by: Any) -> None:
        self.columns: list[str] = []
        self.names: dict[str, str] = {}
        self.head: Callable[[RunPoint], str] = lambda run: human.tokens(_context(run))
        if not hasattr(results, "columns") or (x is None and not swept(results)):
            if x is not None:
                raise PlotInputError(f"--x {x} names a sweep's axis: plot a sweep database")
            self.key, self.words = _bars_along(runs)
            self.xlabel = "context (tokens)" if self.words == "context" else self.words
            return
        x = x if x is not None else default_x(results)
        check_columns(results, x, by)
        others = [a for a in line_axes(results, x) if a != "kv.policy"] if by is None else by
        self.columns, self.names = list(others), short_names([x, *others])
        if x == CONTEXT_AXIS:
            self.key, self.words, self.xlabel = _context, "context", "context (tokens)"
        elif x == BATCH_AXIS:
            self.key, self.words, self.xlabel = _batch, "batch slots", "batch slots"
        else:
            self.key = lambda run: value_order(lookup(run, x, None))
            self.head = lambda run: value_tick(lookup(run, x, None))
            self.words, self.xlabel = self.names[x], axis_title(x)


def swept(frame: Any) -> bool:
    """Whether a sweep frame varies some axis."""
    from rdu_sim.report.sweep_frame import swept_axes

    return bool(swept_axes(frame))


def _split(results: Any) -> tuple[Any, Any]:
    """A sweep frame's finished rows and the rest (failed points: the note counts them),
    each with the frame's attrs; other results whole, with nothing left out."""
    if not hasattr(results, "columns") or "status" not in results.columns:
        return results, None
    done = results["status"] == "done"
    parts = results[done], results[~done]
    for part in parts:
        part.attrs.update(results.attrs)
    return parts


MEMORY_COUNTS = (
    "each bar: one socket's memory planned for the slots under it, the batch that point "
    "runs; 'N fit': the slots memory holds beside the weights, where the results say"
)
"""What the memory plot's bars and tick labels count."""


def _tick(run: RunPoint, head: Callable[[RunPoint], str]) -> str:
    """A bar's label: its value along the bars (``head``: its context, or the swept axis'
    value as the spec wrote it), the batch slots the memory was planned for, and how many
    memory holds (a run's ``memory_capacity``) when the results say."""
    label = head(run)
    if run.batch_slots is not None:
        label += f"\n{run.batch_slots} slots"
    if run.memory_capacity is not None:
        label += f"\n{run.memory_capacity} fit"
    return label


def memory_footprint(
    results: Any,
    *,
    tiers: Sequence[str] | None = None,
    group_by: Sequence[str] = ("model", "kv_policy"),
    x: str | None = None,
    by: Sequence[str] | None = None,
) -> Figure:
    """Stacked bars of weights, KV cache, activations and free space per tier vs context
    (vs batch slots for runs of one context that differ in their batch; along a sweep's
    axis for a sweep database).

    One row of axes per memory tier, one column per group of runs (by default per model and
    KV policy, so full attention and SnapStream sit side by side); within an axes one bar per
    context length, in GiB per socket, labelled with the batch slots the memory was planned
    for and the slots memory holds (``memory_capacity``, where the results have it: the
    capacity plot's hollow markers). The y axis of a row is shared so columns compare.

    A sweep database's frame (``rdu_sim.sweep.load``) goes along ``x`` (default: the axis
    ``plot sweep`` goes along), each bar labelled with its value as the spec wrote it and
    the axis named by its field, a column per value of the ``by`` axes (default: the other
    swept axes not zipped with ``x``, as ``plot sweep``'s lines); its failed points are left
    out and, with the points a stopped sweep has not run, said under the figure in the
    sweep plot's words (``plots_sweep.left_out_note``).

    Args:
        results: runs (dicts, a list, or a sweep DataFrame), each with ``memory`` and a
            context length.
        tiers: tiers to show (default: HBM and every other tier some run uses).
        group_by: result keys whose values make the columns.
        x: a sweep's axis to go along.
        by: a sweep's axes whose values make the columns (beside ``group_by``).

    Returns:
        The figure; each axes holds four bar containers (weights, KV, activations, free).
    """
    done, failed = _split(results)
    if failed is not None and not len(done):
        raise PlotInputError("no point of the sweep finished: nothing to draw")
    runs = as_runs(done)
    shown = list(tiers) if tiers is not None else _tiers_in_use(runs)
    if not shown:
        raise PlotInputError("results report no memory tiers (expected memory.sram/hbm/ddr)")
    along = _Along(done, runs, x, by)
    groups = group_runs(runs, [*group_by, *along.columns])
    bars = max(len(members) for members in groups.values())
    fig, axes = new_figure(len(shown), len(groups), width=max(4.2, 0.9 * bars + 1.2), height=3.4)
    row_axes: dict[str, list[Any]] = {}
    ordered = sorted(
        groups.items(),
        key=lambda kv: [value_order(lookup(kv[1][0], c, None)) for c in along.columns],
    )
    for col, (label, members) in enumerate(ordered):
        members = sorted(members, key=along.key)
        positions = np.arange(len(members))
        for row, tier in enumerate(shown):
            ax = axes[row * len(groups) + col]
            row_axes.setdefault(tier, []).append(ax)
            usage = [_memory(r, tier) for r in members]
            bottom = np.zeros(len(members))
            for part in MEMORY_PARTS:
                heights = np.array([u[part] / GIB for u in usage])
                ax.bar(
                    positions,
                    heights,
                    0.7,
                    bottom=bottom,
                    color=PART_COLORS[part],
                    edgecolor="white",
                    linewidth=0.5,
                    label=_PART_LABELS[part],
                )
                bottom += heights
            ax.set_xticks(positions, [_tick(r, along.head) for r in members], fontsize=8)
            ax.set_title(f"{tier.upper()} · {label}", fontsize=10)
            if row == len(shown) - 1:
                ax.set_xlabel(along.xlabel)
            if col == 0:
                ax.set_ylabel(f"{tier.upper()} GiB per socket")
    for ax_row in row_axes.values():
        top = max(ax.get_ylim()[1] for ax in ax_row)
        for ax in ax_row:
            ax.set_ylim(0, top)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center")
    figure_title(fig, titled(f"Memory per socket vs {along.words}", runs))
    left_out = as_runs(failed) if failed is not None and len(failed) else []
    total, not_run = point_counts(results, len(runs) + len(left_out))
    note = left_out_note(left_out, total, "memory", along.names, not_run=not_run)
    note_settings(fig, runs, counts=[MEMORY_COUNTS, *([note] if note else [])])
    return fig


CAPACITY_COUNTS = (
    "batch capacity: the slots 'auto' runs, what memory holds cut to a batch the serving stack runs"
)
"""What the capacity plot's filled markers count (a run's ``batch_capacity``)."""

NOT_CAPACITY = "the batch a point runs, not its capacity"
"""Said of ``serving.batch_slots`` under the capacity plot: the batch a point runs (the
memory plot's) does not change the capacity plotted."""

HOLDS_LABEL = "hollow: slots memory\nholds, where the\nstack runs fewer"
"""The legend entry of the capacity plot's hollow markers (a run's ``memory_capacity``)."""

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")


def _coincide(
    points: list[tuple[int, float]], drawn: dict[str, list[tuple[int, float]]]
) -> tuple[int, str | None]:
    """How many lines already drawn share a point with ``points``, and the first that has
    all of them (the line this one would hide behind)."""
    shared = [label for label, other in drawn.items() if set(points) & set(other)]
    same = next((label for label, other in drawn.items() if other == points), None)
    return len(shared), same


def _bound_example(runs: Sequence[RunPoint]) -> list[str]:
    """For each thing other than memory that bounds some point's capacity (the stack's
    ``batch_programs``, its ``max_batch_slots``), the first such point's ``capacity`` words
    (a run's, from ``compiler.capacity_words``)."""
    lines: dict[str, str] = {}
    for run in runs:
        limit, words = run.capacity_limit, run.capacity
        if limit and limit not in ("memory", "coe") and words and limit not in lines:
            where = f"{run.kv_policy} at {human.tokens(_context(run))}"
            lines[limit] = f"{where}: {words}"
    return list(lines.values())


def batch_capacity(results: Any, *, group_by: Sequence[str] = ("model", "kv_policy")) -> Figure:
    """Batch capacity (slots that fit in memory and the stack runs) vs context, one line per
    model and policy, with what memory holds beside it where that is more.

    Both axes are log-2: a full-attention slot's cache doubles with the context, so what
    memory holds halves per doubling (and a stack of power-of-two programs runs a power of
    two of it), while SnapStream's flattens once the context exceeds its budget. The gap
    between the lines is the "larger maximum batch" of the paper.

    Filled markers are the batch capacity (``batch_capacity``, what ``auto`` runs); hollow
    ones, what memory holds (``memory_capacity``) where the stack runs fewer, so the slots a
    memory plot shows read here too. A line that shares points with one drawn before it gets
    a smaller marker of another shape (and ``(= other)`` in the legend when it is that line
    throughout), so no policy hides under another. The note under the figure says what is
    counted, and why a point runs fewer than memory holds (the run's ``capacity`` words);
    the batch a point runs (``serving.batch_slots``) does not change it, and is said so.

    Returns:
        The figure; one labelled line per group of runs.
    """
    runs = as_runs(results)
    groups = group_runs(runs, group_by)
    fig, (ax,) = new_figure()
    all_contexts: list[int] = []
    capacities: list[float] = []
    drawn: dict[str, list[tuple[int, float]]] = {}
    hollow = False
    for i, (label, members) in enumerate(groups.items()):
        members = sorted(members, key=_context)
        contexts = [_context(r) for r in members]
        cap = [float(r.need("batch_capacity")) for r in members]
        points = list(zip(contexts, cap, strict=True))
        shared, same = _coincide(points, drawn)
        drawn[label] = points
        style = line_style(label, i, list(groups))
        ax.plot(
            contexts,
            cap,
            marker=_MARKERS[i % len(_MARKERS)],
            markersize=max(3.0, 8.0 - 2.5 * shared),
            label=label if same is None else f"{label} (= {same})",
            zorder=2 + shared,
            **style,
        )
        holds = [
            (c, float(r.memory_capacity))
            for c, r in zip(contexts, members, strict=True)
            if r.memory_capacity is not None and r.memory_capacity > r.need("batch_capacity")
        ]
        if holds:
            hollow = True
            ax.plot(
                [h[0] for h in holds],
                [h[1] for h in holds],
                linestyle="none",
                marker=_MARKERS[i % len(_MARKERS)],
                markersize=max(3.0, 8.0 - 2.5 * shared),
                markerfacecolor="none",
                color=style["color"],
            )
        all_contexts += contexts
        capacities += cap + [h[1] for h in holds]
    if hollow:
        hollow_key(ax, HOLDS_LABEL)
    use_token_axis(ax, all_contexts)
    if capacities and min(capacities) > 0 and max(capacities) / min(capacities) > 8:
        plain_log2(ax)
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("batch capacity (slots 'auto' runs)")
    ax.grid(True, which="major", alpha=0.3)
    legend_outside(fig, ax)
    figure_title(fig, titled("Batch capacity vs context", runs))
    note_settings(
        fig,
        runs,
        counts=[CAPACITY_COUNTS, *_bound_example(runs)],
        asides={"serving.batch_slots": NOT_CAPACITY},
    )
    return fig
