"""The one driver of a serving scheduler: dispatch, arrival landing, the clock's range and
every wait, for every kind of server.

The scheduler (``serving.scheduler``) decides and never waits; a :class:`Driver` runs it on
the serving loop (``des.timeline``: integer picoseconds, ``des.order``'s same-instant order)
as a driver of the loop, a generator resumed at each time it yields, without event objects:

- at a step boundary it lets its :class:`ArrivalSource` land what has arrived, applies the
  KV hand-offs that ended, lets the source run prefill work of its own (a CoE router's), then
  asks the scheduler for an :class:`~rdu_sim.serving.scheduler.Action` and carries it out:
  a prefill step, a decode run (cut short when something arrives that a slot could take), or
  a wait for the next arrival;
- every step's end is one wait: the clock's range checked (``serving.clock``), the arrivals
  due by then landed as the step is taken, and the step's reads waited for too while a
  Composition of Experts' copy shares the channels (:meth:`Driver.step` for work the source
  brings).

Where requests come from is the source's business, one interface for three kinds:
:class:`ArrivalSource` itself is pushed at run time (a cluster's router, a KV hand-off: the
server's ``submit``/``enqueue``, then :meth:`Driver.poke`), :class:`KnownArrivals` knows them
in advance (a server alone: ``serving.arrivals``), and a Composition of Experts' turn
(``serving.coe_server``) lets the holding expert's requests in. A driver pushed at run time
first lets every same-instant arrival land (a *settle*: it re-queues itself at ``LATE``), and
one whose KV hand-offs end at events its own steps cause (prefill and decode replicas)
settles after every step too.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Final

from rdu_sim.des.order import LATE
from rdu_sim.des.timeline import IDLE, Loop
from rdu_sim.native import mypyc_attr
from rdu_sim.serving.arrivals import NEVER, Arrivals
from rdu_sim.serving.clock import MAX_PS, advance
from rdu_sim.serving.driven import Action, Driven
from rdu_sim.serving.scheduler import Scheduler
from rdu_sim.serving.step_cache import StepCache
from rdu_sim.shapes import StepShape

STOP: Final = -1
"""``ArrivalSource.idle``: the drive ends (nothing will arrive, or a CoE turn is over)."""
WAKE: Final = -2
"""``ArrivalSource.idle``: wait to be poked (something pushed, a hand-off ended)."""

_DECODE: Final = Action.DECODE
_IDLE: Final = Action.IDLE

Waits = Generator[Any, None, None]
"""What a driver yields: its next resumption's time (ps) or ``des.timeline.IDLE``."""

StepTraffic = Callable[[StepCache, StepShape], bool]
"""A step of ``shape`` (timed by that cache) starts: True when its reads share channels with
other work (a CoE copy) and the driver must wait for them too (:meth:`Driver.reads_done`)."""


@mypyc_attr(allow_interpreted_subclasses=True)
class ArrivalSource:
    """Where a driven scheduler's requests come from (module docstring). As it is: pushed at
    run time, so the driver settles before its first decision, lands nothing itself, and
    waits to be poked when idle."""

    def __init__(self) -> None:
        self.driver: Driver | None = None

    def bind(self, driver: Driver) -> None:
        """Feed ``driver``'s scheduler (called once, by the driver)."""
        self.driver = driver

    def settles_first(self) -> bool:
        """Whether the first decision waits for every event of its instant (requests pushed
        by other drivers of the loop at time 0)."""
        return True

    def land(self, now: int) -> None:
        """A decision at ``now``: what has arrived by then reaches the scheduler (without a
        series row of its own: the decision records the instant)."""

    def during(self, end: int) -> None:
        """A step ending at ``end`` was taken: what arrives by then reaches the scheduler at
        its own time (recorded with the step's state, as a step-by-step server would)."""

    def run_steps(self, start: int, steps: int, step: int) -> int:
        """Steps of a decode run from ``start`` the source lets run before what it knows
        will arrive (the run ends with the step in flight then)."""
        return steps

    def idle(self, now: int) -> int:
        """The scheduler has nothing to do at ``now``: wait until this time, :data:`WAKE`
        or :data:`STOP`."""
        return WAKE

    def has_work(self) -> bool:
        """Whether prefill work of the source's own waits (a CoE router's, on the same
        sockets): it takes a step when the batching policy lets prefill work run."""
        return False

    def work(self) -> Waits:
        """Run that work's steps through :meth:`Driver.step`."""
        raise NotImplementedError
        yield  # (a generator)


