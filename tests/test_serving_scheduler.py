"""Conservation laws of the serving simulation, on a fake step-time function."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import numpy as np
import pytest

from rdu_sim.config.workload import KVConfig, ServingConfig
from rdu_sim.kv import make_policy
from rdu_sim.serving.buckets import prompt_bucket
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import make_requests
from rdu_sim.serving.server import ServerConfig
from rdu_sim.serving.simulate import serve
from rdu_sim.serving.step_cache import StepCache, StepCost
from rdu_sim.shapes import StepShape


def serving_config(**data: Any) -> ServingConfig:
    """A validated ServingConfig from plain data (as a workload file would give it)."""
    return ServingConfig.model_validate(data)


def kv_config(**data: Any) -> KVConfig:
    """A validated KVConfig from plain data."""
    return KVConfig.model_validate(data)


def fake_step(shape: StepShape) -> StepCost:
    if shape.phase == "prefill":
        return StepCost(2.9e-3 + shape.tokens * 6.1e-7 + shape.cache_len * 1.3e-7, 0.2, 0.8)
    return StepCost(1.9e-2 + shape.batch * 1.1e-4 + shape.cache_len * 2.3e-7, 0.9, 0.1)


def run(
    policy: str = "full", slots: int = 6, pack: int | None = None, **serving: Any
) -> tuple[ServingRecords, StepCache]:
    """Serve on the fake step time; ``pack``: the runtime's ``prefill_batch_tokens``."""
    max_context = serving.pop("max_context", 8192)
    config = serving_config(
        max_context=max_context,
        **{
            "requests": 80,
            "seed": 3,
            "prompt_tokens": {
                "dist": "lognormal",
                "median": 1500,
                "sigma": 0.7,
                "low": 16,
                "high": 8000,
            },
            "output_tokens": {"dist": "uniform", "low": 1, "high": 900},
            **serving,
        },
    )
    kv = kv_config(policy=policy, budget=None if policy == "full" else 2048, recent=1024)
    cache = StepCache(fake_step)
    requests = make_requests(config, slots)
    records = serve(
        requests,
        make_policy(kv, max_context),
        cache,
        ServerConfig(
            slots,
            max_context,
            config.prefill_priority,
            config.prefill_chunk_tokens,
            prefill_batch_tokens=pack,
        ),
    )
    return records, cache


ARRIVALS = [
    {"arrival": {"process": "poisson", "rate": 2.0}},
    {"arrival": {"process": "poisson", "rate": 50.0}, "prefill_priority": "decode_first"},
    {"arrival": {"process": "closed_loop", "concurrency": 10}, "prefill_chunk_tokens": 512},
    {"arrival": {"process": "all_at_once"}},
]


def time_average(series: np.ndarray, column: int, end: int) -> float:
    """Integral over [0, end] of a step function given by (time, value) rows, / end."""
    times = series[:, 0]
    values = series[:, column]
    # The last row at each instant holds the state after every change at that instant.
    keep = np.append(times[1:] != times[:-1], True)
    times, values = times[keep], values[keep]
    durations = np.diff(np.append(times, end))
    return float((values * durations).sum()) / end


@pytest.mark.parametrize("case", ARRIVALS, ids=lambda c: str(c["arrival"]["process"]))
def test_littles_law_from_the_time_series(case: dict[str, Any]) -> None:
    """L = lambda W: the time series (number in system, queue length) against the requests."""
    records, _ = run(**case)
    end = int(records.finish_ps.max())
    series = records.series_array()
    in_system = series[:, 1] + series[:, 2] + series[:, 3]
    series_l = np.column_stack([series[:, 0], in_system, series[:, 1]])
    throughput = len(records) / end
    time_in_system = float((records.finish_ps - records.arrival_ps).mean())
    assert time_average(series_l, 1, end) == pytest.approx(throughput * time_in_system, rel=1e-9)
    queue_delay = float((records.admit_ps - records.arrival_ps).mean())
    assert time_average(series_l, 2, end) == pytest.approx(
        throughput * queue_delay, rel=1e-9, abs=1e-12
    )


@pytest.mark.parametrize("case", ARRIVALS, ids=lambda c: str(c["arrival"]["process"]))
@pytest.mark.parametrize("policy", ["full", "snapstream"])
@pytest.mark.parametrize("pack", [None, 8192], ids=["one-prompt", "packed"])
def test_every_request_completes_once_and_tokens_add_up(
    case: dict[str, Any], policy: str, pack: int | None
) -> None:
    records, cache = run(policy, pack=pack, **case)
    assert (records.completions == 1).all()
    assert records.tokens_generated == int(records.output_tokens.sum())
    assert (records.arrival_ps <= records.admit_ps).all()
    assert (records.admit_ps < records.first_token_ps).all()
    assert (records.first_token_ps <= records.finish_ps).all()
    # Every decode step is counted once in the cache; every prefill step too.
    assert cache.hits + cache.misses == records.decode_steps + records.prefill_steps
    # Slots are never over-subscribed.
    series = records.series_array()
    assert (series[:, 2] + series[:, 3] <= 6).all()


