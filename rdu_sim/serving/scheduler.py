"""The continuous-batching scheduler of one server: the policy alone, however it is driven.

Policy (docs/serving.md has the full statement):

- Requests wait in one FIFO queue. A request is *admitted* to the lowest free slot when its
  first prefill step starts (queueing delay = admission - arrival).
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
  prompts pad to the same shape, FIFO, while a slot is free and the step's padded tokens stay
  within the budget, and runs them as one step of that batch.
- A decode step runs the static decode graph over all ``batch_slots`` slots (empty and
  still-prefilling slots are padding, as in any static graph) at the decode bucket
  ``policy.decode_bucket(longest cache among decoding slots)``; every decoding slot gains
  one token. A request with ``output`` tokens decodes ``output - 1`` steps after prefill.
- ``prefill_first``: before each decode step, all prefill work runs: every free slot with a
  waiting request is prefilled; with chunking, each prefilling slot (and each new
  admission) advances by one chunk per decode step, oldest first.
  ``decode_first``: at most one prefill step (a prompt, or one chunk of the oldest
  prefilling slot) between two decode steps.
  With no decoding slot, prefill steps simply run back to back.
- Decisions are taken at step boundaries, after every arrival at the same instant.

Speed: between state changes every decode step has the same shape and time, so the server
advances ``k`` steps at once (``k`` = steps until the next completion or bucket change, or 1
when prefill work waits for the next boundary). An arrival during such a run, when a slot is
free, cuts it at the next step boundary -- exactly where a step-by-step server would have
seen it. Time is integer picoseconds, so ``k * step`` is exact.

The scheduler decides and accounts; it never waits. It reads the time from ``clock`` and
gives its drivers (``serving.server``: a server alone, a cluster replica;
``serving.coe_server``: a Composition of Experts' turns) what to wait for:
:meth:`Scheduler.prefill` yields the delays (ps) of a prefill step (or, for a driver that
waits itself, :meth:`begin_prefill` returns them and :meth:`end_prefill` ends the step, with
no decision in between), :meth:`decode_plan` a decode run that :meth:`cut` may shorten
when something arrives mid-run, and :meth:`decode_done` accounts it once it has ended.
What arrives between decisions is handed over by :meth:`enqueue` (the driver calls ``poke``
to be woken or cut), and a completion is reported to ``on_complete`` (a server alone's
closed-loop users resubmit there).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from simpy.events import Event

from rdu_sim.des.timeline import Timeline
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.serving.buckets import prefill_step
from rdu_sim.serving.hooks import ServerHooks
from rdu_sim.serving.load import Counters, Load, outstanding_at
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.slots import Slots
from rdu_sim.serving.speculative import RoundSlots, Speculation
from rdu_sim.serving.step_cache import StepCache
from rdu_sim.shapes import StepShape

Progress = Callable[[int, int], None]
Priority = Literal["prefill_first", "decode_first"]
Role = Literal["mixed", "prefill", "decode"]


@dataclass(frozen=True)
class ServerConfig:
    """The knobs of the scheduling policy."""

    batch_slots: int
    max_context: int
    prefill_priority: Priority = "prefill_first"
    prefill_chunk_tokens: int | None = None
    role: Role = "mixed"  # prefill and decode replicas need ``hooks`` that move the KV cache
    # the runtime packs waiting prompts into one prefill step, up to this many (padded)
    # tokens (the serving stack's ``prefill_batch_tokens``); None: one prompt per prefill step
    prefill_batch_tokens: int | None = None


class PromptFacts:
    """The policy's answers for a prompt length, memoised: a million requests asked them two
    policy calls a request, through its checks, for a few thousand lengths (at most
    ``max_context`` of them). Each is asked only when needed, as the policy itself would
    be: a request that ends at its first token never asks for a decode cache (which need
    not fit its slot). Servers of one policy share one (a cluster pool's replicas: one each
    would hold the same answers 1,024 times).
    """

    def __init__(self, policy: KVPolicy) -> None:
        self.policy = policy
        self.slot_tokens = policy.slot_tokens()
        self._compresses: dict[int, bool] = {}
        self._first_cache: dict[int, int] = {}

    def compresses(self, prompt: int) -> bool:
        """Whether the policy compresses a prompt of this many tokens."""
        known = self._compresses.get(prompt)
        if known is None:
            known = self._compresses[prompt] = self.policy.compresses(prompt)
        return known

    def first_cache(self, prompt: int) -> int:
        """The prompt's cache at its first decode step (after one generated token)."""
        known = self._first_cache.get(prompt)
        if known is None:
            known = self._first_cache[prompt] = self.policy.cache_at(prompt, 1)
        return known

    def last_cache(self, prompt: int, first: int, steps: int) -> int:
        """The prompt's cache after ``steps`` generated tokens, given its ``first``
        (:attr:`first_cache`): one token more a step (``serving.slots``' model of every
        policy) while that stays within the slot; the policy answers beyond (its cache
        saturates at the slot, or it raises), and for no step at all."""
        cache = first + steps - 1
        if steps > 0 and cache <= self.slot_tokens:
            return cache
        return self.policy.cache_at(prompt, steps)


