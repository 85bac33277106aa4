"""The deployment plot: simulated against measured, from batch 1 to the largest batch, per machine.

One panel per machine (the hardware file a measured row runs on): every row at the batch it
ran (a full-load row at the batch its stack's KV pool allowed), and how fast the simulator
is against the measurement: simulated over measured tokens/s, measured over simulated
seconds (above 1 the simulator is faster, whatever the metric), on a log scale, so a row
20% slow and one 20% fast sit symmetrically.
The colour is the serving stack (each its fixed colour, ``plots_style.stack_color``), the
marker how it was measured (a batch sent together, or a full-load run); a held-out row of a
calibration is hollow, drawn over the fitted ones. Panels come in the machines' name order.
The shaded band is +-10%.

It reads what ``rdu-sim validate --suite deployment --json`` prints (``points``) or what
``rdu-sim calibrate`` writes (``fit.json``: ``targets``; published figures, which have no
batch, are left out), or a list of either's rows. Nothing here imports ``rdu_sim.validate``:
rows are read by their fields.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from rdu_sim.report.plots_data import PlotInputError, number
from rdu_sim.report.plots_style import figure_title, new_figure, plain_log2, stack_color

__all__ = ["BAND", "DeploymentRow", "deployment", "deployment_rows"]

BAND = 0.10
"""The shaded band around simulated = measured (+-10%)."""

FULL_LOAD = "full-load"


@dataclass(frozen=True)
class DeploymentRow:
    """One measured row as the plot reads it."""

    machine: str
    stack: str
    method: str  # "batch" or "full load"
    batch: int
    measured: float
    simulated: float
    held_out: bool
    unit: str = "s"

    @property
    def ratio(self) -> float:
        """The simulated speed over the measured: simulated over measured for a rate,
        measured over simulated for a time."""
        if self.unit == "s":
            return self.measured / self.simulated
        return self.simulated / self.measured


def _validate_row(item: Mapping[str, Any]) -> DeploymentRow:
    """A point of ``validate --suite deployment --json``."""
    group = str(item.get("group", ""))
    parts = group.split(" · ")
    return DeploymentRow(
        machine=str(item.get("hardware", parts[0])),
        stack=parts[1] if len(parts) > 1 else str(item.get("stack") or ""),
        method=FULL_LOAD if item.get("batch") is None else "batch",
        batch=int(number(item.get("batch_slots") or item.get("batch"), "batch_slots")),
        measured=number(item.get("measured"), "measured"),
        simulated=number(item.get("simulated"), "simulated"),
        held_out=bool(item.get("held_out", False)),
        unit=str(item.get("unit", "s")),
    )


def _fit_row(item: Mapping[str, Any]) -> DeploymentRow | None:
    """A target of calibrate's fit.json (None for a published figure: it has no batch)."""
    groups = item.get("groups")
    if not isinstance(groups, Mapping) or "figure" in groups:
        return None
    batch = item.get("batch_slots")
    if not batch or item.get("simulated") is None:
        return None
    return DeploymentRow(
        machine=str(groups.get("hardware", "?")),
        stack=str(groups.get("stack", "")),
        method=str(groups.get("method", "batch")),
        batch=int(number(batch, "batch_slots")),
        measured=number(item.get("measured"), "measured"),
        simulated=number(item.get("simulated"), "simulated"),
        held_out=bool(item.get("held_out", False)),
        unit=str(item.get("unit", "s")),
    )


def deployment_rows(results: Any) -> list[DeploymentRow]:
    """The measured rows of ``results`` (see the module docstring).

    Raises:
        PlotInputError: results that hold no measured row with a batch.
    """
    read: Callable[[Mapping[str, Any]], DeploymentRow | None]
    if isinstance(results, Mapping):
        if "points" in results:
            items, read = results["points"], _validate_row
        elif "targets" in results:
            items, read = results["targets"], _fit_row
        else:
            raise PlotInputError(
                "expected what `rdu-sim validate --suite deployment --json` prints (points) "
                "or calibrate's fit.json (targets)"
            )
    elif isinstance(results, list):
        if any(isinstance(i, Mapping) and "published" in i for i in results):
            raise PlotInputError(
                "these are the published figures `rdu-sim validate --json` prints (plot them "
                "with `rdu-sim plot calibration`); deployment plots what `rdu-sim validate "
                "--suite deployment --json` prints or calibrate's fit.json"
            )
        items = results
        read = (
            _fit_row
            if any(isinstance(i, Mapping) and "groups" in i for i in results)
            else _validate_row
        )
    else:
        raise PlotInputError(f"expected deployment rows, got {type(results).__name__}")
    if not isinstance(items, list):
        raise PlotInputError("the rows must be a list")
    rows = []
    for item in items:
        if not isinstance(item, Mapping):
            raise PlotInputError(f"a row must be a mapping, got {type(item).__name__}")
        row = read(item)
        if row is None:
            continue
        if not (row.measured > 0 and row.simulated > 0 and row.batch >= 1):
            raise PlotInputError(
                f"a row of {row.machine} has measured {row.measured!r}, simulated "
                f"{row.simulated!r} and batch {row.batch!r}: each must be positive"
            )
        if not (math.isfinite(row.ratio) and row.batch < 1 << 31):
            raise PlotInputError(f"a row of {row.machine} is not finite")
        rows.append(row)
    if not rows:
        raise PlotInputError("no measured row with a batch to plot")
    return rows


