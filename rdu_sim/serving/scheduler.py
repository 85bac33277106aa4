"""The continuous-batching scheduler of one server: the policy alone, however it is driven.

Policy (docs/serving.md has the full statement):

- Requests wait in one queue, in arrival order (a request preempted for a decode step's
  pages, ``kv_allocation: on_demand``, goes back to its front). A request is *admitted* to
  the lowest free slot when its first prefill step starts (queueing delay = first
  admission - arrival): the queue's head, unless the batching policy chooses another
  (``BatchingPolicy.admit_from``).
- A prefill step is batch 1 (unless the runtime packs prompts, below): the whole prompt
  padded to its bucket (``serving.buckets.prompt_bucket``), or, with
  ``prefill_chunk_tokens = C`` and a prompt longer than C, one chunk of C tokens attending
  to the ``cache_len`` tokens already prefilled (the last chunk is padded to C). The step
  that prefills the last prompt token also produces the first output token (TTFT = end of
  that step). SnapKV selection, when the policy compresses, is part of the compiled prefill
  program.
- ``prefill_batch_tokens`` (the serving stack's ``prefill_batch_tokens``; a lone server, a CoE
  node, a cluster replica without prefix cache or hand-offs; not with speculation): a
  prefill step that admits a request also admits the next waiting requests whose whole
  prompts pad to the same shape, in the order admissions take them, while a slot is free
  and the step's padded tokens (and the decode rows a mixed step carries) stay within the
  budget, and runs them as one step of that batch.
- A decode step runs the static decode graph over all ``batch_slots`` slots (empty and
  still-prefilling slots are padding, as in any static graph) at the decode bucket
  ``policy.decode_bucket(longest cache among decoding slots)``, or over the smallest
  compiled batch that holds the decoding slots when the runtime picks its program by the
  queue's length (``decode_rows``); a runtime that batches dynamically (``dynamic_batch``:
  a paged KV cache) runs the decoding slots alone at the bucket of their mean cache
  (``serving.decode_rounds``). Every decoding slot gains one
  token. A request with ``output`` tokens decodes ``output - 1`` steps after prefill.
- When prefill work takes a step from decoding, and which, is the batching policy's
  (``serving.batching``: ``prefill_first``, ``decode_first``, ...).
- ``mixed_batching`` (the serving stack's): a prefill step that starts while slots decode
  also carries the decode step's rows (``StepShape.with_decode``: the rows and bucket the
  decode step would run), so every decoding slot gains its token at its end instead of
  waiting for it (not under speculative decoding, whose rounds are not one decode step).
- Decisions are taken at step boundaries, after every arrival at the same instant.

Speed: between state changes every decode step has the same shape and time, so the server
advances ``k`` steps at once (``k`` = steps until the next completion or bucket change, or 1
when prefill work waits for the next boundary). An arrival during such a run, when a slot is
free, cuts it at the next step boundary -- exactly where a step-by-step server would have
seen it. Time is integer picoseconds, so ``k * step`` is exact.

The scheduler decides and accounts; it never waits. Its variants are strategies chosen once,
when it is made (:class:`Policies`): the batching policy, the hand-off of KV caches between
replicas (``serving.handoff``), how decode runs advance (``serving.decode_rounds``), what a
draft adds to prefill (``serving.drafting``) and which running request a decode step short of
KV pages preempts (``serving.preemption``). It reads the time from the loop's ``now`` and
gives its one driver (``serving.driver``) what to wait for: :meth:`decide` an :class:`Action`,
:meth:`begin_prefill` the delays (ps) of a prefill step that :meth:`end_prefill` ends,
:meth:`decode_plan` a decode run that :meth:`cut` may shorten when something arrives mid-run
and :meth:`decode_done` accounts once it has ended. What arrives between decisions is handed
over by :meth:`enqueue` (the driver's ``poke`` wakes or cuts it), and a completion is
reported to ``on_complete`` (a server alone's closed-loop users resubmit there).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from rdu_sim.kv.paged import PagedKV
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.pickled import Reduced, by_fields
from rdu_sim.serving.batching.base import (
    ADMIT,
    NO_PREFILL,
    BatchingPolicy,
    QueueView,
    chooses_admission,
)
from rdu_sim.serving.batching.checked import checked
from rdu_sim.serving.buckets import reusable_prefix
from rdu_sim.serving.clock import Clock
from rdu_sim.serving.decode_rounds import DecodeRounds
from rdu_sim.serving.drafting import Drafting
from rdu_sim.serving.driven import FOREVER, Action, Driven
from rdu_sim.serving.handoff import HandOff
from rdu_sim.serving.kv_pool import OnDemandPool, PoolBlocks, kv_pool
from rdu_sim.serving.load import Counters, Load, outstanding_at
from rdu_sim.serving.preemption.base import DEFAULT as LATEST_ARRIVAL
from rdu_sim.serving.preemption.base import PreemptionPolicy, RunningView
from rdu_sim.serving.preemption.checked import checked as checked_preemption
from rdu_sim.serving.prompt_facts import PromptFact, PromptFacts
from rdu_sim.serving.records import UNSET, ServingRecords
from rdu_sim.serving.slots import DECODING
from rdu_sim.serving.step_cache import StepCache, StepCounts, StepEntry
from rdu_sim.shapes import DecodeRows, StepShape, batches_live

Progress = Callable[[int, int], None]
Priority = str  # a registered batching policy's name (``serving.batching``)
Role = Literal["mixed", "prefill", "decode"]


_ADMIT: Final = Action.ADMIT
_PREFILL: Final = Action.PREFILL
_DECODE: Final = Action.DECODE
_IDLE: Final = Action.IDLE


@dataclass(frozen=True)
class ServerConfig:
    """The knobs of the scheduling policy."""

    batch_slots: int
    max_context: int
    prefill_priority: Priority = "prefill_first"  # the batching policy (``serving.batching``)
    prefill_chunk_tokens: int | None = None
    role: Role = "mixed"  # prefill and decode replicas need ``hooks`` that move the KV cache
    # the runtime packs waiting prompts into one prefill step, up to this many (padded)
    # tokens (the serving stack's ``prefill_batch_tokens``); None: one prompt per prefill step
    prefill_batch_tokens: int | None = None
    # a prefill step also decodes the generating slots (the serving stack's
    # ``mixed_batching``)
    mixed_batching: bool = False
    # the rows a decode step runs (``StackConfig.decode_rows``): every slot, or the decoding
    # sequences rounded up the CUDA-graph ladder, to a program's batch, or not at all
    decode_rows: DecodeRows = "slots"
    # a paged KV cache's pool, which admissions reserve pages of (``serving.kv_pool``);
    # None: static slots, each holding a whole sequence
    kv_pool: PagedKV | None = None
    # which running request a decode step short of pages preempts (``serving.preemption``:
    # a registered name; read only where the pool gives pages on demand)
    preemption: str = LATEST_ARRIVAL

    def __reduce__(self) -> Reduced:
        return by_fields(self)  # (compiled, a frozen dataclass: ``rdu_sim.pickled``)

    @property
    def dynamic_batch(self) -> bool:
        """Whether the runtime batches its live sequences per step (a paged KV cache): its
        decode steps run the decoding sequences, its prefill steps unpadded prompts."""
        return batches_live(self.decode_rows)


@dataclass(frozen=True)
class Policies:
    """The scheduler's strategies, chosen once when it is made (module docstring)."""

    batching: BatchingPolicy
    handoff: HandOff
    rounds: DecodeRounds
    drafting: Drafting
    preemption: PreemptionPolicy  # who a decode step short of pages preempts

    def __reduce__(self) -> Reduced:
        return by_fields(self)  # (compiled, a frozen dataclass: ``rdu_sim.pickled``)


