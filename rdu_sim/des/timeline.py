"""The serving level's event loop: integer picoseconds, events in ``des.order``'s order.

Everything above the kernels runs here: a lone server, a cluster of mixed replicas, a
disaggregated cluster with its KV link. It holds two kinds of entry, keyed alike:

- SimPy's own events (``schedule``, ``timeout``, ``event``, ``process``: a ``Process``, a
  ``Condition``), processed as ``simpy.Environment.step`` does: their callbacks in order, a
  failure nobody defused ends the run with its error;
- drivers (:meth:`start`): generators that yield the picosecond time at which to be
  resumed, or :data:`IDLE` to wait for a :meth:`wake`, with no event object at all. A
  serving step end is one resumption of its server's driver (~3 a request), so drivers are
  what a server runs as when it needs nothing but the clock and wakes.

Each entry is one int, ``((time << 2 | priority) << SEQ_BITS | seq) << WHO_BITS | who``
(compared in one step, where a tuple compares field by field): ``seq`` counts queuings (the
event id of ``des.order``), ``who`` is the driver (0 for a SimPy event, found by its
``seq``). A driver's resumption can be moved (:meth:`move`): the new entry replaces the
old, which is skipped when it comes up (the clock still passes it, as SimPy's orphaned
event fires with no one waiting). Time is a Python int, so picosecond arithmetic is exact
across the serving clock's whole range (``serving.clock``: 2^63 ps), where a float would
round past 2^53 ps (2.5 simulated hours).
"""

from __future__ import annotations

from collections.abc import Generator
from heapq import heappop, heappush
from typing import Any, Final, Protocol

import simpy

from rdu_sim.des.environment import _check_failed
from rdu_sim.des.order import NORMAL, URGENT
from rdu_sim.interrupts import native

SEQ_BITS: Final = 48  # queuings counted in a key (2.8e14: beyond any run's events)
WHO_BITS: Final = 21  # drivers a loop holds (two million), 0 being SimPy's events

IDLE: Final[object] = object()
"""What a driver yields to wait until :meth:`Timeline.wake` resumes it."""

Driver = Generator[Any, None, None]
"""A generator yielding its next resumption's time (an int, ps) or :data:`IDLE`."""


class Loop(Protocol):
    """The serving loop as its users see it: the :class:`Timeline`, or an adapter that runs
    drivers on another loop (the tests run them in ``simpy.Environment``, the oracle)."""

    @property
    def now(self) -> int:
        """Now, in integer picoseconds."""
        ...

    def start(self, driver: Driver, priority: int, endless: bool = False) -> int:
        """Run ``driver`` from now; its number for :meth:`wake` and :meth:`move`."""
        ...

    def wake(self, who: int) -> None:
        """Resume driver ``who``, idle (or waiting for a time it no longer waits for), now."""
        ...

    def move(self, who: int, at: int) -> None:
        """Driver ``who`` resumes at ``at`` instead."""
        ...

    def event(self) -> simpy.Event:
        """A pending SimPy event."""
        ...

    def timeout(self, delay: int, value: Any = None) -> simpy.Timeout:
        """A SimPy event ``delay`` ps from now."""
        ...

    def run(self) -> int:
        """Process everything; the time of the last entry."""
        ...


