"""Pages given on demand (the stack's ``kv_allocation: on_demand``, vLLM's block manager,
``serving.kv_pool.OnDemandPool``): an admission takes its prompt's pages, a decode run grows
a request a page as it crosses a page boundary, and a decode step the free pages cannot
grow preempts the running request that arrived last, which returns to the queue's front and
is prefilled again (its prompt and the tokens it had generated) when readmitted. Before,
every paged stack reserved a request's prompt and output tokens at admission (TensorRT-LLM's
GUARANTEED_NO_EVICT), vLLM's too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rdu_sim import api
from rdu_sim.api_cluster import run_cluster
from rdu_sim.cluster.prefix_cache import PooledBlocks, PrefixCache
from rdu_sim.compiler.placement import capacity_words
from rdu_sim.config.errors import ConfigError
from rdu_sim.kv.paged import PagedKV
from rdu_sim.report.summary import summarize
from rdu_sim.serving.kv_pool import OnDemandPool
from rdu_sim.serving.step_cache import StepCounts

REPO = Path(__file__).resolve().parents[1]
L8 = "llama3.1-8b-1socket"
WORKLOAD = {
    "hardware": "dgx-h100",
    "stack": "vllm-2024",
    "serving.max_context": 2048,
    "serving.batch_slots": 32,
    "serving.requests": 60,
    "serving.arrival": {"process": "all_at_once"},
    "serving.prompt_tokens": 256,
    "serving.output_tokens": {"dist": "uniform", "low": 64, "high": 1024},
    "serving.seed": 3,
}
BINDS = {**WORKLOAD, "stack.memory_utilization": 0.22}
"""A pool of 1,285 16-token pages: 32 whole requests do not fit it, 32 prompts do."""


def _run(overrides: dict[str, Any], allocation: str) -> Any:
    return api.run(api.load(L8, {**overrides, "stack.kv_allocation": allocation}))


def _times(run: Any) -> list[bytes]:
    r = run.records
    return [a.tobytes() for a in (r.admit_ps, r.first_token_ps, r.finish_ps, r.preemptions)]


def test_pages_in_use_never_exceed_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked after every change of the pool's pages: an admission, a run's growth, a
    prefill's blocks, a leaving or preempted request."""
    seen: list[int] = []

    def checked(name: str) -> None:
        original = getattr(OnDemandPool, name)

        def wrapper(self: OnDemandPool, *args: Any) -> None:
            original(self, *args)
            assert 0 <= self.in_use <= self.kv.pages
            seen.append(self.in_use)

        monkeypatch.setattr(OnDemandPool, name, wrapper)

    for name in ("take", "grow", "prefilled", "give_back"):
        checked(name)
    run = _run(BINDS, "on_demand")
    assert run.records.counts.preemptions > 0 and seen
    assert max(seen) == run.records.counts.kv_pages_peak == run.placement.kv_pool.pages


def test_memory_binding_on_demand_admits_more_and_preempts() -> None:
    """Every request completes once with its output tokens; on demand runs more requests at
    once than reserving whole requests, preempts some (each counted, the summary's
    ``preemptions``), and a preempted request keeps its first admission and first token."""
    reserve, demand = _run(BINDS, "reserve"), _run(BINDS, "on_demand")
    outputs = int(demand.records.output_tokens.sum())
    for run in (reserve, demand):
        records = run.records
        assert (records.completions == 1).all()
        assert records.tokens_generated == outputs
    # the records keep the requests as drawn (the scheduler re-prefills from its own copies)
    assert (demand.records.output_tokens == reserve.records.output_tokens).all()
    assert (demand.records.prompt_tokens == reserve.records.prompt_tokens).all()

    def most_running(run: Any) -> int:
        rows = run.records.series_array()
        return int((rows[:, 2] + rows[:, 3]).max())

    assert most_running(demand) > most_running(reserve)
    assert reserve.records.counts.preemptions == 0
    preempted = demand.records.preemptions
    assert preempted.sum() == demand.records.counts.preemptions > 0
    pool = demand.summary().to_dict()["kv_pool"]
    assert pool["preemptions"] == int(preempted.sum())
    assert "preemptions" not in reserve.summary().to_dict()["kv_pool"]
    once = preempted > 0
    records = demand.records
    assert (records.admit_ps[once] < records.first_token_ps[once]).all()
    assert (records.first_token_ps[once] < records.finish_ps[once]).all()