@pytest.mark.parametrize(
    ("pack", "batches"), [(None, [1] * 8), (512, [4, 4]), (1024, [8]), (640, [5, 3])]
)
def test_batched_prefill_packs_waiting_prompts_within_the_token_budget(
    pack: int | None, batches: list[int]
) -> None:
    """Eight equal prompts at once: one prefill step per ``pack // 128`` of them, each step a
    batch of that many 128-token prompts; a packed prompt's first token comes at the end of
    its step, and the decode that follows is the same."""
    records, cache = run(
        slots=8,
        pack=pack,
        requests=8,
        prompt_tokens=128,
        output_tokens=5,
        arrival={"process": "all_at_once"},
    )
    prefills = [StepShape("prefill", k, 128, 0, select=False) for k in batches]
    assert records.prefill_steps == len(batches)
    assert sum(n for s, n in cache.steps.items() if s.phase == "prefill") == len(batches)
    ends = np.cumsum([cache.step_ps(s) for s in prefills])
    first = np.repeat(ends, batches)
    assert (records.first_token_ps == first).all()
    assert (records.admit_ps == np.repeat(np.append(0, ends[:-1]), batches)).all()
    assert records.tokens_generated == 8 * 5


def test_batched_prefill_packs_only_prompts_of_the_same_shape() -> None:
    """A prompt whose padded shape differs starts the next step (FIFO is kept)."""
    records, cache = run(
        slots=4,
        pack=8192,
        requests=4,
        prompt_tokens={"dist": "uniform", "low": 100, "high": 300},
        output_tokens=3,
        seed=5,
        arrival={"process": "all_at_once"},
    )
    buckets = [prompt_bucket(int(p), 8192) for p in records.prompt_tokens]
    runs = [len(list(g)) for _, g in itertools.groupby(buckets)]
    assert len(runs) > 1  # the seed draws prompts of two buckets
    assert records.prefill_steps == len(runs)
    heads = [b for b, _ in itertools.groupby(buckets)]
    expected = Counter(
        StepShape("prefill", n, b, 0, select=False) for b, n in zip(heads, runs, strict=True)
    )
    assert {s: n for s, n in cache.steps.items() if s.phase == "prefill"} == expected


def test_fifo_admission_order() -> None:
    records, _ = run(arrival={"process": "poisson", "rate": 30.0})
    order = np.argsort(records.admit_ps, kind="stable")
    assert (np.diff(records.arrival_ps[order]) >= 0).all()


@pytest.mark.parametrize("policy", ["full", "snapstream"])
def test_one_request_ttft_is_the_prefill_step_and_tpot_the_decode_step(policy: str) -> None:
    records, cache = run(
        policy,
        slots=4,
        requests=1,
        prompt_tokens=3000,
        output_tokens=200,
        arrival={"process": "all_at_once"},
    )
    max_context = 8192
    prefill = StepShape(
        "prefill", 1, prompt_bucket(3000, max_context), 0, select=policy == "snapstream"
    )  # 3000 tokens > the 2048 budget
    kv_policy = make_policy(
        kv_config(policy=policy, budget=None if policy == "full" else 2048, recent=1024),
        max_context,
    )
    bucket = kv_policy.decode_bucket(kv_policy.cache_at(3000, 199))
    decode = StepShape("decode", 4, 1, bucket)
    ttft = records.seconds(records.first_token_ps - records.arrival_ps)[0]
    tpot = records.seconds(records.finish_ps - records.first_token_ps)[0] / 199
    assert ttft == cache.step_s(prefill)
    assert tpot == pytest.approx(cache.step_s(decode), rel=1e-12)
    assert cache.steps == {prefill: 1, decode: 199}


