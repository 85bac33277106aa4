"""The serving loop's oracle: ``des.timeline``'s drivers, run in ``simpy.Environment``.

Production serving runs on ``rdu_sim.des.timeline.Timeline``: drivers (generators yielding
the picosecond time of their next resumption, or ``IDLE``) and SimPy's own events on one heap
of packed integer keys. :class:`SimPyLoop` is the same face (``des.timeline.Loop``) on SimPy's
environment: each resumption of a driver is a SimPy event queued at the driver's priority
(``des.simpy_events.scheduled``), a moved or woken driver's older event is left to pass with
no one resumed, and SimPy's events (a KV link's transfers, hand-offs) are SimPy's. A run on
it must equal a run on the Timeline event for event (tests/test_serving_alone.py,
tests/test_cluster_loop.py); the adapter lives here, with the tests, because nothing in
production runs on it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import simpy

from rdu_sim.des.order import NORMAL, URGENT
from rdu_sim.des.simpy_events import scheduled
from rdu_sim.des.timeline import IDLE, Driver


class SimPyLoop:
    """``des.timeline.Loop`` on a fresh ``simpy.Environment`` (module docstring)."""

    def __init__(self) -> None:
        self.env = simpy.Environment()
        self._sends: list[Callable[[None], Any]] = []
        self._priority: list[int] = []
        self._endless: list[bool] = []
        self._current: list[object] = []  # each driver's live resumption (older ones pass)

    @property
    def now(self) -> int:
        """Now, in integer picoseconds."""
        return int(self.env.now)

    def start(self, driver: Driver, priority: int, endless: bool = False) -> int:
        """Run ``driver`` from now (URGENT, as a SimPy process starts)."""
        who = len(self._sends)
        self._sends.append(driver.send)
        self._priority.append(priority)
        self._endless.append(endless)
        self._current.append(None)
        self._queue(who, self.now, URGENT)
        return who

    def wake(self, who: int) -> None:
        """Resume driver ``who`` now (NORMAL, as SimPy's woken event)."""
        self._queue(who, self.now, NORMAL)

    def move(self, who: int, at: int) -> None:
        """Driver ``who`` resumes at ``at`` instead."""
        self._queue(who, at, self._priority[who])

    def _queue(self, who: int, at: int, priority: int) -> None:
        event = scheduled(self.env, at - self.now, priority)
        self._current[who] = event
        event.callbacks.append(partial(self._resume, who))

    def _resume(self, who: int, event: simpy.Event) -> None:
        if self._current[who] is not event:
            return  # moved or woken since: this resumption passes with no one waiting
        self._current[who] = None
        try:
            waits_for = self._sends[who](None)
        except StopIteration:
            if self._endless[who]:
                raise RuntimeError("an endless driver ended") from None
            return
        if waits_for is IDLE:
            return
        if type(waits_for) is not int or waits_for < self.now:
            raise ValueError(f"a driver yielded {waits_for!r} at {self.now}")
        self._queue(who, waits_for, self._priority[who])

    # --- SimPy's own events -----------------------------------------------------------------
    def event(self) -> simpy.Event:
        return self.env.event()

    def timeout(self, delay: int, value: Any = None) -> simpy.Timeout:
        return self.env.timeout(delay, value)

    def run(self) -> int:
        """Process everything; the time of the last event."""
        self.env.run()
        return self.now
