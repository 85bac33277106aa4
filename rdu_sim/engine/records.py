"""Trace records the engine emits when asked (``record=True``): slices and counters.

The core only emits records; ``rdu_sim.report.trace`` turns them into a Chrome/Perfetto JSON
file. A :class:`Recorder` collects one simulation run in that run's local time; the engine
places runs on the step's timeline with :meth:`Recorder.extend_into` (kernels run one after
another, so each run is shifted by its start time).

Tracks: ``kernel`` (one slice per kernel call or looped call), ``stage/<name>`` (one slice per
tile a stage computes; a stage's PCUs are a FIFO server, so its slices never overlap) and
counters ``hbm``, ``ddr``, ``p2p`` (bytes in flight on the socket's memory tiers and links).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TraceSlice:
    """A span of activity on one socket's track (Chrome ``ph: X``)."""

    socket: int
    track: str
    name: str
    start_s: float
    dur_s: float
    args: tuple[tuple[str, str | float], ...] = ()


@dataclass(frozen=True)
class TraceCounter:
    """A sample of a counter on one socket (Chrome ``ph: C``), e.g. HBM bytes in flight."""

    socket: int
    name: str
    time_s: float
    value: float


@dataclass(frozen=True)
class TraceRecords:
    """All records of one step, on the step's timeline (seconds from the step's start)."""

    slices: tuple[TraceSlice, ...] = ()
    counters: tuple[TraceCounter, ...] = ()


@dataclass
class Recorder:
    """Collects records of one run; owned by that run (no shared state between runs)."""

    slices: list[TraceSlice] = field(default_factory=list)
    counters: list[TraceCounter] = field(default_factory=list)
    _level: dict[tuple[int, str], float] = field(default_factory=dict)

    def slice(
        self,
        socket: int,
        track: str,
        name: str,
        start_s: float,
        end_s: float,
        args: tuple[tuple[str, str | float], ...] = (),
    ) -> None:
        """Record that ``track`` of ``socket`` was busy with ``name`` on [start, end]."""
        self.slices.append(TraceSlice(socket, track, name, start_s, end_s - start_s, args))

    def in_flight(self, socket: int, name: str, time_s: float, delta: float) -> None:
        """Move counter ``name`` of ``socket`` by ``delta`` at ``time_s`` and sample it."""
        key = (socket, name)
        value = self._level.get(key, 0.0) + delta
        if abs(value) < 1e-6:  # float residue of +x then -x
            value = 0.0
        self._level[key] = value
        self.counters.append(TraceCounter(socket, name, time_s, value))

    def extend_into(self, target: Recorder, offset_s: float) -> None:
        """Append this run's records to ``target``, shifted by ``offset_s`` seconds."""
        target.slices.extend(
            TraceSlice(s.socket, s.track, s.name, s.start_s + offset_s, s.dur_s, s.args)
            for s in self.slices
        )
        target.counters.extend(
            TraceCounter(c.socket, c.name, c.time_s + offset_s, c.value) for c in self.counters
        )

    def freeze(self) -> TraceRecords:
        """The collected records, sorted by time (stable) for a readable file."""
        return TraceRecords(
            slices=tuple(sorted(self.slices, key=lambda s: s.start_s)),
            counters=tuple(sorted(self.counters, key=lambda c: c.time_s)),
        )
