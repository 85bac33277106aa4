"""What a sweep database's frame varied: its swept axes and a hashable stand-in for a cell.

Light on purpose (no plotting library): the sweep's closing table and its plots both ask
which axes a sweep varied, and must agree.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["cell_key", "swept_axes"]


def cell_key(value: Any) -> str:
    """A hashable stand-in for a cell (dicts, lists; NaN, as pandas stores a null, is None)."""
    if isinstance(value, float) and math.isnan(value):
        value = None
    return json.dumps(value, sort_keys=True, default=str)


def swept_axes(frame: Any) -> list[str]:
    """The axes of a sweep frame that take more than one value, in the spec's order: over
    the spec's points where the frame says them (``attrs["axis_values"]``,
    ``rdu_sim.sweep.load``: an interrupted sweep whose stored points share one batch still
    sweeps the batch), else over its rows."""
    attrs = frame.attrs if hasattr(frame, "attrs") else {}
    axes = attrs.get("axes", [])
    planned = attrs.get("axis_values") or {}

    def values(axis: str) -> Any:
        return planned[axis] if axis in planned else frame[axis]

    return [a for a in axes if a in frame.columns and len({cell_key(v) for v in values(a)}) > 1]