class Timeline:
    """The integer-picosecond event loop (``simpy.Environment``'s face for SimPy's events,
    plus drivers); :meth:`run` processes every entry in ``des.order``'s order."""

    def __init__(self) -> None:
        self.now = 0
        self._heap: list[int] = []
        self._seq = 0
        self._events: dict[int, Any] = {}  # seq -> a SimPy event queued under it
        self._sends: list[Any] = [None]  # each driver's ``send`` (index 0: SimPy's events)
        self._priority: list[int] = [NORMAL]  # each driver's resumption priority
        self._endless: list[bool] = [False]  # drivers that must never end
        self._current: list[int] = [-1]  # each driver's live entry (an older one is stale)
        self._active_proc: Any = None  # set by SimPy's Process while it runs

    # --- SimPy's environment ---------------------------------------------------------------
    @property
    def active_process(self) -> Any:
        """The SimPy ``Process`` running now, if any."""
        return self._active_proc

    def schedule(self, event: Any, priority: int = NORMAL, delay: int = 0) -> None:
        """Queue a SimPy ``event`` at ``now + delay`` (an int of picoseconds, not negative)."""
        if type(delay) is not int or delay < 0:
            raise ValueError(f"a delay on the serving clock is an int >= 0 ps, got {delay!r}")
        self._push(self.now + delay, priority, 0)
        self._events[self._seq] = event

    def timeout(self, delay: int, value: Any = None) -> simpy.Timeout:
        """``simpy.Environment.timeout``: an event ``delay`` ps from now."""
        return simpy.Timeout(self, delay, value)  # type: ignore[arg-type]

    def event(self) -> simpy.Event:
        """``simpy.Environment.event``: a pending event."""
        return simpy.Event(self)  # type: ignore[arg-type]

    def process(self, generator: Generator[Any, Any, Any]) -> simpy.Process:
        """``simpy.Environment.process``: SimPy's ``Process`` (events, interrupts)."""
        return simpy.Process(self, generator)  # type: ignore[arg-type]

    # --- drivers -----------------------------------------------------------------------------
    def start(self, driver: Driver, priority: int, endless: bool = False) -> int:
        """Run ``driver`` from now (URGENT, as a SimPy process starts), resuming it at
        ``priority`` at each time it yields; its number for :meth:`wake` and :meth:`move`.
        ``endless``: its ending is an error (a cluster replica serves until the run ends)."""
        who = len(self._sends)
        if who >> WHO_BITS:
            raise ValueError(f"a timeline holds at most 2**{WHO_BITS} - 1 drivers")
        self._sends.append(driver.send)
        self._priority.append(priority)
        self._endless.append(endless)
        self._current.append(-1)
        self._current[who] = self._push(self.now, URGENT, who)
        return who

    def wake(self, who: int) -> None:
        """Resume driver ``who``, idle, now (a NORMAL entry, as SimPy's woken event)."""
        self._current[who] = self._push(self.now, NORMAL, who)

    def move(self, who: int, at: int) -> None:
        """Driver ``who`` resumes at ``at`` instead of where it would have (a new entry at
        its priority; the old one goes stale)."""
        self._current[who] = self._push(at, self._priority[who], who)

    def peek(self) -> int | None:
        """When the next entry is due (a stale one too: never later than the next that
        runs); None when none is left."""
        heap = self._heap
        return heap[0] >> (SEQ_BITS + WHO_BITS + 2) if heap else None

    def _push(self, at: int, priority: int, who: int) -> int:
        """Queue an entry for ``who`` (0: a SimPy event); its key."""
        seq = self._seq = self._seq + 1
        if seq >> SEQ_BITS:
            raise OverflowError(f"a timeline counts at most 2**{SEQ_BITS} queuings")
        key = (((at << 2 | priority) << SEQ_BITS | seq) << WHO_BITS) | who
        heappush(self._heap, key)
        return key

    # --- the loop ----------------------------------------------------------------------------
    @native  # the compiled drivers run here: a signal is raised after them (rdu_sim.interrupts)
    def run(self) -> int:
        """Process every entry until none is left; returns the time of the last (SimPy's
        ``env.now`` after ``run``)."""
        heap, sends, current, events = self._heap, self._sends, self._current, self._events
        priorities = self._priority
        who_mask = (1 << WHO_BITS) - 1
        seq_mask = (1 << SEQ_BITS) - 1
        time_shift = SEQ_BITS + WHO_BITS + 2
        # A driver's resumption inlines ``_push`` (a replica is resumed ~3 times a request);
        # the queuing count is ``self._seq``, read and written around it. A driver whose next
        # entry would be the only one (a server alone) is resumed at once, without the heap.
        while heap:
            key = heappop(heap)
            self.now = key >> time_shift
            who = key & who_mask
            if not who:  # a SimPy event: ``simpy.Environment.step``'s body
                event = events.pop(key >> WHO_BITS & seq_mask)
                callbacks, event.callbacks = event.callbacks, None
                for callback in callbacks:
                    callback(event)
                _check_failed(event)
                continue
            if key != current[who]:
                continue  # moved: stale
            send = sends[who]
            while True:
                try:
                    waits_for = send(None)
                except StopIteration:
                    if self._endless[who]:
                        raise RuntimeError("an endless driver ended") from None
                    current[who] = -1
                    break
                if type(waits_for) is not int:
                    if waits_for is not IDLE:
                        raise TypeError(
                            f"a driver yielded {waits_for!r}: its next time (an int, ps) or IDLE"
                        )
                    break
                if waits_for < self.now:
                    raise ValueError(f"a driver yielded {waits_for} ps, before now ({self.now})")
                if not heap:  # its entry would be the only one: resume it at once
                    self.now = waits_for
                    continue
                seq = self._seq = self._seq + 1
                if seq >> SEQ_BITS:
                    raise OverflowError(f"a timeline counts at most 2**{SEQ_BITS} queuings")
                key = (((waits_for << 2 | priorities[who]) << SEQ_BITS | seq) << WHO_BITS) | who
                heappush(heap, key)
                current[who] = key
                break
        return self.now
