"""P2PLink: latency + bytes/bandwidth, FIFO serialization per direction, accounting."""

from __future__ import annotations

import pytest

from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.hw import P2PLink

BW, LAT = 50e9, 2e-6


def test_lone_transfer_takes_latency_plus_serialization() -> None:
    env = CountingEnvironment()
    link = P2PLink(env, BW, LAT)
    done = link.transfer(1e6)
    env.run(done)
    assert env.now == pytest.approx(LAT + 1e6 / BW, rel=1e-12)
    assert done.value == env.now
    assert link.transfer_time(1e6) == pytest.approx(env.now, rel=1e-12)


def test_same_direction_serializes_but_latency_is_pipelined() -> None:
    env = CountingEnvironment()
    link = P2PLink(env, BW, LAT)
    first, second = link.transfer(1e6), link.transfer(1e6)
    env.run()
    assert first.value == pytest.approx(LAT + 1e6 / BW)
    assert second.value == pytest.approx(LAT + 2e6 / BW)  # waits for serialization only
    assert link.busy_time(0) == pytest.approx(2e6 / BW)
    assert link.busy_time(0) <= env.now


def test_opposite_directions_are_independent() -> None:
    env = CountingEnvironment()
    link = P2PLink(env, BW, LAT)
    a, b = link.transfer(1e6, 0, tag="x"), link.transfer(1e6, 1)
    env.run()
    assert a.value == b.value == pytest.approx(LAT + 1e6 / BW)
    assert link.bytes[0].total == link.bytes[1].total == 1e6
    assert link.bytes[0].by_tag == {"x": 1e6}
    assert link.total_bytes == 2e6


def test_transfer_issued_after_idle_starts_immediately() -> None:
    env = CountingEnvironment()
    link = P2PLink(env, BW, LAT)
    link.transfer(1e6)
    env.run(until=1.0)
    late = link.transfer(1e6)
    env.run()
    assert late.value == pytest.approx(1.0 + LAT + 1e6 / BW)
    assert link.busy_time(0) == pytest.approx(2e6 / BW)


def test_bad_arguments() -> None:
    env = CountingEnvironment()
    with pytest.raises(ValueError):
        P2PLink(env, 0.0)
    with pytest.raises(ValueError):
        P2PLink(env, BW, -1.0)
    with pytest.raises(ValueError):
        P2PLink(env, BW).transfer(1.0, direction=2)
    with pytest.raises(ValueError):
        P2PLink(env, BW).transfer(-1.0)
