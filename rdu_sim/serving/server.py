"""The continuous-batching server: a SimPy process driving static batch slots.

Policy (docs/serving.md has the full statement):

- Requests wait in one FIFO queue. A request is *admitted* to the lowest free slot when its
  first prefill step starts (queueing delay = admission - arrival).
- A prefill step is batch 1: the whole prompt padded to its bucket
  (``serving.buckets.prompt_bucket``), or, with ``prefill_chunk_tokens = C`` and a prompt
  longer than C, one chunk of C tokens attending to the ``cache_len`` tokens already
  prefilled (the last chunk is padded to C). The step that prefills the last prompt token
  also produces the first output token (TTFT = end of that step). SnapKV selection, when
  the policy compresses, is part of the compiled prefill program.
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
from dataclasses import dataclass
from functools import lru_cache, partial
from operator import attrgetter
from typing import Any, Literal

import simpy
from simpy.events import Event

from rdu_sim.des.order import LATE
from rdu_sim.des.simpy_events import redirect, scheduled
from rdu_sim.des.timeline import IDLE, Timeline
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.serving.arrivals import NEVER, Arrivals
from rdu_sim.serving.buckets import prefill_step
from rdu_sim.serving.clock import advance
from rdu_sim.serving.hooks import ServerHooks
from rdu_sim.serving.load import Counters, Load, outstanding_at
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.slots import Slots
from rdu_sim.serving.speculative import RoundSlots, Speculation
from rdu_sim.serving.step_cache import StepCache
from rdu_sim.shapes import StepShape

_NOW = attrgetter("now")

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


def _trigger(wake: Event, _event: Event) -> None:
    """Fire ``wake`` unless something else already did (a step boundary reached)."""
    if not wake.triggered:
        wake.succeed()


class PromptFacts:
    """The policy's answers for a prompt length, memoised (bounded): a million requests asked
    them two policy calls a request, through its checks, for a few thousand lengths. Each is
    asked only when needed, as the policy itself would be: a request that ends at its first
    token never asks for a decode cache (which need not fit its slot). Servers of one policy
    share one (a cluster pool's replicas: one each would hold the same answers 1,024 times).
    """

    def __init__(self, policy: KVPolicy) -> None:
        self.compresses: Callable[[int], bool] = lru_cache(maxsize=1 << 16)(policy.compresses)
        """Whether the policy compresses a prompt of this many tokens."""
        self.first_cache: Callable[[int], int] = lru_cache(maxsize=1 << 16)(
            partial(policy.cache_at, generated=1)
        )
        """The prompt's cache at its first decode step (after one generated token)."""


class Server:
    """Static batch slots, a FIFO queue, and the scheduler that runs prefill and decode steps."""

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
        """``forever``: keep serving until the simulation runs out of events (a replica, whose
        requests are not known in advance) instead of stopping after ``len(records)``.
        ``load``: where to keep the outstanding-work counters (``serving.load``; a cluster
        passes a row of its pool's board so a router can read every replica at once).
        ``speculation``: a draft's steps and rounds (``serving.speculative``).
        ``facts``: the policy's memoised per-prompt answers (:class:`PromptFacts`), shared
        by the servers of one policy; a server alone makes its own.
        ``arrivals``: the requests of a server alone, which it lands itself as its clock
        passes them (a driver of ``env``, a ``Timeline``). Without them the server is fed by
        :meth:`submit`: a driver of a ``Timeline`` when mixed, else a SimPy process in
        ``env`` (a ``simpy.Environment`` runs any server but one alone, as an oracle)."""
        if config.role != "mixed" and hooks is None:
            raise ValueError(f"a {config.role} server needs hooks to move its KV cache")
        if speculation is not None and (hooks is not None or config.role != "mixed"):
            raise ValueError("a speculative server runs alone, without cluster hooks")
        if arrivals is not None and (hooks is not None or forever):
            raise ValueError("a server given its arrivals runs alone, without cluster hooks")
        if arrivals is not None and not isinstance(env, Timeline):
            raise ValueError("a server given its arrivals is a driver: it needs a Timeline")
        # a driver of the timeline (no event objects), or a SimPy process (settles, hand-offs)
        driven = isinstance(env, Timeline) and config.role == "mixed"
        self._timeline = env if driven and isinstance(env, Timeline) else None
        self.env = env
        self.config = config
        self.policy = policy
        self._prompt_facts = facts if facts is not None else PromptFacts(policy)
        self.cache = cache
        self.records = records
        self._series = records.series if records.keeps_series else None  # rows, if kept
        self.progress = progress
        self.speculation = speculation
        rounds = speculation is not None and speculation.config.decoding is not None
        self.slots = RoundSlots(config.batch_slots) if rounds else Slots(config.batch_slots)
        self._rounds = rounds  # the slots run speculative rounds (``RoundSlots``)
        self.queue: deque[int] = deque()
        self.completed = 0
        self._wake: Event | None = None  # what a SimPy process waits on, idle
        self._idle = False  # a driver waits for a wake
        self._last_was_prefill = False
        self._bucket = 0
        self._bucket_from = 1  # longest caches from here to ``_bucket`` run at ``_bucket``
        self._decode_steps: dict[int, tuple[StepShape, int]] = {}  # bucket -> shape, step ps
        self.hooks = hooks
        self._until = None if forever else len(records)
        self._handoffs: list[tuple[int, int]] = []  # (slot, request) whose KV moved, to apply
        self.load: Counters = load if load is not None else Load()  # see outstanding_tokens
        self.arrivals = arrivals
        self._due = NEVER if arrivals is None else arrivals.next_time()  # its next arrival
        self._longest_step_s = lambda: cache.longest_step_s  # for the clock's range error
        # Now, in integer picoseconds (~13 reads a request): the timeline's or SimPy's; C
        # calls (attrgetter) where a method would cost twice as much
        self._clock: Callable[[], int]
        if isinstance(env, Timeline):
            self._clock = partial(_NOW, env)
        else:
            self._clock = self._simpy_now
        # Only prefill and decode replicas see same-instant events their own steps cause
        # elsewhere (KV hand-offs): a mixed one needs no settle after a step (module docstring).
        self._settles = config.role != "mixed"
        self._run_end: Event | int | None = None  # a mixed process's cuttable decode run's end
        self._run_plan = (0, 0, 1)  # and its (start, steps, step)
        self.process: simpy.Process | None = None
        self._who = 0  # its number as a driver of the timeline
        if self._timeline is not None:
            work = self._run() if arrivals is None else self._alone()
            self._who = self._timeline.start(work, LATE, endless=forever)
        else:
            self.process = env.process(self._run())  # type: ignore[arg-type]

    def _simpy_now(self) -> int:
        """Now on the SimPy clock, in integer picoseconds."""
        return int(self.env.now)

    # --- arrivals ---------------------------------------------------------------------------
    def submit(self, request: int) -> None:
        """A request arrives now (a server process: a router or a test hands it over)."""
        now = self._clock()
        self.records.arrival_ps[request] = now
        self._enqueue(request, now)
        self._poke()

    def enqueue(self, request: int) -> None:
        """Queue a request now, keeping the arrival time it already has (a decode replica
        receiving a request prefilled elsewhere; :meth:`submit` for a new one)."""
        self._enqueue(request, int(self.env.now))
        self._poke()

    def _enqueue(self, request: int, now: int, record: bool = True) -> None:
        """Queue an arrived request, its work counted; ``record``: write the series row (not
        when a decision at the same instant writes one anyway, replacing it)."""
        records = self.records
        added = records.output_tokens.item(request)
        if self.config.role != "decode":
            added += records.target_prompt_tokens.item(request)
        else:
            added -= 1  # its first token came with its prefill
        self.load.add(added)
        self.queue.append(request)
        if record and self._series is not None:
            self._record(now)

    def _land(self, until: int, record: bool = True) -> None:
        """A server alone: every request due by ``until`` arrives, at its own time (during a
        step, the slots' state is the step's, as a step-by-step server would record it).
        ``record=False``: they land at a decision, whose row at this instant replaces theirs."""
        arrivals = self.arrivals
        assert arrivals is not None
        at = self._due
        while at <= until:
            request = arrivals.take()
            self.records.arrival_ps[request] = at
            self._enqueue(request, at, record)
            at = arrivals.next_time()
        self._due = at

    def outstanding_tokens(self) -> int:
        """Prompt tokens still to prefill plus output tokens still to generate, over the
        requests queued or in a slot here, as of now (mid-way through a batched decode run
        too): the load a router balances."""
        load = self.load
        return int(
            outstanding_at(
                self._clock(),
                load.outstanding,
                load.run_start,
                load.run_end,
                load.run_step,
                load.run_decoding,
            )
        )

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
        """A mixed process's decode run, cut by an arrival now: it waits for the end of the
        step in flight instead of the run's (its resumption moves to a new event, as SimPy's
        own interrupts move it; the old end fires with no one waiting)."""
        old = self._run_end
        start, steps, step = self._run_plan
        now = self._clock()
        cut = self._cut(start, steps, step, now)
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

    # --- the scheduler alone ---------------------------------------------------------------
    def _alone(self) -> Generator[int, Any, None]:
        """A server alone as a driver of its timeline: serve every request of ``arrivals``,
        yielding each step's end.

        Arrivals due at a decision land first (a process settles same-instant events before
        deciding); those due during a step land as the step is taken (:meth:`_pass`); a
        decode run is cut where the next arrival falls (:meth:`_cut`). Stops early only if
        nothing is left to arrive (``serving.simulate`` then reports the requests that never
        completed)."""
        assert self.arrivals is not None and self._until is not None
        clock = self._clock
        while self.completed < self._until:
            now = clock()
            if self._due <= now:
                self._land(now, record=False)  # the decision records this instant
            action = self._decide(now)
            if action == "admit" or action == "prefill":
                for delay in self._prefill():
                    yield self._pass(delay)
            elif action == "decode":
                shape, bucket, steps, step = self._decode_plan()
                advance(now, steps * step, self._longest_step_s)  # the uncut run's range
                steps = self._cut(now, steps, step, self._due)
                yield self._pass(steps * step)
                self._decode_done(shape, bucket, steps)
            elif self._due == NEVER:
                return
            else:
                yield self._due
        self._record(clock())

    def _pass(self, delay: int) -> int:
        """A server alone: the time ``delay`` ps from now, the arrivals due by then landed
        (during a step, the slots' state is the step's, as a step-by-step server records)."""
        end = advance(self._clock(), delay, self._longest_step_s)
        if self._due <= end:
            self._land(end)
        return end

    def _cut(self, start: int, steps: int, step: int, arrival: int) -> int:
        """Steps of a decode run from ``start`` that an arrival at ``arrival`` leaves: when a
        slot could take it, the run ends with the step in flight when it arrives (one at
        least); otherwise all ``steps``."""
        slots = self.slots
        if steps > 1 and (slots.occupied < slots.n or slots.waiting):
            in_flight = max(1, -(-(arrival - start) // step))
            if in_flight < steps:
                self.load.run_end = start + in_flight * step
                return in_flight
        return steps

    # --- the process ------------------------------------------------------------------------
    def _run(self) -> Generator[Event | int | object, Any, None]:
        settle = True  # the first decision waits for every arrival at time 0
        while self._until is None or self.completed < self._until:
            if settle:
                yield self._at(0)  # settle: let same-instant events land first
            settle = self._settles
            if self._handoffs:
                self._apply_handoffs()
            if self.config.role == "decode":
                self._reserve_slots()
            action = self._decide(self._clock())
            if action == "admit" or action == "prefill":
                for delay in self._prefill():
                    yield self._at(delay)
            elif action == "decode":
                yield from self._decode()
            else:
                if self._timeline is not None:
                    self._idle = True
                    yield IDLE
                else:
                    self._wake = self.env.event()
                    yield self._wake
                    self._wake = None
        self._record(int(self.env.now))

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

    def _choose(self) -> str:
        """ "admit" (a prefill step admitting a request), "prefill" (another prefill step),
        "decode" or "idle"."""
        decoding = self.slots.decoding > 0
        if self.config.prefill_priority == "decode_first" and decoding and self._last_was_prefill:
            return "decode"
        candidate = self._prefill_candidate()
        if candidate is not None:
            return "admit" if candidate < 0 else "prefill"
        return "decode" if decoding else "idle"

    def _decide(self, now: int) -> str:
        """The action to take at ``now`` (:meth:`_choose`), recording the state it is taken
        in; not before an admission, which records the same instant and so replaces that
        row (``SeriesLog``: one row an instant)."""
        action = self._choose()
        if action != "admit" and self._series is not None:  # (a replica keeps no series)
            self._record(now)
        return action

    # --- steps ------------------------------------------------------------------------------
    def _prefill(self) -> Generator[int, None, None]:
        """One prefill step (admitting a request first if it starts one); yields the delays
        (ps) to wait, the state changing after each."""
        slots, records = self.slots, self.records
        slot = self._prefill_candidate()
        assert slot is not None
        if slot < 0:
            slot = slots.free_slot()
            request = self.queue.popleft()
            slots.admit(slot, request)
            now = self._clock()
            records.admit_ps[request] = now
            records.slot[request] = slot
            if self.hooks is not None:
                self._skip_cached(slot, request)
            if self._series is not None:
                self._record(now)
            if self.speculation is not None and self.speculation.config.prefill is not None:
                # speculative prefill: the draft scores the whole prompt first
                whole = int(records.prompt_tokens[request])
                yield self.speculation.selection_ps(whole, count=True)
        else:
            request = slots.request[slot]
        prompt = records.target_prompt_tokens.item(request)
        before = slots.prefilled[slot]
        config = self.config
        shape, done = prefill_step(
            prompt,
            before,
            config.max_context,
            config.prefill_chunk_tokens,
            self._prompt_facts.compresses(prompt),
        )
        step = self.cache.run(shape)
        if self.speculation is not None:
            step = self.speculation.prefill_ps(step, shape, count=True)
        records.prefill_steps += 1
        yield step
        self._last_was_prefill = True
        slots.prefilled[slot] = done
        slots.chunked_this_round.add(slot)
        if done < prompt:
            self.load.add(before - done)
            return
        now = self._clock()
        records.first_token_ps[request] = now
        records.tokens_generated += 1
        self.load.add(before - done - 1)  # the prompt's tokens and the first output token
        output = records.output_tokens.item(request)
        if self.hooks is not None:
            sent = self.hooks.prefilled(request)
            if sent is not None:  # the KV cache leaves: hold the slot until it has
                slots.hold(slot)
                self.load.add(1 - output)
                sent.callbacks.append(partial(self._handed_off, slot, request))
                return
        if output == 1:
            self._complete(slot, request, now)
            return
        self._start_decode(slot, request, prompt, output)

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

    def _start_decode(self, slot: int, request: int, prompt: int, output: int) -> None:
        """The slot's request (prefilled here, or its KV cache received) starts decoding:
        ``prompt`` tokens cached (the target's), ``output`` tokens in all, the first done."""
        cap = self.policy.cache_at(prompt, output - 1)
        slots = self.slots
        if isinstance(slots, RoundSlots):
            assert self.speculation is not None
            self.speculation.start(slots, self.records, slot, request, cap)
            return
        slots.start_decode(slot, self._prompt_facts.first_cache(prompt), cap, output - 1)

    # --- KV hand-offs (cluster replicas) -------------------------------------------------------
    def _handed_off(self, slot: int, request: int, _event: Event) -> None:
        """A KV transfer of this slot ended (sent or received): act at the next boundary."""
        self._handoffs.append((slot, request))
        self._poke()

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

    def _decode_plan(self) -> tuple[StepShape, int, int, int]:
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
            shape, step = self._decode_shape(bucket)
            decoding = slots.decoding
        start = self._clock()
        self.load.begin_run(start, start + steps * step, step, decoding)
        return shape, bucket, steps, step

    def _decode_shape(self, bucket: int) -> tuple[StepShape, int]:
        """The decode step's shape at ``bucket`` and its time (ps), one shape object per
        bucket (the step cache finds it by identity, not by comparing fields). Not for
        speculative rounds, whose steps are the draft's and the verification's."""
        known = self._decode_steps.get(bucket)
        if known is None:
            shape = StepShape("decode", self.slots.n, 1, bucket)
            known = self._decode_steps[bucket] = (shape, self.cache.step_ps(shape))
        return known

    def _decode(self) -> Generator[Event | int, Any, None]:
        """A server process's decode run: when a slot could take an arrival (or a KV hand-off
        can end), wait for the run's end or that, whichever comes first, then finish the step
        in flight."""
        shape, bucket, steps, step = self._decode_plan()
        slots = self.slots
        start = self._clock()
        end = start + steps * step
        if steps > 1 and (slots.occupied < slots.n or slots.waiting):
            if not self._settles:  # mixed: one event, moved earlier if an arrival cuts the run
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
                    steps = self._cut(start, steps, step, now)
                    yield self._at(start + steps * step - now)
        else:
            yield self._at(end - start)
        self._decode_done(shape, bucket, steps)

    def _decode_done(self, shape: StepShape, bucket: int, steps: int) -> None:
        """Account a decode run of ``steps`` steps that ended now; complete who finished."""
        slots = self.slots
        if self._rounds:
            assert self.speculation is not None
            self.speculation.run_rounds(self.cache, bucket, steps)
        else:
            self.cache.run(shape, steps)
        records = self.records
        records.decode_steps += steps
        records.decode_runs += 1
        emitted = slots.emitted(steps)
        records.tokens_generated += emitted
        self.load.end_run(emitted)
        self._last_was_prefill = False
        now = self._clock()
        for slot in slots.advance(steps):
            self._complete(slot, slots.request[slot], now)

    def _complete(self, slot: int, request: int, now: int) -> None:
        records = self.records
        records.finish_ps[request] = now
        records.completions[request] += 1
        self.slots.release(slot)
        self.completed += 1
        if self.hooks is not None:
            self.hooks.left(request)
        if self.arrivals is not None:
            self.arrivals.completed(now)
            if self._due == NEVER:  # else the next arrival stays the one already known
                self._due = self.arrivals.next_time()
        if self.progress is not None:
            self.progress(self.completed, len(records))

    def _at(self, delay: int) -> Event | int:
        """A LATE event ``delay`` ps from now (a step boundary or a settle point;
        SimulatedTimeError rather than a time past the clock's range, ``serving.clock``); on
        a timeline, the time it falls at."""
        end = advance(self._clock(), delay, self._longest_step_s)
        if self._timeline is not None:
            return end
        at: Event = scheduled(self.env, delay, LATE)
        return at

    def _record(self, now: int) -> None:
        """A time-series row: the state after a change at ``now`` (a replica keeps none)."""
        series = self._series
        if series is not None:
            slots = self.slots
            series.append(
                now, len(self.queue), len(slots.prefill_order), slots.decoding, self._bucket
            )
