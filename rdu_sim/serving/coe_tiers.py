"""A socket's memory tiers and copy engine under Composition of Experts, on the serving loop.

The copy engine (``hw.CopyEngine``) and the fair-shared HBM and DDR channels
(``hw.MemoryChannel``) are the kernels' hardware models: compiled, on des's float-clock
environment (``des.CountingEnvironment``), with rates per picosecond here. Under CoE they run
as one driver of the serving loop (``des.timeline.Timeline``, integer picoseconds). A tier
event at time ``t`` is *seen* at the first whole picosecond at or after it: a copy that
lands, or a step's reads that end, at a fractional picosecond is told to the server then,
before any step end of that instant (a step end is ``LATE``, the driver ``NORMAL``:
``des.order``). The driver processes the tiers' events ahead of the loop as long as no other
entry of the loop comes first (so nothing the server does can fall between them), and stops
at the first that tells the server something, to be resumed when it is seen: a copy of
1.9 GB is ~500 tier events but one or two resumptions.

The tiers' float clock counts from the start of their busy period (the first request after
they were idle), so it holds picoseconds exactly however late the run is (a period is a few
copies long; it is exact up to 2^53 ps, 2.5 hours, of continuous copying): each period gets
a fresh environment, channels and copy engine, whose counts are summed here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.des.order import NORMAL
from rdu_sim.des.timeline import IDLE, Timeline
from rdu_sim.hw.copy_engine import CopyEngine
from rdu_sim.hw.memory_channel import MemoryChannel
from rdu_sim.serving.arrivals import NEVER
from rdu_sim.serving.clock import PS_PER_S


@dataclass(frozen=True)
class Tiers:
    """One socket's memory tiers and copy engine, as plain numbers (bytes, bytes/s, s)."""

    hbm_bandwidth: float
    hbm_latency: float
    hbm_efficiency: float
    ddr_bandwidth: float
    ddr_latency: float
    ddr_efficiency: float
    copy_bandwidth: float