def deployment(results: Any, *, title: str | None = None) -> Figure:
    """Simulated over measured against the batch, one panel per machine.

    Returns:
        The figure; ``fig.axes`` holds one axes per machine, in the machines' name order
        (the same whatever order the rows come in); each stack has its fixed colour
        (``plots_style.stack_color``), and held-out rows are drawn over the fitted ones.
    """
    rows = deployment_rows(results)
    machines = sorted({r.machine for r in rows})  # the same order whatever the file's
    stacks = sorted({r.stack for r in rows})
    colors = {stack: stack_color(stack) for stack in stacks}
    markers = {"batch": "o", FULL_LOAD: "s"}
    fig, axes = new_figure(len(machines), 1, width=7.5, height=3.4)
    ratios = [r.ratio for r in rows]
    low, high = min(min(ratios), 1 - BAND) / 1.1, max(max(ratios), 1 + BAND) * 1.1
    for ax, machine in zip(axes, machines, strict=True):
        mine = [r for r in rows if r.machine == machine]
        batches = [r.batch for r in mine]
        ax.axhspan(1 - BAND, 1 + BAND, color="#e5e5e5", zorder=0)
        ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1, zorder=1)
        for row in sorted(mine, key=lambda r: r.held_out):  # held out on top: few, hollow
            color = colors[row.stack]
            ax.plot(
                [row.batch],
                [row.ratio],
                marker=markers.get(row.method, "o"),
                linestyle="none",
                markersize=6,
                color=color,
                markerfacecolor="none" if row.held_out else color,
                markeredgecolor=color,
                alpha=0.85,
                zorder=3 if row.held_out else 2,
            )
        plain_log2(ax, "x")
        ax.set_xlim(0.7, max(batches) * 1.4)
        _speed_axis(ax, low, high)
        ax.grid(True, which="major", alpha=0.3)
        worst = max(mine, key=lambda r: abs(math.log(r.ratio)))
        ax.set_title(
            f"{machine}: {len(mine)} rows, batch {min(batches)} to {max(batches)}; furthest: "
            f"{_speed(worst.ratio)} at batch {worst.batch}",
            loc="left",
            fontsize=9,
        )
    axes[-1].set_xlabel("batch (a full-load row: the batch its stack's KV pool held)")
    handles = [
        Line2D([], [], marker="o", linestyle="none", color=colors[s], label=s or "default")
        for s in stacks
    ]
    methods = sorted({r.method for r in rows})
    handles += [
        Line2D([], [], marker=markers.get(m, "o"), linestyle="none", color="0.4", label=m)
        for m in methods
    ]
    if any(r.held_out for r in rows):
        handles.append(
            Line2D(
                [],
                [],
                marker="o",
                linestyle="none",
                color="0.4",
                markerfacecolor="none",
                label="held out",
            )
        )
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncols=min(6, len(handles)),
        fontsize=8,
        frameon=False,
    )
    figure_title(
        fig,
        title
        or "Measured deployments: the simulator's speed against the measured, per machine "
        "(above 1x the simulator is faster; band ±10%)",
    )
    return fig


SPEED_TICKS = (0.25, 1 / 3, 0.5, 2 / 3, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0)


def _speed(ratio: float) -> str:
    """A speed ratio in words: ``1.23x faster``, ``1.5x slower``."""
    if ratio >= 1:
        return f"{ratio:.2f}x faster"
    return f"{1 / ratio:.2f}x slower"


def _speed_axis(ax: Any, low: float, high: float) -> None:
    """A log axis of the simulated speed over the measured, ticked as 1.25x, 0.8x ..."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_yscale("log")
    ax.set_ylim(low, high)
    ax.yaxis.set_major_locator(FixedLocator([t for t in SPEED_TICKS if low <= t <= high]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:.3g}x"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("simulated speed / measured")