NO_PACKED: Final[list[int]] = []
"""``PrefillInFlight.packed`` of a step that prefills one prompt (never written)."""


class FirstStep:
    """A prompt length's first prefill step on this server: the answers about the prompt
    (shared by the servers of a pool) and, once it has run here, the step's entry in this
    server's cache; found with one lookup a request."""

    def __init__(self, fact: PromptFact) -> None:
        self.fact = fact
        self.entry: StepEntry | None = None


class PrefillInFlight:
    """The prefill step begun and not yet ended (a server has one at most: the scheduler
    keeps one and refills it, no allocation a step): its slot, request and prompt, the
    prompt tokens done after it, the slots of the other prompts packed into it,
    and the prompt's answers when it is its first step (its decode cache is kept there)."""

    def __init__(self) -> None:
        self.active = False
        self.slot = -1
        self.request = -1
        self.prompt = 0
        self.done = 0
        self.packed: list[int] = NO_PACKED
        self.fact: PromptFact | None = None
        self.decodes = False  # the step carries the decoding slots' rows (a mixed step)

    def begin(
        self,
        slot: int,
        request: int,
        prompt: int,
        done: int,
        packed: list[int],
        fact: PromptFact | None,
        decodes: bool,
    ) -> None:
        """A prefill step begins (``decodes``: it carries the decode rows)."""
        if self.active:
            raise RuntimeError("a prefill step began with another in flight (a bug)")
        self.active = True
        self.slot = slot
        self.request = request
        self.prompt = prompt
        self.done = done
        self.packed = packed
        self.fact = fact
        self.decodes = decodes