def test_with_ample_memory_on_demand_runs_as_reserving() -> None:
    """No page runs short: the same admissions, steps and times as reserving (no request
    preempted); only the pool's use differs (a request holds its cache so far, never its
    whole reservation)."""
    reserve, demand = _run(WORKLOAD, "reserve"), _run(WORKLOAD, "on_demand")
    assert demand.records.counts.preemptions == 0
    assert _times(demand) == _times(reserve)
    assert demand.summary().makespan_s == reserve.summary().makespan_s
    assert demand.records.counts.kv_pages_peak < reserve.records.counts.kv_pages_peak


def test_on_demand_is_deterministic() -> None:
    first, second = _run(BINDS, "on_demand"), _run(BINDS, "on_demand")
    assert _times(first) == _times(second)
    assert first.records.counts.preemptions == second.records.counts.preemptions > 0


def test_the_watermark_keeps_pages_free_at_admission() -> None:
    """A higher watermark admits later: the runs differ."""
    low = _run({**BINDS, "stack.kv_watermark": 0.0}, "on_demand")
    high = _run({**BINDS, "stack.kv_watermark": 0.2}, "on_demand")
    assert _times(low) != _times(high)


def test_on_demand_is_refused_beside_mixed_steps_and_unread_by_static_slots() -> None:
    """A mixed step's decode rows would grow pages mid-step (not modelled): refused, at the
    field. Static slots hold a whole sequence each: the vLLM stack with its pages taken
    away runs as the reserving one."""
    with pytest.raises(ConfigError, match="kv_allocation") as error:
        api.load(
            L8,
            {"hardware": "dgx-h100", "stack": "tensorrt-llm", "stack.kv_allocation": "on_demand"},
        )
    assert "'on_demand' with mixed_batching is not modelled" in str(error.value)
    static = {**WORKLOAD, "serving.requests": 8, "stack.kv_page_tokens": None}
    assert _times(_run(static, "on_demand")) == _times(_run(static, "reserve"))


def test_a_preempted_request_unpins_its_cached_blocks() -> None:
    """A prefix cache's blocks in the pool: a preempted request's prompt blocks stay cached,
    idle (evictable), and its readmission pins them again, taking only the rest."""
    kv = PagedKV(page_tokens=4, pages=12, slot_tokens=1 << 20, on_demand=True)
    cache = PrefixCache(6)
    hashes = {1: [10, 11], 2: [20]}
    counts = StepCounts()
    pool = OnDemandPool(kv, counts, blocks=PooledBlocks(cache, 2, hashes.__getitem__))
    assert pool.fits(1, 16, 100)  # (the prompt's 4 pages, not its 29-page reservation)
    cache.acquire(1, hashes[1])
    pool.take(1, 16, 100, 1)
    cache.insert(1, hashes[1])
    pool.prefilled(1, 2)
    assert (pool.reserved, pool.cached_pages) == (0, 4)
    pool.decoding(1, 16, 0)
    assert pool.short(0) == 0 and pool.steps_fit(0, 100) == 4 * 8  # 8 free pages of 4
    pool.grow(5, 3)  # 21 tokens: 6 pages, 2 its own
    assert (pool.reserved, pool.in_use) == (2, 6)
    cache.acquire(2, hashes[2])
    pool.take(2, 8, 10, 4)  # another prompt's 2 pages
    assert pool.short(32 - 1) > 0  # request 1 at 48 tokens would need 12 pages
    pool.give_back(1, 5)  # preempted: its own pages free, its blocks idle
    cache.release(1)
    assert (pool.reserved, pool.cached_pages, cache.idle) == (2, 4, 2)
    assert pool.fits(1, 21, 95)  # readmitted, 21 tokens: its 2 cached blocks and 2 pages
    cache.acquire(1, hashes[1])
    pool.take(1, 21, 95, 6)
    assert (pool.reserved, pool.in_use, cache.idle) == (2 + 2, 8, 0)


def test_growth_is_counted_per_page_boundary() -> None:
    """A request of 16 prompt tokens in 4-token pages: 4 pages at admission; its step k
    caches 16 + k tokens, so it needs a fifth page at step 1 and a sixth at step 5."""
    kv = PagedKV(page_tokens=4, pages=5, slot_tokens=1 << 20, on_demand=True)
    pool = OnDemandPool(kv, StepCounts())
    pool.take(7, 16, 10, 0)
    pool.decoding(7, 16, 0)
    assert pool.steps_fit(0, 9) == 4  # the fifth page holds tokens 17 to 20
    pool.grow(4, 1)
    assert pool.short(4) == 1  # the fifth step's token needs a sixth page
    assert np.array_equal([pool.reserved, pool.free], [5, 0])


