"""The engine's event loop: SimPy's environment and events as compiled classes, that count
their events, stop at an event limit and can pause.

``StepTiming.events`` must be the events actually processed, not an estimate, so that the
event budget (``engine.max_events``) and the speed benchmarks measure the real cost; the
budget is enforced here, exactly: the environment never processes more than ``limit``
events. ``run_until_pause`` is SimPy's event loop that returns right after the callback that
called :meth:`pause`, so a kernel simulation can stop at a layer boundary at the exact point
in the event order where the boundary happened; the paused event's remaining callbacks run
first when the loop resumes, so pausing changes nothing in the simulation. The counters live
on the environment (one per run), never in a global.

:class:`CountingEnvironment` and :class:`Event` are not SimPy's classes but behave as
``simpy.Environment`` and ``simpy.Event`` do, with the same attributes (``env``,
``callbacks``, ``_value``, ``_ok``, ``_defused``; ``_now``, ``_queue``, ``_active_proc``,
``schedule``, ``now``, ``active_process``), so SimPy's own events (a ``Process``, a
``Resource`` request, a ``Condition``) run in this environment and wait on its events. They
are plain classes, not subclasses of SimPy's, so that the compiled core (mypyc) keeps their
fields in a struct: the engine makes and processes several events a tile, and SimPy's
events and environment keep theirs in a dictionary. Every event is queued under the key
SimPy's would get (time, priority, event id: ``des.order``'s rule), so the order of events,
and so every result, is SimPy's; the key is kept in the event's own fields and compared by
``Event.__lt__`` (SimPy queues a tuple of the four, made and compared element by element for
every event). A SimPy event is queued in a :class:`_Scheduled` that carries its key.

Events due now (an event succeeded, a zero timeout) wait in a FIFO beside the heap instead
of in it: each is keyed (now, ``NORMAL``, a fresh id), so they arrive in key order, and the
loop takes whichever of the FIFO's first and the heap's first has the smaller key, which is
exactly the heap order of the two together. About a third of a step's events are due now;
the FIFO spares them a heap push and pop. ``run_until_pause`` pauses Python's cyclic garbage
collector while events run (the engine's garbage goes by reference counting; the collector's
state is restored on leaving).
"""

from __future__ import annotations

import gc
import heapq
import sys
from collections import deque
from collections.abc import Callable, Generator, Iterable
from typing import Any, Final

import simpy
from simpy import events
from simpy.core import EmptySchedule, Infinity
from simpy.events import AnyOf, Condition, ConditionValue

# Final: compiled code reads these from a C static, not the module's dictionary (per event)
PENDING: Final[object] = events.PENDING
URGENT: Final[int] = events.URGENT
NORMAL: Final[int] = events.NORMAL
heappush: Final = heapq.heappush
heappop: Final = heapq.heappop


class EventLimitError(Exception):
    """The environment would process more than its ``limit`` of events."""


