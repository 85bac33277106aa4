"""A SimPy environment that counts its events, stops at an event limit and can pause.

``StepTiming.events`` must be the events actually processed, not an estimate, so that the
event budget (``engine.max_events``) and the speed benchmarks measure the real cost; the
budget is enforced here, exactly: the environment never processes more than ``limit``
events. ``run_until_pause`` is SimPy's event loop (``Environment.step``'s body, inlined: no
Python frame per event) that returns right after the callback that called :meth:`pause`, so
a kernel simulation can stop at a layer boundary at the exact point in the event order
where the boundary happened; the paused event's remaining callbacks run first when the loop
resumes, so pausing changes nothing in the simulation. The counters live on the
environment (one per run), never in a global.

The loop reads SimPy's queue and event internals (``_queue``, ``_now``, ``_eid``,
``Event._ok``, ``_value``, ``_defused``), as ``Environment.step`` does; ``simpy`` is pinned
below 5. ``timeout`` and ``event`` make the same events as SimPy's and queue them under the
same key (time, priority, event id), without SimPy's per-call descriptor, ``__init__`` and
``schedule`` frames: the engine makes several a tile.

Events due now (an event succeeded, a zero timeout) wait in a FIFO beside the heap instead
of in it: each is keyed (now, ``NORMAL``, a fresh id), so they arrive in key order, and the
loop takes whichever of the FIFO's first and the heap's first has the smaller key, which is
exactly the heap order of the two together. About a third of a step's events are due now;
the FIFO spares them a heap push and pop. The order of events, and so every result, is
unchanged. SimPy's own ``step``/``run`` do not know the FIFO: this environment runs only by
``run_until_pause``, which pauses Python's cyclic garbage collector while events run (the
engine's garbage goes by reference counting; the collector's state is restored on leaving).
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable, Generator
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.core import EmptySchedule
from simpy.events import NORMAL, PENDING, URGENT, Event, Timeout

_new = object.__new__


class EventLimitError(Exception):
    """The environment would process more than its ``limit`` of events."""


class QuickEvent(Event):
    """``simpy.Event`` whose ``succeed`` queues it itself, under the key SimPy's would use
    (now, ``NORMAL``, next id): the engine succeeds one or more of these a tile."""

    def succeed(self, value: Any = None) -> Event:
        """Set the event's value and queue it for processing now (as ``Event.succeed``)."""
        if self._value is not PENDING:
            raise RuntimeError(f"{self} has already been triggered")
        self._ok = True
        self._value = value
        env: Any = self.env
        env._due_now.append((env._now, NORMAL, next(env._eid), self))
        return self


