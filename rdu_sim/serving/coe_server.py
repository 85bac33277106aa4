"""The Composition of Experts server: expert turns of continuous batching on des's event loop.

The node's sockets serve one model at a time (all tensor-parallel). The router model runs
first on every request that arrives: at the next step boundary it prefills the prompt (the
lone server's ``prefill_first``: an arrival cuts a decode run at the step in flight), which
names the request's expert; the request then waits for that expert. A *turn* begins with
the expert of the oldest waiting request: if that expert is not in the HBM region it is
switched in (``coe.ExpertRegion`` picks a victim, each socket's ``hw.CopyEngine`` copies the
expert's weights from DDR to HBM) and the server stalls until the copy has landed, routing
the requests that arrive meanwhile. During the turn the server runs continuous batching on
the static slots: at every step boundary each free slot admits the oldest waiting request of
the holding expert that the switch policy still lets in (``coe.switch``), a newly admitted
request is prefilled (its first token) before the next decode step, and decode steps run
every decoding slot at the KV policy's bucket of the longest cache. The turn ends when its
slots are empty and the policy admits no more; then the next turn begins.

Switch policies (``coe.switch``):

- ``drain``: the holding expert keeps admitting its requests while any is waiting or
  running: the most batching, but a popular expert under heavy load may hold the sockets
  for long while others wait;
- ``bounded``: the turn admits its expert's requests only while it is younger than
  ``coe.turn_s`` or no other expert's request waits; then its running requests finish and
  the sockets go on (the oldest waiting request's expert is next), so no expert waits for
  more than a turn's bound plus the requests running.

With ``coe.prefetch`` the next turn's expert (the oldest waiting request's, of another
expert) is copied in while the turn runs (never evicting the holding expert or one copied
ahead and not yet used); during a copy every step also puts its own HBM and DDR bytes on the
channels the copy uses (the step ends when both its time and its traffic are done), so the
copy and the steps slow each other.

Time is integer picoseconds on ``des.CountingEnvironment`` (its unit is the picosecond: the
channels' and the copy engine's rates are given in bytes per picosecond); a copy or a shared
step ends at a fractional picosecond, and the server resumes at the next whole one. The
environment holds its clock as a float, exact for integers up to 2^53 ps (about 2.5 hours):
a run that would go further stops with ``SimulatedTimeError`` (``serving.clock``'s own range
is checked too). Arrivals are known in advance (``serving.arrivals``: the open loop's times,
the closed loop's completions) and are landed at step boundaries without events; a decode
run of identical steps is one event. The environment's event limit is ``engine.max_events``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.engine.timing import StepTiming
from rdu_sim.hw.copy_engine import CopyEngine
from rdu_sim.hw.memory_channel import MemoryChannel
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.serving.arrivals import NEVER, Arrivals, ClosedLoop, OpenLoop
from rdu_sim.serving.buckets import prefill_steps
from rdu_sim.serving.clock import PS_PER_S, SimulatedTimeError, advance, to_s
from rdu_sim.serving.expert_region import ExpertRegion
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.slots import Slots
from rdu_sim.serving.step_cache import StepCache
from rdu_sim.shapes import StepShape

EXACT_PS = 2**53
"""The last picosecond des's float clock holds exactly (about 2.5 hours)."""

Progress = Callable[[int, int], None]
"""Called with (requests completed, requests in all) as requests finish."""


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


@dataclass(frozen=True)
class TurnPolicy:
    """The CoE scheduling knobs: slots, context, switch policy and its bound, prefetch, and
    whether prefill work (the router's and the expert's) goes before decode steps."""

    slots: int
    max_context: int
    chunk: int | None
    switch: str  # "drain" or "bounded"
    turn_ps: int
    prefetch: bool
    prefill_priority: str = "prefill_first"  # or "decode_first" (serving.prefill_priority)


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


