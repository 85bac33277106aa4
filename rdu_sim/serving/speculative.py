"""Speculation in the server: the steps a draft adds, and slots that advance by rounds.

Speculative decoding (``speculation.decoding``): a decode "step" of the server is a round.
The draft runs ``DRAFT_CATCH_UP`` tokens per slot (catching up with the last round's
outcome), then k - 1 single-token steps, drafting k tokens; the target verifies k + 1
tokens per slot in one static step. A round runs the rows the server's plain decode step
would (``DecodeRounds``' rule, ``StackConfig.decode_rows``: every slot of a static graph,
the live sequences of a paged stack at their mean cache's bucket). Every step is a static
shape timed by the engine through a step cache (the target's, and the draft's own); a stack
that runs a round as one program (``StackConfig.speculative_rounds``) pays its host's time
once a round, with the verify step, so the draft's steps count their device time alone
(:meth:`Speculation.draft_ps`). Each slot then advances by its own accepted tokens plus one
(:class:`RoundSlots`, drawn per request by ``serving.acceptance``); the rejected tokens'
cache entries are rolled back. The draft prefills every prompt too (it
drafts from the whole context): the same prefill shapes, on the draft. On the target's
sockets (``placement: shared``) the draft's steps run between the target's; on its own
(``separate``) its prefill runs beside the target's, and each round sends the drafted tokens
over a link and the verdict back (:class:`DraftLink`).

Speculative prefill (``speculation.prefill``): before a request's first prefill step, the
draft prefills its whole prompt and decodes ``look_ahead`` tokens whose attention scores
the prompt; the kept tokens are mapped to the target's tokenizer (``token_mapping`` per
prompt token, on the host) and the target prefills only them (``kept_tokens``): its slot
holds the kept tokens, so its decode attends to fewer too, and a compressing KV policy has
fewer to compress.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from rdu_sim.config.workload import SpeculationConfig
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.pickled import Reduced, by_fields
from rdu_sim.serving.acceptance import request_rounds
from rdu_sim.serving.buckets import prefill_steps, prompt_bucket
from rdu_sim.serving.clock import to_ps
from rdu_sim.serving.decode_rounds import DecodeRounds
from rdu_sim.serving.drafting import Drafting
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.slots import DECODING, Slots
from rdu_sim.serving.step_cache import PS_PER_S, StepCache
from rdu_sim.shapes import DecodeRows, StepShape
from rdu_sim.speculation import DRAFT_CATCH_UP, target_prompt

_NO_ROUNDS = np.zeros(0, dtype=np.int64)


class RoundSlots(Slots):
    """Slots whose decode steps are speculative rounds: each slot emits its own drawn number
    of tokens per round (``emitted_after[slot][r]``: its tokens after round r + 1,
    cumulative), so its cache grows by that, not by one per step: at most ``most`` a round
    (k + 1: the accepted drafts and the target's own token)."""

    def __init__(self, n: int, most: int = 1) -> None:
        super().__init__(n)
        self.most = most
        self.emitted_after: list[NDArray[np.int64]] = [_NO_ROUNDS] * n
        self.first_cache = np.zeros(n, dtype=np.int64)  # cache at the slot's first round
        self.rounds_done = np.zeros(n, dtype=np.int64)

    def start_rounds(
        self, slot: int, cache: int, cap: int, emitted_after: NDArray[np.int64]
    ) -> None:
        """The slot's request decodes in ``len(emitted_after)`` rounds."""
        self.start_decode(slot, cache, cap, len(emitted_after))
        self.emitted_after[slot] = emitted_after
        self.first_cache[slot] = cache
        self.rounds_done[slot] = 0

    def release(self, slot: int) -> None:
        super().release(slot)
        self.emitted_after[slot] = _NO_ROUNDS

    def _emitted(self, slot: int, rounds: int) -> int:
        """Tokens the slot emitted in its first ``rounds`` rounds."""
        return int(self.emitted_after[slot][rounds - 1]) if rounds else 0

    def steps_in_run(self, bucket: int) -> int:
        """Rounds until the next completion or until the longest cache outgrows ``bucket``."""
        steps = self._next_finish() - self.steps_done  # (the completion heap's top)
        for slot in np.flatnonzero((self.phase == DECODING) & (self.cap > bucket)):
            # the first round j whose cache, first_cache + emitted(j), exceeds the bucket
            room = bucket - int(self.first_cache[slot])
            crossing = int(np.searchsorted(self.emitted_after[slot], room, side="right")) + 1
            if crossing <= len(self.emitted_after[slot]):
                steps = min(steps, crossing - int(self.rounds_done[slot]))
        return steps

    def emitted(self, steps: int) -> int:
        """Tokens the decoding slots emit in their next ``steps`` rounds."""
        total = 0
        for slot in map(int, np.flatnonzero(self.phase == DECODING)):
            done = int(self.rounds_done[slot])
            total += self._emitted(slot, done + steps) - self._emitted(slot, done)
        return total

    def advance(self, steps: int) -> list[int]:
        """Run ``steps`` rounds; return the slots whose request is now complete."""
        mask = self.phase == DECODING
        for slot in map(int, np.flatnonzero(mask)):
            done = int(self.rounds_done[slot]) + steps
            self.rounds_done[slot] = done
            self.cache[slot] = self.first_cache[slot] + self._emitted(slot, done)
        self.chunked_this_round.clear()
        return self._finished(steps)


@dataclass(frozen=True)
class DraftLink:
    """A separate draft's link to the target's sockets (``run.draft_link``): each round
    sends ``row_bytes`` a row (its k drafted token ids there, its accepted count and the
    target's token back) at ``bandwidth`` (B/s), after ``latency_s`` each way."""

    latency_s: float
    bandwidth: float
    row_bytes: float

    def __reduce__(self) -> Reduced:
        return by_fields(self)  # (compiled, a frozen dataclass: ``rdu_sim.pickled``)

    def round_ps(self, rows: int) -> int:
        """The link's time in a round of ``rows`` rows (integer ps)."""
        return to_ps(2 * self.latency_s + rows * self.row_bytes / self.bandwidth)


@dataclass
class Speculation:
    """The draft's share of a server's work: its steps (from ``draft_cache``), the rounds
    of speculative decoding, the selection of speculative prefill. A round runs the rows the
    server's decode step would (``DecodeRounds``' rule, ``StackConfig.decode_rows``): every
    slot of a static graph, the live sequences of a paged stack's batch."""

    config: SpeculationConfig
    draft_cache: StepCache
    policy: KVPolicy
    max_context: int
    chunk: int | None
    seed: int
    rates: NDArray[np.float64] | None = None  # per request (speculative decoding)
    ragged: bool = False  # prompts prefilled unpadded (a paged runtime: ``buckets``)
    link: DraftLink | None = None  # separate sockets: drafted tokens there, the verdict back
    one_program: bool = False  # a round is one launch (``StackConfig.speculative_rounds``)
    # a round's time by (rows, decode bucket), as one int (``DecodeRounds._steps``' key)
    _round_ps: dict[int, int] = field(default_factory=dict, init=False)

    @property
    def separate(self) -> bool:
        return self.config.placement == "separate"

    # --- speculative decoding -------------------------------------------------------------
    def round_shapes(self, rows: int, bucket: int) -> tuple[StepShape, tuple[StepShape, ...]]:
        """(the target's verify step, the draft's steps) of a round of ``rows`` rows at
        decode bucket ``bucket``: static shapes, compiled per k; the draft's later steps
        attend up to k - 1 drafted tokens past the bucket."""
        decoding = self.config.decoding
        assert decoding is not None
        k = decoding.draft_tokens
        verify = StepShape("decode", rows, k + 1, bucket)
        draft = (StepShape("decode", rows, DRAFT_CATCH_UP, bucket),) + (
            StepShape("decode", rows, 1, bucket + k - 1),
        ) * (k - 1)
        return verify, draft

    def plain_shape(self, rows: int, bucket: int) -> StepShape:
        """The target's plain decode step of ``rows`` rows at ``bucket`` (one token a row):
        the step the server would run without the draft, with the same live sequences (the
        same rows rule), what a round stands in for and is measured against
        (``report.speculation``)."""
        return StepShape("decode", rows, 1, bucket)

    def link_ps(self, rows: int) -> int:
        """A separate draft's link time in a round of ``rows`` rows (0 on shared sockets)."""
        return 0 if self.link is None else self.link.round_ps(rows)

    def draft_ps(self, rows: int, bucket: int) -> int:
        """The draft's steps of a round of ``rows`` rows at ``bucket`` (integer ps). The
        stack's rule (``StackConfig.speculative_rounds``), here only: a round run as one
        program is launched once, its verify step paying the host's time, so its draft steps
        take their device time alone; a round run step by step pays each step's host time
        too."""
        cache, (_, draft) = self.draft_cache, self.round_shapes(rows, bucket)
        if self.one_program:
            return sum(cache.device_ps(s) for s in draft)
        return sum(cache.step_ps(s) for s in draft)

    def round_ps(self, target: StepCache, rows: int, bucket: int) -> int:
        """One round's time, ``rows`` rows at ``bucket`` (integer ps): the draft's steps
        (:meth:`draft_ps`), the link if any, then the verify step."""
        key = rows << 40 | bucket
        known = self._round_ps.get(key)
        if known is None:
            verify = self.round_shapes(rows, bucket)[0]
            total = self.draft_ps(rows, bucket) + target.step_ps(verify)
            known = self._round_ps[key] = total + self.link_ps(rows)
        return known

    def run_rounds(self, target: StepCache, rows: int, bucket: int, rounds: int) -> None:
        """Count ``rounds`` rounds of ``rows`` rows at ``bucket`` in the step caches."""
        verify, draft = self.round_shapes(rows, bucket)
        target.run(verify, rounds)
        for shape in draft:
            self.draft_cache.run(shape, rounds)

    def start(
        self,
        slots: RoundSlots,
        records: ServingRecords,
        slot: int,
        request: int,
        prompt: int,
        output: int,
        cap: int,
    ) -> None:
        """The request in ``slot`` (``prompt`` tokens cached, ``output`` in all) starts
        decoding: draw its rounds (its own generator), kept in ``records``."""
        decoding = self.config.decoding
        assert decoding is not None and self.rates is not None
        emitted_after, accepted = request_rounds(
            self.seed, request, float(self.rates[request]), decoding.draft_tokens, output - 1
        )
        records.rounds[request] = len(emitted_after)
        records.accepted_drafts[request] = accepted
        slots.start_rounds(slot, self.policy.cache_at(prompt, 1), cap, emitted_after)

    def prefill_ps(self, target_ps: int, shape: StepShape, count: bool) -> int:
        """A target prefill step's time with the draft's (speculative decoding: the draft
        prefills the same shape, after it on shared sockets, beside it on separate ones)."""
        if self.config.decoding is None:
            return target_ps
        draft = self.draft_cache.run(shape) if count else self.draft_cache.step_ps(shape)
        return max(target_ps, draft) if self.separate else target_ps + draft

    # --- speculative prefill ----------------------------------------------------------------
    def target_prompt(self, prompt: int) -> int:
        """Prompt tokens the target prefills (all of them without speculative prefill:
        ``speculation.target_prompt``)."""
        return target_prompt(self.config, prompt)

    def selection_shapes(self, prompt: int) -> list[StepShape]:
        """The draft's steps scoring a prompt: its prefill of the whole prompt (no KV
        selection: it keeps the prompt to score it), then ``look_ahead`` decode steps of one
        token, each compiled for the prompt's bucket and every look-ahead token before it
        (one static shape: the last step's)."""
        prefill = self.config.prefill
        assert prefill is not None
        shapes = prefill_steps(prompt, self.max_context, self.chunk, False, self.ragged)
        bucket = prompt_bucket(prompt, self.max_context, self.ragged)
        look = StepShape("decode", 1, 1, bucket + prefill.look_ahead - 1)
        return [*shapes, *[look] * prefill.look_ahead]

    def mapping_ps(self, prompt: int) -> int:
        """Host time mapping a prompt's kept tokens to the target's tokenizer (ps)."""
        prefill = self.config.prefill
        mapping = prefill.token_mapping if prefill is not None else None
        return to_ps(mapping * prompt) if mapping else 0

    def selection_ps(self, prompt: int, count: bool) -> int:
        """The whole speculative-prefill selection of a prompt before the target's prefill:
        the draft's steps and the token mapping (integer ps)."""
        cache = self.draft_cache
        steps = [cache.run(s) if count else cache.step_ps(s) for s in self.selection_shapes(prompt)]
        return sum(steps) + self.mapping_ps(prompt)


class SpeculativeRounds(DecodeRounds):
    """Decode runs of speculative rounds (the decode-rounds strategy, ``serving.decode_rounds``):
    a run's "steps" are rounds, each the draft's steps and one verify step, and each slot
    advances by its own accepted tokens (``RoundSlots``). A round runs the rows plain
    decoding's step would (the base's rule, ``rows``) and, on a paged stack, reads each
    sequence's own pages as it does (``per_sequence``)."""

    def ride_prefill(self) -> bool:
        """A round (the draft's steps and a verify step) is not a decode step a prefill step
        can carry: speculative servers run their prefill steps alone."""
        return False

    def __init__(
        self, speculation: Speculation, records: ServingRecords, rows: DecodeRows = "slots"
    ) -> None:
        super().__init__(rows)
        self.speculation = speculation
        self.records = records
        self._rows_planned = 0  # the rows of the run planned last

    def slots(self, n: int) -> Slots:
        """Slots that advance by rounds, k + 1 tokens at most a round."""
        decoding = self.speculation.config.decoding
        assert decoding is not None
        return RoundSlots(n, decoding.draft_tokens + 1)

    def plan(self, slots: Slots, cache: StepCache, bucket: int) -> tuple[StepShape, int, int]:
        """A round at ``bucket`` over the rows plain decoding would run now: the plain
        decode shape (not run: the round's own steps are counted at the run's end), the
        round's time, and no count of tokens (each slot's differ)."""
        speculation = self.speculation
        rows = self._rows_planned = self._batch(slots)
        return speculation.plain_shape(rows, bucket), speculation.round_ps(cache, rows, bucket), 0

    def done(self, cache: StepCache, bucket: int, steps: int) -> None:
        """Count ``steps`` rounds' steps in the target's and the draft's caches."""
        self.speculation.run_rounds(cache, self._rows_planned, bucket, steps)

    def start(
        self, slots: Slots, slot: int, request: int, prompt: int, output: int, first: int, cap: int
    ) -> None:
        """Draw the request's rounds and start them (``Speculation.start``)."""
        assert isinstance(slots, RoundSlots)
        self.speculation.start(slots, self.records, slot, request, prompt, output, cap)


class DraftWork(Drafting):
    """The draft's share of prefill (the drafting strategy, ``serving.drafting``): its own
    prefill of every prompt under speculative decoding, its scoring of a whole prompt before
    the target's first prefill step under speculative prefill."""

    def __init__(self, speculation: Speculation, whole_prompts: NDArray[np.int64]) -> None:
        self.speculation = speculation
        self.scores_prompts = speculation.config.prefill is not None
        self.whole_prompts = whole_prompts.data  # each request's whole prompt (not the kept)

    def packs(self) -> bool:
        """No: the draft's work is per request."""
        return False

    def admitted(self, request: int) -> int:
        """Speculative prefill: the draft's scoring of the whole prompt and the token
        mapping (ps); else nothing."""
        if not self.scores_prompts:
            return 0
        return self.speculation.selection_ps(int(self.whole_prompts[request]), count=True)

    def prefill_ps(self, target_ps: int, shape: StepShape) -> int:
        """The target's step with the draft's prefill of the same shape (speculative
        decoding)."""
        return self.speculation.prefill_ps(target_ps, shape, count=True)


@dataclass(frozen=True)
class PrefillSaving:
    """Speculative prefill of one prompt against the target prefilling all of it: times
    (s) and FLOPs (all sockets) of each part, and whether a compressing KV policy runs its
    selection on the whole prompt and on the kept tokens."""

    prompt_tokens: int
    kept_tokens: int
    draft_s: float  # the draft's prefill and look-ahead steps
    mapping_s: float  # host time mapping the kept tokens across tokenizers
    target_s: float  # the target's prefill of the kept tokens
    full_s: float  # the target's prefill of the whole prompt (without speculation)
    draft_flops: float
    target_flops: float
    full_flops: float
    compresses_full: bool
    compresses_kept: bool

    def __reduce__(self) -> Reduced:
        return by_fields(self)  # (compiled, a frozen dataclass: ``rdu_sim.pickled``)


def prefill_saving(
    speculation: Speculation, target: StepCache, policy: KVPolicy, prompt: int
) -> PrefillSaving:
    """What speculative prefill does to ``prompt``: each part's time and FLOPs from the step
    caches (simulating the shapes not run yet, among them the whole prompt's prefill)."""
    kept = speculation.target_prompt(prompt)
    context, chunk = speculation.max_context, speculation.chunk

    def steps(tokens: int) -> list[StepShape]:
        return prefill_steps(tokens, context, chunk, policy.compresses(tokens), speculation.ragged)

    def cost(cache: StepCache, shapes: list[StepShape]) -> tuple[float, float]:
        return (
            sum(cache.step_s(s) for s in shapes),
            sum(cache.cost(s).flops for s in shapes),
        )

    draft_s, draft_flops = cost(speculation.draft_cache, speculation.selection_shapes(prompt))
    target_s, target_flops = cost(target, steps(kept))
    full_s, full_flops = cost(target, steps(prompt))
    return PrefillSaving(
        prompt_tokens=prompt,
        kept_tokens=kept,
        draft_s=draft_s,
        mapping_s=speculation.mapping_ps(prompt) / PS_PER_S,
        target_s=target_s,
        full_s=full_s,
        draft_flops=draft_flops,
        target_flops=target_flops,
        full_flops=full_flops,
        compresses_full=policy.compresses(prompt),
        compresses_kept=policy.compresses(kept),
    )