class KnownArrivals(ArrivalSource):
    """A server alone's requests, known in advance (``serving.arrivals``: the open loop's
    times, the closed loop's users, who resubmit at completions this server makes): they
    land as the clock passes them, with no event, and a decode run is cut where the next
    one falls, computed when the run starts."""

    def __init__(self, arrivals: Arrivals) -> None:
        super().__init__()
        self.arrivals = arrivals
        self.due = arrivals.next_time()  # the next arrival
        self._scheduler: Scheduler | None = None

    def bind(self, driver: Driver) -> None:
        """Feed ``driver``'s scheduler, and hear its completions (closed-loop users)."""
        super().bind(driver)
        scheduler = driver.scheduler
        assert isinstance(scheduler, Scheduler), "known arrivals feed one server's scheduler"
        self._scheduler = scheduler
        scheduler.on_complete = self._completed
        self._arrival_ps = scheduler.records.arrival_ps.data  # (as the scheduler's arrays)
        self._at_step: Callable[[int, int], None] = self._arrived  # (bound once)
        self._at_decision: Callable[[int, int], None] = self._arrived_by_decision

    def settles_first(self) -> bool:
        """No: no other driver pushes anything."""
        return False

    def land(self, now: int) -> None:
        """Every request due by ``now`` arrives (its row is the decision's)."""
        if self.due <= now:
            self.due = self.arrivals.land(now, self._at_decision)

    def during(self, end: int) -> None:
        """Every request due by ``end`` arrives, recorded at its own time."""
        if self.due <= end:
            self.due = self.arrivals.land(end, self._at_step)

    def run_steps(self, start: int, steps: int, step: int) -> int:
        """The run ends with the step in flight when the next request arrives, if a slot
        could take it (``Scheduler.cut``)."""
        due = self.due
        if steps > 1 and due < start + steps * step:
            assert self._scheduler is not None
            return self._scheduler.cut(start, steps, step, due)
        return steps

    def idle(self, now: int) -> int:
        """The next arrival's time; :data:`STOP` when none is left."""
        return STOP if self.due == NEVER else self.due

    def _arrived(self, request: int, at: int) -> None:
        """``request`` arrived at ``at`` (during a step: the row is the step's state)."""
        assert self._scheduler is not None
        self._arrival_ps[request] = at
        self._scheduler.enqueue(request, at)

    def _arrived_by_decision(self, request: int, at: int) -> None:
        """``request`` arrived at ``at``, landing at a decision (whose row replaces its)."""
        assert self._scheduler is not None
        self._arrival_ps[request] = at
        self._scheduler.enqueue(request, at, False)

    def _completed(self, now: int) -> None:
        """A request completed at ``now`` (a closed-loop user resubmits)."""
        self.arrivals.completed(now)
        if self.due == NEVER:  # else the next arrival stays the one already known
            self.due = self.arrivals.next_time()


