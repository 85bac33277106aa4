"""The batched-advance server gives exactly the per-request times of a naive reference.

`reference_serve` below implements the policy of docs/serving.md from scratch: one loop
iteration per step, no SimPy, asking the KV policy for every slot's cache at every step. The
fast server (batched decode runs, numpy slot state, the linear cache model, SimPy event
priorities) must agree with it to the picosecond.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from rdu_sim.config.workload import KVConfig, ServingConfig
from rdu_sim.kv import make_policy
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.serving.buckets import decode_rows, prompt_bucket
from rdu_sim.serving.requests import RequestSet, make_requests
from rdu_sim.serving.server import ServerConfig
from rdu_sim.serving.simulate import serve
from rdu_sim.serving.step_cache import PS_PER_S, StepCache, StepCost
from rdu_sim.shapes import DecodeRows, StepShape, batches_live


def serving_config(**data: Any) -> ServingConfig:
    """A validated ServingConfig from plain data (as a workload file would give it)."""
    return ServingConfig.model_validate(data)


def kv_config(**data: Any) -> KVConfig:
    """A validated KVConfig from plain data."""
    return KVConfig.model_validate(data)


def fake_step(shape: StepShape) -> StepCost:
    """Step times with awkward (non-round) constants, growing with the shape."""
    if shape.phase == "prefill":
        select = 1.9e-3 if shape.select else 0.0  # the SnapKV selection costs extra
        return StepCost(3.1e-3 + shape.tokens * 7.3e-7 + shape.cache_len * 1.1e-7 + select)
    return StepCost(1.7e-2 + shape.batch * 1.3e-4 + shape.cache_len * 3.7e-7)


@dataclass(frozen=True)
class ReferenceDraft:
    """What a draft changes in the reference (tests/test_speculation_serving.py): a decode
    step's time at a bucket (a round), the tokens request r emits in its j-th round, a
    prefill step's time given the target's, the time before a request's first prefill step,
    and the prompt tokens the target prefills."""

    decode_ps: Callable[[int, int], int]  # (rows, bucket) -> a round's time
    tokens: Callable[[int, int], int]
    prefill_ps: Callable[[StepShape, int], int]
    admission_ps: Callable[[int], int]
    prompt: Callable[[int], int]


def reference_serve(
    requests: RequestSet,
    policy: KVPolicy,
    cache: StepCache,
    slots: int,
    max_context: int,
    priority: str = "prefill_first",
    chunk: int | None = None,
    skipped: dict[int, int] | None = None,
    draft: ReferenceDraft | None = None,
    rows: DecodeRows = "slots",
) -> dict[str, np.ndarray]:
    """Per-request arrival/admit/first-token/finish times (ps), stepping one step at a time.
    ``skipped``: prompt tokens a prefix cache spares each request (prefill starts past them);
    ``draft``: a speculating server's steps; ``rows``: the stack's decode-rows rule (a
    paged stack's ``ladder`` also reads each sequence's pages, its decode bucket the mean
    cache's, and prefills unpadded prompts; unchunked only here)."""
    paged = batches_live(rows)
    assert not paged or chunk is None
    n = len(requests)
    prompt = requests.prompt_tokens.tolist()
    if draft is not None:
        prompt = [draft.prompt(p) for p in prompt]
    rounds = [0] * n
    output = requests.output_tokens.tolist()
    times = {k: np.full(n, -1, dtype=np.int64) for k in ("arrival", "admit", "first", "finish")}
    future: deque[tuple[int, int]] = deque()  # (time, request) of arrivals not yet seen
    next_id = 0
    if requests.arrival_s is None:
        users = min(requests.concurrency or slots, n)
        for _ in range(users):
            future.append((0, next_id))
            next_id += 1
    else:
        arrivals = np.rint(requests.arrival_s * PS_PER_S).astype(np.int64).tolist()
        future.extend((t, i) for i, t in enumerate(arrivals))
        next_id = n
    req: list[int] = [-1] * slots
    phase = ["empty"] * slots
    prefilled = [0] * slots
    generated = [0] * slots
    flagged = [False] * slots
    order: list[int] = []
    queue: deque[int] = deque()
    t = 0
    last_prefill = False
    done = 0

    def complete(slot: int) -> None:
        nonlocal done, next_id
        r = req[slot]
        times["finish"][r] = t
        req[slot] = -1
        phase[slot] = "empty"
        done += 1
        if requests.arrival_s is None and next_id < n:
            future.append((t, next_id))
            next_id += 1

    while done < n:
        while future and future[0][0] <= t:
            at, r = future.popleft()
            times["arrival"][r] = at
            queue.append(r)
        decoding = [s for s in range(slots) if phase[s] == "decode"]
        candidate: int | None = None
        if order:
            if priority == "decode_first" or not decoding:
                candidate = order[0]
            else:
                candidate = next((s for s in order if not flagged[s]), None)
        if candidate is None and queue and "empty" in phase:
            candidate = -1
        if priority == "decode_first" and decoding and last_prefill:
            action = "decode"
        elif candidate is not None:
            action = "prefill"
        elif decoding:
            action = "decode"
        else:
            t = future[0][0]
            continue
        if action == "prefill":
            assert candidate is not None
            slot = candidate
            if slot < 0:
                slot = phase.index("empty")
                r = queue.popleft()
                req[slot], phase[slot] = r, "prefill"
                prefilled[slot] = (skipped or {}).get(r, 0)
                order.append(slot)
                times["admit"][r] = t
                if draft is not None:
                    t += draft.admission_ps(r)
            r = req[slot]
            compresses = policy.compresses(prompt[r])
            if chunk is not None and prompt[r] > chunk:
                start = prefilled[slot]
                prefilled[slot] = min(prompt[r], start + chunk)
                last = prefilled[slot] == prompt[r]
                shape = StepShape("prefill", 1, chunk, start, select=compresses and last)
            else:
                cached = prefilled[slot]
                shape = StepShape(
                    "prefill",
                    1,
                    prompt_bucket(prompt[r] - cached, max_context - cached, paged),
                    cached,
                    select=compresses,
                )
                prefilled[slot] = prompt[r]
            t += cache.step_ps(shape) if draft is None else draft.prefill_ps(shape, r)
            last_prefill = True
            flagged[slot] = True
            if prefilled[slot] == prompt[r]:
                order.remove(slot)
                times["first"][r] = t
                phase[slot], generated[slot] = "decode", 1
                if output[r] == 1:
                    complete(slot)
        else:
            caches = [policy.cache_at(prompt[req[s]], generated[s]) for s in decoding]
            read = -(-sum(caches) // len(caches)) if paged else max(caches)
            bucket = policy.decode_bucket(read)
            batch = decode_rows(rows, len(decoding), slots)
            if draft is None:
                t += cache.step_ps(StepShape("decode", batch, 1, bucket))
            else:
                t += draft.decode_ps(batch, bucket)
            last_prefill = False
            flagged = [False] * slots
            for s in decoding:
                r = req[s]
                if draft is None:
                    generated[s] += 1
                else:
                    generated[s] += draft.tokens(r, rounds[r])
                    rounds[r] += 1
                if generated[s] == output[r]:
                    complete(s)
    return times


CASES: list[dict[str, Any]] = [
    {"policy": "full", "arrival": {"process": "closed_loop"}},
    {"policy": "full", "arrival": {"process": "poisson", "rate": 3.0}},
    {
        "policy": "full",
        "arrival": {"process": "poisson", "rate": 40.0},
        "prefill_priority": "decode_first",
    },
    {"policy": "full", "arrival": {"process": "all_at_once"}, "prefill_chunk_tokens": 300},
    {
        "policy": "full",
        "arrival": {"process": "poisson", "rate": 5.0},
        "prefill_chunk_tokens": 256,
        "prefill_priority": "decode_first",
    },
    {"policy": "snapstream", "arrival": {"process": "poisson", "rate": 4.0}},
    {
        "policy": "snapstream",
        "arrival": {"process": "closed_loop", "concurrency": 9},
        "prefill_chunk_tokens": 512,
    },
    {
        "policy": "snapkv",
        "arrival": {"process": "poisson", "rate": 6.0},
        "prefill_priority": "decode_first",
    },
    {"policy": "streamingllm", "arrival": {"process": "all_at_once"}},
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_batched_server_matches_step_by_step_reference(case: dict[str, Any]) -> None:
    max_context = 4096
    slots = 5
    case = dict(case)
    policy_name = case.pop("policy")
    budget = {"full": None, "streamingllm": 516}.get(policy_name, 1024)
    kv = kv_config(policy=policy_name, min_bucket=256, budget=budget, recent=512)
    policy = make_policy(kv, max_context)
    serving = serving_config(
        max_context=max_context,
        requests=60,
        seed=7,
        prompt_tokens={"dist": "lognormal", "median": 900, "sigma": 0.9, "low": 1, "high": 4000},
        output_tokens={"dist": "uniform", "low": 1, "high": 700},
        **case,
    )
    requests = make_requests(serving, slots)
    cache = StepCache(fake_step)
    records = serve(
        requests,
        policy,
        cache,
        ServerConfig(slots, max_context, serving.prefill_priority, serving.prefill_chunk_tokens),
    )
    expected = reference_serve(
        requests,
        policy,
        cache,
        slots,
        max_context,
        serving.prefill_priority,
        serving.prefill_chunk_tokens,
    )
    np.testing.assert_array_equal(records.arrival_ps, expected["arrival"])
    np.testing.assert_array_equal(records.admit_ps, expected["admit"])
    np.testing.assert_array_equal(records.first_token_ps, expected["first"])
    np.testing.assert_array_equal(records.finish_ps, expected["finish"])
    # The optimisation must actually batch: far fewer events than decode steps.
    assert records.decode_runs < records.decode_steps
