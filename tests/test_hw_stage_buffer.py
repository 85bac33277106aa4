"""StageBuffer: a producer -> buffer -> consumer pipeline runs at the slower stage."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Sequence
from typing import Any

import numpy as np
import pytest
import simpy

from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.hw import PCUGroup, StageBuffer

FAST_SRAM = 1e18  # bytes/s: makes SRAM time negligible where the test is about compute
TILE = 64 * 1024


def pipeline(
    t_prod: Sequence[float],
    t_cons: Sequence[float],
    capacity: int,
    sram_bandwidth: float = FAST_SRAM,
    hold: bool = True,
) -> tuple[float, float, StageBuffer]:
    """Run T tiles through two PCU stages; return (producer end, consumer end, buffer)."""
    env = CountingEnvironment()
    buf = StageBuffer(env, capacity, sram_bandwidth)
    prod = PCUGroup(env, 1, 1.0, name="producer")  # 1 FLOP/s: flops == seconds
    cons = PCUGroup(env, 1, 1.0, name="consumer")
    ends: dict[str, float] = {}

    def producer() -> Generator[simpy.Event, Any, None]:
        for t in t_prod:
            yield prod.compute(t)
            yield from buf.put(TILE)
        ends["producer"] = env.now

    def consumer() -> Generator[simpy.Event, Any, None]:
        for t in t_cons:
            yield from buf.get(hold=hold)
            yield cons.compute(t)
            if hold:
                buf.release()
        ends["consumer"] = env.now

    env.process(producer())
    env.process(consumer())
    env.run()
    return ends["producer"], ends["consumer"], buf


@pytest.mark.parametrize(("tp", "tc"), [(1e-6, 3e-6), (3e-6, 1e-6), (2e-6, 2e-6)])
@pytest.mark.parametrize("capacity", [1, 2, 4])
def test_runs_at_the_slower_stage(tp: float, tc: float, capacity: int) -> None:
    n_tiles = 200
    _, end, buf = pipeline([tp] * n_tiles, [tc] * n_tiles, capacity)
    fill = min(tp, tc)
    assert end == pytest.approx(fill + n_tiles * max(tp, tc), rel=1e-6)
    assert buf.bytes_written.total == buf.bytes_read.total == n_tiles * TILE
    assert buf.bytes_written.count == buf.bytes_read.count == n_tiles
    assert buf.bytes_in_flight == 0 and buf.tiles_held == 0


def test_back_pressure_blocks_the_producer() -> None:
    tp, tc, n_tiles, cap = 1e-6, 5e-6, 50, 2
    prod_end, _cons_end, buf = pipeline([tp] * n_tiles, [tc] * n_tiles, cap)
    # the producer's last put waits for the consumer to release tile n_tiles - 1 - cap
    assert prod_end == pytest.approx(tp + (n_tiles - cap) * tc, rel=1e-6)
    assert buf.producer_stall_time > 0
    assert buf.peak_bytes_in_flight == cap * TILE
    free_end, _, free_buf = pipeline([tp] * n_tiles, [tc] * n_tiles, n_tiles)
    assert free_end == pytest.approx(n_tiles * tp, rel=1e-9)
    assert free_buf.producer_stall_time == 0


def test_double_buffering_hides_jitter_and_bigger_is_never_slower() -> None:
    rng = np.random.default_rng(3)
    n_tiles = 300
    tp = [float(x) for x in rng.exponential(1e-6, n_tiles)]
    tc = [float(x) for x in rng.exponential(1e-6, n_tiles)]
    ends = [pipeline(tp, tc, cap)[1] for cap in (1, 2, 3, 4, 8, 16, 64)]
    assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(ends))
    assert ends[-1] < ends[0] * 0.95  # buffering genuinely helps under jitter
    lower = max(sum(tp) + tc[-1], tp[0] + sum(tc))
    assert ends[-1] >= lower * (1 - 1e-12)


def test_sram_bandwidth_bounds_throughput() -> None:
    n_tiles, bw = 100, 64e9  # tile write or read = 1.024 us, compute negligible
    per_tile = TILE / bw
    _, end, buf = pipeline([1e-12] * n_tiles, [1e-12] * n_tiles, 2, sram_bandwidth=bw)
    # write and read ports work in parallel, each busy n_tiles * per_tile back to back: the
    # write port is done one tile before the read port, which reads the last tile after it
    assert end == pytest.approx((n_tiles + 1) * per_tile, rel=1e-6)
    # (the stages' 1e-12 s computes, 2 n_tiles of them, are the only slack)
    write_free, read_free = buf.ports_free_at()
    slack = 2 * n_tiles * 1e-12
    assert n_tiles * per_tile <= write_free <= n_tiles * per_tile + slack
    assert (n_tiles + 1) * per_tile <= read_free <= (n_tiles + 1) * per_tile + slack
    assert buf.bytes_written.total == buf.bytes_read.total == n_tiles * TILE


def test_copy_out_consumer_frees_slot_after_read() -> None:
    tp, tc, n_tiles = 1e-6, 5e-6, 20
    held, _, _ = pipeline([tp] * n_tiles, [tc] * n_tiles, 1, hold=True)
    copied, _, _ = pipeline([tp] * n_tiles, [tc] * n_tiles, 1, hold=False)
    assert copied < held  # the slot no longer waits for the consumer's compute


def test_release_without_tile_and_bad_arguments() -> None:
    env = CountingEnvironment()
    make: Callable[..., StageBuffer] = StageBuffer
    with pytest.raises(RuntimeError):
        make(env, 2, 1e12).release()
    with pytest.raises(ValueError):
        make(env, 0, 1e12)
    with pytest.raises(ValueError):
        make(env, 2, 0.0)


def test_deterministic() -> None:
    rng = np.random.default_rng(5)
    tp = [float(x) for x in rng.exponential(1e-6, 100)]
    tc = [float(x) for x in rng.exponential(1e-6, 100)]
    assert pipeline(tp, tc, 2)[:2] == pipeline(tp, tc, 2)[:2]


@pytest.mark.parametrize("capacity", [1, 2, 3])
def test_offer_is_put_when_a_slot_is_free_and_nothing_when_full(capacity: int) -> None:
    """``offer`` takes a free slot as ``put`` would (same tile, same end), and leaves a full
    buffer as it was; ``put`` then waits for the slot as usual."""
    env = CountingEnvironment()
    buf, twin = StageBuffer(env, capacity, 1e9), StageBuffer(env, capacity, 1e9)
    ends = [buf.offer(1000.0, k) for k in range(capacity)]
    for k in range(capacity):  # the same tiles through put: nothing to wait for
        put = twin.put(1000.0, k)
        with pytest.raises(StopIteration) as stop:
            next(put)
        assert stop.value.value == ends[k]
    assert ends == pytest.approx([1e-6 * (k + 1) for k in range(capacity)])
    assert buf.ports_free_at() == twin.ports_free_at()
    state = (buf.occupancy(), buf.ports_free_at(), buf.bytes_written.total)
    assert buf.offer(1000.0, "late") is None  # full: nothing changes
    assert (buf.occupancy(), buf.ports_free_at(), buf.bytes_written.total) == state
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        buf.offer(-1.0)
    got: list[Any] = []

    def consumer() -> Generator[simpy.Event, Any, None]:
        for _ in range(capacity + 1):
            got.append((yield from buf.get(hold=False)))

    def late_producer() -> Generator[simpy.Event, Any, None]:
        yield from buf.put(1000.0, "late")

    env.process(consumer())
    env.process(late_producer())
    env.run()
    assert got == [*range(capacity), "late"]


@pytest.mark.parametrize("capacity", [1, 2])
def test_bytes_moved_is_what_the_two_counters_carry(capacity: int) -> None:
    """The fast-forward's marks read ``bytes_moved`` instead of building both counters."""
    _, _, buf = pipeline([1e-6] * 5, [2e-6] * 5, capacity)
    assert buf.bytes_moved() == buf.bytes_written.total + buf.bytes_read.total == 10 * TILE
