"""The Composition of Experts server: a driver of the one serving scheduler, in expert turns.

The node's sockets serve one model at a time (all tensor-parallel). What CoE adds to a
server, and all this module holds: which expert holds the sockets, the router, the switch
policy, and switches as copies. Everything else, how the holding expert's requests are
batched (admission to free slots, prefill against decode, buckets, chunking, decode runs),
is the shared continuous-batching policy, ``serving.scheduler.Scheduler``, as a lone
server and every cluster replica run it.

- The router model runs first on every request that arrives: at the next step boundary it
  prefills the prompt on the same sockets (prefill work: under ``decode_first`` one step of
  it between two decode steps, as the scheduler's own), which names the request's expert;
  an arrival ends a decode run with the step in flight (``Scheduler.end_run_at``).
- Each request's expert, hit or miss, router prefill and share of the copy stalls (the
  node's waits for its expert's copies between its routing and its let-in) go to its
  records (``ServingRecords.expert`` and the rest: ``requests.csv``).
- A *turn* goes to the expert of the oldest waiting request: if it is not in the HBM region
  it is switched in (``ExpertRegion`` picks a victim, each socket's copy engine copies the
  expert's weights from DDR to HBM: ``serving.coe_tiers``) and the server waits for the
  copy, routing the requests that arrive meanwhile.
- During the turn the holding expert's waiting requests are handed to the scheduler's queue,
  oldest first, as many as it has free slots and while the switch policy (``coe.switch``)
  lets them in; the scheduler admits and serves them. The turn ends when the scheduler is
  idle (its slots empty, nothing let in), then the next turn begins.

Switch policies: ``drain`` lets the holding expert's requests in while any waits (the most
batching, but a popular expert under load may hold the sockets while others wait);
``bounded`` lets them in only while the turn is younger than ``coe.turn_s`` or no other
expert's request waits, then lets its running requests finish.

With ``coe.prefetch`` the next turn's expert (the oldest waiting request's, of another
expert) is copied in while the turn runs (never evicting the holding expert or one copied
ahead and not yet used). While a copy is in flight each step also puts its own HBM and DDR
reads on the channels the copy uses, and ends when both its time and its reads are done, so
the copy and the steps slow each other (decode then runs a step at a time).

The node is a driver of the serving loop (``des.timeline.Timeline``, integer picoseconds,
the clock's whole range: ``serving.clock``), resumed at its step ends (``LATE``, as every
server's), when a copy it waits for lands and when a step's reads end (``serving.coe_tiers``:
a driver of the same loop, which calls back); each turn is the scheduler's one driver
(``serving.driver``) fed by :class:`Turn`. Arrivals are known in advance (``serving.arrivals``)
and land at step boundaries without events. A CoE run is bounded, as any serving run, by
``serving.max_work``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import partial

import numpy as np
import simpy
from numpy.typing import NDArray

from rdu_sim.des.order import LATE
from rdu_sim.des.timeline import IDLE, Timeline
from rdu_sim.engine.timing import StepTiming
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.serving.arrivals import NEVER, Arrivals
from rdu_sim.serving.batching import make_batching
from rdu_sim.serving.buckets import prefill_steps
from rdu_sim.serving.clock import advance
from rdu_sim.serving.coe_tiers import SocketTiers, Tiers
from rdu_sim.serving.decode_rounds import DecodeRounds
from rdu_sim.serving.drafting import Drafting
from rdu_sim.serving.driver import STOP, ArrivalSource, Driver, Waits
from rdu_sim.serving.expert_region import ExpertRegion
from rdu_sim.serving.handoff import KeepHere
from rdu_sim.serving.preemption import make_preemption
from rdu_sim.serving.records import SeriesLog, ServingRecords
from rdu_sim.serving.scheduler import Policies, Progress, Scheduler, ServerConfig
from rdu_sim.serving.step_cache import StepCache, StepFn
from rdu_sim.shapes import StepShape

__all__ = ["CoEServer", "SwitchPolicy", "Tiers", "TurnCounts"]


@dataclass(frozen=True)
class SwitchPolicy:
    """When the sockets go to another expert (``coe.switch``, ``coe.turn_s`` in ps) and
    whether the next turn's expert is copied ahead (``coe.prefetch``)."""

    switch: str  # "drain" or "bounded"
    turn_ps: int
    prefetch: bool