def test_chunked_prefill_shapes_and_interleaving() -> None:
    """Chunks of C tokens attend to what is already prefilled; decode runs between them."""
    records, cache = run(
        slots=2,
        requests=2,
        prompt_tokens=1000,
        output_tokens=50,
        prefill_chunk_tokens=256,
        arrival={"process": "all_at_once"},
    )
    chunks = [s for s in cache.steps if s.phase == "prefill"]
    assert chunks == [StepShape("prefill", 1, 256, c, select=False) for c in (0, 256, 512, 768)]
    assert all(cache.steps[s] == 2 for s in chunks)
    # With no decoding slot, the first prompt's chunks run back to back; the second
    # prompt's chunks then alternate with decode steps of the first request.
    chunk_ps = sum(cache.step_ps(s) for s in chunks)
    decode_ps = cache.step_ps(StepShape("decode", 2, 1, 1024))
    assert records.first_token_ps[0] == chunk_ps
    assert records.first_token_ps[1] - records.first_token_ps[0] == chunk_ps + 3 * decode_ps


def test_decode_first_admits_one_prefill_between_decode_steps() -> None:
    records, cache = run(
        slots=8,
        requests=8,
        prompt_tokens=1000,
        output_tokens=100,
        prefill_priority="decode_first",
        arrival={"process": "all_at_once"},
    )
    first = np.sort(records.first_token_ps)
    prefill = cache.step_ps(StepShape("prefill", 1, 1024, 0, select=False))
    gaps = np.diff(first)
    # After the first prefill, each next prefill waits for one decode step.
    assert (gaps > prefill).all()
    records_pf, _ = run(
        slots=8,
        requests=8,
        prompt_tokens=1000,
        output_tokens=100,
        arrival={"process": "all_at_once"},
    )
    assert (np.diff(np.sort(records_pf.first_token_ps)) == prefill).all()


def test_chunked_compressing_prefill_selects_on_the_last_chunk_only() -> None:
    _, cache = run(
        "snapstream",
        slots=1,
        requests=1,
        prompt_tokens=3000,
        output_tokens=2,
        prefill_chunk_tokens=1024,
        arrival={"process": "all_at_once"},
    )
    chunks = sorted((s for s in cache.steps if s.phase == "prefill"), key=lambda s: s.cache_len)
    assert [(s.cache_len, s.select) for s in chunks] == [(0, False), (1024, False), (2048, True)]


def test_decode_bucket_follows_the_longest_cache() -> None:
    """Full attention changes decode bucket as caches grow; SnapStream never does."""
    _, cache_full = run(
        "full",
        slots=2,
        requests=2,
        prompt_tokens=900,
        output_tokens=3000,
        arrival={"process": "all_at_once"},
    )
    buckets = sorted(s.cache_len for s in cache_full.steps if s.phase == "decode")
    assert buckets == [1024, 2048, 4096]
    _, cache_snap = run(
        "snapstream",
        slots=2,
        requests=2,
        prompt_tokens=900,
        output_tokens=3000,
        arrival={"process": "all_at_once"},
    )
    assert sorted(s.cache_len for s in cache_snap.steps if s.phase == "decode") == [2048]


def test_every_policy_has_the_linear_cache_model() -> None:
    """The server assumes cache_at(p, g) == min(cache_at(p, 1) + g - 1, cache_at(p, last))."""
    max_context = 4096
    for name, extra in [
        ("full", {}),
        ("snapstream", {"budget": 1024, "recent": 512}),
        ("snapkv", {"budget": 1024}),
        ("streamingllm", {"recent": 512}),
    ]:
        policy = make_policy(kv_config(policy=name, min_bucket=256, **extra), max_context)
        for prompt in (1, 7, 500, 1023, 1024, 1025, 2000, 4000):
            last = max_context - prompt  # the longest output a clipped request can have
            if last < 2:
                continue
            c1 = policy.cache_at(prompt, 1)
            cap = policy.cache_at(prompt, last)
            for g in range(1, last + 1, 37):
                assert policy.cache_at(prompt, g) == min(c1 + g - 1, cap), (name, prompt, g)


def test_ten_thousand_long_requests_are_fast_and_compact() -> None:
    """The issue-10 shape (10k requests, ~8k-token outputs) costs events per state change,
    not per decode step: well under a second of serving time here, tiny records."""
    import time

    start = time.perf_counter()
    records, _ = run(
        "snapstream",
        slots=128,
        max_context=131072,
        requests=10_000,
        prompt_tokens={
            "dist": "lognormal",
            "median": 4096,
            "sigma": 0.8,
            "low": 256,
            "high": 65536,
        },
        output_tokens={
            "dist": "lognormal",
            "median": 8192,
            "sigma": 0.6,
            "low": 512,
            "high": 32768,
        },
    )
    elapsed = time.perf_counter() - start
    assert (records.completions == 1).all()
    assert records.decode_steps > 500_000
    assert records.decode_runs < 2 * len(records)  # one event per state change
    assert len(records.series) < 6 * len(records)
    assert elapsed < 15, elapsed  # ~1 s on a laptop; a per-step loop would take minutes
