"""The table a sweep ends with: per point, the values of its swept axes and its headline metrics.

Read from the sweep database's frame (``rdu_sim.sweep.load``, in the spec's grid order), so
what the table shows is what ``--export`` writes and ``rdu-sim plot sweep`` draws. Each axis
is said in words under the table (``config.field_docs``); a metric's value is shown in the
unit its name carries (``_s`` in seconds, ``_bytes`` in bytes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.table import Table

from rdu_sim import human
from rdu_sim.config.field_docs import axis_label
from rdu_sim.report.sweep_frame import swept_axes

__all__ = ["HEADLINE_METRICS", "MAX_ROWS", "format_metric", "sweep_table"]

MAX_ROWS = 100
"""Points shown; a larger sweep shows its first ones and says where the rest are."""

HEADLINE_METRICS = (
    "batch_slots",
    "decode_tokens_per_s",
    "steady_decode_tokens_per_s",
    "ttft_s.p50",
    "tpot_s.p50",
    "goodput.fraction",
    "slo_met",
    "sockets",
)
"""What the table shows of a sweep that kept every metric (a spec without ``metrics:``)."""

MAX_ERROR_CHARS = 60


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def format_metric(name: str, value: Any) -> str:
    """A metric's value for people, in the unit its name says: ``12.3 ms`` for ``*_s`` (and
    its percentiles), ``1.5 GiB`` for ``*_bytes``, ``1,374`` for counts and rates."""
    if _missing(value):
        return human.MISSING
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    parts = name.split(".")
    unit = next((p for p in reversed(parts) if p.endswith(("_s", "_bytes", "bytes"))), "")
    if unit.endswith("bytes"):
        return human.size(value)
    if unit.endswith("_s") and not unit.endswith("per_s"):
        return human.duration(value)
    if isinstance(value, int):
        return f"{value:,}"
    return human.number(value)


def _metrics(frame: Any, axes: Sequence[str], named: Sequence[str] | None) -> list[str]:
    """The spec's metrics (all it named), else the headline ones the rows hold."""
    if named:
        return [m for m in named if m in frame.columns and m not in axes]
    return [m for m in HEADLINE_METRICS if m in frame.columns and m not in axes]


def sweep_table(frame: Any, metrics: Sequence[str] | None = None, title: str = "") -> Table:
    """One row per point: status, each swept axis's value, each metric (``metrics``: the
    spec's list; None: :data:`HEADLINE_METRICS`)."""
    axes = swept_axes(frame)
    shown = _metrics(frame, axes, metrics)
    failed = "status" in frame.columns and bool((frame["status"] != "done").any())
    table = Table(title=title or None, title_justify="left", box=box.SIMPLE_HEAD)
    for column in (*axes, *shown):  # a header is the path a user types: never cut
        table.add_column(column, justify="right", no_wrap=True, min_width=len(column))
    if failed:
        table.add_column("status", no_wrap=True, overflow="ellipsis")
    records = frame.to_dict("records")
    for record in records[:MAX_ROWS]:
        cells = [_axis_value(record[a]) for a in axes]
        cells += [format_metric(m, record[m]) for m in shown]
        if failed:
            status = str(record.get("status"))
            error = record.get("error")
            if status != "done" and isinstance(error, str):
                status += f": {' '.join(error.split())[:MAX_ERROR_CHARS]}"
            cells.append(status)
        table.add_row(*cells)
    notes = [f"{axis}: {axis_label(axis)}" for axis in axes if axis_label(axis) != axis]
    if len(records) > MAX_ROWS:
        notes.append(f"first {MAX_ROWS} of {len(records)} points")
    if notes:
        table.caption = "; ".join(notes)
        table.caption_justify = "left"
    return table


def _axis_value(value: Any) -> str:
    """An axis value as the spec wrote it (``1.8 TB/s``, ``32768``, ``none``)."""
    if _missing(value):
        return "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_axis_value(v)}" for k, v in value.items())
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