@dataclass
class TurnCounts:
    """What the server counted: switches, turns, hits, stalls, router time."""

    switches: int = 0
    turns: int = 0
    hits: int = 0
    admitted_mid_turn: int = 0
    stall_ps: int = 0
    router_ps: int = 0
    longest_turn_ps: int = 0


class Turn(ArrivalSource):
    """What feeds the scheduler during an expert's turn (``serving.driver``'s source): at
    each boundary the holding expert's waiting requests are let in, the router's prefill
    steps run among the scheduler's prefill work, a decode run ends where the next request
    arrives (the router takes it at the boundary), and the turn ends when the scheduler is
    idle."""

    def __init__(self, server: CoEServer) -> None:
        super().__init__()
        self.server = server

    def settles_first(self) -> bool:
        """No: the arrivals are known in advance, and the node is the loop's one server."""
        return False

    def land(self, now: int) -> None:
        """After a step: copy the next turn's expert ahead if the policy may; then the
        arrivals land (for the router) and the holding expert's requests are let in."""
        server = self.server
        if server.switching.prefetch and not server.in_flight:
            server._prefetch(server._expert)
        server._land()
        server._let_in()

    def run_steps(self, start: int, steps: int, step: int) -> int:
        """A run ends with the step in flight when the next request arrives, or after one
        step while a copy shares the channels or an arrival waits for the router."""
        server = self.server
        copying = server.tiers.copying or bool(server.unrouted)
        ends = start if copying else server.arrivals.next_time()
        return server.scheduler.end_run_at(start, steps, step, ends)

    def idle(self, now: int) -> int:
        """The turn ends."""
        return STOP

    def has_work(self) -> bool:
        """An arrival waits for the router."""
        return bool(self.server.unrouted)

    def work(self) -> Waits:
        """The router prefills the oldest arrival's prompt."""
        return self.server._route()


