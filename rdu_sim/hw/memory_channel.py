"""A memory tier (HBM or DDR) as a fair, exactly-simulated shared pipe.

Mechanism: egalitarian processor sharing, simulated event by event. Every
request first waits ``latency`` (pipelined: it does not use bandwidth), then
joins the set of active streams; while ``n`` streams are active each one
receives ``min(B_eff / n, max_stream_bandwidth)`` bytes/s, where
``B_eff = bandwidth * efficiency``. Rates are recomputed exactly at every
arrival and departure, so this is the fluid limit of the chunk-interleaving
(round-robin over lanes) model with an infinitely small chunk: fair to the
byte, and exact for a lone stream (``latency + nbytes / B_eff``).

Why not chunks on a ``simpy.Resource``: that costs ~4 events per chunk, i.e.
thousands of events per weight load. Here the bookkeeping uses a *virtual
time* ``V`` (bytes served so far to any one continuously active stream): a
stream joining at ``V0`` with ``b`` bytes finishes when ``V`` reaches
``V0 + b``, so a heap orders completions and only the earliest needs a timer.
Cost per request: one latency timeout, one completion event, and at most one
wake-up timer; arrivals that merely delay the next completion add no event.

A read may name an earlier request of the same pipeline (``after``): its latency runs
as usual, but its bytes join the active streams only once that request is done. One
pipeline's prefetches then arrive in the order it consumes them (as a copy pipeline's
stages do), instead of sharing the tier with each other: under fair sharing, loads issued
at the same instant all end together, so a consumer that issues its next loads only when
the earlier ones end leaves the tier idle for a whole latency each time (the faster its
compute, the more its issues bunch up and the more latencies it exposes).

``efficiency`` is the achievable fraction of the datasheet peak (refresh,
bank conflicts, read/write turnaround); it is not public for SN40L, so it is
a parameter (hw_configs/ says why 0.95 for HBM reads, 0.8 for DDR). Reads and writes
share the same bandwidth and are counted separately.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Final

from rdu_sim.des.environment import CountingEnvironment, Event
from rdu_sim.hw.stats import BusyTracker, ByteCounter

_REL_TOL: Final = 1e-12
heappush: Final = heapq.heappush  # Final: a C static when compiled, not a dictionary lookup
heappop: Final = heapq.heappop


class MemoryChannel:
    """One memory tier: ``bandwidth`` (bytes/s peak), ``latency`` (s), ``efficiency``.

    Args:
        env: the SimPy environment.
        bandwidth: peak bytes/s of the whole tier (e.g. 1.8e12 for SN40L HBM).
        latency: seconds from issue to first byte, paid once per request.
        efficiency: achievable fraction of peak, in (0, 1].
        max_stream_bandwidth: optional per-stream cap in bytes/s (one DMA
            engine cannot saturate the tier alone); ``None`` means no cap.
        name: label for reports.
    """

    def __init__(
        self,
        env: CountingEnvironment,
        bandwidth: float,
        latency: float = 0.0,
        efficiency: float = 1.0,
        max_stream_bandwidth: float | None = None,
        name: str = "mem",
    ) -> None:
        if bandwidth <= 0:
            raise ValueError(f"{name}.bandwidth must be > 0, got {bandwidth}")
        if latency < 0:
            raise ValueError(f"{name}.latency must be >= 0, got {latency}")
        if not 0 < efficiency <= 1:
            raise ValueError(f"{name}.efficiency must be in (0, 1], got {efficiency}")
        if max_stream_bandwidth is not None and max_stream_bandwidth <= 0:
            raise ValueError(f"{name}.max_stream_bandwidth must be > 0, got {max_stream_bandwidth}")
        self.env = env
        self.name = name
        self.latency = float(latency)
        self.effective_bandwidth = float(bandwidth) * efficiency
        self.stream_cap = math.inf if max_stream_bandwidth is None else float(max_stream_bandwidth)
        self.reads = ByteCounter()
        self.writes = ByteCounter()
        self.busy = BusyTracker(name)
        self.max_streams = 0
        self._vtime = 0.0
        self._last = float(env.now)
        self._active: list[tuple[float, int, Event]] = []  # (finish tag, seq, done)
        self._seq = 0
        self._timers: list[float] = []  # pending wake-up times (a heap)
        # requests in their latency, each with the request it comes after (or None)
        self._waiting: deque[tuple[float, Event, Event | None]] = deque()
        # bound once: one is appended to every timer and every latency delay
        self._wake_cb = self._wake
        self._join_cb = self._join_oldest

    def read(self, nbytes: float, tag: str | None = None, after: Event | None = None) -> Event:
        """Read ``nbytes``; the returned event fires when the last byte has arrived. With
        ``after`` (an earlier request of the same pipeline), the bytes move only once it is
        done: its latency overlaps, its bandwidth does not (a pipeline's loads in order)."""
        self.reads.add(nbytes, tag)
        return self._issue(nbytes, after)

    def write(self, nbytes: float, tag: str | None = None) -> Event:
        """Write ``nbytes``; the returned event fires when the last byte is stored."""
        self.writes.add(nbytes, tag)
        return self._issue(nbytes, None)

    def transfer_time(self, nbytes: float) -> float:
        """Uncontended time for one request: ``latency + nbytes / stream rate``."""
        return self.latency + nbytes / min(self.effective_bandwidth, self.stream_cap)

    def streams_left_s(self) -> list[float]:
        """Each active stream's bytes left now, in seconds at the effective bandwidth (sorted):
        with the requests in their latency, the channel's whole state (reads waiting on an
        earlier one, ``after``, aside: the GPU kernel, their one user, is compared empty)."""
        if not self._active:
            return []
        vtime = self._vtime + self._rate() * (float(self.env.now) - self._last)
        rate = self.effective_bandwidth
        return sorted((tag - vtime) / rate for tag, _, _ in self._active)

    @property
    def active_streams(self) -> int:
        """Streams currently moving bytes (requests still in their latency excluded)."""
        return len(self._active)

    def _issue(self, nbytes: float, after: Event | None) -> Event:
        env = self.env
        done = env.event()
        if nbytes == 0:  # nothing to move: no request is issued
            return done.succeed(0)
        # Every request waits the same latency, so the delays end in issue order (same
        # times, ids increasing): each one joins the oldest request still waiting.
        self._waiting.append((nbytes, done, after))
        if self.latency > 0:
            env.timeout(self.latency).add_callback(self._join_cb)
        else:
            self._join_oldest(None)
        return done

    def _rate(self) -> float:
        """Bytes/s each active stream receives right now."""
        share, cap = self.effective_bandwidth / len(self._active), self.stream_cap
        return cap if cap < share else share  # min(share, cap) without the call (per event)

    def _advance(self) -> None:
        """Move virtual time to ``env.now`` at the current (constant) rate."""
        now = float(self.env._now)
        last, active = self._last, self._active
        if active and now > last:
            rate = self._rate()
            self._vtime += rate * (now - last)
            self.busy.add(last, now, rate * len(active) / self.effective_bandwidth)
        self._last = now

    def _join_oldest(self, _ev: Event | None) -> None:
        """The oldest waiting request's latency is over: it joins the active streams, or,
        if the request it comes after is not done yet, when that one is."""
        nbytes, done, after = self._waiting.popleft()
        if after is not None and after.callbacks is not None:  # not yet processed
            after.callbacks.append(lambda _after: self._join(nbytes, done))
            return
        self._join(nbytes, done)

    def _join(self, nbytes: float, done: Event) -> None:
        """``nbytes`` start moving now, as one more active stream; ``done`` fires at the end."""
        self._advance()
        active = self._active
        heappush(active, (self._vtime + nbytes, self._seq, done))
        self._seq += 1
        if len(active) > self.max_streams:
            self.max_streams = len(active)
        self._arm()

    def _arm(self) -> None:
        """Make sure a wake-up is pending no later than the next completion."""
        active = self._active
        if not active:
            return
        now = float(self.env._now)
        left = active[0][0] - self._vtime
        due = now + (0.0 if left < 0.0 else left) / self._rate()  # max(left, 0.0)
        timers = self._timers
        if timers and timers[0] <= due:
            return  # an earlier timer will fire first and re-arm
        heappush(timers, due)
        self.env.timeout(due - now).add_callback(self._wake_cb)

    def _wake(self, _ev: Event) -> None:
        heappop(self._timers)
        self._advance()
        now = float(self.env._now)
        active = self._active
        while active:
            tag, _, done = active[0]
            left = tag - self._vtime
            # left > _REL_TOL * max(tag, 1.0) and now + left / rate > now (a comparison
            # instead of max's call; the rate only when the first test holds)
            if left > _REL_TOL * (tag if tag > 1.0 else 1.0) and now + left / self._rate() > now:
                break
            if tag > self._vtime:
                self._vtime = tag  # snap: removes float drift exactly
            heappop(active)
            done.succeed(now)
        if not active:
            self._vtime = 0.0  # idle: restart virtual time, keeping float error bounded
        self._arm()
