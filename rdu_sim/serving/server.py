"""The drivers of the serving scheduler (``serving.scheduler``): a server alone and a cluster
replica, each a :class:`Server`, which brings the clock, the arrivals and the waiting; the
scheduler decides.

Every server runs on des's serving loop (``rdu_sim.des.timeline.Timeline``, integer
picoseconds, ``des.order``'s same-instant order). A server alone (what ``serving.simulate``
runs) knows its arrivals in advance (``serving.arrivals``: the open loop's times, the closed
loop's completions): it is a driver of the loop that yields its step ends, lands the arrivals
due by the end of each step, and cuts a decode run where the next arrival falls; no event
object at all. A cluster replica's requests come from a router at run time. A mixed replica
is a driver too, yielding its step ends and idling until an arrival wakes it; an arrival that
cuts its decode run moves its resumption earlier (:meth:`_cut_now`). A prefill or decode
replica is a SimPy process on the same loop: it settles same-instant events (KV hand-offs its
own steps cause) before deciding, and waits on the events of its hand-offs. The same
generator (:meth:`_run`) runs as a driver or as a SimPy process; ``simpy.Environment`` runs
it too, as the tests' oracle.

In a cluster (``rdu_sim.cluster``) a server is one replica: ``hooks`` (``serving.hooks``)
let a prefix cache shorten prefills, and ``role`` splits serving in two. A ``prefill``
replica holds a prefilled slot until its KV cache has been sent; a ``decode`` replica admits
a request by reserving a slot, decodes once the cache has arrived, and never prefills.
Hand-offs that complete mid-step take effect at the next step boundary, like arrivals.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from functools import partial
from operator import attrgetter
from typing import Any

import simpy
from simpy.events import Event

from rdu_sim.des.order import LATE
from rdu_sim.des.simpy_events import redirect, scheduled
from rdu_sim.des.timeline import IDLE, Timeline
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.serving.arrivals import NEVER, Arrivals
from rdu_sim.serving.clock import MAX_PS, advance
from rdu_sim.serving.hooks import ServerHooks
from rdu_sim.serving.load import Counters
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.scheduler import (
    Priority,
    Progress,
    PromptFacts,
    Role,
    Scheduler,
    ServerConfig,
)
from rdu_sim.serving.slots import Slots
from rdu_sim.serving.speculative import Speculation
from rdu_sim.serving.step_cache import StepCache

__all__ = ["Priority", "Progress", "PromptFacts", "Role", "Server", "ServerConfig"]

_NOW = attrgetter("now")


def _trigger(wake: Event, _event: Event) -> None:
    """Fire ``wake`` unless something else already did (a step boundary reached)."""
    if not wake.triggered:
        wake.succeed()


class Server:
    """A :class:`~rdu_sim.serving.scheduler.Scheduler` and what drives it on an event loop:
    the clock, the arrivals, the waits for step ends, the wakes and the cut decode runs."""

    def __init__(
        self,
        env: Timeline | simpy.Environment,
        config: ServerConfig,
        policy: KVPolicy,
        cache: StepCache,
        records: ServingRecords,
        progress: Progress | None = None,
        *,
        hooks: ServerHooks | None = None,
        forever: bool = False,
        load: Counters | None = None,
        speculation: Speculation | None = None,
        arrivals: Arrivals | None = None,
        facts: PromptFacts | None = None,
    ) -> None:
        """The scheduler's arguments (``Scheduler``), and ``arrivals``: the requests of a
        server alone, which it lands itself as its clock passes them (a driver of ``env``, a
        ``Timeline``). Without them the server is fed by :meth:`submit`: a driver of a
        ``Timeline`` when mixed, else a SimPy process in ``env`` (a ``simpy.Environment``
        runs any server but one alone, as an oracle)."""
        # Now, in integer picoseconds (~13 reads a request): the timeline's or SimPy's; C
        # calls (attrgetter) where a method would cost twice as much
        self._clock: Callable[[], int]
        if isinstance(env, Timeline):
            self._clock = partial(_NOW, env)
        else:
            self._clock = self._simpy_now
        self.scheduler = Scheduler(
            config,
            policy,
            cache,
            records,
            self._clock,
            progress,
            hooks=hooks,
            forever=forever,
            load=load,
            speculation=speculation,
            facts=facts,
            timeline=env if isinstance(env, Timeline) else None,
        )
        if arrivals is not None and (hooks is not None or forever):
            raise ValueError("a server given its arrivals runs alone, without cluster hooks")
        if arrivals is not None and not isinstance(env, Timeline):
            raise ValueError("a server given its arrivals is a driver: it needs a Timeline")
        self.scheduler.poke = self._poke
        self._arrival_ps = records.arrival_ps.data  # (as the scheduler's arrays)
        # a driver of the timeline (no event objects), or a SimPy process (settles, hand-offs)
        driven = isinstance(env, Timeline) and config.role == "mixed"
        self._timeline = env if driven and isinstance(env, Timeline) else None
        self.env = env
        self.arrivals = arrivals
        self._due = NEVER  # a server alone's next arrival
        if arrivals is not None:
            self._due = arrivals.next_time()
            self.scheduler.on_complete = self._completed
        self._longest_step_s = lambda: cache.longest_step_s  # for the clock's range error
        # Only prefill and decode replicas see same-instant events their own steps cause
        # elsewhere (KV hand-offs): a mixed one needs no settle after a step (module docstring).
        self._settles = config.role != "mixed"
        self._wake: Event | None = None  # what a SimPy process waits on, idle
        self._idle = False  # a driver waits for a wake
        self._run_end: Event | int | None = None  # a mixed replica's cuttable decode run's end
        self._run_plan = (0, 0, 1)  # and its (start, steps, step)
        self.process: simpy.Process | None = None
        self._who = 0  # its number as a driver of the timeline
        if self._timeline is not None:
            work = self._run() if arrivals is None else self._alone()
            self._who = self._timeline.start(work, LATE, endless=forever)
        else:
            self.process = env.process(self._run())  # type: ignore[arg-type]

    # --- the scheduler's state, as the cluster and the tests read it --------------------------
    @property
    def config(self) -> ServerConfig:
        return self.scheduler.config

    @property
    def records(self) -> ServingRecords:
        return self.scheduler.records

    @property
    def cache(self) -> StepCache:
        return self.scheduler.cache

    @property
    def completed(self) -> int:
        """Requests completed here."""
        return self.scheduler.completed

    @property
    def slots(self) -> Slots:
        return self.scheduler.slots

    @property
    def queue(self) -> deque[int]:
        """The requests waiting for a slot, oldest first."""
        return self.scheduler.queue

    @property
    def load(self) -> Counters:
        return self.scheduler.load

    def outstanding_tokens(self) -> int:
        """The scheduler's outstanding tokens now (what a router balances)."""
        return self.scheduler.outstanding_tokens()

    def _simpy_now(self) -> int:
        """Now on the SimPy clock, in integer picoseconds."""
        return int(self.env.now)

    # --- arrivals ---------------------------------------------------------------------------
    def submit(self, request: int) -> None:
        """A request arrives now (a replica: a router or a test hands it over)."""
        now = self._clock()
        self._arrival_ps[request] = now
        self.scheduler.enqueue(request, now)
        self._poke()

    def enqueue(self, request: int) -> None:
        """Queue a request now, keeping the arrival time it already has (a decode replica
        receiving a request prefilled elsewhere; :meth:`submit` for a new one)."""
        self.scheduler.enqueue(request, self._clock())
        self._poke()

    def _land(self, until: int, record: bool = True) -> None:
        """A server alone: every request due by ``until`` arrives, at its own time (during a
        step, the slots' state is the step's, as a step-by-step server would record it).
        ``record=False``: they land at a decision, whose row at this instant replaces theirs."""
        arrivals = self.arrivals
        assert arrivals is not None
        scheduler = self.scheduler
        arrival_ps = self._arrival_ps
        at = self._due
        while at <= until:
            request = arrivals.take()
            arrival_ps[request] = at
            scheduler.enqueue(request, at, record)
            at = arrivals.next_time()
        self._due = at

    def _completed(self, now: int) -> None:
        """A server alone: a request completed at ``now`` (a closed-loop user resubmits)."""
        arrivals = self.arrivals
        assert arrivals is not None
        arrivals.completed(now)
        if self._due == NEVER:  # else the next arrival stays the one already known
            self._due = arrivals.next_time()

    def _poke(self) -> None:
        """Something arrived now: wake the server if idle, or cut its decode run."""
        if self._idle:
            self._idle = False
            assert self._timeline is not None
            self._timeline.wake(self._who)
        elif self._wake is not None and not self._wake.triggered:
            self._wake.succeed()
        elif self._run_end is not None:
            self._cut_now()

    def _cut_now(self) -> None:
        """A mixed replica's decode run, cut by an arrival now: it waits for the end of the
        step in flight instead of the run's (its resumption moves, as SimPy's own interrupts
        move it; the old end passes with no one waiting)."""
        old = self._run_end
        start, steps, step = self._run_plan
        now = self._clock()
        cut = self.scheduler.cut(start, steps, step, now)
        if cut == steps:
            return
        new = self._run_end = self._at(start + cut * step - now)
        self._run_plan = (start, cut, step)
        timeline = self._timeline
        if timeline is not None:
            assert isinstance(new, int)
            timeline.move(self._who, new)
            return
        assert isinstance(old, Event) and isinstance(new, Event) and self.process is not None
        redirect(self.process, old, new)

    # --- a server alone ----------------------------------------------------------------------
    def _alone(self) -> Generator[int, Any, None]:
        """A server alone as a driver of its timeline: serve every request of ``arrivals``,
        yielding each step's end.

        Arrivals due at a decision land first (a process settles same-instant events before
        deciding); those due during a step land as the step is taken; a
        decode run is cut where the next arrival falls (``Scheduler.cut``). Stops early
        only if nothing is left to arrive (``serving.simulate`` then reports the requests
        that never completed)."""
        scheduler, timeline = self.scheduler, self._timeline
        until = scheduler.until
        assert self.arrivals is not None and until is not None and timeline is not None
        while scheduler.completed < until:
            now = timeline.now
            if self._due <= now:
                self._land(now, record=False)  # the decision records this instant
            action = scheduler.decide(now)
            # each step's end, the arrivals due by then landed first (during a step, the
            # slots' state is the step's, as a step-by-step server records it)
            if action == "admit" or action == "prefill":
                for delay in scheduler.begin_prefill():
                    end = timeline.now + delay
                    if end > MAX_PS:
                        advance(timeline.now, delay, self._longest_step_s)  # (raises)
                    if self._due <= end:
                        self._land(end)
                    yield end
                scheduler.end_prefill()
            elif action == "decode":
                shape, bucket, steps, step = scheduler.decode_plan()
                if now + steps * step > MAX_PS:  # the uncut run's range
                    advance(now, steps * step, self._longest_step_s)  # (raises)
                due = self._due
                if steps > 1 and due < now + steps * step:
                    steps = scheduler.cut(now, steps, step, due)
                end = now + steps * step
                if due <= end:
                    self._land(end)
                yield end
                scheduler.decode_done(shape, bucket, steps)
            elif self._due == NEVER:
                return
            else:
                yield self._due
        scheduler.record(timeline.now)

    # --- a cluster replica -------------------------------------------------------------------
    def _run(self) -> Generator[Event | int | object, Any, None]:
        """A replica (or any server fed by :meth:`submit`): a driver of its timeline or a
        SimPy process, yielding what it waits for."""
        scheduler = self.scheduler
        settle = True  # the first decision waits for every arrival at time 0
        while scheduler.until is None or scheduler.completed < scheduler.until:
            if settle:
                yield self._at(0)  # settle: let same-instant events land first
            settle = self._settles
            scheduler.at_boundary()
            action = scheduler.decide(self._clock())
            if action == "admit" or action == "prefill":
                for delay in scheduler.prefill():
                    yield self._at(delay)
            elif action == "decode":
                yield from self._decode()
            elif self._timeline is not None:
                self._idle = True
                yield IDLE
            else:
                self._wake = self.env.event()
                yield self._wake
                self._wake = None
        scheduler.record(self._clock())

    def _decode(self) -> Generator[Event | int, Any, None]:
        """A replica's decode run: when a slot could take an arrival (or a KV hand-off can
        end), wait for the run's end or that, whichever comes first, then finish the step
        in flight."""
        scheduler = self.scheduler
        shape, bucket, steps, step = scheduler.decode_plan()
        start = self._clock()
        end = start + steps * step
        if scheduler.cuttable(steps):
            if not self._settles:  # mixed: one end, moved earlier if an arrival cuts the run
                self._run_plan = (start, steps, step)
                self._run_end = self._at(end - start)
                yield self._run_end
                self._run_end = None
                steps = self._run_plan[1]
            else:
                wake = self._wake = self.env.event()
                boundary = self._at(end - start)
                assert isinstance(boundary, Event)
                boundary.callbacks.append(partial(_trigger, wake))  # (one event, not an AnyOf)
                yield wake
                self._wake = None
                if not boundary.processed:
                    now = self._clock()
                    steps = scheduler.cut(start, steps, step, now)
                    yield self._at(start + steps * step - now)
        else:
            yield self._at(end - start)
        scheduler.decode_done(shape, bucket, steps)

    def _at(self, delay: int) -> Event | int:
        """A LATE event ``delay`` ps from now (a step boundary or a settle point;
        SimulatedTimeError rather than a time past the clock's range, ``serving.clock``); on
        a timeline, the time it falls at."""
        end = advance(self._clock(), delay, self._longest_step_s)
        if self._timeline is not None:
            return end
        at: Event = scheduled(self.env, delay, LATE)
        return at
