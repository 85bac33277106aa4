"""Admission check for absurdly large serving runs: estimate the work, refuse it up front.

The serving simulation is O(state changes), not O(steps) (docs/serving.md), and the engine
refuses a step whose kernel simulation would exceed ``engine.max_events``. What is left
unbounded is the request level itself, whose cost grows with

- **state changes**: about ``4 + 2 * chunks`` per request (arrival, admission, prefill steps
  and the decode steps interleaved with chunks, completion) plus one per decode bucket its
  cache grows through. Each costs ~20-30 us of CPU and ~250 bytes of records (one time-series
  row), so ``serving.prefill_chunk_tokens: 1`` on long prompts would need billions of them;
- **batch slots**: every state change updates the slot arrays, so at a million slots (``auto``
  on a tiny model) each one costs ~0.7 ms instead of ~25 us;
- **distinct step shapes**: each is compiled and simulated once by the engine (~0.1-1 s);
  small prefill chunks on long prompts make thousands of them.

``estimate_run`` turns these into *work units* (one unit is about one state change: ~25 us
and ~250 bytes): ``changes * (1 + slots / SLOTS_PER_UNIT) + shapes * UNITS_PER_SHAPE``;
``check_run`` refuses a run above ``serving.max_work`` (default 10 million units: a few
minutes and at most ~2.5 GB) with a :class:`RunTooLargeError` naming the largest term and
the knobs that shrink it. It is a ``ConfigError``, so ``rdu-sim run`` prints it and exits 2.
The estimate is cheap (NumPy over the generated requests, no simulation) and an upper bound
in practice (1.6x the measured rows on a million Llama requests): the shipped workloads need
1-7 % of the default, 10,000 DeepSeek-R1 requests ~8 %, a million Llama 3.1 8B requests
65-90 % (~70 s and ~1.1 GB measured).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from rdu_sim import human
from rdu_sim.compiler.placement import reserved_words
from rdu_sim.config.errors import ConfigError, ConfigIssue
from rdu_sim.config.overrides import overridden
from rdu_sim.kv.paged import PagedKV
from rdu_sim.scenario import Scenario
from rdu_sim.serving.buckets import program_rows, prompt_bucket
from rdu_sim.serving.requests import RequestSet, clip_to_context, typical_prompt
from rdu_sim.sim_warnings import RduSimWarning, warn
from rdu_sim.speculation import target_prompts

SLOTS_PER_UNIT = 40_000
"""Batch slots whose per-change array updates cost about as much as one state change."""

UNITS_PER_SHAPE = 10_000
"""Work units charged per distinct step shape (one compile plus one engine simulation)."""

UNITS_PER_COPY_CHUNK = 3
"""Work units charged per chunk a Composition of Experts' switch copies: ~8 events of the
copy engine and its channels a chunk (its DDR read and HBM write, their latencies, its
floor), ~80 us."""

BYTES_PER_CHANGE = 250
"""Approximate record memory of one state change (a time-series row and its share of the
per-request arrays and the summary's copies), measured on a million-request run."""


class RunTooLargeError(ConfigError):
    """A serving run whose estimated work exceeds ``serving.max_work``."""


@dataclass(frozen=True)
class RunEstimate:
    """What a serving run would cost, estimated before simulating it."""

    requests: int
    batch_slots: int
    state_changes: int  # scheduler events / time-series rows (upper bound)
    prefill_steps: int  # prefill steps (chunks) over all requests
    shapes: int  # distinct static step shapes the engine would simulate (upper bound)
    copy_chunks: int = 0  # chunks a Composition of Experts' switches may copy (upper bound)

    @property
    def slot_factor(self) -> float:
        """How much one state change costs at these batch slots, relative to a small batch."""
        return 1.0 + self.batch_slots / SLOTS_PER_UNIT

    @property
    def work(self) -> int:
        """Work units: state changes weighted by batch slots, plus the shapes' simulation."""
        return (
            int(self.state_changes * self.slot_factor)
            + self.shapes * UNITS_PER_SHAPE
            + self.copy_chunks * UNITS_PER_COPY_CHUNK
        )

    @property
    def memory_bytes(self) -> int:
        """Approximate peak memory of the run's records."""
        return self.state_changes * BYTES_PER_CHANGE


def _prefill_counts(
    prompts: np.ndarray,
    max_context: int,
    chunk: int | None,
    packed: int | None = None,
    slots: int = 1,
    ragged: bool = False,
) -> tuple[np.ndarray, int]:
    """(prefill steps per request, distinct prefill shapes) for clipped prompt lengths;
    ``packed``: the runtime packs whole prompts of one bucket into a step of up to that many
    tokens and ``slots`` prompts (each batch size is a shape of its own); ``ragged``: the
    runtime's prompts and last chunks unpadded (``buckets.prefill_step``)."""
    if chunk is None:
        steps = np.ones_like(prompts)
        chunked_shapes = 0
        whole = np.unique(prompts)
    else:
        steps = np.where(prompts > chunk, -(-prompts // chunk), 1)
        longest = int(prompts.max(initial=0))
        # Chunks of every cache_len below the longest prompt, with and without the selection.
        chunked_shapes = 2 * (-(-longest // chunk)) if longest > chunk else 0
        whole = np.unique(prompts[prompts <= chunk])
        if ragged:  # a last chunk shorter than the chunk: its own shape at its position
            tails = {
                ((p - 1) // chunk, prompt_bucket(p - (p - 1) // chunk * chunk, chunk, True))
                for p in map(int, np.unique(prompts[prompts > chunk]))
            }
            chunked_shapes += 2 * len(tails)
    buckets = {prompt_bucket(int(p), max_context, ragged) for p in whole}
    sizes = sum(1 if packed is None else min(slots, max(1, packed // b)) for b in buckets)
    return steps, 2 * sizes + chunked_shapes


def estimate_run(scenario: Scenario, batch_slots: int, requests: RequestSet) -> RunEstimate:
    """Upper-bound estimate of a serving run's state changes, shapes and work (no simulation).

    Per request: arrival, admission, completion and one decode run cut by an arrival (4), two
    per prefill step (the step, and the decode step interleaved with a chunk), and one per
    decode bucket between its prompt and its last cache. Shapes: two per prompt bucket used
    (with and without SnapKV selection; per batch size when the runtime packs prompts), two
    per chunk position, and every decode bucket;
    the workload's typical prompt (timed for the report's ``prefill_s``) counts as used. A
    draft (speculation) adds at most two shapes of its own per target shape (a round's
    draft steps; a prompt's draft prefill and look-ahead). A Composition of Experts' router
    prefills every prompt too (its steps and shapes again), and each request may cost two
    switches (one on demand, one prefetched), each copying the expert in chunks.
    """
    serving = scenario.workload.serving
    prompts, outputs = clip_to_context(
        np.asarray(requests.prompt_tokens, dtype=np.int64),
        np.asarray(requests.output_tokens, dtype=np.int64),
        serving.max_context,
    )
    packed = scenario.stack.prefill_batch_tokens
    ragged = scenario.stack.dynamic_batch
    steps, _ = _prefill_counts(prompts, serving.max_context, serving.prefill_chunk_tokens)
    # The report also times one prompt of the workload's typical length.
    typical = typical_prompt(serving, np.asarray(requests.prompt_tokens, dtype=np.int64))
    reported = np.append(prompts, typical)  # the same prompt api.run times
    _, prefill_shapes = _prefill_counts(
        reported, serving.max_context, serving.prefill_chunk_tokens, packed, batch_slots, ragged
    )
    decode_buckets = np.asarray(scenario.kv_policy.buckets(), dtype=np.int64)
    crossed = np.searchsorted(decode_buckets, prompts + outputs, side="left") - np.searchsorted(
        decode_buckets, prompts, side="left"
    )
    changes = int(4 * len(prompts) + 2 * steps.sum() + np.maximum(crossed, 0).sum()) + 2
    # the row counts a decode bucket is run at: a static runtime's programs, all of them;
    # a paged runtime's ladder once (its rungs met with its page buckets are far fewer than
    # their product, which would refuse the full-load runs: the estimate is short there)
    rule = scenario.stack.decode_rows
    rows = 1 if rule == "ladder" else program_rows(rule, batch_slots)
    shapes = prefill_shapes + len(decode_buckets) * rows
    if scenario.draft is not None:  # per target shape, at most two of the draft's
        shapes *= 3
    copy_chunks = 0
    if scenario.workload.coe is not None:
        from rdu_sim.serving.coe import switch_chunks  # (the compiler's weight inventory)

        changes += int(2 * steps.sum())
        shapes += prefill_shapes
        copy_chunks = 2 * len(prompts) * switch_chunks(scenario)
    return RunEstimate(
        requests=len(prompts),
        batch_slots=batch_slots,
        state_changes=changes,
        prefill_steps=int(steps.sum()),
        shapes=shapes,
        copy_chunks=copy_chunks,
    )


def _advice(estimate: RunEstimate, scenario: Scenario) -> str:
    """The knobs that shrink the largest term of the estimate."""
    serving = scenario.workload.serving
    hints: list[str] = []
    if estimate.slot_factor > 2:
        hints.append(
            f"set serving.batch_slots below {estimate.batch_slots:,} (it is the "
            "batch capacity when 'auto')"
        )
    chunk = serving.prefill_chunk_tokens
    if chunk is not None and (
        estimate.prefill_steps > 2 * estimate.requests
        or estimate.shapes * UNITS_PER_SHAPE > estimate.work // 2
    ):
        hints.append(f"raise serving.prefill_chunk_tokens (now {chunk}) or drop it")
    buckets = scenario.workload.kv.context_buckets
    if isinstance(buckets, list) and len(buckets) > 64:
        hints.append(f"use fewer kv.context_buckets (now {len(buckets)})")
    hints.append(f"lower serving.requests (now {estimate.requests:,})")
    hints.append(
        f"or raise serving.max_work (now {serving.max_work:,}) if this machine can afford it"
    )
    return "; ".join(hints)


class UnchunkedPromptWarning(RduSimWarning):
    """A prompt longer than the stack's token budget a step runs whole (no chunking set)."""


def unchunked_prompts(
    scenario: Scenario, prompt_tokens: NDArray[np.int64]
) -> tuple[int, int] | None:
    """(the longest prompt, the stack's ``prefill_batch_tokens``) when a run's prompts pass
    that budget (TensorRT-LLM's ``max_num_tokens``) with no ``serving.prefill_chunk_tokens``
    set, so each runs as one prefill step past it; None when no prompt does."""
    budget = scenario.stack.prefill_batch_tokens
    serving = scenario.workload.serving
    if budget is None or serving.prefill_chunk_tokens is not None or not len(prompt_tokens):
        return None
    longest = min(int(np.max(prompt_tokens)), serving.max_context)
    return None if longest <= budget else (longest, budget)


def unchunked_words(scenario: Scenario, prompt_tokens: NDArray[np.int64]) -> str | None:
    """What a run of prompts past the stack's ``prefill_batch_tokens`` with no
    ``serving.prefill_chunk_tokens`` is told (``unchunked_prompts``): each runs as one
    prefill step past the budget, where a runtime enforcing it would chunk them; None when
    no prompt is."""
    found = unchunked_prompts(scenario, prompt_tokens)
    if found is None:
        return None
    longest, budget = found
    return (
        f"prompts of up to {longest:,} tokens exceed the stack {scenario.stack.name}'s "
        f"prefill_batch_tokens ({budget:,}) and each runs as one prefill step; a runtime "
        f"that enforces its token budget chunks them (serving.prefill_chunk_tokens, e.g. "
        f"{budget})"
    )


def warn_unchunked(scenario: Scenario, prompt_tokens: NDArray[np.int64]) -> None:
    """:func:`unchunked_words` as a warning (UnchunkedPromptWarning) naming the workload."""
    words = unchunked_words(scenario, prompt_tokens)
    if words is not None:
        warn(UnchunkedPromptWarning(f"{scenario.workload_file}: {words}"))


def check_pool(
    scenario: Scenario,
    pool: PagedKV | None,
    prompts: NDArray[np.int64],
    outputs: NDArray[np.int64],
    role: str = "mixed",
) -> None:
    """A ConfigError at ``serving.max_context`` when a request's reservation
    (``kv.paged.PagedKV.request_pages``; requests of ``prompts`` and ``outputs`` tokens, of
    the prompt the tokens the target caches: ``speculation.target_prompts``)
    exceeds a paged KV cache's whole pool on a server of ``role``: the scheduler could
    never admit it (the run is refused before simulating, nothing lost). A lone run and
    each pool of a cluster ask."""
    if pool is None or not len(prompts):
        return
    prompts = target_prompts(scenario.workload.speculation, prompts)  # (the kept tokens)
    lengths = zip(prompts.tolist(), outputs.tolist(), strict=True)
    need = {pair: pool.request_pages(*pair, role) for pair in set(lengths)}  # each length once
    most = max(need.values())
    if most <= pool.pages:
        _check_readmission(scenario, pool, prompts, outputs, role)
        return
    too_big = [pair for pair, pages in need.items() if pages > pool.pages]
    over = sum(int(np.sum((prompts == p) & (outputs == o))) for p, o in too_big)
    # pages on demand: admitted on its prompt's pages, it would outgrow the pool
    reserve, reserves, never = (
        ("need", "needs", "finish")
        if pool.gives_on_demand(role)
        else ("reserve", "reserves", "be admitted")
    )
    refused = ConfigError.single(
        scenario.workload_file,
        "serving.max_context",
        f"{over:,} of {len(prompts):,} requests {reserve} more KV pages than the stack's whole "
        f"pool holds: the largest {reserves} {most:,} pages of {pool.page_tokens} tokens "
        f"(its {reserved_words(scenario)}), the pool has {pool.pages:,} "
        f"({pool.tokens:,} tokens, {human.size(pool.pages * pool.page_bytes, 4)} per "
        f"device{scenario.stack.kv_share_words()}), so it could never {never}; lower "
        f"serving.max_context to at most {pool.tokens:,} (requests are cut to fit it), or "
        "give the KV cache more memory",
        scenario.lines.get(("serving", "max_context")),
    )
    raise overridden(refused, scenario.workload_file, scenario.overrides)


def _check_readmission(
    scenario: Scenario,
    pool: PagedKV,
    prompts: NDArray[np.int64],
    outputs: NDArray[np.int64],
    role: str,
) -> None:
    """Pages on demand (``kv.paged.gives_on_demand``: ``kv_allocation: on_demand``, a mixed
    server decoding a token a step): a request is admitted only while its prompt's pages
    leave ``watermark_pages`` free, and one preempted after ``g`` output tokens is readmitted
    with a prompt of ``P + g`` tokens (``g`` up to ``O - 1``): a ConfigError at
    ``serving.max_context`` naming ``kv_watermark`` when the pages of ``P + O - 1`` tokens and
    the watermark exceed the pool (such a request could pass the reservation check and never
    be admitted). A pool that reserves (speculative rounds, a disaggregated replica) admits
    on its reservation alone, which :func:`check_pool` checked."""
    if not pool.gives_on_demand(role):
        return
    longest = {int(p + o - 1) for p, o in zip(prompts.tolist(), outputs.tolist(), strict=True)}
    need = {tokens: pool.request_pages(tokens, 0, role) for tokens in longest}
    largest = max(need.values())
    if largest + pool.watermark_pages <= pool.pages:
        return
    over = sum(
        int(np.sum(prompts + outputs - 1 == tokens))
        for tokens, pages in need.items()
        if pages + pool.watermark_pages > pool.pages
    )
    refused = ConfigError.single(
        scenario.workload_file,
        "serving.max_context",
        f"{over:,} of {len(prompts):,} requests could not be admitted with the stack "
        f"{scenario.stack.name}'s pages on demand: one preempted before its last token is "
        f"prefilled again with its prompt and output tokens but one, up to {largest:,} "
        f"pages of {pool.page_tokens} tokens, and an admission leaves the stack's kv_watermark "
        f"({pool.watermark_pages:,} pages) free of the pool's {pool.pages:,}; lower "
        f"serving.max_context, lower stack.kv_watermark, or give the KV cache more memory",
        scenario.lines.get(("serving", "max_context")),
    )
    raise overridden(refused, scenario.workload_file, scenario.overrides)


def check_run(scenario: Scenario, batch_slots: int, requests: RequestSet) -> RunEstimate:
    """The run's estimate; :class:`RunTooLargeError` when it exceeds ``serving.max_work``."""
    estimate = estimate_run(scenario, batch_slots, requests)
    limit = scenario.workload.serving.max_work
    if estimate.work > limit:
        message = (
            f"this run would need an estimated {estimate.work:,} units of work, more than "
            f"serving.max_work = {limit:,} (~{estimate.state_changes:,} scheduler state "
            f"changes for {estimate.requests:,} requests and {estimate.prefill_steps:,} "
            f"prefill steps, at {estimate.batch_slots:,} batch slots, "
            f"{estimate.shapes:,} step shapes to simulate, "
            + (
                f"{estimate.copy_chunks:,} chunks of expert switches to copy, "
                if estimate.copy_chunks
                else ""
            )
            + f"~{estimate.memory_bytes / 2**30:.1f} GiB of records); to shrink it, "
            + _advice(estimate, scenario)
        )
        raise RunTooLargeError([ConfigIssue(scenario.workload_file, "serving.max_work", message)])
    return estimate
