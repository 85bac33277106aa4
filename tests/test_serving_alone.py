"""The one driver (``serving.driver``) serves alike whatever feeds it and whatever loop runs it.

Four ways of serving the same open-loop requests must agree to the picosecond, in every
per-request time, the time series, the step counts and (for the pushed ones) the outstanding
tokens a router reads at each arrival:

- a server alone: arrivals known in advance (``KnownArrivals``), decode runs cut where the
  next one falls, computed when the run starts (``serving.simulate``);
- a mixed replica (a cluster replica without hooks) on a Timeline, its requests pushed by an
  arrivals driver: one settle at time 0, a cut run's resumption moved to the step in flight;
- the same on ``simpy.Environment``, the oracle (tests/simpy_loop.py);
- that driver forced to settle after every step and to cut runs when it resumes (what
  prefill/decode replicas do), on the oracle.

All four must also match ``reference_serve`` (tests/test_serving_batched.py), which steps
one step at a time and so shares none of the cut arithmetic. Step times are round numbers
here so that arrivals fall exactly on step boundaries and many share an instant: the ties a
wrong boundary rule would get wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from simpy_loop import SimPyLoop
from test_serving_batched import reference_serve

from rdu_sim.config.workload import KVConfig
from rdu_sim.des.order import NORMAL
from rdu_sim.des.timeline import Timeline
from rdu_sim.kv import make_policy
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.serving.arrivals import NEVER, ClosedLoop, OpenLoop
from rdu_sim.serving.batching import BatchingPolicy, make_batching
from rdu_sim.serving.driver import KnownArrivals
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import RequestSet
from rdu_sim.serving.scheduler import Scheduler
from rdu_sim.serving.server import Server, ServerConfig
from rdu_sim.serving.simulate import arrivals_for, serve
from rdu_sim.serving.slots import Slots
from rdu_sim.serving.step_cache import PS_PER_S, StepCache, StepCost
from rdu_sim.shapes import StepShape

NS = 1000  # ps
MAX_CONTEXT = 4096


def round_step(shape: StepShape) -> StepCost:
    """Whole nanoseconds: a decode step 40 ns (+1 ns a 256-token bucket), a prefill 7 ns +
    1 ns a 128 tokens (+3 ns with the SnapKV selection)."""
    if shape.phase == "prefill":
        ns = 7 + shape.tokens // 128 + (3 if shape.select else 0)
    else:
        ns = 40 + shape.cache_len // 256
    return StepCost(ns * 1e-9)


def requests_of(seed: int, n: int, spread_ns: int) -> RequestSet:
    """``n`` requests arriving at whole nanoseconds in [0, spread_ns), many at equal times."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(1, 1500, size=n).astype(np.int64)
    output = rng.integers(1, 400, size=n).astype(np.int64)
    arrival_ns = np.sort(rng.integers(0, spread_ns, size=n))
    arrival_ns[1::7] = arrival_ns[0::7][: len(arrival_ns[1::7])]  # same-instant arrivals
    arrival_ns.sort()
    return RequestSet(prompt, output, arrival_ns * 1e-9, None)


def policy_of(name: str) -> KVPolicy:
    budget = {"full": None, "streamingllm": 516}.get(name, 1024)
    kv = KVConfig.model_validate(
        {"policy": name, "min_bucket": 256, "budget": budget, "recent": 512}
    )
    return make_policy(kv, MAX_CONTEXT)


def by_process(
    requests: RequestSet,
    policy: KVPolicy,
    config: ServerConfig,
    settle_every_step: bool,
    timeline: bool = False,
) -> tuple[ServingRecords, StepCache, list[int]]:
    """Serve with the requests pushed by another driver at their arrival times, on the
    oracle (or, ``timeline``, on a Timeline); the outstanding tokens read just before each
    arrival (what a router sees). ``settle_every_step``: the prefill/decode replicas' way."""
    loop: Any = Timeline() if timeline else SimPyLoop()
    cache = StepCache(round_step)
    records = ServingRecords(requests.prompt_tokens.copy(), requests.output_tokens.copy())
    server = Server(loop, config, policy, cache, records)
    server.driver.settles = settle_every_step
    assert requests.arrival_s is not None
    arrivals = np.rint(requests.arrival_s * PS_PER_S).astype(np.int64).tolist()
    seen: list[int] = []

    def feed() -> Any:
        for request, at in enumerate(arrivals):
            if at > loop.now:
                yield at
            seen.append(server.outstanding_tokens())
            server.submit(request)

    loop.start(feed(), NORMAL)
    loop.run()
    assert server.completed == len(requests)
    return records, cache, seen


