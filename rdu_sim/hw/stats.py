"""Busy-time and byte accounting shared by every hardware primitive.

Primitives record *closed* intervals of work as they learn about them; the
tracker keeps two numbers:

* ``busy_time``: the length of the union of all intervals (time during which
  the unit did anything at all);
* ``unit_seconds``: the integral of the recorded ``units`` (lane-seconds,
  fraction-of-bandwidth-seconds, ...), which can exceed ``busy_time`` for a
  multi-lane unit and falls below it for a partly used one.

Intervals must arrive with non-decreasing start times ("time never goes
backwards"); that lets the union be kept in O(1) memory with a single open
block, which is what FIFO servers and state-change sampling naturally produce.
Violations raise ``ValueError`` instead of silently corrupting utilisation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

_EPS: Final = 1e-15


class BusyTracker:
    """Union-of-intervals busy time plus unit-weighted busy time.

    Args:
        name: label used in error messages and reports.
    """

    __slots__ = (
        "_block_end",
        "_block_start",
        "_closed",
        "_has_block",
        "_intervals",
        "_last_start",
        "_unit_seconds",
        "name",
    )

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._closed = 0.0  # union length of merged blocks already closed
        self._block_start = 0.0
        self._block_end = 0.0
        self._has_block = False
        self._last_start = float("-inf")
        self._unit_seconds = 0.0
        self._intervals = 0

    def add(self, start: float, end: float, units: float = 1.0) -> None:
        """Record that the unit was busy on ``[start, end]`` with ``units`` in use."""
        if start >= self._last_start and end > start and units >= 0:
            # Fast path (almost every call: FIFO servers report in order): the same updates
            # as below without the max() calls; the engine calls this ~1e6 times per run.
            self._last_start = start
            self._intervals += 1
            self._unit_seconds += (end - start) * units
            if not self._has_block:
                self._block_start, self._block_end, self._has_block = start, end, True
            elif start <= self._block_end:
                if end > self._block_end:
                    self._block_end = end
            else:
                self._closed += self._block_end - self._block_start
                self._block_start, self._block_end = start, end
            return
        if end < start - _EPS:
            raise ValueError(f"{self.name}: interval end {end} < start {start}")
        if start < self._last_start - _EPS:
            raise ValueError(
                f"{self.name}: time went backwards: start {start} < previous {self._last_start}"
            )
        if units < 0:
            raise ValueError(f"{self.name}: units must be >= 0, got {units}")
        end = max(end, start)
        self._last_start = max(start, self._last_start)
        self._intervals += 1
        self._unit_seconds += (end - start) * units
        if end <= start:
            return
        if not self._has_block:
            self._block_start, self._block_end, self._has_block = start, end, True
        elif start <= self._block_end:
            self._block_end = max(self._block_end, end)
        else:
            self._closed += self._block_end - self._block_start
            self._block_start, self._block_end = start, end

    @property
    def busy_time(self) -> float:
        """Seconds during which at least one recorded interval was active."""
        open_block = self._block_end - self._block_start if self._has_block else 0.0
        return self._closed + open_block

    @property
    def unit_seconds(self) -> float:
        """Integral of ``units`` over time (e.g. lane-seconds)."""
        return self._unit_seconds

    @property
    def intervals(self) -> int:
        """Number of intervals recorded (a cheap activity counter)."""
        return self._intervals

    def utilization(self, elapsed: float, capacity: float = 1.0) -> float:
        """``unit_seconds / (elapsed * capacity)``; 0 when nothing has elapsed."""
        if elapsed <= 0:
            return 0.0
        return self._unit_seconds / (elapsed * capacity)

    def busy_fraction(self, elapsed: float) -> float:
        """``busy_time / elapsed``: the share of wall time the unit was active."""
        return self.busy_time / elapsed if elapsed > 0 else 0.0


@dataclass(slots=True)
class ByteCounter:
    """Bytes moved, in total and per caller-supplied tag (e.g. "weights", "kv")."""

    total: float = 0.0
    count: int = 0
    by_tag: dict[str, float] = field(default_factory=dict)

    def add(self, nbytes: float, tag: str | None = None) -> None:
        """Count ``nbytes`` (>= 0) under ``tag`` (untagged bytes only go to ``total``)."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        self.total += nbytes
        self.count += 1
        if tag is not None:
            self.by_tag[tag] = self.by_tag.get(tag, 0.0) + nbytes