class Driver:
    """Runs ``scheduler`` (a server's, or a replica's attention ranks together:
    ``serving.driven``) on ``loop``, fed by ``source`` (module docstring). ``settles``:
    let same-instant events land after every step (hand-offs its own steps cause).
    ``traffic``: told of every step, may ask for its reads to be waited for too (a CoE
    copy in flight). ``longest_step_s``: for the clock's range error (default: the
    scheduler's step cache's)."""

    def __init__(
        self,
        loop: Loop,
        scheduler: Driven,
        source: ArrivalSource,
        *,
        settles: bool = False,
        traffic: StepTraffic | None = None,
        longest_step_s: Callable[[], float] | None = None,
    ) -> None:
        self.loop = loop
        self.scheduler = scheduler
        self.source = source
        self.settles = settles
        self.traffic = traffic
        self.longest_step_s: Callable[[], float] = (
            longest_step_s if longest_step_s is not None else self._cache_longest_s
        )
        self.who = 0  # its number as a driver of the loop (set by whoever starts it)
        self._idle = False  # waits to be poked
        self._running = False  # in a decode run a poke may cut
        self._woken = False  # poked mid-run (a driver that settles cuts when it resumes)
        self._run_start = 0
        self._run_steps = 0
        self._run_step = 1
        self._reads = False  # a step's reads not yet done (``traffic``)
        self._waits_reads = False  # idle until they are
        scheduler.poke = self.poke
        source.bind(self)

    def start(self, endless: bool = False) -> None:
        """Start :meth:`drive` on the loop (``endless``: a replica, which serves until the
        run ends)."""
        self.who = self.loop.start(self.drive(), LATE, endless)

    def _cache_longest_s(self) -> float:
        return self.scheduler.cache.longest_step_s

    # --- the loop ---------------------------------------------------------------------------
    def drive(self) -> Waits:
        """Decide and act at every step boundary until the scheduler has completed what it
        serves (or the source stops it), then record the last instant. (One generator,
        each wait a ``yield`` in it: a nested generator a step cost a lone server ~5% of
        its time.)"""
        scheduler, source, loop = self.scheduler, self.source, self.loop
        settle = source.settles_first()
        while scheduler.completed < scheduler.until:
            if settle:
                yield loop.now  # (LATE: the instant's other events land first)
            settle = self.settles
            now = loop.now
            source.land(now)
            scheduler.at_boundary()
            if source.has_work() and scheduler.prefill_may_run():
                scheduler.record(now)
                yield from source.work()
                scheduler.prefill_ran_elsewhere()
                continue
            action = scheduler.decide(now)
            if action is _DECODE:
                shape, bucket, steps, step = scheduler.decode_plan()
                self._end(now, steps * step)  # the whole run within the clock's range
                steps = source.run_steps(now, steps, step)
                running = scheduler.cuttable(steps)
                if running:  # a poke may cut it
                    self._run_start, self._run_steps, self._run_step = now, steps, step
                    self._running = True
                end = self._end(now, steps * step)
                source.during(end)
                if self.traffic is None or not self._traffic(scheduler.cache, shape):
                    yield end
                else:
                    yield from self._with_reads(end)
                if running:
                    self._running = False
                    steps = self._run_steps  # (cut by a poke)
                    if self._woken:  # poked mid-run: it ends with the step in flight
                        self._woken = False
                        steps = scheduler.cut(now, steps, step, loop.now)
                        yield self._end(loop.now, now + steps * step - loop.now)
                scheduler.decode_done(shape, bucket, steps)
            elif action is _IDLE:
                until = source.idle(now)
                if until == STOP:
                    return
                if until == WAKE:
                    self._idle = True
                    yield IDLE
                else:
                    yield until
            else:  # a prefill step (after the draft's scoring, under speculative prefill)
                for delay in scheduler.begin_prefill():
                    end = self._end(loop.now, delay)
                    source.during(end)
                    prefilling = scheduler.prefill_shape
                    assert prefilling is not None
                    if self.traffic is None or not self._traffic(scheduler.cache, prefilling):
                        yield end
                    else:
                        yield from self._with_reads(end)
                scheduler.end_prefill()
        scheduler.record(loop.now)

    def step(self, cache: StepCache, shape: StepShape, delay: int) -> Waits:
        """Wait ``delay`` ps of steps of ``shape`` (timed by ``cache``) for work the source
        brings (a CoE router's), as the loop waits for the scheduler's: the clock's range
        checked, the arrivals due by its end landed as it is taken, its reads waited for
        while a copy shares the channels."""
        end = self._end(self.loop.now, delay)
        self.source.during(end)
        if self.traffic is None or not self._traffic(cache, shape):
            yield end
        else:
            yield from self._with_reads(end)

    def _traffic(self, cache: StepCache, shape: StepShape) -> bool:
        """Tell ``traffic`` a step starts; whether the driver must wait for its reads."""
        traffic = self.traffic
        assert traffic is not None
        self._reads = True  # (until ``reads_done``, which may come at once)
        if not traffic(cache, shape):
            self._reads = False
            return False
        return True

    def _with_reads(self, end: int) -> Waits:
        """Wait for ``end``, then for the step's reads if they are not done yet."""
        yield end
        if self._reads:
            self._waits_reads = True
            yield IDLE

    def _end(self, now: int, delay: int) -> int:
        """``now + delay``; SimulatedTimeError past the clock's range."""
        end = now + delay
        if end > MAX_PS:
            advance(now, delay, self.longest_step_s)  # (raises, naming the longest step)
        return end

    # --- what the loop tells it -------------------------------------------------------------
    def poke(self) -> None:
        """Something arrived now (pushed, or a hand-off ended): wake the driver if idle, or
        cut its decode run if a slot could take it. A driver that settles after every step
        cuts when it resumes (after the instant's other events); one that does not moves its
        resumption at once."""
        if self._idle:
            self._idle = False
            self.loop.wake(self.who)
        elif self._running and not self._woken:
            if self.settles:
                self._woken = True
                self.loop.wake(self.who)
            else:
                self._cut_now()

    def _cut_now(self) -> None:
        """The decode run, cut by an arrival now: it waits for the end of the step in flight
        instead of the run's (the old resumption passes with no one waiting)."""
        start, steps, step = self._run_start, self._run_steps, self._run_step
        cut = self.scheduler.cut(start, steps, step, self.loop.now)
        if cut == steps:
            return
        self._run_steps = cut
        now = self.loop.now
        self.loop.move(self.who, self._end(now, start + cut * step - now))

    def reads_done(self) -> None:
        """The reads of the step in flight are done (``traffic``)."""
        self._reads = False
        if self._waits_reads:
            self._waits_reads = False
            self.loop.wake(self.who)