def config_args(config: ServerConfig) -> tuple[Any, ...]:
    """``reference_serve``'s arguments after the request set, policy and cache."""
    return (
        config.batch_slots,
        config.max_context,
        config.prefill_priority,
        config.prefill_chunk_tokens,
    )


CASES = [
    {"policy": "full", "slots": 3, "spread": 20_000},
    {"policy": "full", "slots": 5, "spread": 2_000, "priority": "decode_first"},
    {"policy": "full", "slots": 4, "spread": 8_000, "chunk": 256},
    {"policy": "snapstream", "slots": 6, "spread": 10_000, "chunk": 512},
    {"policy": "snapkv", "slots": 2, "spread": 40_000, "priority": "decode_first"},
    {"policy": "streamingllm", "slots": 8, "spread": 500},
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_alone_equals_both_processes(case: dict[str, Any], seed: int) -> None:
    requests = requests_of(seed, 120, case["spread"] * NS)
    policy = policy_of(case["policy"])
    config = ServerConfig(
        case["slots"], MAX_CONTEXT, case.get("priority", "prefill_first"), case.get("chunk")
    )
    cache = StepCache(round_step)
    alone = serve(requests, policy, cache, config)
    mixed, mixed_cache, mixed_seen = by_process(requests, policy, config, False)
    settling, settling_cache, settling_seen = by_process(requests, policy, config, True)
    driven, driven_cache, driven_seen = by_process(requests, policy, config, False, True)
    for other in (mixed, settling, driven):
        for name in ("arrival_ps", "admit_ps", "first_token_ps", "finish_ps", "slot"):
            np.testing.assert_array_equal(getattr(other, name), getattr(alone, name), name)
        np.testing.assert_array_equal(other.series.times(), alone.series.times())
        np.testing.assert_array_equal(other.series.counts(), alone.series.counts())
        counts = ("prefill_steps", "decode_steps", "decode_runs", "tokens_generated")
        assert [getattr(other, c) for c in counts] == [getattr(alone, c) for c in counts]
    assert mixed_cache.steps == settling_cache.steps == driven_cache.steps == cache.steps
    assert mixed_seen == settling_seen == driven_seen  # the router's view at every arrival
    # and all three step as the naive one-step-at-a-time reference does (its own cut rule)
    expected = reference_serve(requests, policy, StepCache(round_step), *config_args(config))
    for name, key in (("admit_ps", "admit"), ("first_token_ps", "first"), ("finish_ps", "finish")):
        np.testing.assert_array_equal(getattr(alone, name), expected[key], name)
    # the cut rule was exercised: some runs ended before their completion or bucket change
    assert alone.decode_runs < alone.decode_steps


def test_closed_loop_source_hands_out_ids_in_submission_order() -> None:
    users = ClosedLoop(users=3, total=5)
    assert [users.next_time(), users.take(), users.take(), users.take()] == [0, 0, 1, 2]
    assert users.next_time() == NEVER
    users.completed(70)
    users.completed(70)
    users.completed(90)  # the 5 requests are all submitted: this user stops
    assert [users.take(), users.next_time(), users.take()] == [3, 70, 4]
    assert users.next_time() == NEVER


@pytest.mark.parametrize("seed", range(5))
def test_a_completion_moves_the_next_arrival_only_when_none_was_known(seed: int) -> None:
    """What ``Server._completed`` relies on to skip re-reading ``next_time``: a completion's
    request comes after every one already known, for both sources."""
    rng = np.random.default_rng(seed)
    sources = [ClosedLoop(users=3, total=40), OpenLoop(np.sort(rng.integers(0, 500, 40)))]
    for source in sources:
        now = 0
        for _ in range(200):
            before = source.next_time()
            if before != NEVER and rng.random() < 0.5:
                source.take()
                continue
            now += int(rng.integers(0, 20))
            source.completed(now)
            if before != NEVER:
                assert source.next_time() == before


def test_open_loop_source_follows_the_schedule() -> None:
    source = OpenLoop(np.array([0, 5, 5, 9], dtype=np.int64))
    source.completed(3)  # completions bring nothing
    taken = []
    while source.next_time() != NEVER:
        taken.append((source.next_time(), source.take()))
    assert taken == [(0, 0), (5, 1), (5, 2), (9, 3)]


def test_a_server_given_arrivals_refuses_cluster_hooks() -> None:
    with pytest.raises(ValueError, match="runs alone"):
        Server(
            Timeline(),
            ServerConfig(2, MAX_CONTEXT),
            policy_of("full"),
            StepCache(round_step),
            ServingRecords(np.ones(1, np.int64), np.ones(1, np.int64)),
            forever=True,
            arrivals=OpenLoop(np.zeros(1, np.int64)),
        )


class EveryDecisionRecords(BatchingPolicy):
    """A batching policy written in Python: ``inner``'s choices, with a series row written at
    every decision that has prefill work (a decision that records too replaces the row: one
    row an instant)."""

    def __init__(self, inner: BatchingPolicy) -> None:
        self.inner = inner
        self.scheduler: Scheduler | None = None
        self.asked = 0

    def next_prefill(self, slots: Slots, queued: int, after_prefill: bool) -> int:
        assert self.scheduler is not None
        self.asked += 1
        self.scheduler.record(self.scheduler.clock.now)
        return self.inner.next_prefill(slots, queued, after_prefill)

    def prefill_may_run(self, slots: Slots, after_prefill: bool) -> bool:
        return self.inner.prefill_may_run(slots, after_prefill)

    def prefill_waits(self, slots: Slots, queued: int) -> bool:
        return self.inner.prefill_waits(slots, queued)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_a_decision_before_an_admission_needs_no_row(case: dict[str, Any]) -> None:
    """The server records no row for a decision to admit (the admission's row, at the same
    instant, replaces it): the series equals one where every decision with prefill work
    records its own, through a batching policy written in Python (which the compiled
    scheduler calls as it calls its own)."""
    requests = requests_of(5, 120, case["spread"] * NS)
    policy = policy_of(case["policy"])
    config = ServerConfig(
        case["slots"], MAX_CONTEXT, case.get("priority", "prefill_first"), case.get("chunk")
    )
    lean = serve(requests, policy, StepCache(round_step), config)
    line = Timeline()
    records = ServingRecords(requests.prompt_tokens, requests.output_tokens)
    recording = EveryDecisionRecords(make_batching(config.prefill_priority))
    server = Server(
        line,
        config,
        policy,
        StepCache(round_step),
        records,
        arrivals=arrivals_for(requests, config.batch_slots),
        batching=recording,
    )
    recording.scheduler = server.scheduler
    line.run()
    assert server.completed == len(requests) and recording.asked >= len(requests)
    full = records
    assert len(full.series) == len(lean.series) > len(requests)
    np.testing.assert_array_equal(full.series.times(), lean.series.times())
    np.testing.assert_array_equal(full.series.counts(), lean.series.counts())


def test_a_server_alone_is_a_driver_of_a_timeline() -> None:
    config, policy = ServerConfig(2, MAX_CONTEXT), policy_of("full")
    line = Timeline()
    alone = Server(
        line,
        config,
        policy,
        StepCache(round_step),
        ServingRecords(np.full(3, 100, np.int64), np.full(3, 4, np.int64)),
        arrivals=OpenLoop(np.zeros(3, np.int64)),
    )
    assert isinstance(alone.driver.source, KnownArrivals)
    line.run()
    assert alone.completed == 3 and line.now > 0


def test_a_request_that_ends_at_its_first_token_never_asks_for_a_decode_cache() -> None:
    """With a one-token context every request is one prompt token and one output token: it
    completes at its prefill and never decodes, so the policy is never asked for a cache at
    the first decode step (1 + 1 tokens, which does not fit). The memo of the policy's
    per-prompt answers must ask as lazily as the policy would be asked."""
    from rdu_sim import api

    root = Path(__file__).resolve().parent.parent
    result = api.run(
        root / "workloads" / "llama3.1-8b-1socket.yaml",
        ["serving.max_context=1", "serving.requests=3"],
    )
    summary = result.to_dict()
    assert summary["requests_completed"] == 3
