"""A paged KV pool's prefix cache shares the pool's pages (``serving.kv_pool``): cached
blocks, pinned or idle, and the running requests' own pages in one pool; an admission
reserves only what its cached leading blocks do not hold, evicting idle blocks least
recently used first; a prefill's blocks move from its own pages into the cache; a leaving
request's blocks stay cached, idle. Before, a fixed ``prefix_cache.pool_share`` (half) of
the pool was set aside for cached blocks and admissions reserved whole reservations from
the rest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from rdu_sim.api_cluster import UncappedPrefixCacheWarning, run_cluster
from rdu_sim.cli.main import cli
from rdu_sim.cluster.prefix_cache import PooledBlocks, PrefixCache
from rdu_sim.kv.paged import PagedKV, block_pages
from rdu_sim.serving.kv_pool import PagedPool
from rdu_sim.serving.step_cache import StepCounts

REPO = Path(__file__).resolve().parents[1]
L8 = REPO / "workloads" / "llama3.1-8b-1socket.yaml"
TRACE = REPO / "workloads" / "traces" / "mooncake-300.jsonl"


class Pool:
    """A pool of ``pages`` 4-token pages sharing its pages with a prefix cache of 8-token
    blocks (2 pages each), driven in the scheduler's order: an admission pins its hits
    (the hooks' ``admitted``) then reserves; a prefill's blocks are cached (``prefilled``)
    then leave the request's own pages; a request returns its own pages then unpins."""

    def __init__(self, pages: int, capacity: int | None = None) -> None:
        self.kv = PagedKV(page_tokens=4, pages=pages, slot_tokens=1 << 20)
        self.cache = PrefixCache(pages // 2 if capacity is None else capacity)
        self.hashes: dict[int, list[int]] = {}
        self.counts = StepCounts()
        self.pool = PagedPool(
            self.kv, self.counts, blocks=PooledBlocks(self.cache, 2, self.hashes.__getitem__)
        )
        self.lengths: dict[int, tuple[int, int]] = {}
        self.now = 0
        self.most_used = self.most_cached = 0  # seen at the events, for ``check``

    def fits(self, request: int, hashes: list[int], prompt: int, output: int) -> bool:
        self.hashes[request] = hashes
        self.lengths[request] = (prompt, output)
        return self.pool.fits(request, prompt, output)

    def admit(self, request: int) -> None:
        self.now += 1
        self.cache.acquire(request, self.hashes[request])
        self.pool.take(request, *self.lengths[request], self.now)
        self.check()

    def prefill(self, request: int) -> None:
        self.now += 1
        self.cache.insert(request, self.hashes[request])
        self.pool.prefilled(request, self.now)
        self.check()

    def leave(self, request: int) -> None:
        self.now += 1
        self.pool.give_back(request, self.now)
        self.cache.release(request)
        self.check()

    def check(self) -> None:
        """Pages in use never exceed the pool; the cached pages are the cache's blocks'; the
        pool's peaks are the most seen at any event so far (what the report says they are)."""
        assert self.pool.in_use == self.pool.reserved + 2 * len(self.cache) <= self.kv.pages
        self.most_used = max(self.most_used, self.pool.in_use)
        self.most_cached = max(self.most_cached, 2 * len(self.cache))
        assert self.counts.kv_pages_peak == self.most_used
        assert self.counts.kv_cached_pages_peak == self.most_cached

    def state(self) -> tuple[int, int, int, int]:
        """Own pages, cached pages, idle cached pages, free pages."""
        return (self.pool.reserved, 2 * len(self.cache), 2 * self.cache.idle, self.pool.free)


def test_the_hand_worked_example() -> None:
    """A pool of 12 pages of 4 tokens, blocks of 8 tokens (2 pages). A: prompt 16 tokens
    (blocks a1 a2) + 4 out = 5 pages; B: prompt 20 (a1 a2 and 4 more) + 4 = 6 pages; C:
    prompt 16 (a1 c2) + 8 = 6 pages; D: prompt 24 (d1 d2 d3) + 8 = 8 pages; E: prompt 8
    (a1) + 4 = 3 pages, E2 the same prompt + 12 = 5 pages."""
    t = Pool(12)
    a1, a2, c2 = 101, 102, 302
    assert block_pages(8, 4) == 2
    assert t.fits(0, [a1, a2], 16, 4)  # A: 5 pages of 12
    t.admit(0)
    assert t.state() == (5, 0, 0, 7)
    t.prefill(0)  # a1 a2 move from A's own pages into the cache: 1 own, 4 cached
    assert t.state() == (1, 4, 0, 7)
    assert t.fits(1, [a1, a2], 20, 4)  # B hits a1 a2: 6 - 4 = 2 own pages
    t.admit(1)
    assert t.state() == (3, 4, 0, 5) and t.cache.hits == 2
    assert t.fits(2, [a1, c2], 16, 8)  # C hits a1: 6 - 2 = 4 own pages
    t.admit(2)
    assert t.state() == (7, 4, 0, 1) and t.pool.in_use == 11
    t.prefill(1)  # B pinned all its blocks at admission: nothing moves
    assert t.state() == (7, 4, 0, 1)
    t.prefill(2)  # c2 moves into the cache: C keeps 2 own pages
    assert t.state() == (5, 6, 0, 1) and t.counts.kv_cached_pages_peak == 6
    t.leave(0)  # A: its own page returns; a1 a2 stay pinned by B (a1 by C too)
    assert t.state() == (4, 6, 0, 2)
    t.leave(1)  # B: a2 becomes idle; a1 is still C's
    assert t.state() == (2, 6, 2, 4)
    # D needs 8 pages: 4 free + 2 idle is all an eviction could give: refused
    assert not t.fits(3, [401, 402, 403], 24, 8)
    t.leave(2)  # C: a1 and c2 become idle (after a2, least recently used first)
    assert t.state() == (0, 6, 6, 6)
    assert t.fits(3, [401, 402, 403], 24, 8)  # 8 <= 6 free + 6 idle
    t.admit(3)  # evicts a2 alone: 8 free
    assert t.state() == (8, 4, 4, 0) and t.cache.match([a1, a2]) == 1
    assert t.cache.evicted_for_room == 1 and t.counts.kv_pages_peak == 12
    # E2 hits a1 (idle): 5 - 2 = 3 own pages; only c2 may be evicted for it (a1 it pins):
    # 0 free + 2 pages < 3, refused (counting a1 as evictable would have said yes)
    assert not t.fits(4, [a1], 8, 12)
    assert t.fits(5, [a1], 8, 4)  # E: 3 - 2 = 1 own page, c2 evicted for it
    t.admit(5)
    assert t.state() == (9, 2, 0, 1) and t.cache.match([a1]) == 1 and t.cache.match([c2]) == 0
    assert (t.cache.lookups, t.cache.hits) == (10, 4)  # A 2, B 2 (hit 2), C 2 (1), D 3, E 1 (1)
    assert (t.cache.inserted, t.cache.evicted, t.cache.evicted_for_room) == (3, 2, 2)
    t.leave(3)
    t.leave(5)
    assert t.state() == (0, 2, 2, 10)  # a1 alone stays cached, idle
    # the time-weighted pages in use: one step (ps) between events, each event's count
    used = [5, 5, 7, 11, 11, 11, 10, 8, 6, 12, 11, 3]
    assert t.counts.kv_page_ps == sum(used)


def test_a_block_cached_meanwhile_is_shared_and_its_copy_freed() -> None:
    """Two requests with the same prompt admitted before either prefilled: both reserve
    their whole prompt. The first's prefill caches its blocks; the second's finds them
    cached, pins them, and its own copy's pages return free (counted once)."""
    t = Pool(20)
    for request in (0, 1):
        assert t.fits(request, [7, 8], 16, 4)
        t.admit(request)
    assert t.state() == (10, 0, 0, 10)
    t.prefill(0)
    assert t.state() == (6, 4, 0, 10)
    t.prefill(1)  # its copies of 7 and 8 are freed: it reads the cached ones
    assert t.state() == (2, 4, 0, 14) and t.cache.inserted == 2


def test_a_capped_cache_keeps_blocks_it_cannot_take_in_the_requests_pages() -> None:
    """prefix_cache.capacity caps the blocks; a block finding no room (the cap reached,
    every block pinned) stays the request's own and returns free when it leaves."""
    t = Pool(20, capacity=1)
    assert t.fits(0, [7, 8], 16, 4)
    t.admit(0)
    t.prefill(0)  # 7 is cached, 8 is not (the cap): A keeps 3 own pages
    assert t.state() == (3, 2, 0, 15) and t.cache.not_cached == 1
    t.leave(0)
    assert t.state() == (0, 2, 2, 18)


@pytest.mark.parametrize("seed", range(8))
def test_random_admissions_keep_the_pools_invariants(seed: int) -> None:
    """Random prompts over a few shared prefixes through a small pool: at every event the
    pages in use (own plus cached) stay within the pool; a running request's pinned blocks
    are all cached (never evicted); its own pages are its reservation less its hits'; and
    an admission is refused only when, with every idle block but its own hits evicted, its
    own pages still would not fit."""
    rng = np.random.default_rng(seed)
    t = Pool(40)
    chains = [[1000 * c + i for i in range(6)] for c in range(4)]
    running: list[int] = []
    refused = admitted = 0
    for request in range(300):
        if running and (rng.random() < 0.5 or len(running) > 6):
            gone = running.pop(int(rng.integers(len(running))))
            t.leave(gone)
        blocks = int(rng.integers(0, 5))
        hashes = chains[int(rng.integers(len(chains)))][:blocks]
        prompt, output = blocks * 8 + int(rng.integers(1, 8)), int(rng.integers(1, 30))
        fits = t.fits(request, hashes, prompt, output)
        need = t.kv.request_pages(prompt, output) - 2 * t.cache.match(hashes)
        pinned_idle = sum(1 for h in hashes[: t.cache.match(hashes)] if t.cache._refs[h] == 0)
        room = t.pool.free + 2 * (t.cache.idle - pinned_idle)
        assert fits == (need <= room)
        if not fits:
            refused += 1
            continue
        admitted += 1
        t.admit(request)
        assert t.pool._held[request] == need  # hits reduce what it reserves
        t.prefill(request)
        running.append(request)
        for other in running:  # pinned blocks stay cached
            held = t.cache._held.get(other, [])
            assert all(h in t.cache._refs and t.cache._refs[h] > 0 for h in held)
    assert refused > 10 and admitted > 100 and t.cache.evicted_for_room > 10
    assert t.counts.kv_pages_peak <= t.kv.pages


# --- in a cluster ----------------------------------------------------------------------------


def _unshared_trace(tmp_path: Path) -> Path:
    """The shipped Mooncake trace with every block hash made unique: no prefix shared."""
    rows = [json.loads(line) for line in TRACE.read_text().splitlines() if line.strip()]
    fresh = 0
    for row in rows:
        row["hash_ids"] = list(range(fresh, fresh + len(row["hash_ids"])))
        fresh += len(row["hash_ids"])
    path = tmp_path / "unshared.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _gpu_cluster(tmp_path: Path, trace: Path, prefix: str) -> Path:
    """One Llama 3.1 8B TensorRT-LLM replica with a small KV pool (its pages bind), one
    prompt a prefill step (a replica with a prefix cache packs none)."""
    path = tmp_path / "gpu.yaml"
    path.write_text(
        f"name: gpu\npools:\n  serve:\n    workload: {L8}\n    replicas: 1\n"
        "    set: {hardware: dgx-h100, stack: tensorrt-llm, "
        "stack.kv_memory_fraction: 0.03, stack.prefill_batch_tokens: null}\n"
        "router: {policy: least_outstanding}\n"
        f"traffic: {{trace: {trace}, format: mooncake}}\n"
        "slo: {ttft: 1 s, tpot: 40 ms, attainment: 0.9}\n" + prefix
    )
    return path


def test_without_shared_prefixes_a_run_is_the_run_without_a_cache(tmp_path: Path) -> None:
    """Differential: with no block shared, every admission, step and completion is the run
    without a prefix cache's, though the cache fills the pool with idle blocks that the
    admissions then evict (an idle block is a finished request's pages)."""
    trace = _unshared_trace(tmp_path)
    cached = run_cluster(_gpu_cluster(tmp_path, trace, "prefix_cache: {block_tokens: 512}\n"))
    plain = run_cluster(_gpu_cluster(tmp_path, trace, ""))
    ours, theirs = cached.requests(), plain.requests()
    for column in theirs:
        np.testing.assert_array_equal(ours[column], theirs[column], err_msg=column)
    data = cached.to_dict()
    prefix = data["prefix_cache"]
    assert prefix["hit_blocks"] == 0 and prefix["evicted_for_room"] > 100
    assert prefix["evicted"] == prefix["evicted_for_room"]
    pool, other = data["pools"]["serve"]["kv_pool"], plain.to_dict()["pools"]["serve"]["kv_pool"]
    assert pool["pages"] == other["pages"]  # the whole pool, nothing set aside
    # the pool binds in both; with the cache, its idle blocks fill it and count as in use
    assert other["peak_pages"] == pool["peak_pages"] == pool["pages"] == 249
    assert 0 < pool["peak_cached_pages"] <= pool["pages"]
    assert "peak_cached_pages" not in other and "evicted_for_room" not in data["per_replica"][0]


GPU = {"hardware": "dgx-h100", "stack": "tensorrt-llm"}
GPU_DISAGGREGATED = {"pools.prefill.set": GPU, "pools.decode.set": GPU}


@pytest.mark.parametrize(("capacity", "blocks", "hits"), [(None, 934, 848), ("8 GiB", 128, 669)])
def test_the_shipped_disaggregated_cluster_on_gpus_shares_its_pool(
    capacity: str | None, blocks: int, hits: int
) -> None:
    """The shipped cluster on TensorRT-LLM: the prefill pool keeps its whole pool (7,477
    pages of 64 tokens; before, half was set aside: 3,741 pages for admissions, 467 blocks
    for the cache, 815 blocks hit, 502 evicted); its cache may hold every page (934 blocks of
    8 pages), or a cap of 8 GiB per socket (128 blocks), fewer hits. Pages in use never
    exceed the pool; the decode pool has no cache."""
    overrides: dict[str, object] = dict(GPU_DISAGGREGATED)
    if capacity is not None:
        overrides["prefix_cache.capacity"] = capacity
    result = run_cluster("llama3.1-8b-disaggregated", overrides)
    prefill = next(p for p in result.pools if p.pool.name == "prefill")
    assert prefill.runtime.config.kv_pool == prefill.placement.kv_pool
    assert prefill.runtime.prefix_blocks == blocks and prefill.runtime.block_pages == 8
    data = result.to_dict()
    assert data["prefix_cache"]["hit_blocks"] == hits
    assert data["prefix_cache"]["capacity_blocks"] == blocks
    shown = data["pools"]["prefill"]["kv_pool"]
    assert shown["pages"] == 7477 and shown["peak_pages"] <= 7477
    assert shown["peak_cached_pages"] <= 8 * blocks
    assert "peak_cached_pages" not in data["pools"]["decode"]["kv_pool"]
    assert data["pools"]["prefill"]["prefix_cache_blocks"] == blocks


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["run", *args])
    return result.exit_code, result.output


def test_pool_share_is_refused_naming_what_replaced_it(tmp_path: Path) -> None:
    code, out = _run(
        "workloads/clusters/llama3.1-8b-disaggregated.yaml", "--set", "prefix_cache.pool_share=0.3"
    )
    assert code == 2 and "Traceback" not in out
    assert out.startswith(
        "error: workloads/clusters/llama3.1-8b-disaggregated.yaml: prefix_cache.pool_share: "
        "was removed: a paged KV pool's prefix cache no longer takes a fixed share"
    )
    assert "prefix_cache.capacity (bytes per socket) caps the cache" in out
    path = _gpu_cluster(tmp_path, TRACE, "prefix_cache: {block_tokens: 512, pool_share: 0.5}\n")
    code, out = _run(str(path))
    assert code == 2 and out.startswith(f"error: {path}:10: prefix_cache.pool_share: was removed")


def test_a_cap_that_caps_nothing_warns_and_blocks_not_whole_pages_are_refused(
    tmp_path: Path,
) -> None:
    """A cap at least a pool's whole KV pool leaves that pool's cache the whole pool, as
    without one (a cluster-wide cap may still limit a larger pool), and says so."""
    path = _gpu_cluster(tmp_path, TRACE, "prefix_cache: {block_tokens: 512, capacity: 1 TB}\n")
    with pytest.warns(UncappedPrefixCacheWarning, match="cap nothing in pool 'serve'"):
        capped = run_cluster(str(path))
    (tmp_path / "b").mkdir()
    plain = run_cluster(
        str(_gpu_cluster(tmp_path / "b", TRACE, "prefix_cache: {block_tokens: 512}\n"))
    )
    assert capped.to_dict()["prefix_cache"] == plain.to_dict()["prefix_cache"]
    rows = [json.loads(line) for line in TRACE.read_text().splitlines()[:40]]
    for row in rows:  # 96-token blocks: not whole 64-token pages
        row["hash_ids"] = list(range(-(-row["input_length"] // 96)))
    trace = tmp_path / "b96.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    code, out = _run(str(_gpu_cluster(tmp_path, trace, "prefix_cache: {block_tokens: 96}\n")))
    assert code == 2, out
    assert (
        "prefix_cache.block_tokens: 96 tokens are not whole pages of the paged KV pool of "
        "pool 'serve' (64-token pages, its stack's kv_page_tokens)"
    ) in out
    assert "''s" not in out  # not "pool 'serve''s paged KV pool"


def test_a_chunked_gpu_prefill_skips_every_cached_block(tmp_path: Path) -> None:
    """TensorRT-LLM starts a chunked prefill at the reused length: it skips every cached
    block's tokens (blocks of 512 tokens, chunks of 2,048), as unchunked; before, the skip
    was rounded down to whole chunks (fewer tokens skipped than the blocks hit)."""
    path = _gpu_cluster(tmp_path, TRACE, "prefix_cache: {block_tokens: 512}\n")
    for chunk in (None, 2048):
        result = run_cluster(path, {"pools.serve.set.serving.prefill_chunk_tokens": chunk})
        assert result.pools[0].runtime.config.prefill_chunk_tokens == chunk
        prefix = result.to_dict()["prefix_cache"]
        assert prefix["hit_blocks"] > 100
        assert prefix["prefill_tokens_skipped"] == 512 * prefix["hit_blocks"]


def test_a_ring_shares_only_the_prompt_tokens_that_stay_in_its_slot() -> None:
    """``kv.sharing.shared_prefix_tokens``: a prompt stored whole is shared whole while its
    slot does not wrap; once its decode outgrows the slot, the ring overwrites its oldest
    tokens, so only the positions before the ring (StreamingLLM's sinks, SnapStream's sinks
    and selected tokens) are shared; a compressed or truncated prompt shares nothing."""
    from rdu_sim.kv.policies import SnapStreamPolicy, StreamingLLMPolicy, kept_counts, slot_wraps
    from rdu_sim.kv.sharing import shared_prefix_tokens

    ring = StreamingLLMPolicy(32768, sinks=512, recent=3584)  # a 4,096-token slot
    assert shared_prefix_tokens(ring, 3000, 1097) == 3000  # 3,000 + 1,096 written: fits
    assert shared_prefix_tokens(ring, 3000, 1098) == 512  # wraps: the sinks stay
    assert shared_prefix_tokens(ring, 300, 5000) == 300  # all of it in the sinks
    assert shared_prefix_tokens(ring, 3000, 1) == 3000  # a prefill server's: no decode
    assert shared_prefix_tokens(ring, 5000, 1) == 0  # truncated at prefill
    snap = SnapStreamPolicy(
        32768,
        budget=4096,
        sinks=4,
        recent=1024,
        observation_window=32,
        kernel_size=7,
        pooling="max",
    )
    assert shared_prefix_tokens(snap, 4000, 200) == 4 + 3068  # the ring's 1,024 go
    assert shared_prefix_tokens(snap, 4000, 97) == 4000
    assert shared_prefix_tokens(snap, 4097, 1) == 0  # compressed
    # the wrap is the report's (``kv_kept.slots_wrapped``), request by request
    prompts, outputs = [3000, 3000, 300, 4000, 1], [1097, 1098, 5000, 1, 9000]
    assert kept_counts(ring, prompts, outputs).slots_wrapped == sum(
        slot_wraps(ring, p, o) for p, o in zip(prompts, outputs, strict=True)
    )


def test_a_ring_on_a_paged_pool_never_hits_tokens_its_ring_overwrites(tmp_path: Path) -> None:
    """StreamingLLM (512 sinks, a 4,096-token slot) on a paged pool with a prefix cache: a
    request whose decode outgrows its slot is credited only blocks inside its sinks; before,
    four such requests were credited 4,096 tokens beyond them (a block the ring overwrote
    as they decoded, read in place by others too)."""
    path = _gpu_cluster(tmp_path, TRACE, "prefix_cache: {block_tokens: 512}\n")
    ring = {"kv.policy": "streamingllm", "kv.budget": 4096, "kv.sinks": 512}
    result = run_cluster(str(path), {f"pools.serve.set.{k}": v for k, v in ring.items()})
    rows = result.requests()
    prompt, output = rows["prompt_tokens"], rows["output_tokens"]
    cached = rows["cached_tokens"]
    wraps = (prompt <= 4096) & (prompt + np.maximum(output - 1, 0) > 4096)
    assert wraps.sum() == 11 and cached[wraps].max() <= 512
    assert (cached[wraps] == 512).any()  # their sinks are still shared
    prefix = result.to_dict()["prefix_cache"]
    assert prefix["hit_blocks"] > 100
    assert prefix["prefill_tokens_skipped"] == cached.sum()