class Scheduler(Driven):
    """Static batch slots, a queue in arrival order (a preempted request back at its front),
    and the policy that chooses and accounts prefill and decode steps (module docstring);
    ``clock`` tells it now, in integer picoseconds."""

    def __init__(
        self,
        config: ServerConfig,
        policy: KVPolicy,
        cache: StepCache,
        records: ServingRecords,
        clock: Clock,
        policies: Policies,
        progress: Progress | None = None,
        *,
        forever: bool = False,
        load: Counters | None = None,
        facts: PromptFacts | None = None,
        blocks: PoolBlocks | None = None,
    ) -> None:
        """``forever``: serve until the simulation runs out of events (a replica, whose
        requests are not known in advance) instead of stopping after ``len(records)``.
        ``load``: where to keep the outstanding-work counters (``serving.load``; a cluster
        passes a row of its pool's board so a router can read every replica at once).
        ``facts``: the memoised answers about prompts (``serving.prompt_facts``), shared by
        the servers of one policy and setup; a server alone makes its own. ``blocks``: a
        cluster replica's prefix cache, whose blocks live in a paged KV pool's pages."""
        self.config = config
        self.policy = policy
        if facts is None:
            facts = PromptFacts(
                policy, config.max_context, config.prefill_chunk_tokens, config.dynamic_batch
            )
        elif (facts.max_context, facts.chunk, facts.ragged) != (
            config.max_context,
            config.prefill_chunk_tokens,
            config.dynamic_batch,
        ):
            raise ValueError("a server shares prompt facts only with servers of its setup")
        self._facts = facts
        # completions that end the run (a replica's never do)
        super().__init__(cache, FOREVER if forever else len(records))
        self.records = records
        self.counts: StepCounts = records.counts
        self._series = records.series if records.keeps_series else None  # rows, if kept
        # The per-request arrays as memoryviews of the same memory, taken once (the records'
        # arrays are fixed when they are made): an item read or written through one is a C
        # operation on a Python int, where a NumPy scalar access costs a method call and a
        # boxed scalar (a lone server touches eight a request). The scheduler reads and
        # writes a request's fields only through these.
        self._prompts = records.target_prompt_tokens.data
        self._outputs = records.output_tokens.data
        self._admit_ps = records.admit_ps.data
        self._first_token_ps = records.first_token_ps.data
        self._finish_ps = records.finish_ps.data
        self._slot_of = records.slot.data
        self._completions = records.completions.data
        self._preemptions = records.preemptions.data
        self._arrivals = records.arrival_ps.data
        self.clock = clock
        self.progress = progress
        # an outside policy's answers are checked as they are taken (``batching.checked``)
        self.batching = checked(policies.batching, config.prefill_priority)
        self._chooses = chooses_admission(policies.batching)  # else FIFO, asked nothing
        self.handoff = policies.handoff
        self.rounds = policies.rounds
        self.drafting = policies.drafting
        self.slots = policies.rounds.slots(config.batch_slots)
        # an admission's KV memory (a paged pool shares its pages with ``blocks``, a prefix
        # cache's: ``serving.kv_pool``); pages on demand where the pool gives them
        self.kv = kv_pool(config.kv_pool, records.counts, config.role, blocks)
        # a pool that gives pages on demand: decode runs grow requests, and a decode step
        # that lacks pages preempts (``_make_room``) whom the preemption policy names, it
        # reading the running requests (``_running``) as drawn and each slot's admission
        # serial (``_admitted``: an outside policy's answers checked as they are taken)
        self._grower = self.kv if isinstance(self.kv, OnDemandPool) else None
        self.preemption = checked_preemption(policies.preemption, config.preemption)
        self._admitted: list[int] = [0] * config.batch_slots
        self._admissions = 0
        self._running: RunningView | None = None
        drawn_prompts, drawn_outputs = self._prompts, self._outputs
        if self._grower is not None:
            # a preempted request is prefilled again, its prompt and the tokens it had
            # generated, and decodes the rest: the scheduler's own copies of the prompts and
            # outputs it serves (``_preempt``), the records' left as they were (one copy a
            # run, shared by a cluster's replicas: ``ServingRecords.served_tokens``)
            prompts, outputs = records.served_tokens()
            self._prompts = prompts.data
            self._outputs = outputs.data
            self._running = RunningView(
                self.slots,
                self._arrivals,
                drawn_prompts,
                drawn_outputs,
                self._outputs,
                self._admitted,
                self._grower,
                clock,
            )
        policies.handoff.bind(self._hand_off_ended, self.start_received, self.leaves, self.reserves)
        self.queue: deque[int] = deque()
        # the prompt tokens of the requests in ``queue`` (a router's ``queued_tokens``),
        # changed where the queue is: ``enqueue``, ``_admit``, ``reserves``
        self.queued_tokens = 0
        # what ``admit_from`` reads (the records' arrival times: set before ``enqueue``)
        self._waiting = QueueView(self.queue, self._prompts, records.arrival_ps.data, clock)
        self._after_prefill = False  # the step that ended last was prefill work
        self._bucket = 0
        self._bucket_from = 1  # longest caches from here to ``_bucket`` run at ``_bucket``
        # a prompt's first prefill step here, by its length (a dict of ints: no shape hashed)
        self._first_steps: dict[int, FirstStep] = {}
        self._next = NO_PREFILL  # the prefill work ``decide`` chose (``begin_prefill`` runs it)
        self._queued = 0  # the waiting requests ``decide`` told the policy of (``_admissible``)
        self._position = 0  # where in the queue ``decide``'s admission takes its request
        self._in_flight = PrefillInFlight()
        # prompts pack into one prefill step: a lone server's (a replica's prefix cache and
        # hand-offs, and a speculative draft's work, are per request)
        self._packs = (
            config.prefill_batch_tokens is not None
            and policies.handoff.packs
            and policies.drafting.packs()
        )
        self.load: Counters = load if load is not None else Load()  # see outstanding_tokens
        self._mixes = config.mixed_batching and policies.rounds.ride_prefill()
        # decode steps read each sequence's own cache (plain rounds of a dynamic batch)
        self._per_sequence = policies.rounds.per_sequence()
        self._mean = 0  # the mean cache of the decode bucket computed last
        self.on_complete: Callable[[int], None] | None = None  # a completion at this time

    # --- arrivals ---------------------------------------------------------------------------
    def enqueue(self, request: int, now: int, record: bool = True) -> None:
        """Queue an arrived request, its tokens counted (its prompt, and the first token when
        it was prefilled elsewhere: ``serving.load``); ``record``: write the series row (not
        when a decision at the same instant writes one anyway, replacing it)."""
        self.load.add(self.arrival_tokens(request))
        self.queue.append(request)
        self.queued_tokens += self._prompts[request]
        if record and self._series is not None:
            self.record(now)

    def arrival_tokens(self, request: int) -> int:
        """What a request adds to the load when it is queued here: its prompt, and the first
        token when it was prefilled elsewhere (``serving.load``); a router that counts what
        it sends counts this."""
        return int(self._prompts[request]) + self.handoff.generated_on_arrival()

    def outstanding_tokens(self) -> int:
        """The load a router balances, as of now (mid-way through a batched decode run too):
        over the requests queued or in a slot here, each one's prompt plus the output tokens
        generated so far, i.e. the prompt tokens still to prefill plus the KV tokens held
        (``serving.load``: no output length still to come is known)."""
        load = self.load
        return int(
            outstanding_at(
                self.clock.now,
                load.outstanding,
                load.run_start,
                load.run_end,
                load.run_step,
                load.run_decoding,
            )
        )

    def leaves(self, request: int, generated: int) -> None:
        """``request`` left this server (completed, or its KV cache sent on) after
        ``generated`` output tokens: its tokens leave the load, its KV pages the pool."""
        self.load.add(-self._prompts[request] - generated)
        self.kv.give_back(request, self.clock.now)

    def reserves(self, request: int) -> bool:
        """Take ``request``'s KV memory now if the free memory holds it (a decode replica's
        hand-off asks before it reserves a slot: the pool's pages, as an admission takes
        them); False, nothing taken, otherwise. :meth:`leaves` returns it. True: ``request``
        (the queue's head) leaves the queue for the slot (the hand-off pops it next)."""
        prompt, output = self._prompts[request], self._outputs[request]
        if not self.kv.fits(request, prompt, output):
            return False
        self.kv.take(request, prompt, output, self.clock.now)
        self.queued_tokens -= prompt
        return True

    def cuttable(self, steps: int) -> bool:
        """Whether an arrival (or a KV hand-off ending) during a decode run of ``steps`` could
        end it early: a slot could take the request (or its hand-off). Not while the queue's
        head waits for KV memory only a completion frees: an arrival queues behind it (in
        order; a batching policy that chooses may take the arrival, so it still cuts)."""
        slots = self.slots
        if steps <= 1:
            return False
        if slots.waiting:
            return True
        return slots.occupied < slots.n and not self._head_waits_for_memory()

    def _head_waits_for_memory(self) -> bool:
        """The next admission in order is the queue's head and the KV memory does not hold it."""
        queue = self.queue
        if not queue or not self.kv.bounded or self._chooses:
            return False
        head = queue[0]
        return not self.kv.fits(head, self._prompts[head], self._outputs[head])

    def cut(self, start: int, steps: int, step: int, arrival: int) -> int:
        """Steps of a decode run from ``start`` that an arrival at ``arrival`` leaves: when a
        slot could take it, the run ends with the step in flight when it arrives (one at
        least); otherwise all ``steps``."""
        return self.end_run_at(start, steps, step, arrival) if self.cuttable(steps) else steps

    def end_run_at(self, start: int, steps: int, step: int, at: int) -> int:
        """Steps of a decode run from ``start`` that end with the step in flight at ``at`` (one
        at least; all ``steps`` if the run ends first); the load counters see where it ends."""
        in_flight = max(1, -(-(at - start) // step))
        if in_flight < steps:
            self.load.run_end = start + in_flight * step
            return in_flight
        return steps

    # --- decisions --------------------------------------------------------------------------
    def prefill_may_run(self) -> bool:
        """Whether prefill work (this server's, or a router's on its sockets) may take the
        next step (the batching policy's)."""
        return self.batching.prefill_may_run(self.slots, self._after_prefill)

    def prefill_ran_elsewhere(self) -> None:
        """A prefill step of work outside the slots ran (a CoE router's): it counts as prefill
        work for the batching policy (under ``decode_first`` a decode step comes next)."""
        self._after_prefill = True

    def decide(self, now: int) -> Action:
        """The action to take at ``now``, recording the state it is taken in; not before an
        admission, which records the same instant and so replaces that row (``SeriesLog``:
        one row an instant). The prefill work chosen is what :meth:`begin_prefill` runs."""
        slots = self.slots
        while True:  # once, or again when a decode step's room preempted every decoder
            chosen = NO_PREFILL
            if slots.prefill_order or self.queue:  # (else no prefill work)
                queued = self._queued = self._admissible()
                chosen = self.batching.next_prefill(slots, queued, self._after_prefill)
            self._next = chosen
            if chosen == ADMIT:
                return _ADMIT
            if chosen >= 0 or self._grower is None or slots.decoding == 0:
                break
            preempted = self.counts.preemptions
            self._make_room(now)
            if slots.decoding == 0:  # (the decoding requests were preempted: decide again)
                continue
            if self.counts.preemptions != preempted:
                # the decode step runs now (vLLM's order: its step, then a fresh decision,
                # not a second one now, which could readmit, prefill and preempt again),
                # sized by the queue as it is after the preemptions (``decode_plan``)
                self._queued = self._admissible()
            break
        self.record(now)
        if chosen >= 0:
            return _PREFILL
        return _DECODE if slots.decoding > 0 else _IDLE

    def _make_room(self, now: int) -> None:
        """A decode step is next, its pages given on demand: while the free pages do not
        hold its growth, preempt the running request the preemption policy names
        (``serving.preemption``; by default the one that arrived last, vLLM's lowest
        priority), by recompute."""
        grower, running = self._grower, self._running
        assert grower is not None and running is not None
        slots = self.slots
        while grower.short(slots.steps_done) > 0:
            self._preempt(self.preemption.victim(running), now)

    def _preempt(self, slot: int, now: int) -> None:
        """``slot``'s request is preempted now: its pages return (its cached blocks
        unpinned, still cached), its slot empties, and it goes back to the front of the
        queue to be prefilled again, its prompt now its prompt and the tokens it generated,
        its output what it has left (its first admission and first token stay recorded)."""
        slots = self.slots
        request = slots.request[slot]
        generated = 0
        if slots.phase[slot] == DECODING:  # (else it had not finished its prefill)
            generated = self._outputs[request] - (int(slots.finish[slot]) - slots.steps_done)
        slots.preempt(slot)
        self.kv.give_back(request, now)
        self.handoff.left(request)
        prompt = self._prompts[request] = self._prompts[request] + generated
        self._outputs[request] -= generated
        self.queue.appendleft(request)
        self.queued_tokens += prompt
        self._preemptions[request] += 1
        self.counts.preemptions += 1

    def at_boundary(self) -> None:
        """A step boundary, before deciding: the KV hand-offs that ended take effect (and a
        decode replica reserves free slots for queued requests)."""
        self.handoff.at_boundary(self.slots, self.queue)

    def _hand_off_ended(self) -> None:
        """A KV transfer ended now: tell the driver (it takes effect at the next boundary)."""
        self.poke()

    # --- prefill ----------------------------------------------------------------------------
    def begin_prefill(self) -> tuple[int, ...]:
        """Start the prefill step :meth:`decide` chose (admitting a request first if it
        starts one, and packing more waiting prompts into it when the runtime batches
        prefills) and account it; the delays (ps) to wait before :meth:`end_prefill`: the
        step's, after the draft's scoring of the prompt when it admits one under speculative
        prefill. Nothing else reads or changes the state in between but arrivals."""
        slots = self.slots
        slot = self._next
        if slot == NO_PREFILL:
            raise RuntimeError("begin_prefill without a decision for prefill work (a bug)")
        self._next = NO_PREFILL
        delays: tuple[int, ...] = ()
        packs = False
        if slot == ADMIT:
            slot = self._admit(self._position)  # the request ``decide`` checked
            request = slots.request[slot]
            # (a readmission's prompt was scored at its first: the target re-prefills the
            # kept tokens and those it generated, nothing for the draft to select again)
            before_ps = 0 if self._preemptions[request] else self.drafting.admitted(request)
            if before_ps:
                delays = (before_ps,)
            packs = self._packs
        else:
            request = slots.request[slot]
        prompt = self._prompts[request]
        before = slots.prefilled[slot]
        fact: PromptFact | None = None
        if before:
            shape, done = self._facts.next_step(prompt, before)
            shape = self._carrying(shape)
            entry = self.cache.entry(shape)
        else:
            first = self._first_step(prompt)
            fact = first.fact
            shape, done = fact.first_step, fact.first_done
            if packs and done == prompt:  # (no hooks: nothing was cached)
                packed, width = self._pack(shape, fact)
                if packed:
                    return self._packed(slot, request, prompt, shape, packed, width, delays)
            shape = self._carrying(shape)
            if shape.mixed:  # (no entry kept by prompt: the decode rows vary)
                entry = self.cache.entry(shape)
            else:
                known = first.entry
                if known is None:
                    known = first.entry = self.cache.entry(shape)
                entry = known
        step = self.drafting.prefill_ps(entry.run(), shape)
        self.counts.prefill_steps += 1
        self.prefill_shape = shape
        self._in_flight.begin(slot, request, prompt, done, NO_PACKED, fact, shape.mixed)
        return (*delays, step)

    def _packed(
        self,
        slot: int,
        request: int,
        prompt: int,
        first: StepShape,
        packed: list[int],
        width: int,
        delays: tuple[int, ...],
    ) -> tuple[int, ...]:
        """:meth:`begin_prefill` of a step whose first prompt was packed with others, each
        prompt ``width`` tokens (:meth:`_pack`)."""
        shape = self._carrying(StepShape("prefill", 1 + len(packed), width, 0, first.select))
        step = self.cache.run(shape)
        self.counts.prefill_steps += 1
        self.prefill_shape = shape
        self._in_flight.begin(slot, request, prompt, prompt, packed, None, shape.mixed)
        return (*delays, step)

    def _carrying(self, shape: StepShape) -> StepShape:
        """The prefill step ``shape``, carrying the decode step the decoding slots would run
        now when the stack mixes and slots decode (a mixed step); else ``shape`` itself."""
        if not (self._mixes and self.slots.decoding > 0):
            return shape
        return shape.with_decode(self.rounds.step_shape(self.slots, self._decode_bucket()))

    def end_prefill(self) -> None:
        """The prefill step begun by :meth:`begin_prefill` ended now: its prompts advance."""
        step = self._in_flight
        if not step.active:
            raise RuntimeError("end_prefill without a prefill step in flight (a bug)")
        step.active = False
        self.prefill_shape = None
        self._after_prefill = True
        if step.decodes:  # first: the prompts that end here start decoding after it
            self._decoded_alongside()
        self._prefilled(step.slot, step.request, step.prompt, step.done, step.fact)
        slots, prompts = self.slots, self._prompts
        for other in step.packed:
            request = slots.request[other]
            prompt = prompts[request]
            self._prefilled(other, request, prompt, prompt, None)

    def _decoded_alongside(self) -> None:
        """The mixed step that ended now also ran the decode step: every decoding slot
        gains its token (a decode run's accounting, for one step)."""
        slots = self.slots
        emitted = slots.emitted(1)
        self.counts.mixed_steps += 1
        self.counts.tokens_generated += emitted
        self.load.add(emitted)
        now = self.clock.now
        for slot in slots.advance(1):
            self.complete(slot, slots.request[slot], now)

    def _admissible(self) -> int:
        """The waiting requests as the batching policy is told of them at a decision: all of
        them, or none while the KV memory cannot hold the one the next admission takes (a
        paged pool's free pages: ``serving.kv_pool``; it waits for a completion, in order).
        With a request waiting and a slot free, a policy that chooses is asked here which
        one (``admit_from``, once a decision): the one checked is the one the decision's
        admission takes (``_position``). No slot free: no admission now, nothing asked."""
        queue = self.queue
        if not queue or not (self._chooses or self.kv.bounded):
            return len(queue)
        slots = self.slots
        if slots.occupied >= slots.n:
            return len(queue)
        position = 0
        if self._chooses:
            position = self._position = self.batching.admit_from(self._waiting)
        if self.kv.bounded:
            request = queue[position]
            if not self.kv.fits(request, self._prompts[request], self._outputs[request]):
                return 0
        return len(queue)

    def _admission(self) -> int:
        """The position in the queue of the request the next packed admission takes: the
        head, or the batching policy's choice when it makes one."""
        return self.batching.admit_from(self._waiting) if self._chooses else 0

    def _admit(self, position: int) -> int:
        """The waiting request at ``position`` in the queue takes the lowest free slot now
        (its admission time)."""
        slots = self.slots
        slot = slots.free_slot()
        queue = self.queue
        if position:
            request = queue[position]
            del queue[position]
        else:
            request = queue.popleft()
        slots.admit(slot, request)
        self._admissions += 1
        self._admitted[slot] = self._admissions  # (the preemption policy's admission order)
        now = self.clock.now
        if self._admit_ps[request] == UNSET:  # (a readmission keeps its first admission's)
            self._admit_ps[request] = now
        self._slot_of[request] = slot
        prompt = self._prompts[request]
        self.queued_tokens -= prompt
        # a prefix cache pins the prompt's cached leading blocks first: a paged pool
        # reserves the rest (``serving.kv_pool``)
        skipped = self.handoff.admitted(request, prompt)
        self.kv.take(request, prompt, self._outputs[request], now)
        if skipped:  # a prefix cache holds them: the prefill starts past them
            config = self.config
            if not 0 < skipped < prompt or skipped != reusable_prefix(
                skipped,
                prompt,
                config.max_context,
                config.prefill_chunk_tokens,
                config.dynamic_batch,
            ):
                raise ValueError(f"hooks skipped {skipped} of {prompt} prompt tokens: not reusable")
            slots.prefilled[slot] = skipped
        self.record(now)
        return slot

    def _pack(self, first: StepShape, fact: PromptFact) -> tuple[list[int], int]:
        """Admit the waiting requests whose whole prompt prefills in the same shape as the
        step's first one (``fact``'s), in the order admissions take them (FIFO, or the
        batching policy's choice), stopping at the first that does not, while a slot is
        free and the step's padded tokens stay within ``prefill_batch_tokens``, the decode
        rows a mixed step carries counted in (TensorRT-LLM's ``max_num_tokens`` counts
        both): their slots, and the tokens each prompt of the step is timed at. A ragged
        runtime packs prompts of one static bucket (``PromptFact.pack_bucket``) at the
        widest of their own fine buckets, so it never packs less than a static one."""
        budget = self.config.prefill_batch_tokens
        assert budget is not None
        slots, prompts, queue = self.slots, self._prompts, self.queue
        if self._mixes:
            budget -= slots.decoding
        packed: list[int] = []
        width = first.tokens
        group = fact.pack_bucket
        while queue and slots.occupied < slots.n:
            position = self._admission()
            waiting = queue[position]
            prompt = prompts[waiting]
            if not self.kv.fits(waiting, prompt, self._outputs[waiting]):
                break
            other = self._first_step(prompt).fact
            if other.first_done != prompt:
                break
            if group:
                step = other.first_step
                if other.pack_bucket != group or step.select != first.select:
                    break
                wider = step.tokens if step.tokens > width else width
            elif other.first_step != first:
                break
            else:
                wider = width
            if (len(packed) + 2) * wider > budget:
                break
            packed.append(self._admit(position))
            width = wider
        return packed, width

    def _first_step(self, prompt: int) -> FirstStep:
        """A prompt length's first prefill step here (made the first time)."""
        first = self._first_steps.get(prompt)
        if first is None:
            first = self._first_steps[prompt] = FirstStep(self._facts.of(prompt))
        return first

    def _prefilled(
        self, slot: int, request: int, prompt: int, done: int, fact: PromptFact | None
    ) -> None:
        """A prefill step advanced ``slot``'s prompt to ``done`` tokens; the
        step that ends the prompt gives the first token and starts its decode (or hand-off)."""
        slots = self.slots
        slots.prefilled[slot] = done
        slots.chunked_this_round.add(slot)
        if done < prompt:
            return
        now = self.clock.now
        if self._first_token_ps[request] == UNSET:  # (a readmission's is not its first: but
            self._first_token_ps[request] = now  # one preempted mid-prefill had none yet)
        self.counts.tokens_generated += 1
        self.load.add(1)  # the first output token
        output = self._outputs[request]
        sent = self.handoff.prefilled(slots, slot, request)  # (a prefix cache takes its blocks)
        self.kv.prefilled(request, now)  # (a paged pool's pages they took move to the cache)
        if sent:
            return  # the slot holds the KV cache until it has left
        if output == 1:
            self.complete(slot, request, now)
            return
        self._start_decode(slot, request, prompt, output, fact)

    def _start_decode(
        self, slot: int, request: int, prompt: int, output: int, fact: PromptFact | None
    ) -> None:
        """The slot's request (prefilled here, or its KV cache received) starts decoding:
        ``prompt`` tokens cached (the target's), ``output`` tokens in all, the first done;
        ``fact``: the prompt's answers, when its first prefill step ran here."""
        facts = self._facts
        first = facts.first_cache(prompt, fact)
        cap = facts.last_cache(prompt, first, output - 1)
        self.rounds.start(self.slots, slot, request, prompt, output, first, cap)
        if self._grower is not None:
            self._grower.decoding(request, prompt, self.slots.steps_done)

    def start_received(self, slot: int, request: int) -> None:
        """A decode replica's reserved ``slot`` received ``request``'s KV cache: it decodes."""
        self._start_decode(slot, request, self._prompts[request], self._outputs[request], None)

    # --- decode -----------------------------------------------------------------------------
    def decode_plan(self) -> tuple[StepShape, int, int, int]:
        """The next decode run from now: its shape, bucket, steps (until the next completion
        or bucket change; 1 when prefill work waits) and step time (ps); the load counters
        see it start."""
        slots = self.slots
        bucket = self._decode_bucket()
        # prefill work waits: a decode step yields to it at its boundary
        waits = bool(slots.prefill_order or self.queue) and self.batching.prefill_waits(
            slots,
            self._queued,  # (what ``decide`` found, just before: nothing asked again)
        )
        if waits:
            steps = 1
        elif self._per_sequence:
            steps = slots.steps_in_mean_run(bucket, self._mean)
        else:
            steps = slots.steps_in_run(bucket)
        if self._grower is not None:  # (``decide`` made room for one step at least)
            steps = self._grower.steps_fit(slots.steps_done, steps)
        shape, step, decoding = self.rounds.plan(slots, self.cache, bucket)
        start = self.clock.now
        self.load.begin_run(start, start + steps * step, step, decoding)
        return shape, bucket, steps, step

    def _decode_bucket(self) -> int:
        """The decode bucket of the longest cache among the decoding slots (kept, with the
        range of longest caches it serves, until one leaves that range): every slot's cache
        fits a static graph's bucket. A runtime that reads each sequence's own pages
        (``dynamic_batch``) reads their sum: the bucket of the mean cache."""
        slots = self.slots
        if self._per_sequence:
            mean = self._mean = slots.mean_cache()
            bucket = self._bucket = self.policy.decode_bucket(mean)
            return bucket
        bucket = self._bucket
        if not slots.longest_within(self._bucket_from, bucket):
            longest = slots.longest_cache()
            if not self._bucket_from <= longest <= bucket:
                # the smallest bucket >= longest is also the smallest >= any cache up to it
                bucket = self._bucket = self.policy.decode_bucket(longest)
                self._bucket_from = longest
        return bucket

    def decode_done(self, shape: StepShape, bucket: int, steps: int) -> None:
        """Account a decode run of ``steps`` steps that ended now; complete who finished."""
        slots = self.slots
        self.rounds.done(self.cache, bucket, steps)
        counts = self.counts
        counts.decode_steps += steps
        counts.decode_runs += 1
        emitted = slots.emitted(steps)
        counts.tokens_generated += emitted
        self.load.end_run(emitted)
        self._after_prefill = False
        now = self.clock.now
        if self._grower is not None:  # (the pages the run's steps took, before any leaves)
            self._grower.grow(slots.steps_done + steps, now)
        for slot in slots.advance(steps):
            self.complete(slot, slots.request[slot], now)

    def complete(self, slot: int, request: int, now: int) -> None:
        """``slot``'s request completed at ``now``: its slot is free."""
        self._finish_ps[request] = now
        self._completions[request] += 1
        self.slots.release(slot)
        self.completed += 1
        self.leaves(request, self._outputs[request])
        self.handoff.left(request)
        if self.on_complete is not None:
            self.on_complete(now)
        if self.progress is not None:
            self.progress(self.completed, len(self.records))

    def record(self, now: int) -> None:
        """A time-series row: the state after a change at ``now`` (a replica keeps none)."""
        series = self._series
        if series is not None:
            slots = self.slots
            series.append(
                now, len(self.queue), len(slots.prefill_order), slots.decoding, self._bucket
            )
