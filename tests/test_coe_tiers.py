"""A socket's tiers under CoE as a driver of the serving loop (serving.coe_tiers): copies and
a step's reads end where the same hardware models end them on their own environment, seen
at the next whole picosecond, and as exactly after 2^53 ps as at time 0."""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import pytest

from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.des.timeline import Timeline
from rdu_sim.hw.copy_engine import CopyEngine
from rdu_sim.hw.memory_channel import MemoryChannel
from rdu_sim.serving.coe_tiers import SocketTiers, Tiers

TIERS = Tiers(1.8e12, 1e-7, 0.95, 200e9, 2e-7, 0.8, 128e9)
COPY = 3.3e8  # bytes: 20 chunks of 16 MiB, the last one short
STEP_HBM, STEP_DDR = 4e8, 2e7  # a step's reads while the copy runs
STEP_AT = 1_000_000_000  # ps after the copy starts


def _models() -> tuple[CountingEnvironment, MemoryChannel, MemoryChannel, CopyEngine]:
    """The tiers' hardware models on their own environment (float ps): DDR, HBM, the copier."""
    env = CountingEnvironment()
    per_ps = 1e-12
    ddr = MemoryChannel(env, TIERS.ddr_bandwidth * per_ps, TIERS.ddr_latency * 1e12, 0.8)
    hbm = MemoryChannel(env, TIERS.hbm_bandwidth * per_ps, TIERS.hbm_latency * 1e12, 0.95)
    return env, ddr, hbm, CopyEngine(env, ddr, hbm, TIERS.copy_bandwidth * per_ps)


def _alone(step_reads: bool = True) -> tuple[float, float, float]:
    """The copy and the step's reads (if ``step_reads``) on the hardware models' own
    environment (float ps): when the copy lands, when both reads are done, and the copy
    engine's busy time."""
    env, ddr, hbm, copier = _models()
    times: dict[str, float] = {}
    copy = copier.copy(COPY)
    copy.callbacks.append(lambda _e: times.setdefault("landed", env.now))

    def step() -> Generator[Any, Any, None]:
        yield env.timeout(STEP_AT)
        yield env.all_of([hbm.read(STEP_HBM), ddr.read(STEP_DDR)])
        times["read"] = env.now

    if step_reads:
        env.process(step())
    env.run()
    return times["landed"], times.get("read", math.nan), copier.busy_s


def _on_timeline(start: int) -> tuple[dict[str, int], SocketTiers]:
    """The same work on the serving loop from ``start`` ps: when the loop sees each end."""
    timeline = Timeline()
    tiers = SocketTiers(timeline, TIERS)
    seen: dict[str, int] = {}

    def work() -> Generator[Any, Any, None]:
        yield timeline.timeout(start)
        tiers.copy(COPY, lambda: seen.setdefault("landed", timeline.now))
        yield timeline.timeout(STEP_AT)
        tiers.traffic(STEP_HBM, STEP_DDR, lambda: seen.setdefault("read", timeline.now))

    timeline.process(work())
    timeline.run()
    return seen, tiers


def test_a_copy_and_a_step_s_reads_end_as_on_their_own_environment() -> None:
    landed, read, busy = _alone()
    assert read < landed  # the reads end during the copy, which they slowed
    seen, tiers = _on_timeline(0)
    assert seen == {"landed": math.ceil(landed), "read": math.ceil(read)}
    assert tiers.copies == 1 and tiers.bytes_copied == COPY and tiers.busy_ps == busy
    assert not tiers.copying


def test_the_tiers_clock_is_as_exact_after_2_53_ps() -> None:
    """Each busy period counts from its own start, so a copy late in a run (where a float
    clock of the whole run would be 2-ps coarse) takes exactly as long as one at 0."""
    early, _ = _on_timeline(0)
    late = 2**60 + 7
    seen, _ = _on_timeline(late)
    assert seen == {key: late + at for key, at in early.items()}


def test_busy_periods_sum_their_copies() -> None:
    timeline = Timeline()
    tiers = SocketTiers(timeline, TIERS)
    landed: list[int] = []

    def work() -> Generator[Any, Any, None]:
        for _ in range(3):  # each copy after the last has landed: three periods
            tiers.copy(COPY, lambda: landed.append(timeline.now))
            while tiers.copying:
                yield timeline.timeout(10**6)
            yield timeline.timeout(5)

    timeline.process(work())
    timeline.run()
    landed_alone, _, busy = _alone(step_reads=False)
    assert tiers.copies == 3 and tiers.bytes_copied == 3 * COPY
    assert tiers.busy_ps == 3 * busy
    assert landed[0] == math.ceil(landed_alone)
    assert landed[1] - landed[0] == landed[2] - landed[1] > landed[0]


def test_the_driver_runs_the_tiers_ahead_between_the_loop_s_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A copy is ~100 tier events (5 a chunk); with nothing else in the loop the driver
    processes them in one go, stopping only where it tells the server something."""
    calls: list[int] = []
    run_ahead = SocketTiers._run_ahead

    def counted(self: SocketTiers) -> int:
        calls.append(self.timeline.now)
        return run_ahead(self)

    monkeypatch.setattr(SocketTiers, "_run_ahead", counted)
    timeline = Timeline()
    tiers = SocketTiers(timeline, TIERS)
    landed: list[int] = []
    tiers.copy(COPY, lambda: landed.append(timeline.now))
    timeline.run()
    assert landed == [math.ceil(_alone(step_reads=False)[0])]
    assert calls == [0, landed[0]]  # its start (the copy asked for), the landing


def test_the_server_acting_when_told_finds_the_tiers_at_its_instant() -> None:
    """Two copies asked for at once; when the first lands the server starts a step's reads
    at once (the second copy still running): the tiers have not run past that instant, so
    the reads end where they do on the models' own environment started then."""
    env, ddr, hbm, copier = _models()
    alone: dict[str, float] = {}

    first = copier.copy(COPY)
    copier.copy(COPY)

    def server_alone() -> Generator[Any, Any, None]:
        yield first
        yield env.timeout(math.ceil(env.now) - env.now)  # seen at the next whole ps
        alone["told"] = env.now
        yield env.all_of([hbm.read(STEP_HBM), ddr.read(STEP_DDR)])
        alone["read"] = env.now

    env.process(server_alone())
    env.run()

    timeline = Timeline()
    tiers = SocketTiers(timeline, TIERS)
    seen: dict[str, int] = {}

    def server() -> Generator[Any, Any, None]:
        landed = timeline.event()
        tiers.copy(COPY, landed.succeed)
        tiers.copy(COPY, lambda: None)
        yield landed
        seen["told"] = timeline.now
        read = timeline.event()
        tiers.traffic(STEP_HBM, STEP_DDR, read.succeed)
        yield read
        seen["read"] = timeline.now

    timeline.process(server())
    timeline.run()
    assert seen == {"told": alone["told"], "read": math.ceil(alone["read"])}