class CoEServer:
    """Serves tagged requests in expert turns (module docstring); ``simulate`` runs it."""

    def __init__(
        self,
        policy: KVPolicy,
        config: ServerConfig,
        switching: SwitchPolicy,
        tiers: Tiers,
        region: ExpertRegion,
        experts: NDArray[np.int64],
        prompt_tokens: NDArray[np.int64],
        output_tokens: NDArray[np.int64],
        arrivals: Arrivals,
        switch_bytes: float,
        expert_step: StepFn,
        router_step: StepFn,
        *,
        progress: Progress | None = None,
    ) -> None:
        self.timeline = timeline = Timeline()
        self.tiers = SocketTiers(timeline, tiers)
        self.cache = StepCache(expert_step)
        self.router_cache = StepCache(router_step)
        self.series = SeriesLog()  # its queue counted with the routed requests (``elsewhere``)
        self.records = ServingRecords(prompt_tokens, output_tokens, series=self.series, coe=True)
        policies = Policies(
            make_batching(config.prefill_priority),
            KeepHere(None),
            DecodeRounds(config.decode_rows),
            Drafting(),
            make_preemption(config.preemption),
        )
        self.scheduler = Scheduler(
            config, policy, self.cache, self.records, timeline, policies, progress
        )
        self.scheduler.on_complete = self._completed
        self.driver = Driver(
            timeline,
            self.scheduler,
            Turn(self),
            traffic=self._traffic,
            longest_step_s=self._longest_s,
        )
        self.policy, self.config, self.switching = policy, config, switching
        self.region, self.experts, self.arrivals = region, experts, arrivals
        self.switch_bytes = switch_bytes
        total = len(self.records)
        self.unrouted: deque[int] = deque()  # arrived, the router not yet run on them
        self.routed_ps = np.zeros(total, dtype=np.int64)  # when the router named its expert
        self.waiting: dict[int, deque[int]] = {}  # expert -> its waiting requests, oldest first
        self.order: deque[int] = deque()  # every waiting request, oldest first (lazy removal)
        self.queued = np.zeros(total, dtype=np.bool_)  # waiting (not yet let in)
        self.n_waiting = 0
        self.counts = TurnCounts()
        self.in_flight: dict[int, simpy.Event] = {}  # expert -> fires when its copy lands
        self.asked_ps: dict[int, int] = {}  # expert -> when its latest copy was asked for
        self.landed_ps: dict[int, int] = {}  # expert -> when its latest copy landed
        self.prefetched: set[int] = set()  # copied ahead, its turn not begun
        # expert -> the time the node stood waiting for its copies (``switch_stall_s``'s
        # parts); a request's share is what accrued between its routing and its let-in
        self.stalled: dict[int, int] = {}
        self.stall_mark = np.zeros(total, dtype=np.int64)  # its expert's stall when routed
        self._turn_start = 0
        self._expert = -1
        self._steps_in_turn = 0
        self._awaits_copy = False  # the node waits for a copy to land (or the next arrival)

    # --- the clock --------------------------------------------------------------------------
    @property
    def now(self) -> int:
        """Now, in integer picoseconds."""
        return self.timeline.now

    def _longest_s(self) -> float:
        return max(self.cache.longest_step_s, self.router_cache.longest_step_s)

    def _at(self, delay: int) -> int:
        """The time ``delay`` ps from now (the node resumes then, after everything else of
        its instant); SimulatedTimeError past the serving clock's range."""
        return advance(self.now, delay, self._longest_s)

    # --- arrivals and the router ------------------------------------------------------------
    def _land(self) -> None:
        """Every request due by now arrives (in order), for the router."""
        self.arrivals.land(self.now, self._arrived)

    def _arrived(self, request: int, at: int) -> None:
        self.records.arrival_ps[request] = at
        self.unrouted.append(request)

    def _completed(self, now: int) -> None:
        """A request completed (a closed-loop user submits its next one)."""
        self.arrivals.completed(now)

    def _route(self) -> Waits:
        """The router prefills the oldest arrived request's prompt (on the same sockets);
        then the request waits for its expert."""
        request = self.unrouted.popleft()
        prompt = int(self.records.prompt_tokens[request])
        config = self.config
        started = self.now
        cache = self.router_cache
        for shape in prefill_steps(
            prompt,
            config.max_context,
            config.prefill_chunk_tokens,
            self.policy.compresses(prompt),
            config.dynamic_batch,
        ):
            yield from self.driver.step(cache, shape, cache.run(shape))
        self.counts.router_ps += self.now - started
        self.routed_ps[request] = self.now
        expert, records = int(self.experts[request]), self.records
        records.expert[request] = expert
        records.router_ps[request] = self.now - started
        self.stall_mark[request] = self.stalled.get(expert, 0)
        self.waiting.setdefault(expert, deque()).append(request)
        self.order.append(request)
        self.queued[request] = True
        self._waits(+1)

    def _waits(self, change: int) -> None:
        self.n_waiting += change
        self.series.elsewhere = self.n_waiting

    def _oldest(self) -> int | None:
        """The oldest waiting request (of any expert), or None."""
        order, queued = self.order, self.queued
        while order and not queued[order[0]]:
            order.popleft()
        return order[0] if order else None

    def _others_waiting(self, expert: int) -> bool:
        """Whether a request of another expert waits."""
        mine = self.waiting.get(expert)
        return self.n_waiting > (len(mine) if mine else 0)

    def _lets_in(self, at: int, others: bool) -> bool:
        """Whether the turn still lets its expert's requests in at ``at`` (ps), ``others``
        telling whether another expert's request waits then (``coe.switch``)."""
        if self.switching.switch == "drain" or not others:
            return True
        return at - self._turn_start < self.switching.turn_ps

    def _let_in(self) -> None:
        """Hand the holding expert's oldest waiting requests to the scheduler's queue, as
        many as it has free slots for, while the switch policy lets them in."""
        expert, scheduler, records = self._expert, self.scheduler, self.records
        queue = self.waiting.get(expert)
        slots, queued_there = scheduler.slots, scheduler.queue
        now = self.now
        while queue and slots.occupied + len(queued_there) < slots.n:
            if not self._lets_in(now, self._others_waiting(expert)):
                break
            request = queue.popleft()
            self.queued[request] = False
            self._waits(-1)
            routed = int(self.routed_ps[request])
            hit = self.asked_ps[expert] < routed and self.landed_ps.get(expert, NEVER) <= routed
            if hit:
                self.counts.hits += 1  # its expert was in HBM when the router named it
            records.expert_hit[request] = int(hit)
            records.copy_stall_ps[request] = self.stalled.get(expert, 0) - self.stall_mark[request]
            if self._steps_in_turn:
                self.counts.admitted_mid_turn += 1  # let in after the turn's first step
            scheduler.enqueue(request, now, record=False)

    # --- switching --------------------------------------------------------------------------
    def _switch_in(self, expert: int, keep: set[int]) -> None:
        """Evict a victim (not in ``keep``) and copy ``expert``'s weights into the region."""
        now = self.now
        evicted = self.region.admit(expert, now, keep)
        if evicted is not None:
            self.prefetched.discard(evicted)
        self.counts.switches += 1
        self.asked_ps[expert] = now
        self.in_flight[expert] = self.timeline.event()
        self.tiers.copy(self.switch_bytes, partial(self._landed, expert))

    def _landed(self, expert: int) -> None:
        """An expert's copy has landed: its weights are in HBM from now."""
        self.landed_ps[expert] = self.now
        self.in_flight.pop(expert).succeed()

    def _prefetch(self, running: int) -> None:
        """Copy the next turn's expert (the oldest waiting request's of another expert) in
        while ``running`` serves, unless it is resident or on its way; the victim is neither
        the running expert nor one copied ahead and not yet used."""
        for request in self.order:
            if not self.queued[request]:
                continue
            expert = int(self.experts[request])
            if expert == running:
                continue
            keep = {running, *self.in_flight, *self.prefetched}
            if expert not in self.region and self.region.can_admit(keep):
                self._switch_in(expert, keep)
                self.prefetched.add(expert)
            return

    def _begin_turn(self, expert: int) -> Waits:
        """Give the sockets to ``expert``: switch it in if needed and wait for its copy,
        routing the requests that arrive meanwhile."""
        counts = self.counts
        counts.turns += 1
        if expert not in self.region:
            self._switch_in(expert, set(self.in_flight))
        while expert in self.in_flight:
            self._land()
            if self.unrouted:
                yield from self._route()
                continue
            waited = self.now
            self.in_flight[expert].callbacks.append(self._copy_landed)
            due = self.arrivals.next_time()
            self._awaits_copy = True  # until the copy lands or the next request arrives
            yield IDLE if due == NEVER else self._at(due - waited)
            self._awaits_copy = False
            counts.stall_ps += self.now - waited
            self.stalled[expert] = self.stalled.get(expert, 0) + self.now - waited
        self.prefetched.discard(expert)
        self.region.use(expert, self.now)
        self._expert, self._turn_start, self._steps_in_turn = expert, self.now, 0
        if self.switching.prefetch:
            self._prefetch(expert)

    def _copy_landed(self, _event: simpy.Event) -> None:
        """The copy the node waits for has landed: it resumes now (unless it already has)."""
        if self._awaits_copy:
            self._awaits_copy = False
            self.timeline.wake(self.driver.who)

    # --- steps ------------------------------------------------------------------------------
    def _traffic(self, cache: StepCache, shape: StepShape) -> bool:
        """A step of ``shape`` starts (the driver's ``traffic``): while a copy is in flight
        its HBM and DDR reads also go on the channels the copy shares, and it ends when both
        its time and its reads are done."""
        self._steps_in_turn += 1
        if not self.tiers.copying:
            return False
        detail = cache.cost(shape).detail
        tiers = detail.bytes_by_tier if isinstance(detail, StepTiming) else {}
        self.tiers.traffic(tiers.get("hbm", 0.0), tiers.get("ddr", 0.0), self.driver.reads_done)
        return True

    # --- the node ---------------------------------------------------------------------------
    def serve(self) -> Waits:
        """Turn after turn until every request has completed (each turn the one driver of
        the scheduler, fed by :class:`Turn`); the router runs on arrivals between turns and
        inside them."""
        scheduler, total = self.scheduler, len(self.records)
        while scheduler.completed < total:
            self._land()
            oldest = self._oldest()
            if oldest is not None:
                yield from self._begin_turn(int(self.experts[oldest]))
                yield from self.driver.drive()
                counts = self.counts
                counts.longest_turn_ps = max(counts.longest_turn_ps, self.now - self._turn_start)
            elif self.unrouted:
                yield from self._route()
            else:
                due = self.arrivals.next_time()
                if due == NEVER:
                    raise RuntimeError("CoE serving has no request left to wait for (a bug)")
                yield self._at(due - self.now)

    def simulate(self) -> None:
        """Run the whole simulation (and the copies still in flight at its end)."""
        self.driver.who = self.timeline.start(self.serve(), LATE)
        self.timeline.run()
        completed, total = self.scheduler.completed, len(self.records)
        if completed != total:
            raise RuntimeError(f"CoE serving stopped with {completed} of {total} completed")