class Event:
    """An event of a :class:`CountingEnvironment` (``simpy.Event``'s attributes and
    methods): pending until ``succeed`` queues it for processing now; ``callbacks`` is None
    once it has been processed."""

    def __init__(self, env: CountingEnvironment) -> None:
        self.env = env
        self.callbacks: list[Callable[[Any], None]] | None = []
        self._value: Any = PENDING
        self._ok = False
        self._defused = False
        # its key in the queue, set when it is queued (each event is queued at most once)
        self._at = 0.0
        self._priority: int = NORMAL
        self._eid = 0

    def __lt__(self, other: Event) -> bool:
        """Whether this event comes before ``other`` in the queue: by time, priority, id."""
        if self._at != other._at:
            return self._at < other._at
        if self._priority != other._priority:
            return self._priority < other._priority
        return self._eid < other._eid

    def __repr__(self) -> str:
        return f"<{type(self).__name__}() object at {id(self):#x}>"

    @property
    def triggered(self) -> bool:
        """Whether the event has a value (it is queued or processed)."""
        return self._value is not PENDING

    @property
    def processed(self) -> bool:
        """Whether the event's callbacks have run."""
        return self.callbacks is None

    @property
    def ok(self) -> bool:
        """Whether the event succeeded (``AttributeError`` while it is pending, as SimPy's)."""
        if self._value is PENDING:
            raise AttributeError(f"{self} is not yet triggered")
        return self._ok

    @property
    def defused(self) -> bool:
        """Whether a failure of this event has been handled (it does not end the run)."""
        return self._defused

    @defused.setter
    def defused(self, _value: bool) -> None:
        """Mark the failure handled (whatever is assigned, as SimPy's setter)."""
        self._defused = True

    @property
    def value(self) -> Any:
        """The event's value (``AttributeError`` while it is pending, as SimPy's)."""
        if self._value is PENDING:
            raise AttributeError(f"Value of {self} is not yet available")
        return self._value

    def succeed(self, value: Any = None) -> Event:
        """Set the event's value and queue it for processing now (as ``Event.succeed``)."""
        if self._value is not PENDING:
            raise RuntimeError(f"{self} has already been triggered")
        self._ok = True
        self._value = value
        self.env._due(self)
        return self

    def add_callback(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(self)`` when this event is processed (after those added before)."""
        callbacks = self.callbacks
        if callbacks is None:
            raise RuntimeError(f"{self} has already been processed")
        callbacks.append(callback)

    def fail(self, exception: BaseException) -> Event:
        """Set the event's failure and queue it for processing now (as ``Event.fail``)."""
        if self._value is not PENDING:
            raise RuntimeError(f"{self} has already been triggered")
        if not isinstance(exception, BaseException):
            raise TypeError(f"{exception} is not an exception.")
        self._ok = False
        self._value = exception
        self.env.schedule(self)
        return self

    def __and__(self, other: Any) -> Any:
        """Both events (a ``simpy.Condition``)."""
        return Condition(self.env, Condition.all_events, [self, other])  # type: ignore[arg-type,list-item]

    def __or__(self, other: Any) -> Any:
        """Either event (a ``simpy.Condition``)."""
        return Condition(self.env, Condition.any_events, [self, other])  # type: ignore[arg-type,list-item]


class AllOf(Event):
    """Fires when every one of ``events`` has been processed: ``simpy.AllOf``'s events in its
    order (each event's callback counts it, the last one succeeds this event now), and its
    value (a ``ConditionValue`` of the events, a condition among them by its own events)."""

    def __init__(self, env: CountingEnvironment, events: Iterable[Any]) -> None:
        super().__init__(env)
        self._events = tuple(events)
        self._count = 0
        if not self._events:
            self.succeed(ConditionValue())
            return
        for event in self._events:
            if event.env is not env:
                raise ValueError("It is not allowed to mix events from different environments")
        check = self._check
        for event in self._events:
            if event.callbacks is None:
                check(event)
            else:
                event.callbacks.append(check)

    def _check(self, event: Any) -> None:
        if self._value is not PENDING:
            return
        self._count += 1
        if not event._ok:
            event._defused = True
            self.fail(event._value)
        elif self._count == len(self._events):
            self.succeed(self._outcome())

    def _outcome(self) -> Any:
        """What SimPy's ``AllOf`` is worth once all its events are processed: each event,
        in order, a condition (SimPy's, or this kind) in place of its own events."""
        outcome = ConditionValue()
        for event in self._events:
            if isinstance(event, (Condition, AllOf)):
                inner: Any = event.value
                outcome.events.extend(inner.events)
            else:
                outcome.events.append(event)
        return outcome


class CountingEnvironment:
    """``simpy.Environment`` that counts processed events (``processed``), refuses to go
    past ``limit`` of them, and runs until a callback pauses it (``run_until_pause``) or,
    as SimPy's, until a time or an event (``run``)."""

    def __init__(self, *, limit: int = sys.maxsize, initial_time: float = 0.0) -> None:
        # keywords only: ``simpy.Environment(x)`` takes ``x`` as the start time
        self._now = float(initial_time)
        self._queue: list[Event] = []  # a heap, in key order
        # events due now, in key order (module docstring): merged with the heap by the loop
        self._due_now: deque[Event] = deque()
        self._eid = 0  # the next event id
        self._active_proc: Any = None  # set by SimPy's Process while it runs
        self.processed = 0
        self.limit = limit
        self._paused = False
        # the event whose callbacks a pause interrupted, and the index of the next one
        self._rest: tuple[Any, list[Callable[[Any], None]], int] | None = None

    @property
    def now(self) -> float:
        """The current simulation time."""
        return self._now

    @property
    def active_process(self) -> Any:
        """The SimPy ``Process`` running now, if any."""
        return self._active_proc

    def schedule(self, event: Any, priority: int = NORMAL, delay: float = 0) -> None:
        """Queue ``event`` at ``now + delay`` (``simpy.Environment.schedule``; not in the
        past, which SimPy allows but the FIFO of events due now cannot follow)."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        entry = event if isinstance(event, Event) else _Scheduled(self, event)
        entry._at = self._now + delay
        entry._priority = priority
        entry._eid = self._eid
        self._eid += 1
        heappush(self._queue, entry)

    def timeout(self, delay: float = 0, value: Any = None) -> Event:
        """``simpy.Environment.timeout``: an event queued ``delay`` from now, under the key
        SimPy's ``Timeout`` gets."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        event = Event(self)
        event._value = value
        event._ok = True
        if delay == 0:
            self._due(event)
        else:
            self.schedule(event, NORMAL, delay)
        return event

    def _due(self, event: Event) -> None:
        """Queue ``event`` now at ``NORMAL`` priority: in the FIFO of events due now, where
        its key (now, NORMAL, a fresh id) comes after every key already there."""
        event._at = self._now
        event._eid = self._eid
        self._eid += 1
        self._due_now.append(event)

    def event(self) -> Event:
        """``simpy.Environment.event``: a pending event."""
        return Event(self)

    def all_of(self, events: Iterable[Any]) -> AllOf:
        """``simpy.Environment.all_of``: an event that fires when all of ``events`` have."""
        return AllOf(self, events)

    def any_of(self, events: Iterable[Any]) -> Any:
        """``simpy.Environment.any_of``: SimPy's ``AnyOf``, which fires when one of
        ``events`` has."""
        return AnyOf(self, events)  # type: ignore[arg-type]

    def process(self, generator: Generator[Any, Any, Any]) -> Any:
        """``simpy.Environment.process``: SimPy's own ``Process`` (interrupts, the active
        process), for what needs it; the engine's stage processes use :meth:`start`."""
        return simpy.Process(self, generator)  # type: ignore[arg-type]

    def start(self, generator: Generator[Any, Any, Any]) -> Event:
        """Run ``generator`` as ``simpy.Environment.process`` would (:class:`_Run`): the same
        events under the same keys, its start at URGENT priority now and its end an
        :class:`Event` succeeded with its return value, for the engine's stage processes
        (resumed ~10 times a tile)."""
        done = Event(self)
        begin = Event(self)
        begin.callbacks = [_Run(generator, done).resume]
        begin._value = None
        begin._ok = True
        self.schedule(begin, URGENT)
        return done

    def scheduled_times(self) -> list[float]:
        """When each event in the queue is due."""
        return [entry._at for entry in (*self._queue, *self._due_now)]

    def peek(self) -> float:
        """When the next event is due (now, while a pause has left callbacks of the last one
        to run); ``Infinity`` when none is left."""
        if self._rest is not None:
            return self._now
        heads = [entries[0]._at for entries in (self._queue, self._due_now) if entries]
        return min(heads) if heads else Infinity

    def step(self) -> None:
        """Process the next event (``simpy.Environment.step``; ``EmptySchedule`` when none is
        left), after the callbacks a pause left to run."""
        self._paused = False
        if self._rest is not None:
            paused, rest, start = self._rest
            self._rest = None
            self._finish(paused, rest, start)
            return
        if self.processed >= self.limit:
            raise EventLimitError(self.limit)
        event = self._next()
        self.processed += 1
        self._finish(event, _take_callbacks(event), 0)

    def _next(self) -> Any:
        """Take the next event (the FIFO's first or the heap's first, whichever comes first),
        move the clock to it, and return it (the SimPy event a :class:`_Scheduled` carries)."""
        queue, due_now = self._queue, self._due_now
        if due_now and (not queue or due_now[0] < queue[0]):
            entry = due_now.popleft()
        else:
            try:
                entry = heappop(queue)
            except IndexError:
                raise EmptySchedule from None
        self._now = entry._at
        return entry.target if isinstance(entry, _Scheduled) else entry

    def pause(self) -> None:
        """Make :meth:`run_until_pause` return after the callback now running."""
        self._paused = True

    def run(self, until: Any = None) -> Any:
        """Process events until ``until`` (a time, or an event: then its value is returned)
        or until no event is left, as ``simpy.Environment.run``."""
        if until is not None:
            if not hasattr(until, "callbacks"):
                at = float(until)
                if at <= self._now:
                    raise ValueError(f"until (={at}) must be > the current simulation time")
                stop = Event(self)
                stop._ok, stop._value = True, None
                self.schedule(stop, URGENT, at - self._now)
                until = stop
            elif until.callbacks is None:
                return until.value
        reached: list[bool] = []
        if until is not None:

            def arrived(_event: Any) -> None:
                reached.append(True)
                self.pause()

            until.callbacks.append(arrived)
        try:
            while not reached:
                self.run_until_pause()
        except EmptySchedule:
            if until is not None:
                raise RuntimeError(
                    f'No scheduled events left but "until" event was not triggered: {until}'
                ) from None
            return None
        if not until._ok:  # a failed ``until`` raises its error, as SimPy's StopSimulation
            raise until._value
        return until.value

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
        loop allocates an event and often a generator frame an event, which would
        trigger a collection every few hundred events, each walking every young object, yet
        almost everything it frees goes by reference counting (a prefill step of 285,000
        events leaves ~7,000 objects in cycles, collected once the collector runs again)."""
        self._paused = False
        if self._rest is not None:
            paused, rest, start = self._rest
            self._rest = None
            if self._finish(paused, rest, start):
                return
        limit, processed = self.limit, self.processed
        try:  # the count is kept in a local while the loop runs (written back on leaving)
            while True:
                if processed >= limit:
                    raise EventLimitError(limit)
                event = self._next()
                processed += 1
                callbacks = _take_callbacks(event)
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
                _check_failed(event)
        finally:
            self.processed = processed

    def _finish(self, event: Any, callbacks: list[Callable[[Any], None]], start: int) -> bool:
        """Run ``event``'s callbacks from ``start`` on (past those a pause let run), then end
        the run if it failed undefused; True if a callback paused (the rest kept for later)."""
        for i in range(start, len(callbacks)):
            callbacks[i](event)
            if self._paused:
                self._rest = (event, callbacks, i + 1)
                return True
        _check_failed(event)
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

    def __init__(self, generator: Generator[Any, Any, Any], done: Event) -> None:
        self._send = generator.send
        self._done = done
        self.resume: Callable[[Any], None] = self._resume

    def _resume(self, event: Any) -> None:
        send = self._send
        while True:
            if isinstance(event, Event):  # the engine's own (fields read from its struct)
                own: Event = event
                if not own._ok:
                    _crash(own)
                value = own._value
            else:
                if not event._ok:
                    _crash(event)
                value = event._value
            try:
                event = send(value)
            except StopIteration as stop:
                self._done.succeed(stop.value)
                return
            if isinstance(event, Event):
                own = event
                callbacks = own.callbacks
            else:
                callbacks = event.callbacks
            if callbacks is not None:
                callbacks.append(self.resume)
                return


class _Scheduled(Event):
    """A SimPy event in the queue: the key of ``target``, a ``simpy.Event``."""

    def __init__(self, env: CountingEnvironment, target: Any) -> None:
        super().__init__(env)
        self.target = target


def _take_callbacks(event: Any) -> list[Callable[[Any], None]]:
    """Mark ``event`` processed (``callbacks`` None) and return the callbacks it had."""
    if isinstance(event, Event):  # the engine's own: its fields, not a dictionary
        own: Event = event
        callbacks = own.callbacks
        own.callbacks = None
    else:  # SimPy's (a Process, a Resource request, a Condition)
        callbacks = event.callbacks
        event.callbacks = None
    if callbacks is None:
        raise RuntimeError(f"{event} was processed twice")
    return callbacks


def _check_failed(event: Any) -> None:
    """As ``Environment.step``: a failed event nobody defused ends the run with its error."""
    if isinstance(event, Event):
        own: Event = event
        if not own._ok and not own._defused:
            _crash(own)
    elif not event._ok and not hasattr(event, "_defused"):
        _crash(event)


def _crash(event: Any) -> None:
    """Raise a copy of a failed event's error, caused by the original (as SimPy does)."""
    exc = type(event._value)(*event._value.args)
    exc.__cause__ = event._value
    raise exc