class CoEServer:
    """Serves tagged requests in expert turns (module docstring); ``simulate`` runs it."""

    def __init__(
        self,
        policy: KVPolicy,
        config: TurnPolicy,
        tiers: Tiers,
        region: ExpertRegion,
        experts: NDArray[np.int64],
        records: ServingRecords,
        arrival_ps: NDArray[np.int64] | None,
        concurrency: int,
        switch_bytes: float,
        expert_cache: StepCache,
        router_cache: StepCache,
        *,
        limit: int,
        progress: Progress | None = None,
    ) -> None:
        self.env = env = CountingEnvironment(limit=limit)
        per_ps = 1.0 / PS_PER_S
        self.ddr = MemoryChannel(
            env, tiers.ddr_bandwidth * per_ps, tiers.ddr_latency * PS_PER_S, tiers.ddr_efficiency
        )
        self.hbm = MemoryChannel(
            env, tiers.hbm_bandwidth * per_ps, tiers.hbm_latency * PS_PER_S, tiers.hbm_efficiency
        )
        self.copier = CopyEngine(env, self.ddr, self.hbm, tiers.copy_bandwidth * per_ps)
        self.policy, self.config, self.region = policy, config, region
        self.experts, self.records = experts, records
        self.switch_bytes = switch_bytes
        self.expert_cache, self.router_cache, self.progress = expert_cache, router_cache, progress
        total = len(records)
        self.arrivals: Arrivals = (
            ClosedLoop(concurrency, total) if arrival_ps is None else OpenLoop(arrival_ps)
        )
        self.unrouted: deque[int] = deque()  # arrived, the router not yet run on them
        self.routed_ps = np.zeros(total, dtype=np.int64)  # when the router named its expert
        self.slots = Slots(config.slots)
        self.waiting: dict[int, deque[int]] = {}  # expert -> its waiting requests, oldest first
        self.order: deque[int] = deque()  # every waiting request, oldest first (lazy removal)
        self.queued = np.zeros(total, dtype=np.bool_)  # waiting (not yet admitted)
        self.n_waiting = 0
        self.plans: dict[int, deque[StepShape]] = {}  # slot -> the expert's prefill steps left
        self.completed = 0
        self.counts = TurnCounts()
        self.in_flight: dict[int, Any] = {}  # expert -> its copy's event
        self.asked_ps: dict[int, int] = {}  # expert -> when its latest copy was asked for
        self.landed_ps: dict[int, float] = {}  # expert -> when its latest copy landed
        self.prefetched: set[int] = set()  # copied ahead, its turn not begun
        self._turn_start = 0
        self._expert = -1
        self._steps_in_turn = 0
        self._bucket = 0  # the last decode run's bucket (the time series')

    # --- the clock --------------------------------------------------------------------------
    @property
    def now(self) -> int:
        """Now, in integer picoseconds (the server resumes only at whole ones)."""
        return int(self.env.now)

    def _longest_s(self) -> float:
        return max(self.expert_cache.longest_step_s, self.router_cache.longest_step_s)

    def _wait(self, delay: int) -> Any:
        """An event ``delay`` ps from now (the serving clock's and des's ranges checked)."""
        now = self.now
        end = advance(now, delay, self._longest_s)
        if end > EXACT_PS:
            raise SimulatedTimeError(
                f"the run's simulated time would pass {to_s(EXACT_PS):.4g} s (2^53 ps, the "
                f"range des's event loop holds exactly) at {to_s(now):.4g} s: serve fewer "
                "requests, or spread their arrivals over less time"
            )
        return self.env.timeout(delay)

    def _align(self) -> Any:
        """Wait for the next whole picosecond (after a copy or a shared step)."""
        now = self.env.now
        return self.env.timeout(math.ceil(now) - now)

    # --- arrivals ---------------------------------------------------------------------------
    def _land(self) -> None:
        """Every request due by now arrives (in order), for the router."""
        now = self.now
        arrivals = self.arrivals
        while arrivals.next_time() <= now:
            at = arrivals.next_time()
            request = arrivals.take()
            self.records.arrival_ps[request] = at
            self.unrouted.append(request)

    def _route(self) -> Generator[Any, Any, None]:
        """The router prefills the oldest arrived request's prompt (on the same sockets);
        then the request waits for its expert."""
        request = self.unrouted.popleft()
        prompt = int(self.records.prompt_tokens[request])
        config = self.config
        started = self.now
        for shape in prefill_steps(
            prompt, config.max_context, config.chunk, self.policy.compresses(prompt)
        ):
            yield from self._steps(self.router_cache, shape, 1)
        self.counts.router_ps += self.now - started
        self.routed_ps[request] = self.now
        self.waiting.setdefault(int(self.experts[request]), deque()).append(request)
        self.order.append(request)
        self.queued[request] = True
        self.n_waiting += 1

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

    def _admits(self, at: int, others: bool) -> bool:
        """Whether the turn still admits its expert's requests at ``at`` (ps), ``others``
        telling whether another expert's request waits then (``coe.switch``)."""
        config = self.config
        if config.switch == "drain" or not others:
            return True
        return at - self._turn_start < config.turn_ps

    # --- switching --------------------------------------------------------------------------
    def _switch_in(self, expert: int, keep: set[int]) -> Any:
        """Evict a victim (not in ``keep``) and copy ``expert``'s weights into the region."""
        now = self.now
        evicted = self.region.admit(expert, now, keep)
        if evicted is not None:
            self.prefetched.discard(evicted)
        self.counts.switches += 1
        self.asked_ps[expert] = now
        copy = self.copier.copy(self.switch_bytes)
        self.in_flight[expert] = copy
        copy.callbacks.append(lambda _event: self._landed(expert))
        return copy

    def _landed(self, expert: int) -> None:
        """An expert's copy has landed: its weights are in HBM from now."""
        self.in_flight.pop(expert, None)
        self.landed_ps[expert] = self.env.now

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

    def _first(self, events: list[Any]) -> Any:
        """An event that fires when the first of ``events`` does."""
        wake = self.env.event()

        def fire(_event: Any) -> None:
            if not wake.triggered:
                wake.succeed()

        for event in events:
            event.callbacks.append(fire)
        return wake

    def _begin_turn(self, expert: int) -> Generator[Any, Any, None]:
        """Give the sockets to ``expert``: switch it in if needed and wait for its copy."""
        counts = self.counts
        counts.turns += 1
        if expert not in self.region:
            self._switch_in(expert, set(self.in_flight))
        copy = self.in_flight.get(expert)
        while copy is not None and expert in self.in_flight:
            self._land()  # the router works while the copy lands
            if self.unrouted:
                yield from self._route()
                continue
            waited = self.now
            due = self.arrivals.next_time()
            yield self._first([copy, *([self._wait(due - waited)] if due != NEVER else [])])
            yield self._align()
            counts.stall_ps += self.now - waited
        self.prefetched.discard(expert)
        self.region.use(expert, self.now)
        self._expert, self._turn_start, self._steps_in_turn = expert, self.now, 0
        if self.config.prefetch:
            self._prefetch(expert)

    # --- admission --------------------------------------------------------------------------
    def _admit(self) -> None:
        """Fill free slots with the holding expert's oldest waiting requests the policy lets in."""
        expert, slots = self._expert, self.slots
        queue = self.waiting.get(expert)
        now = self.now
        while queue and slots.occupied < slots.n:
            if not self._admits(now, self._others_waiting(expert)):
                break
            request = queue.popleft()
            self.queued[request] = False
            self.n_waiting -= 1
            slot = slots.free_slot()
            slots.admit(slot, request)
            records = self.records
            records.admit_ps[request] = now
            records.slot[request] = slot
            counts = self.counts
            if self._steps_in_turn:
                counts.admitted_mid_turn += 1
            routed = int(self.routed_ps[request])
            if self.asked_ps[expert] < routed and self.landed_ps.get(expert, NEVER) <= routed:
                counts.hits += 1  # its expert was in HBM when the router named it
            prompt = int(records.prompt_tokens[request])
            self.plans[slot] = deque(
                prefill_steps(
                    prompt,
                    self.config.max_context,
                    self.config.chunk,
                    self.policy.compresses(prompt),
                )
            )

    # --- steps ------------------------------------------------------------------------------
    def _steps(self, cache: StepCache, shape: StepShape, count: int) -> Generator[Any, Any, None]:
        """``count`` steps of ``shape``; while a copy is in flight each also puts its HBM and
        DDR bytes on the channels the copy shares (it ends when both are done)."""
        step = cache.run(shape, count)
        self._steps_in_turn += count
        if not self.copier.busy:
            yield self._wait(count * step)
            return
        detail = cache.cost(shape).detail
        tiers = detail.bytes_by_tier if isinstance(detail, StepTiming) else {}
        for _ in range(count):
            wait = self._wait(step)  # (the clock's range checked)
            if not self.copier.busy:
                yield wait
                continue
            hbm = self.hbm.read(tiers.get("hbm", 0.0), tag="step")
            yield self.env.all_of([wait, hbm, self.ddr.read(tiers.get("ddr", 0.0), tag="step")])
            yield self._align()

    def _prefill(self) -> Generator[Any, Any, None]:
        """The next prefill step of the oldest prefilling slot; the last one gives the
        request its first token."""
        slots, records = self.slots, self.records
        slot = slots.prefill_order[0]
        request = slots.request[slot]
        plan = self.plans[slot]
        yield from self._steps(self.expert_cache, plan.popleft(), 1)
        records.prefill_steps += 1
        if plan:
            return
        del self.plans[slot]
        now = self.now
        records.first_token_ps[request] = now
        records.tokens_generated += 1
        prompt = int(records.prompt_tokens[request])
        output = int(records.output_tokens[request])
        if output == 1:
            self._complete(slot, request, now)
            return
        policy = self.policy
        slots.start_decode(
            slot, policy.cache_at(prompt, 1), policy.cache_at(prompt, output - 1), output - 1
        )

    def _cut(self, steps: int, step: int) -> int:
        """Steps of a decode run from now that the next arrival leaves: the router runs at
        the next step boundary, so the run ends with the step in flight when it arrives."""
        start = self.now
        due = self.arrivals.next_time()
        if steps <= 1 or due >= start + steps * step:
            return steps
        return max(1, -(-(due - start) // step))

    def _decode(self) -> Generator[Any, Any, None]:
        """A decode run: identical steps until the next completion, bucket change or an
        arrival the turn admits (one step at a time while a copy shares the channels)."""
        slots, records = self.slots, self.records
        bucket = self._bucket = self.policy.decode_bucket(slots.longest_cache())
        shape = StepShape("decode", slots.n, 1, bucket)
        step = self.expert_cache.step_ps(shape)
        steps = slots.steps_in_run(bucket)
        if self.copier.busy or self.unrouted or slots.prefill_order:
            steps = 1  # shared with a copy step by step, or prefill work waits (decode_first)
        else:
            steps = self._cut(steps, step)
        emitted = slots.emitted(steps)
        yield from self._steps(self.expert_cache, shape, steps)
        records.decode_steps += steps
        records.decode_runs += 1
        records.tokens_generated += emitted
        now = self.now
        for slot in slots.advance(steps):
            self._complete(slot, slots.request[slot], now)

    def _complete(self, slot: int, request: int, now: int) -> None:
        records = self.records
        records.finish_ps[request] = now
        records.completions[request] += 1
        self.slots.release(slot)
        self.completed += 1
        self.arrivals.completed(now)
        if self.progress is not None:
            self.progress(self.completed, len(records))

    def _record(self) -> None:
        slots = self.slots
        self.records.series.append(
            self.now, self.n_waiting, len(slots.prefill_order), slots.decoding, self._bucket
        )

    # --- the process ------------------------------------------------------------------------
    def serve(self) -> Generator[Any, Any, None]:
        """Turn after turn until every request has completed; the router runs on arrivals
        between turns and inside them."""
        total = len(self.records)
        while self.completed < total:
            self._land()
            oldest = self._oldest()
            if oldest is not None:
                yield from self._begin_turn(int(self.experts[oldest]))
                yield from self._turn()
            elif self.unrouted:
                yield from self._route()
            else:
                due = self.arrivals.next_time()
                if due == NEVER:
                    raise RuntimeError("CoE serving has no request left to wait for (a bug)")
                yield self._wait(due - self.now)

    def _turn(self) -> Generator[Any, Any, None]:
        """Continuous batching for the holding expert until its slots are empty and the
        policy admits no more of its requests. Prefill work (routing an arrival, the next
        prefill step of an admitted request) goes first under ``prefill_first``; under
        ``decode_first`` at most one such step runs between two decode steps."""
        slots, counts = self.slots, self.counts
        decode_first = self.config.prefill_priority == "decode_first"
        last_was_prefill = False
        while True:
            self._land()
            self._admit()
            self._record()
            yields = decode_first and last_was_prefill and slots.decoding > 0
            if self.unrouted and not yields:
                yield from self._route()
                last_was_prefill = True
            elif slots.prefill_order and not yields:
                yield from self._prefill()
                last_was_prefill = True
            elif slots.decoding:
                yield from self._decode()
                last_was_prefill = False
            else:
                break
            if self.config.prefetch and not self.in_flight:
                self._prefetch(self._expert)
        counts.longest_turn_ps = max(counts.longest_turn_ps, self.now - self._turn_start)

    def simulate(self) -> None:
        """Run the whole simulation."""
        process = self.env.process(self.serve())
        self.env.run(process)
        self._record()
        if self.completed != len(self.records):
            raise RuntimeError(
                f"CoE serving stopped with {self.completed} of {len(self.records)} completed"
            )