def test_a_cluster_replica_with_a_prefix_cache_preempts_and_serves_every_request(
    tmp_path: Path,
) -> None:
    """The shipped Mooncake trace (prompts sharing prefixes) on one vLLM replica whose pool
    binds: preempted requests unpin their blocks and are prefilled again, hitting the cache;
    every request the reserving run serves is served, and no page is used twice."""
    tables, pools, lookups = {}, {}, {}
    for allocation in ("reserve", "on_demand"):
        path = tmp_path / f"{allocation}.yaml"
        path.write_text(
            f"name: gpu\npools:\n  serve:\n    workload: {REPO / 'workloads' / (L8 + '.yaml')}\n"
            "    replicas: 1\n    set: {hardware: dgx-h100, stack: vllm-2024, "
            f"stack.kv_allocation: {allocation}, stack.memory_utilization: 0.226, "
            "stack.prefill_batch_tokens: null}\nrouter: {policy: least_outstanding}\n"
            f"traffic: {{trace: {REPO / 'workloads' / 'traces' / 'mooncake-300.jsonl'}, "
            "format: mooncake}\nslo: {ttft: 1 s, tpot: 40 ms, attainment: 0.9}\n"
            "prefix_cache: {block_tokens: 512}\n"
        )
        run = run_cluster(path)
        tables[allocation] = run.requests()
        pools[allocation] = run.to_dict()["pools"]["serve"]["kv_pool"]
        lookups[allocation] = run.to_dict()["prefix_cache"]["lookups"]
    reserve, demand = tables["reserve"], tables["on_demand"]
    assert (demand["status"] == reserve["status"]).all()
    assert (demand["output_tokens"] == reserve["output_tokens"]).all()
    served = demand["status"] == "served"
    assert served.sum() > 250 and (demand["finish_s"][served] > 0).all()
    assert pools["on_demand"]["preemptions"] > 0 and "preemptions" not in pools["reserve"]
    assert pools["on_demand"]["peak_pages"] <= pools["on_demand"]["pages"]
    # each prompt looked up once, at its first admission (a readmission's are not counted)
    assert lookups["on_demand"] == lookups["reserve"] > 0


