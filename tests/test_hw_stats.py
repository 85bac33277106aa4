"""BusyTracker and ByteCounter: union of intervals, unit-seconds, monotone time."""

from __future__ import annotations

import pytest

from rdu_sim.hw import BusyTracker, ByteCounter


def test_union_of_overlapping_and_disjoint_intervals() -> None:
    t = BusyTracker("x")
    t.add(0.0, 2.0)
    t.add(1.0, 3.0, units=2.0)  # overlaps: union grows by 1
    t.add(3.0, 4.0)  # touching: same block
    t.add(10.0, 11.0)  # disjoint
    t.add(10.5, 10.7)  # nested
    assert t.busy_time == pytest.approx(5.0)
    assert t.unit_seconds == pytest.approx(2.0 + 4.0 + 1.0 + 1.0 + 0.2)
    assert t.intervals == 5
    assert t.busy_fraction(20.0) == pytest.approx(0.25)
    assert t.utilization(20.0, capacity=2.0) == pytest.approx(8.2 / 40.0)
    assert t.utilization(0.0) == 0.0


def test_time_never_goes_backwards() -> None:
    t = BusyTracker("x")
    t.add(5.0, 6.0)
    with pytest.raises(ValueError, match="backwards"):
        t.add(4.0, 7.0)
    with pytest.raises(ValueError):
        t.add(6.0, 5.0)
    with pytest.raises(ValueError):
        t.add(6.0, 7.0, units=-1.0)


def test_byte_counter_totals_and_tags() -> None:
    c = ByteCounter()
    c.add(10, "w")
    c.add(5)
    c.add(7, "w")
    assert (c.total, c.count, c.by_tag) == (22, 3, {"w": 17})
    with pytest.raises(ValueError):
        c.add(-1)