class CountingEnvironment(simpy.Environment):
    """``simpy.Environment`` that counts processed events (``processed``), refuses to go
    past ``limit`` of them, and runs until a callback pauses it."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.processed = 0
        self.limit = limit
        # events due now, in key order (module docstring): merged with the heap by the loop
        self._due_now: deque[tuple[Any, int, int, Event]] = deque()
        self._paused = False
        # the event whose callbacks a pause interrupted, and the index of the next one
        self._rest: tuple[simpy.Event, list[Callable[[Any], None]], int] | None = None

    def timeout(self, delay: float = 0, value: Any = None) -> Timeout:
        """``simpy.Environment.timeout``: the same event, queued under the same key."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        event: Timeout = _new(Timeout)
        event.env = self
        event.callbacks = []
        event._value = value
        event._delay = delay
        event._ok = True
        key = (self._now + delay, NORMAL, next(self._eid), event)
        if delay == 0:
            self._due_now.append(key)
        else:
            heappush(self._queue, key)
        return event

    def event(self) -> Event:
        """``simpy.Environment.event``: a pending event (a :class:`QuickEvent`)."""
        event: Event = QuickEvent.__new__(QuickEvent)
        event.env = self
        event.callbacks = []
        return event

    def start(self, generator: Generator[Event, Any, Any]) -> Event:
        """Run ``generator`` as ``simpy.Environment.process`` would (:class:`_Run`): the same
        events under the same keys, its start at URGENT priority now and its end a
        :class:`QuickEvent` succeeded with its return value, for the engine's stage processes
        (resumed ~10 times a tile)."""
        done = self.event()
        begin: Event = _new(Event)
        begin.env = self
        begin.callbacks = [_Run(generator, done).resume]
        begin._value = None
        begin._ok = True
        heappush(self._queue, (self._now, URGENT, next(self._eid), begin))
        return done

    def scheduled_times(self) -> list[float]:
        """When each event in the queue is due."""
        return [float(entry[0]) for entry in (*self._queue, *self._due_now)]

    def peek(self) -> float:
        """When the next event is due (``simpy.Environment.peek``, which reads only the heap,
        would miss the events due now); ``Infinity`` when none is left."""
        heads = [entry[0][0] for entry in (self._queue, self._due_now) if entry]
        return float(min(heads)) if heads else simpy.core.Infinity

    def step(self) -> None:
        """Not available: SimPy's ``step`` (and so ``run``) would not see the events due now."""
        raise NotImplementedError("a CountingEnvironment runs by run_until_pause()")

    def pause(self) -> None:
        """Make :meth:`run_until_pause` return after the callback now running."""
        self._paused = True

    def run_until_pause(self) -> None:
        """Process events until a callback pauses the environment.

        Raises ``EmptySchedule`` when no event is left, and :class:`EventLimitError`
        instead of processing event ``limit + 1``.
        """
        collecting = gc.isenabled()
        if collecting:  # see _run_until_pause
            gc.disable()
        try:
            self._run_until_pause()
        finally:
            if collecting:
                gc.enable()

    def _run_until_pause(self) -> None:
        """``run_until_pause``'s loop, run with Python's cyclic garbage collector paused: the
        loop allocates an event, a key and often a generator frame an event, which would
        trigger a collection every few hundred events, each walking every young object, yet
        almost everything it frees goes by reference counting (a prefill step of 285,000
        events leaves ~7,000 objects in cycles, collected once the collector runs again)."""
        self._paused = False
        if self._rest is not None:
            event, callbacks, start = self._rest
            self._rest = None
            if self._finish(event, callbacks, start):
                return
        queue, due_now = self._queue, self._due_now
        limit, processed = self.limit, self.processed
        try:  # the count is kept in a local while the loop runs (written back on leaving)
            while True:
                if processed >= limit:
                    raise EventLimitError(limit)
                if due_now and (not queue or due_now[0] < queue[0]):
                    self._now, _, _, event = due_now.popleft()
                else:
                    try:
                        self._now, _, _, event = heappop(queue)
                    except IndexError:
                        raise EmptySchedule from None
                processed += 1
                callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
                n = len(callbacks)
                if n == 1:  # most events wake one process or run one callback
                    callbacks[0](event)
                    if self._paused:
                        self._rest = (event, callbacks, 1)
                        return
                elif n:  # (a fifth have none: a tile finished before anyone asked for it)
                    for i, callback in enumerate(callbacks):
                        callback(event)
                        if self._paused:
                            self._rest = (event, callbacks, i + 1)
                            return
                if not event._ok and not hasattr(event, "_defused"):
                    _crash(event)
        finally:
            self.processed = processed

    def _finish(
        self, event: simpy.Event, callbacks: list[Callable[[Any], None]], start: int
    ) -> bool:
        """Run the callbacks of ``event`` a pause interrupted; True if one paused again."""
        for i in range(start, len(callbacks)):
            callbacks[i](event)
            if self._paused:
                self._rest = (event, callbacks, i + 1)
                return True
        if not event._ok and not hasattr(event, "_defused"):
            _crash(event)
        return False


class _Run:
    """A generator driven as SimPy's ``Process._resume`` drives it, without its bookkeeping.

    Where the generator yields a pending event, ``resume`` (bound once) is appended to the
    event's callbacks, as ``Process._resume`` appends itself; an event already processed
    sends its value straight back; the return ends the run by succeeding ``done`` under the
    key SimPy's process event gets (now, ``NORMAL``, next id). So the events, their keys
    and their callbacks' order are SimPy's. What is left out: ``env.active_process``,
    interrupts, and a failed event thrown into the generator (the engine fails none); an
    exception the generator raises leaves the event loop at once, where SimPy would fail
    the process event and raise it when that is processed.
    """

    __slots__ = ("_done", "_send", "resume")

    def __init__(self, generator: Generator[Event, Any, Any], done: Event) -> None:
        self._send = generator.send
        self._done = done
        self.resume: Callable[[Event], None] = self._resume

    def _resume(self, event: Any) -> None:
        # Any: simpy declares ``callbacks`` a list but sets None once the event is processed
        send = self._send
        while True:
            if not event._ok:
                _crash(event)
            try:
                event = send(event._value)
            except StopIteration as stop:
                self._done.succeed(stop.value)
                return
            callbacks = event.callbacks
            if callbacks is not None:
                callbacks.append(self.resume)
                return


def _crash(event: simpy.Event) -> None:
    """As ``Environment.step``: a failed event nobody defused ends the run with its error."""
    exc = type(event._value)(*event._value.args)
    exc.__cause__ = event._value
    raise exc