class SocketTiers:
    """The copy engine and the channels it shares with the steps, as a driver of ``timeline``
    (module docstring): :meth:`copy` and :meth:`traffic` start work now and call back, at the
    whole picosecond the serving loop sees it end."""

    def __init__(self, timeline: Timeline, tiers: Tiers) -> None:
        self.timeline = timeline
        self.tiers = tiers
        self.copies = 0
        self.bytes_copied = 0.0
        self.busy_ps = 0.0  # the copy engine's busy time, summed over its busy periods
        self._pending = 0  # copies asked for and not landed
        self._origin = 0  # the serving clock's time of the tiers' time 0
        self._env: CountingEnvironment | None = None  # None: idle (no period running)
        self._copier: CopyEngine | None = None
        self._hbm: MemoryChannel | None = None
        self._ddr: MemoryChannel | None = None
        self._due = NEVER  # when the driver resumes next (NEVER: idle)
        self._told: list[Callable[[], object]] = []  # what to tell the server when seen
        self._who = timeline.start(self._drive(), NORMAL)

    @property
    def copying(self) -> bool:
        """Whether a copy has been asked for and has not landed."""
        return self._pending > 0

    def copy(self, nbytes: float, landed: Callable[[], object]) -> None:
        """Copy ``nbytes`` from DDR to HBM (behind the copies asked for before); ``landed()``
        is called when the last byte is in HBM."""
        self._pending += 1
        copier = self._period().copier

        def seen() -> None:
            self._pending -= 1
            landed()

        copier.copy(nbytes).callbacks.append(lambda _event: self._told.append(seen))
        self._arm()

    def traffic(self, hbm_bytes: float, ddr_bytes: float, ended: Callable[[], object]) -> None:
        """A step's own reads of HBM and DDR, on the channels a copy shares; ``ended()`` is
        called when both are done."""
        period = self._period()
        reads = period.env.all_of(
            [period.hbm.read(hbm_bytes, tag="step"), period.ddr.read(ddr_bytes, tag="step")]
        )

        def done(_event: Any) -> None:
            self._told.append(ended)

        reads.add_callback(done)
        self._arm()

    # --- the busy period -------------------------------------------------------------------
    def _period(self) -> _Period:
        """The running busy period, its clock brought to now (a new one if idle)."""
        now = self.timeline.now
        env = self._env
        if env is None:
            self._start_period(now)
        else:
            at = now - self._origin
            if env.now < at:
                env.run(until=at)  # nothing is due before ``at``: the driver ran up to it
            elif env.now > at:
                raise RuntimeError("the tiers ran ahead of the serving loop (a bug)")
        assert self._env is not None and self._copier is not None
        assert self._hbm is not None and self._ddr is not None
        return _Period(self._env, self._copier, self._hbm, self._ddr)

    def _start_period(self, now: int) -> None:
        tiers, per_ps = self.tiers, 1.0 / PS_PER_S
        env = self._env = CountingEnvironment()
        self._origin = now
        self._ddr = MemoryChannel(
            env, tiers.ddr_bandwidth * per_ps, tiers.ddr_latency * PS_PER_S, tiers.ddr_efficiency
        )
        self._hbm = MemoryChannel(
            env, tiers.hbm_bandwidth * per_ps, tiers.hbm_latency * PS_PER_S, tiers.hbm_efficiency
        )
        self._copier = CopyEngine(env, self._ddr, self._hbm, tiers.copy_bandwidth * per_ps)

    def _end_period(self) -> None:
        """Nothing is left to do: keep the copy engine's counts, drop the period."""
        copier = self._copier
        assert copier is not None
        self.copies += copier.copies
        self.bytes_copied += copier.bytes_copied
        self.busy_ps += copier.busy_s  # (its clock is in picoseconds)
        self._env = self._copier = self._hbm = self._ddr = None

    def _next_at(self) -> int:
        """When the tiers' next event is seen (NEVER: none)."""
        env = self._env
        if env is None:
            return NEVER
        at = env.peek()
        return NEVER if math.isinf(at) else self._origin + math.ceil(at)

    def _arm(self) -> None:
        """Resume the driver by the tiers' next event (earlier than it would be)."""
        at = self.timeline.now if self._told else self._next_at()
        if at < self._due:
            self._due = at
            self.timeline.move(self._who, at)

    def _drive(self) -> Generator[Any, None, None]:
        """Resumed when a tier event is seen: tell the server what it waits for, process the
        tiers ahead, then wait for the next event seen (or idle until :meth:`_arm`)."""
        while True:
            self._due = self._run_ahead()
            yield IDLE if self._due == NEVER else self._due

    def _run_ahead(self) -> int:
        """Process the tier events seen by now, telling the server of each as it comes, then
        those seen before the loop's next entry, up to the first that tells the server
        something; returns when the next unprocessed event (or that one) is seen."""
        timeline, told = self.timeline, self._told
        now = timeline.now
        for tell in told:
            tell()
        told.clear()
        env = self._env
        if env is None:
            return NEVER
        horizon = self._horizon(now)
        origin = self._origin
        while True:
            at = env.peek()
            if math.isinf(at):
                self._end_period()
                return NEVER
            seen = origin + math.ceil(at)
            if seen > horizon:
                return seen
            env.step()
            if told:
                if seen > now:
                    return seen
                for tell in told:
                    tell()
                told.clear()
                horizon = self._horizon(now)  # the server may act now: go no further

    def _horizon(self, now: int) -> int:
        """The last picosecond whose tier events may be processed now: the one before the
        loop's next entry (the server acts only at entries), or none if it has none."""
        after = self.timeline.peek()  # None: the server waits on the tiers
        return NEVER if after is None else max(now, after - 1)


@dataclass(frozen=True)
class _Period:
    env: CountingEnvironment
    copier: CopyEngine
    hbm: MemoryChannel
    ddr: MemoryChannel