def test_the_request_preempted_is_the_running_one_that_arrived_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM's rule: its running queue in arrival order, the tail preempted first. Seen at
    each preemption (a request giving its pages back, all but its last time: it completes
    once): among the requests holding pages then, it arrived last."""
    given: list[tuple[int, list[int]]] = []
    original = OnDemandPool.give_back

    def give_back(self: OnDemandPool, request: int, now: int) -> None:
        given.append((request, list(self._room)))
        original(self, request, now)

    monkeypatch.setattr(OnDemandPool, "give_back", give_back)
    arriving = {**BINDS, "serving.arrival": {"process": "poisson", "rate": 40.0}}
    records = _run(arriving, "on_demand").records
    arrivals = records.arrival_ps
    last = {request: at for at, (request, _) in enumerate(given)}
    preemptions = [(at, request, running) for at, (request, running) in enumerate(given)]
    preemptions = [p for p in preemptions if last[p[1]] != p[0]]
    assert len(preemptions) == records.counts.preemptions > 0
    assert len(set(arrivals.tolist())) > 50  # (the arrivals differ)
    for _, request, running in preemptions:
        assert max((arrivals[r], r) for r in running) == (arrivals[request], request)


def test_a_request_preempted_mid_prefill_keeps_its_first_token() -> None:
    """Chunked prefill under preemption: a request preempted before its first token (its
    prefill not ended) records the first token its readmission's prefill gives, and its
    admission the first one's; every request's times are ordered arrival <= admission <=
    first token <= finish."""
    chunked = {
        **BINDS,
        "serving.requests": 120,
        "serving.max_context": 4096,
        "serving.prompt_tokens": {"dist": "uniform", "low": 64, "high": 3000},
        "serving.arrival": {"process": "poisson", "rate": 40.0},
        "serving.prefill_chunk_tokens": 128,
        "stack.kv_watermark": 0.0,
    }  # (3 of its 35 preemptions take a request mid-prefill)
    records = _run(chunked, "on_demand").records
    assert records.counts.preemptions > 0
    assert (records.completions == 1).all()
    assert (records.arrival_ps <= records.admit_ps).all()
    assert (records.admit_ps < records.first_token_ps).all()
    assert (records.first_token_ps <= records.finish_ps).all()


def test_a_request_readmitted_past_the_watermark_is_refused() -> None:
    """A request preempted before its last token is prefilled again with ``P + O - 1``
    tokens, and an admission leaves the watermark free: an 18-page pool with 2 watermark
    pages holds a reservation of 17 pages (a prompt of 64 tokens and 200 output, 16-token
    pages) but not its readmission's 17 pages and the watermark's 2 (refused naming
    kv_watermark); without the watermark, or reserving whole requests, it runs."""
    from rdu_sim.serving.limits import check_pool

    scenario = api.load(L8, {**BINDS, "stack.kv_allocation": "on_demand"})
    prompts, outputs = np.array([64, 64]), np.array([200, 10])
    fits = PagedKV(page_tokens=16, pages=18, slot_tokens=1 << 20, on_demand=True)
    check_pool(scenario, fits, prompts, outputs)
    tight = PagedKV(
        page_tokens=16, pages=18, slot_tokens=1 << 20, on_demand=True, watermark_pages=2
    )
    with pytest.raises(ConfigError, match=r"1 of 2 requests.*kv_watermark \(2 pages\)"):
        check_pool(scenario, tight, prompts, outputs)
    reserving = PagedKV(page_tokens=16, pages=18, slot_tokens=1 << 20, watermark_pages=2)
    check_pool(scenario, reserving, prompts, outputs)


def test_the_decode_run_after_a_preemption_sees_the_queue_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A decode step that preempted runs at once; whether prefill work waits for its
    boundary (a run of one step) is judged on the queue after the preemption: the preempted
    request at its front, waiting when its readmission (its prompt and generated tokens)
    does not fit. Seen at the pool: the victims' readmissions asked of the pool after they
    left, then the run's steps planned (``steps_fit``)."""
    after: list[tuple[bool, int]] = []
    state: dict[str, Any] = {"victim": None}
    original_short, original_give, original_fit, original_take = (
        OnDemandPool.short,
        OnDemandPool.give_back,
        OnDemandPool.steps_fit,
        OnDemandPool.take,
    )

    def short(self: OnDemandPool, steps_done: int) -> int:
        state["steps_done"] = steps_done
        return original_short(self, steps_done)

    def give_back(self: OnDemandPool, request: int, now: int) -> None:
        started = self._decoding.get(request)
        done = state.get("steps_done")
        original_give(self, request, now)
        if started is not None and done is not None:  # (preempted: a decode step's room)
            prompt, start = started
            state["victim"] = (request, prompt + 1 + done - start)

    def take(self: OnDemandPool, request: int, prompt: int, output: int, now: int) -> None:
        state["victim"] = state["steps_done"] = None  # (an admission: a decision came first)
        original_take(self, request, prompt, output, now)

    def steps_fit(self: OnDemandPool, steps_done: int, steps: int) -> int:
        victim = state["victim"]
        if victim is not None:
            request, prompt = victim
            after.append((self.fits(request, prompt, 0), steps))
            state["victim"] = None
        state["steps_done"] = None
        return original_fit(self, steps_done, steps)

    monkeypatch.setattr(OnDemandPool, "short", short)
    monkeypatch.setattr(OnDemandPool, "give_back", give_back)
    monkeypatch.setattr(OnDemandPool, "steps_fit", steps_fit)
    monkeypatch.setattr(OnDemandPool, "take", take)
    records = _run(BINDS, "on_demand").records
    assert records.counts.preemptions > 0
    assert any(not fits for fits, _ in after)
    for fits, steps in after:
        assert (steps == 1) == fits


def test_a_clusters_replicas_share_one_copy_of_the_served_tokens() -> None:
    """A scheduler giving pages on demand changes a preempted request's prompt and output in
    its own copies: one copy a run (made when the first asks), not one a replica (a
    replica's memory was the requests' once more each)."""
    from rdu_sim.serving.records import ServingRecords

    records = ServingRecords(np.array([5, 6, 7]), np.array([9, 8, 7]))
    first, second = records.replica_view(), records.replica_view()
    prompts, outputs = first.served_tokens()
    assert second.served_tokens()[0] is prompts and second.served_tokens()[1] is outputs
    assert records.served_tokens()[0] is prompts
    prompts[0] += 3
    assert records.target_prompt_tokens.tolist() == [5, 6, 7] and outputs.tolist() == [9, 8, 7]


