"""What each request of a cluster run would see alone: the floors no replica count lowers.

More replicas of one configuration only take queueing and interference away; they never make
a step faster. So a request's TTFT is at least its own prefill run alone (batch 1, every
chunk, nothing queued; a prefix cache spares at most the leading blocks some earlier
request's prompt held, rounded as ``serving.buckets.reusable_prefix`` rounds them), and its
TPOT at least one decode step of its replica's static batch at the decode bucket of its
first decode (the bucket only grows as its cache grows, or when longer caches share the
step). A request the context limit rejected meets neither floor. These floors are exact
for a request that really is alone (tests/test_plan_why.py checks every request of real
runs against them), and they are the same at every replica count: the plan's stop rule
(``report.slo_why``) reads them once per configuration.

The step times come from the run's own step function (memoised by shape: most floors reuse
shapes the run already simulated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from rdu_sim.cluster.records import REJECTED
from rdu_sim.engine.timing import StepTiming
from rdu_sim.kv.paged import held_output
from rdu_sim.kv.sharing import shared_prefix_tokens
from rdu_sim.report.bound import StepBound, step_bound
from rdu_sim.serving.buckets import decode_rows, prefill_step, reusable_prefix
from rdu_sim.serving.clock import step_ps, to_s
from rdu_sim.shapes import StepShape

if TYPE_CHECKING:
    from rdu_sim.api_cluster import ClusterResult, PoolResolved
    from rdu_sim.cluster.replica import PoolRuntime


@dataclass(frozen=True)
class Floors:
    """Per request (in request order), seconds: ``ttft_s`` the prefill alone, ``tpot_s`` one
    decode step (0 for a request of one output token, which has no TPOT); ``inf`` for a
    rejected request. ``prefill_shapes`` and ``decode_shapes`` are each request's steps (the
    largest prefill step; None where the floor is 0 or infinite), to ask what binds them."""

    ttft_s: NDArray[np.float64]
    tpot_s: NDArray[np.float64]
    prefill_shapes: list[StepShape | None]
    decode_shapes: list[StepShape | None]
    prompt_tokens: NDArray[np.int64]


def _front(result: ClusterResult) -> PoolResolved:
    """The pool that prefills (mixed or prefill)."""
    return next(p for p in result.pools if p.runtime.config.role != "decode")


def _back(result: ClusterResult) -> PoolResolved:
    """The pool that decodes (mixed or decode)."""
    return next(p for p in result.pools if p.runtime.config.role != "prefill")


def _cacheable(result: ClusterResult) -> NDArray[np.int64]:
    """Per request, the most prompt tokens any prefix cache could hold for it: its leading
    shared blocks that an earlier request's prompt also held (caches of unbounded size);
    zero without a prefix cache."""
    requests = result.run.fit.requests
    prefix = result.scenario.config.prefix_cache
    out = np.zeros(len(requests), dtype=np.int64)
    if prefix is None or not requests.has_hashes:
        return out
    front = _front(result).runtime
    policy, role = front.policy, front.config.role
    block = prefix.block_tokens
    seen: set[int] = set()
    for request in range(len(requests)):
        prompt = int(requests.prompt_tokens[request])
        output = held_output(int(requests.output_tokens[request]), role)
        shared = shared_prefix_tokens(policy, prompt, output)  # the cluster's rule
        if not shared:
            continue
        blocks = requests.hashes(request)[: shared // block]
        leading = 0
        for value in blocks:
            if value not in seen:
                break
            leading += 1
        out[request] = leading * block
        seen.update(blocks)
    return out


def request_floors(result: ClusterResult) -> Floors:
    """Each request's TTFT and TPOT floors (module docstring)."""
    serving = result.run.serving
    rejected = result.run.records.status == REJECTED
    front, back = _front(result).runtime, _back(result).runtime
    prefill_config = front.config
    cacheable = _cacheable(result)
    n = len(serving.prompt_tokens)
    ttft = np.zeros(n, dtype=np.float64)
    tpot = np.zeros(n, dtype=np.float64)
    prefill_shapes: list[StepShape | None] = [None] * n
    decode_shapes: list[StepShape | None] = [None] * n
    prefills: dict[tuple[int, int], tuple[float, StepShape]] = {}
    decodes: dict[int, tuple[float, StepShape]] = {}
    for request in range(n):
        if rejected[request]:
            ttft[request] = tpot[request] = np.inf
            continue
        prompt = int(serving.prompt_tokens[request])
        cached = reusable_prefix(
            int(cacheable[request]),
            prompt,
            prefill_config.max_context,
            prefill_config.prefill_chunk_tokens,
            prefill_config.dynamic_batch,
        )
        known = prefills.get((prompt, cached))
        if known is None:
            known = prefills[(prompt, cached)] = _prefill(front, prompt, cached)
        ttft[request], prefill_shapes[request] = known
        if int(serving.output_tokens[request]) > 1:
            first = back.facts.first_cache(prompt)
            bucket = back.policy.decode_bucket(first)
            step = decodes.get(bucket)
            if step is None:
                # the fewest rows a decode step runs: one live sequence's (every slot of a
                # static graph over all slots)
                rows = decode_rows(back.config.decode_rows, 1, back.config.batch_slots)
                shape = StepShape("decode", rows, 1, bucket)
                step = decodes[bucket] = (
                    _seconds(back.step_times.cost(shape).step_s, shape),
                    shape,
                )
            tpot[request], decode_shapes[request] = step
    return Floors(ttft, tpot, prefill_shapes, decode_shapes, serving.prompt_tokens.copy())


def _seconds(step_s: float, shape: StepShape) -> float:
    """A step's time as the serving clock advances it (integer picoseconds)."""
    return to_s(step_ps(step_s, f"a {shape.phase} step"))


def _prefill(runtime: PoolRuntime, prompt: int, cached: int) -> tuple[float, StepShape]:
    """A prompt's prefill alone past ``cached`` tokens (the scheduler's steps): its time
    and its longest step."""
    config = runtime.config
    compresses = runtime.facts.of(prompt).compresses
    total_ps, longest, longest_s = 0, None, -1.0
    done = cached
    while done < prompt:
        shape, done = prefill_step(
            prompt,
            done,
            config.max_context,
            config.prefill_chunk_tokens,
            compresses,
            config.dynamic_batch,
        )
        seconds = runtime.step_times.cost(shape).step_s
        total_ps += step_ps(seconds, "a prefill step")
        if seconds > longest_s:
            longest, longest_s = shape, seconds
    assert longest is not None  # a prompt has at least one token to prefill
    return to_s(total_ps), longest


def bound_of(result: ClusterResult, shape: StepShape | None) -> StepBound | None:
    """What binds one of the run's steps (None when the engine gave no timing)."""
    if shape is None:
        return None
    pool = _front(result) if shape.phase == "prefill" else _back(result)
    detail = pool.runtime.step_times.cost(shape).detail
    if not isinstance(detail, StepTiming):
        return None
    return step_bound(detail, pool.pool.scenario.hardware)