class FirstStep:
    """A prompt's first prefill step, memoised by the prompt's length (per server: it
    depends on the server's context and chunk), with what a request of that prompt asks
    next: one lookup a request."""

    def __init__(self, shape: StepShape, done: int) -> None:
        self.shape = shape
        self.done = done  # prompt tokens done after it
        self.tally: list[int] | None = None  # the step cache's, once run (``run_tally``)
        self.first_cache = -1  # the prompt's first decode cache once asked (``PromptFacts``)


class Scheduler:
    """Static batch slots, a FIFO queue, and the policy that chooses and accounts prefill and
    decode steps (module docstring); ``clock`` tells it now, in integer picoseconds."""

    def __init__(
        self,
        config: ServerConfig,
        policy: KVPolicy,
        cache: StepCache,
        records: ServingRecords,
        clock: Callable[[], int],
        progress: Progress | None = None,
        *,
        hooks: ServerHooks | None = None,
        forever: bool = False,
        load: Counters | None = None,
        speculation: Speculation | None = None,
        facts: PromptFacts | None = None,
        timeline: Timeline | None = None,
    ) -> None:
        """``forever``: serve until the simulation runs out of events (a replica, whose
        requests are not known in advance) instead of stopping after ``len(records)``.
        ``load``: where to keep the outstanding-work counters (``serving.load``; a cluster
        passes a row of its pool's board so a router can read every replica at once).
        ``speculation``: a draft's steps and rounds (``serving.speculative``).
        ``facts``: the policy's memoised per-prompt answers (:class:`PromptFacts`), shared
        by the servers of one policy; a server alone makes its own. ``timeline``: the loop
        ``clock`` reads, if it is one (its ``now`` is then read directly)."""
        if config.role != "mixed" and hooks is None:
            raise ValueError(f"a {config.role} server needs hooks to move its KV cache")
        if speculation is not None and (hooks is not None or config.role != "mixed"):
            raise ValueError("a speculative server runs alone, without cluster hooks")
        self.config = config
        self.policy = policy
        self._prompt_facts = facts if facts is not None else PromptFacts(policy)
        self.cache = cache
        self.records = records
        self._series = records.series if records.keeps_series else None  # rows, if kept
        # The per-request arrays as memoryviews of the same memory: an item read or written
        # through one is a C operation on a Python int, where a NumPy scalar access costs a
        # method call and a boxed scalar (a lone server touches eight a request).
        self._prompts = records.target_prompt_tokens.data
        self._outputs = records.output_tokens.data
        self._admit_ps = records.admit_ps.data
        self._first_token_ps = records.first_token_ps.data
        self._finish_ps = records.finish_ps.data
        self._slot_of = records.slot.data
        self._completions = records.completions.data
        self.clock = clock
        self._timeline = timeline
        self.progress = progress
        self.speculation = speculation
        rounds = speculation is not None and speculation.config.decoding is not None
        self.slots = RoundSlots(config.batch_slots) if rounds else Slots(config.batch_slots)
        self._rounds = rounds  # the slots run speculative rounds (``RoundSlots``)
        self.queue: deque[int] = deque()
        self.completed = 0
        self.until = None if forever else len(records)  # completions that end the run
        self._last_was_prefill = False
        self._decode_first = config.prefill_priority == "decode_first"
        self._bucket = 0
        self._bucket_from = 1  # longest caches from here to ``_bucket`` run at ``_bucket``
        # bucket -> [its decode shape, step ps, the step cache's tally once run (``run_tally``)]
        self._decode_steps: dict[int, list[Any]] = {}
        # a prompt's first prefill step, by its length (a dict of ints: no shape hashed, no
        # policy asked a request)
        self._first_steps: dict[int, FirstStep] = {}
        self._candidate: int | None = None  # what ``decide`` found to prefill (see there)
        self.prefill_shape: StepShape | None = None  # the prefill step in flight, if any
        # the prefill step begun: slot, request, prompt, tokens before and after, the other
        # slots packed into it, its prompt's first step if it is one
        self._prefilling: tuple[int, int, int, int, int, list[int], FirstStep | None] | None
        self._prefilling = None
        self.hooks = hooks
        # prompts pack into one prefill step: a lone server's (a replica's prefix cache and
        # hand-offs, and a speculative draft's prefill, are per request)
        self._packs = (
            config.prefill_batch_tokens is not None and hooks is None and speculation is None
        )
        self._handoffs: list[tuple[int, int]] = []  # (slot, request) whose KV moved, to apply
        self.load: Counters = load if load is not None else Load()  # see outstanding_tokens
        self.poke: Callable[[], None] = _nothing  # the driver: something arrived now
        self.on_complete: Callable[[int], None] | None = None  # a completion at this time

    def _now(self) -> int:
        """Now (``clock``): the timeline's field itself when there is one (a field read
        compiled, where calling the clock costs a call and two attribute lookups)."""
        timeline = self._timeline
        return timeline.now if timeline is not None else self.clock()

    # --- arrivals ---------------------------------------------------------------------------
    def enqueue(self, request: int, now: int, record: bool = True) -> None:
        """Queue an arrived request, its work counted; ``record``: write the series row (not
        when a decision at the same instant writes one anyway, replacing it)."""
        added = self._outputs[request]
        if self.config.role != "decode":
            added += self._prompts[request]
        else:
            added -= 1  # its first token came with its prefill
        self.load.add(added)
        self.queue.append(request)
        if record and self._series is not None:
            self.record(now)

    def outstanding_tokens(self) -> int:
        """Prompt tokens still to prefill plus output tokens still to generate, over the
        requests queued or in a slot here, as of now (mid-way through a batched decode run
        too): the load a router balances."""
        load = self.load
        return int(
            _outstanding_at(
                self.clock(),
                load.outstanding,
                load.run_start,
                load.run_end,
                load.run_step,
                load.run_decoding,
            )
        )

    def cuttable(self, steps: int) -> bool:
        """Whether an arrival (or a KV hand-off ending) during a decode run of ``steps`` could
        end it early: a slot could take the request (or its hand-off)."""
        slots = self.slots
        return steps > 1 and (slots.occupied < slots.n or bool(slots.waiting))

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

    def _prefill_candidate(self) -> int | None:
        """Slot whose next chunk to prefill, -1 to admit a new request, None: no prefill work."""
        slots = self.slots
        if slots.prefill_order:
            if self.config.prefill_priority == "decode_first" or slots.decoding == 0:
                return slots.prefill_order[0]
            for slot in slots.prefill_order:
                if slot not in slots.chunked_this_round:
                    return slot
        if self.queue and slots.occupied < slots.n:
            return -1
        return None

    def prefill_may_run(self) -> bool:
        """Whether prefill work may take the next step: under ``decode_first``, not right
        after a prefill step while slots decode."""
        return not (self._last_was_prefill and self._decode_first and self.slots.decoding > 0)

    def prefill_ran_elsewhere(self) -> None:
        """A prefill step of work outside the slots ran (a CoE router's): it counts as prefill
        work, so under ``decode_first`` a decode step comes next."""
        self._last_was_prefill = True

    def decide(self, now: int) -> str:
        """The action to take at ``now``: "admit" (a prefill step admitting a request),
        "prefill" (another prefill step), "decode" or "idle", recording the state it is taken
        in; not before an admission, which records the same instant and so replaces that row
        (``SeriesLog``: one row an instant). The prefill candidate found is the one
        :meth:`prefill` takes."""
        slots = self.slots
        candidate = None
        if self.prefill_may_run():
            if slots.prefill_order or self.queue:  # (else no candidate)
                candidate = self._prefill_candidate()
            if candidate is None:
                action = "decode" if slots.decoding > 0 else "idle"
            elif candidate < 0:
                self._candidate = candidate
                return "admit"
            else:
                action = "prefill"
        else:
            action = "decode"
        self._candidate = candidate
        self.record(now)
        return action

    # --- steps ------------------------------------------------------------------------------
    def prefill(self) -> Generator[int, None, None]:
        """One prefill step (:meth:`begin_prefill`): yields the delays (ps) to wait, then
        applies it (:meth:`end_prefill`)."""
        yield from self.begin_prefill()
        self.end_prefill()

    def begin_prefill(self) -> tuple[int, ...]:
        """Start one prefill step (admitting a request first if it starts one, and packing
        more waiting prompts into it when the runtime batches prefills) and account it; the
        delays (ps) to wait before :meth:`end_prefill`: the step's, after a speculative
        prefill's selection when it admits one. Nothing else reads or changes the state in
        between but arrivals (a packed step's prompts are admitted here)."""
        slots = self.slots
        slot = self._candidate
        if slot is None:  # (not found by ``decide`` just before)
            slot = self._prefill_candidate()
            assert slot is not None
        self._candidate = None
        delays: tuple[int, ...] = ()
        if slot < 0:
            slot = self._admit()
            request = slots.request[slot]
            speculation = self.speculation
            if speculation is not None and speculation.config.prefill is not None:
                # speculative prefill: the draft scores the whole prompt first
                whole = int(self.records.prompt_tokens[request])
                delays = (speculation.selection_ps(whole, count=True),)
            packs = self._packs
        else:
            request = slots.request[slot]
            packs = False
        prompt = self._prompts[request]
        before = slots.prefilled[slot]
        tally: list[int] | None
        first: FirstStep | None = None
        if before:
            shape, done = self._prefill_shape(prompt, before)
            tally = self.cache.run_tally(shape)
        else:
            first = self._first_steps.get(prompt)
            if first is None:
                first = self._first_step(prompt)
            shape, done, tally = first.shape, first.done, first.tally
            if packs and done == prompt:  # (no hooks: nothing was cached)
                packed = self._pack(shape)
                if packed:
                    return self._packed(slot, request, prompt, shape, packed, delays)
            if tally is None:
                tally = first.tally = self.cache.run_tally(shape)
            else:
                tally[0] += 1
        step = tally[1]
        if self.speculation is not None:
            step = self.speculation.prefill_ps(step, shape, count=True)
        self.records.prefill_steps += 1
        self.prefill_shape = shape
        self._prefilling = (slot, request, prompt, before, done, [], first)
        return (*delays, step)

    def _packed(
        self,
        slot: int,
        request: int,
        prompt: int,
        first: StepShape,
        packed: list[int],
        delays: tuple[int, ...],
    ) -> tuple[int, ...]:
        """:meth:`begin_prefill` of a step whose first prompt was packed with others."""
        shape = StepShape("prefill", 1 + len(packed), first.tokens, 0, first.select)
        step = self.cache.run(shape)
        self.records.prefill_steps += 1
        self.prefill_shape = shape
        self._prefilling = (slot, request, prompt, 0, prompt, packed, None)
        return (*delays, step)

    def end_prefill(self) -> None:
        """The prefill step begun by :meth:`begin_prefill` ended now: its prompts advance."""
        prefilling = self._prefilling
        assert prefilling is not None
        self._prefilling = None
        self.prefill_shape = None
        slot, request, prompt, before, done, packed, first = prefilling
        self._last_was_prefill = True
        self._prefilled(slot, request, prompt, before, done, first)
        slots, prompts = self.slots, self._prompts
        for other in packed:
            request = slots.request[other]
            prompt = prompts[request]
            self._prefilled(other, request, prompt, 0, prompt, None)

    def _admit(self) -> int:
        """The queue's first request takes the lowest free slot now (its admission time)."""
        slots = self.slots
        slot = slots.free_slot()
        request = self.queue.popleft()
        slots.admit(slot, request)
        now = self._now()
        self._admit_ps[request] = now
        self._slot_of[request] = slot
        if self.hooks is not None:
            self._skip_cached(slot, request)
        self.record(now)
        return slot

    def _prefill_shape(self, prompt: int, before: int) -> tuple[StepShape, int]:
        """The next prefill step of a prompt with ``before`` tokens done: (shape, new done)."""
        config = self.config
        return prefill_step(
            prompt,
            before,
            config.max_context,
            config.prefill_chunk_tokens,
            self._prompt_facts.compresses(prompt),
        )

    def _first_step(self, prompt: int) -> FirstStep:
        """A prompt's first prefill step, memoised by its length."""
        first = self._first_steps.get(prompt)
        if first is None:
            first = self._first_steps[prompt] = FirstStep(*self._prefill_shape(prompt, 0))
        return first

    def _pack(self, first: StepShape) -> list[int]:
        """Admit the waiting requests whose prompt prefills in the same static shape as the
        step's first one (FIFO, stopping at the first that does not), while a slot is free
        and the step's padded tokens stay within ``prefill_batch_tokens``; their slots."""
        budget = self.config.prefill_batch_tokens
        assert budget is not None
        slots, prompts, queue = self.slots, self._prompts, self.queue
        packed: list[int] = []
        tokens = first.tokens
        while queue and slots.occupied < slots.n and tokens + first.tokens <= budget:
            prompt = prompts[queue[0]]
            step = self._first_step(prompt)
            if step.shape != first or step.done != prompt:
                break
            packed.append(self._admit())
            tokens += first.tokens
        return packed

    def _prefilled(
        self, slot: int, request: int, prompt: int, before: int, done: int, first: FirstStep | None
    ) -> None:
        """A prefill step advanced ``slot``'s prompt from ``before`` to ``done`` tokens; the
        step that ends the prompt gives the first token and starts its decode (or hand-off)."""
        slots = self.slots
        slots.prefilled[slot] = done
        slots.chunked_this_round.add(slot)
        if done < prompt:
            self.load.add(before - done)
            return
        now = self._now()
        self._first_token_ps[request] = now
        self.records.tokens_generated += 1
        self.load.add(before - done - 1)  # the prompt's tokens and the first output token
        output = self._outputs[request]
        if self.hooks is not None:
            sent = self.hooks.prefilled(request)
            if sent is not None:  # the KV cache leaves: hold the slot until it has
                slots.hold(slot)
                self.load.add(1 - output)
                sent.callbacks.append(partial(self._handed_off, slot, request))
                return
        if output == 1:
            self.complete(slot, request, now)
            return
        self._start_decode(slot, request, prompt, output, first)

    def _skip_cached(self, slot: int, request: int) -> None:
        """Start a prefill past the prompt tokens a prefix cache holds (hooks decide how many)."""
        assert self.hooks is not None
        prompt = int(self.records.target_prompt_tokens[request])
        skipped = self.hooks.admitted(request, prompt)
        chunk = self.config.prefill_chunk_tokens
        if not 0 <= skipped < prompt or (chunk is not None and prompt > chunk and skipped % chunk):
            raise ValueError(f"hooks skipped {skipped} of {prompt} prompt tokens: not reusable")
        self.slots.prefilled[slot] = skipped
        self.load.add(-skipped)

    def _start_decode(
        self, slot: int, request: int, prompt: int, output: int, step: FirstStep | None = None
    ) -> None:
        """The slot's request (prefilled here, or its KV cache received) starts decoding:
        ``prompt`` tokens cached (the target's), ``output`` tokens in all, the first done;
        ``step``: the prompt's first prefill step, which keeps its first decode cache."""
        facts = self._prompt_facts
        if step is None:
            first = facts.first_cache(prompt)
        else:
            first = step.first_cache
            if first < 0:
                first = step.first_cache = facts.first_cache(prompt)
        cap = facts.last_cache(prompt, first, output - 1)
        slots = self.slots
        if isinstance(slots, RoundSlots):
            assert self.speculation is not None
            self.speculation.start(slots, self.records, slot, request, cap)
            return
        slots.start_decode(slot, first, cap, output - 1)

    # --- KV hand-offs (cluster replicas) -------------------------------------------------------
    def _handed_off(self, slot: int, request: int, _event: Event) -> None:
        """A KV transfer of this slot ended (sent or received): act at the next boundary."""
        self._handoffs.append((slot, request))
        self.poke()

    def at_boundary(self) -> None:
        """A replica at a step boundary, before deciding: the KV hand-offs that ended take
        effect, and a decode replica reserves free slots for queued requests."""
        if self._handoffs:
            self._apply_handoffs()
        if self.config.role == "decode":
            self._reserve_slots()

    def _apply_handoffs(self) -> None:
        for slot, request in self._handoffs:
            if self.config.role == "decode":
                records = self.records
                prompt = int(records.target_prompt_tokens[request])
                self._start_decode(slot, request, prompt, int(records.output_tokens[request]))
            else:  # sent: the slot is free
                self.slots.release(slot)
                assert self.hooks is not None
                self.hooks.left(request)
        self._handoffs.clear()

    def _reserve_slots(self) -> None:
        """Decode replica: every queued request that finds a free slot reserves it and starts
        receiving its KV cache (no prefill here)."""
        slots, hooks = self.slots, self.hooks
        assert hooks is not None
        while self.queue and slots.occupied < slots.n:
            slot = slots.free_slot()
            request = self.queue.popleft()
            slots.reserve(slot, request)
            received = hooks.receive(request)
            received.callbacks.append(partial(self._handed_off, slot, request))

    def decode_plan(self) -> tuple[StepShape, int, int, int]:
        """The next decode run from now: its shape, bucket, steps (until the next completion
        or bucket change; 1 when prefill work waits) and step time (ps); the load counters
        see it start."""
        slots = self.slots
        bucket = self._bucket
        if not slots.longest_within(self._bucket_from, bucket):
            longest = slots.longest_cache()
            if not self._bucket_from <= longest <= bucket:
                # the smallest bucket >= longest is also the smallest >= any cache up to it
                bucket = self._bucket = self.policy.decode_bucket(longest)
                self._bucket_from = longest
        # prefill work waits: a decode step yields to it at its boundary
        prefill_waits = slots.prefill_order or (self.queue and slots.occupied < slots.n)
        steps = 1 if prefill_waits else slots.steps_in_run(bucket)
        if self._rounds:
            assert self.speculation is not None
            shape = StepShape("decode", slots.n, 1, bucket)  # not run: rounds account theirs
            step = self.speculation.round_ps(self.cache, bucket)
            decoding = 0  # a round's tokens differ per slot: a run settles its count at its end
        else:
            known = self._decode_steps.get(bucket)
            shape, step = (known[0], known[1]) if known is not None else self.decode_shape(bucket)
            decoding = slots.decoding
        start = self._now()
        self.load.begin_run(start, start + steps * step, step, decoding)
        return shape, bucket, steps, step

    def decode_shape(self, bucket: int) -> tuple[StepShape, int]:
        """The decode step's shape at ``bucket`` and its time (ps), one shape object per
        bucket. Not for speculative rounds, whose steps are the draft's and the
        verification's."""
        known = self._decode_steps.get(bucket)
        if known is None:
            shape = StepShape("decode", self.slots.n, 1, bucket)
            known = self._decode_steps[bucket] = [shape, self.cache.step_ps(shape), None]
        return known[0], known[1]

    def decode_done(self, shape: StepShape, bucket: int, steps: int) -> None:
        """Account a decode run of ``steps`` steps that ended now; complete who finished."""
        slots = self.slots
        if self._rounds:
            assert self.speculation is not None
            self.speculation.run_rounds(self.cache, bucket, steps)
        else:
            known = self._decode_steps[bucket]  # (``decode_plan`` made it)
            tally = known[2]
            if tally is None:
                known[2] = self.cache.run_tally(shape, steps)
            else:
                tally[0] += steps
        records = self.records
        records.decode_steps += steps
        records.decode_runs += 1
        emitted = slots.emitted(steps)
        records.tokens_generated += emitted
        self.load.end_run(emitted)
        self._last_was_prefill = False
        now = self._now()
        for slot in slots.advance(steps):
            self.complete(slot, slots.request[slot], now)

    def complete(self, slot: int, request: int, now: int) -> None:
        """``slot``'s request completed at ``now``: its slot is free."""
        self._finish_ps[request] = now
        self._completions[request] += 1
        self.slots.release(slot)
        self.completed += 1
        if self.hooks is not None:
            self.hooks.left(request)
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


_outstanding_at: Any = outstanding_at
"""``serving.load.outstanding_at``, untyped here: on ints it gives a NumPy integer, which
compiled code would reject where the annotation says ``int``."""


def _nothing() -> None:
    """No driver to tell (until one sets ``Scheduler.poke``)."""