def test_speculative_prefill_scores_a_prompt_once_however_often_it_is_preempted() -> None:
    """Speculative prefill on pages on demand: the draft scores each whole prompt before its
    first prefill; a preempted request's readmission prefills its kept tokens and those it
    generated, the draft's scoring not run again. The draft's steps are those of a run
    whose pool never binds, where nothing is preempted (the same prompts, each scored once,
    and the same plain decode steps: the draft runs none)."""
    from test_speculation_memory import PAGED_PREFILL, SPECDEC

    sets = {
        **PAGED_PREFILL,
        "stack": "vllm-2024",
        "stack.kv_allocation": "on_demand",
        "serving.requests": 40,
        "serving.arrival": {"process": "all_at_once"},
        "serving.output_tokens": 1024,
        "serving.max_context": 8192,
        "serving.batch_slots": 64,
    }
    steps = {}
    for utilization in (0.25, 0.3):
        run = api.run(SPECDEC, {**sets, "stack.memory_utilization": utilization})
        cache = run.speculation.draft_cache
        steps[utilization] = (cache.hits + cache.misses, run.records.counts.preemptions)
    assert steps[0.25][1] > 0 and steps[0.3][1] == 0
    assert steps[0.25][0] == steps[0.3][0]


def test_each_admission_leaves_the_watermark_and_each_request_holds_its_caches_pages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At every admission the pages left to grow into (free and idle cached blocks') after
    it took its own are the watermark at least; after every decode run's growth each
    decoding request's room is exactly its cache's pages (its prompt and the steps it
    decoded), no page short or spare."""
    from rdu_sim.kv.paged import reserved_pages

    admissions: list[int] = []
    grown: list[int] = []
    take, grow = OnDemandPool.take, OnDemandPool.grow

    def taking(self: OnDemandPool, request: int, prompt: int, output: int, now: int) -> None:
        take(self, request, prompt, output, now)
        assert self._spare() >= self.watermark > 0
        admissions.append(request)

    def growing(self: OnDemandPool, steps_done: int, now: int) -> None:
        grow(self, steps_done, now)
        kv = self.kv
        for request, (prompt, start) in self._decoding.items():
            cache = reserved_pages(
                prompt, steps_done - start, kv.slot_tokens, kv.page_tokens, kv.extra_tokens
            )
            assert self._room[request] == cache
            grown.append(request)

    monkeypatch.setattr(OnDemandPool, "take", taking)
    monkeypatch.setattr(OnDemandPool, "grow", growing)
    records = _run({**BINDS, "stack.kv_watermark": 0.05}, "on_demand").records  # 64 pages
    assert records.counts.preemptions > 0
    assert len(admissions) == len(records) + records.counts.preemptions and grown


def test_the_capacity_words_say_pages_come_on_demand() -> None:
    """Only a reserving stack's words say a request reserves its pages at admission; on
    demand they say what sized the batch: the prompt's pages and the watermark."""
    words = {}
    for allocation in ("reserve", "on_demand"):
        scenario = api.load(L8, {**WORKLOAD, "stack.kv_allocation": allocation})
        words[allocation] = capacity_words(scenario, 100, 32)
    assert "each request reserves its prompt and output tokens at admission" in words["reserve"]
    assert "(20 pages of 16 tokens;" in words["reserve"]
    assert "at admission" not in words["on_demand"]
    assert (
        "(16 pages of 16 tokens; each request admitted on the pages of its prompt tokens, "
        "leaving the stack's kv_watermark (1.0% of the pool) free; the stack gives pages on "
        "demand as requests decode, preempting when they run out (kv_allocation: on_demand))"
    ) in words["on_demand"]


def test_auto_sizes_an_on_demand_batch_by_its_prompts_pages_and_the_watermark() -> None:
    """vLLM's scheduler admits while the free pages less a prompt's leave the watermark: the
    batch ``auto`` picks under pages on demand is the most slots whose smallest prompts'
    pages (256 tokens: 16 pages) and the watermark fit the pool beside their activations,
    more than the reserving rule's (256 + 64 tokens: 20 pages a request)."""
    from rdu_sim.compiler.placement import batch_capacity, pool_pages, weight_inventory

    picked = {}
    for allocation in ("reserve", "on_demand"):
        scenario = api.load(L8, {**BINDS, "stack.kv_allocation": allocation})
        picked[allocation] = batch_capacity(scenario)
    scenario = api.load(L8, {**BINDS, "stack.kv_allocation": "on_demand"})
    weights = sum(w.bytes for w in weight_inventory(scenario))

    def fits(slots: int) -> bool:
        pages = pool_pages(scenario, slots, weights)
        return slots * 16 + int(0.01 * pages) <= pages

    n = picked["on_demand"]
    assert fits(n) and not fits(n + 1)
    assert n > picked["reserve"]


def test_a_request_longer_than_the_pool_is_refused_in_its_allocations_words() -> None:
    """A 64 + 300-token request is 23 pages of 16 tokens against a 20-page pool: reserving,
    it could never be admitted; on demand it is admitted on its prompt's 4 pages and could
    never finish."""
    from rdu_sim.serving.limits import check_pool

    scenario = api.load(L8, {**BINDS, "stack.kv_allocation": "on_demand"})
    prompts, outputs = np.array([64]), np.array([300])
    for on_demand, words in ((False, "reserves 23 pages"), (True, "needs 23 pages")):
        pool = PagedKV(page_tokens=16, pages=20, slot_tokens=1 << 20, on_demand=on_demand)
        with pytest.raises(ConfigError) as refused:
            check_pool(scenario, pool, prompts, outputs)
        message = str(refused.value)
        assert words in message
        never = "could never finish" if on_demand else "could never be admitted"
        assert never in message


SPECDEC = "workloads/speculative/llama3.1-70b-16socket-specdec.yaml"
TIGHT_SPECDEC = {
    "hardware": "dgx-h100",
    "parallelism.tp": 8,
    "stack": "vllm-2024",
    "serving.requests": 4,
    "serving.batch_slots": 4,
    "serving.max_context": 131072,
    "serving.prefill_chunk_tokens": 2048,
    "stack.memory_utilization": 0.27,
    "serving.prompt_tokens": 58800,
    "serving.output_tokens": 200,
}
"""A pool of 3,710 pages: one 58,800 + 200-token request's reservation (3,688 pages) fits;
a preempted one's readmission, 58,999 tokens and the 1% watermark, would not."""


def test_speculative_rounds_reserve_under_an_on_demand_stack() -> None:
    """Speculative rounds grow a slot k + 1 tokens a round, so their pool reserves whatever
    the stack's kv_allocation (`kv.paged.gives_on_demand`); the refusal that guards
    readmissions after a preemption, which a reserving pool never makes, must not refuse
    the run, and the report names no preemptions. It runs as the reserving stack does."""
    runs = {
        allocation: api.run(api.load(SPECDEC, {**TIGHT_SPECDEC, "stack.kv_allocation": allocation}))
        for allocation in ("on_demand", "reserve")
    }
    assert _times(runs["on_demand"]) == _times(runs["reserve"])
    summary = summarize(runs["on_demand"])
    assert summary.kv_pool is not None and summary.kv_pool.preemptions is None
    assert "preemptions" not in summary.to_dict()["kv_pool"]
    scenario = runs["on_demand"].scenario
    assert not runs["on_demand"].placement.kv_pool.gives_on_demand("mixed")
    assert "each request reserves its prompt and output tokens at admission" in (
        capacity_words(scenario, 1, 1)
    )


def test_a_speculative_pools_refusal_says_it_reserves() -> None:
    """A request longer than a speculative run's pool could never be admitted (its pool
    reserves), not "never finish" as a pool giving pages on demand would say."""
    from rdu_sim.serving.limits import check_pool

    scenario = api.load(SPECDEC, {**TIGHT_SPECDEC, "stack.kv_allocation": "on_demand"})
    pool = PagedKV(page_tokens=16, pages=20, slot_tokens=1 << 20, on_demand=True, step_tokens=5)
    assert not pool.gives_on_demand("mixed") and not pool.gives_on_demand("decode")
    with pytest.raises(ConfigError) as refused:
        check_pool(scenario, pool, np.array([64]), np.array([300]))
    assert "could never be admitted" in str(refused.value)


def test_static_slots_never_give_pages_on_demand_whatever_kv_allocation_says() -> None:
    """``kv_allocation`` is read only with pages: a static-slot stack set to on_demand
    reserves as it always did (``StackConfig.pages_on_demand``, the one reading)."""
    from rdu_sim.compiler.placement import pages_on_demand

    static = api.load("llama3.1-8b-1socket", {"stack.kv_allocation": "on_demand"})
    assert not static.stack.dynamic_batch
    assert not static.stack.pages_on_demand and not pages_on_demand(static)
