"""A paged KV cache's pool (``kv.paged``, ``serving.kv_pool``): the batch a paged stack runs
is set by its requests, not by ``serving.max_context``; admissions reserve pages and never
hold more than the pool; a request the pool can never hold is refused; static slots are
untouched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rdu_sim import api
from rdu_sim.compiler.placement import plan_memory
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.workload import KVConfig
from rdu_sim.kv import make_policy
from rdu_sim.kv.paged import PagedKV, reserved_pages
from rdu_sim.report.console import serving_table
from rdu_sim.report.terminal import wide_console
from rdu_sim.scenario import load_scenario
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import RequestSet
from rdu_sim.serving.server import ServerConfig
from rdu_sim.serving.simulate import serve
from rdu_sim.serving.step_cache import StepCache, StepCost
from rdu_sim.shapes import StepShape

MS = 1e-3
L8_FP8_H100 = """\
name: l8-fp8-h100
hardware: dgx-h100
stack: tensorrt-llm
model: llama-3.1-8b
dtypes: {weights: fp8, kv: fp8, activations: bf16}
parallelism: {tp: 1}
kv: {policy: full}
serving:
  batch_slots: auto
  max_context: 4096
  prompt_tokens: 128
  output_tokens: 128
  arrival: {process: all_at_once}
  requests: 3000
  seed: 0
"""


@pytest.fixture(scope="module")
def l8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("paged") / "l8.yaml"
    path.write_text(L8_FP8_H100)
    return path


def test_a_reservation_is_prompt_and_output_in_whole_pages() -> None:
    assert reserved_pages(128, 128, 4096, 64) == 4
    assert reserved_pages(129, 128, 4096, 64) == 5
    assert reserved_pages(3000, 3000, 4096, 64) == 64  # at most the policy's slot
    assert reserved_pages(100, 27, 4096, 64, extra_tokens=1) == 2  # 128 tokens: 2 pages
    pool = PagedKV(page_tokens=16, pages=10, slot_tokens=8192)
    assert (pool.request_pages(17, 1), pool.tokens) == (2, 160)


@pytest.mark.parametrize("max_context", [256, 8192, 131072])
def test_the_batch_is_set_by_the_requests_not_by_max_context(l8: Path, max_context: int) -> None:
    """The trial's three cases: 128 + 128-token requests on TensorRT-LLM (a pool of
    kv_memory_fraction 0.9 of what the weights and activations leave; max_batch_slots 2048).
    Before the pool, each slot was max_context long: 2,048, 130 and 8 slots, 28,082, 18,346
    and 1,769 tokens/s."""
    summary = api.run(l8, {"serving.max_context": max_context}).summary()
    assert (summary.batch_slots, summary.capacity_limit) == (2048, "max_batch_slots")
    assert summary.decode_tokens_per_s == pytest.approx(28_081.91, rel=1e-6)
    pool = summary.kv_pool
    assert pool is not None and pool.page_tokens == 64 and pool.smallest_request_pages == 4
    assert pool.pages == 16447 and pool.bytes == summary.memory["hbm"].kv_bytes
    # every slot holds a 4-page request at once, never more than the pool
    assert pool.peak_pages == 2048 * 4 <= pool.pages
    assert pool.mean_pages is not None and 0 < pool.mean_pages <= pool.peak_pages
    assert "in the KV pool" in summary.capacity and "max_batch_slots: 2048" in summary.capacity


def test_admissions_wait_for_free_pages(l8: Path) -> None:
    """512 slots set, 8,100-token requests (127 pages each) in a pool of 16,621 pages: never
    more than the pool's 130 requests hold pages at once, whatever the slots."""
    result = api.run(
        l8,
        {
            "serving.max_context": 16384,
            "serving.prompt_tokens": 8000,
            "serving.output_tokens": 100,
            "serving.batch_slots": 512,
            "serving.requests": 400,
        },
    )
    summary, records = result.summary(), result.records
    pool = summary.kv_pool
    assert pool is not None and pool.smallest_request_pages == 127
    # what auto would pick is sized at its own batch's activations (131 slots' pool), this
    # plan's pool at 512 slots' (larger activations): 130 requests
    assert (summary.batch_capacity, pool.pages // 127) == (131, 130)
    assert pool.peak_pages <= pool.pages and pool.peak_pages % 127 == 0
    # the invariant from the records: requests between admission and completion at any
    # instant never reserve more than the pool
    admit, finish = records.admit_ps, records.finish_ps
    events = sorted([(int(t), 1) for t in admit] + [(int(t), -1) for t in finish])
    held = most = 0
    for _, change in events:  # a completion at an instant frees before an admission
        held += change
        most = max(most, held)
    assert most * 127 <= pool.pages and most * 127 == pool.peak_pages
    assert "take a request only when the pool's free pages hold" in summary.capacity


@pytest.mark.filterwarnings("ignore:.*prompts of up to")
def test_a_request_bigger_than_the_pool_is_refused(l8: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        api.run(
            l8,
            {
                "serving.max_context": 131072,
                "serving.prompt_tokens": {"dist": "uniform", "low": 100, "high": 120000},
                "serving.output_tokens": 100,
                "serving.requests": 20,
                "stack.kv_memory_fraction": 0.05,
            },
        )
    message = str(caught.value)
    assert "serving.max_context" in message
    assert "reserve more KV pages than the stack's whole pool holds" in message
    assert "the pool has 904 (57,856 tokens" in message
    assert "lower serving.max_context to at most 57,856" in message


def _cost(shape: StepShape) -> StepCost:
    return StepCost(5 * MS if shape.phase == "decode" else 10 * MS)


def _serve(config: ServerConfig) -> ServingRecords:
    rng = np.random.default_rng(3)
    requests = RequestSet(
        prompt_tokens=rng.integers(50, 900, 60).astype(np.int64),
        output_tokens=rng.integers(2, 60, 60).astype(np.int64),
        arrival_s=np.sort(rng.uniform(0, 0.5, 60)),
        concurrency=None,
    )
    policy = make_policy(KVConfig.model_validate({"policy": "full"}), config.max_context, 64)
    return serve(requests, policy, StepCache(_cost), config)


def test_a_pool_that_never_binds_changes_nothing_and_a_tight_one_does() -> None:
    """Differential: static slots (no pool) and a pool too big to bind serve identically;
    a pool of a few requests delays admissions and never overfills."""
    base = ServerConfig(16, 1024, decode_rows="ladder")
    static = _serve(base)
    roomy = _serve(ServerConfig(16, 1024, decode_rows="ladder", kv_pool=PagedKV(64, 10_000, 1024)))
    for field in ("admit_ps", "first_token_ps", "finish_ps", "slot"):
        assert np.array_equal(getattr(static, field), getattr(roomy, field)), field
    assert static.counts.kv_pages_peak == 0 and roomy.counts.kv_pages_peak > 0
    tight = _serve(ServerConfig(16, 1024, decode_rows="ladder", kv_pool=PagedKV(64, 40, 1024)))
    assert tight.counts.kv_pages_peak <= 40
    assert int(tight.admit_ps.sum()) > int(static.admit_ps.sum())


def test_static_stacks_keep_their_slots() -> None:
    """SN40L (no kv_page_tokens): no pool in the plan or the report, and the KV cache is
    the slots' own (each slot's bytes times the slots)."""
    result = api.run("llama3.1-8b-1socket", {"serving.requests": 20, "serving.max_context": 4096})
    summary = result.summary()
    assert summary.kv_pool is None and "kv_pool" not in summary.to_dict()
    assert result.placement.kv_pool is None
    assert summary.kv_bytes_per_slot * summary.batch_slots == summary.memory["hbm"].kv_bytes


def test_the_console_names_a_paged_stacks_per_slot_kv_the_pools_share(l8: Path) -> None:
    """On a paged stack ``kv_bytes_per_slot`` is the pool over the slots (16 slots share
    thousands of pages, of which a request here takes 4), not any sequence's own KV cache:
    the console row says "KV pool per slot"; static slots keep "KV cache per slot"."""

    def row(workload: str | Path, overrides: dict[str, object]) -> str:
        summary = api.run(workload, {"serving.requests": 16, **overrides}).summary()
        console = wide_console()
        with console.capture() as out:
            console.print(serving_table(summary))
        first = next(line for line in out.get().splitlines() if "per slot" in line)
        return " ".join(first.replace("│", " ").split())

    paged = row(l8, {"serving.batch_slots": 16})
    assert paged.startswith("KV pool per slot (per GPU) ") and "KV cache" not in paged
    static = row("llama3.1-8b-1socket", {"serving.max_context": 4096})
    assert static.startswith("KV cache per slot (per socket) ")


@pytest.mark.parametrize("stack", ["tensorrt-llm", "vllm-2024"])
def test_the_pool_is_the_stacks_kv_room_in_whole_pages(stack: str) -> None:
    """TensorRT-LLM's kv_memory_fraction and vLLM's memory_utilization give the room
    (``StackConfig.kv_room``); the pool is that room in whole pages, whatever the slots."""
    scenario = load_scenario(
        "workloads/llama3.1-8b-1socket.yaml", overrides={"hardware": "dgx-h100", "stack": stack}
    )
    for slots in (8, 64):
        plan = plan_memory(scenario, slots)
        pool, hbm = plan.kv_pool, plan.tiers["hbm"]
        assert pool is not None and pool.page_tokens == scenario.stack.kv_page_tokens
        room = scenario.stack.kv_room(hbm.capacity_bytes, hbm.weights_bytes, hbm.activations_bytes)
        assert pool.pages == int(room // pool.page_bytes) > 0
        assert hbm.kv_bytes == pool.pages * pool.page_bytes <= room


def test_vllm_runs_at_most_its_default_max_num_seqs() -> None:
    """vllm-2024 had no max_batch_slots, so ``auto`` counted every smallest request its pool
    holds (898 here, by their prompts' pages and the watermark under its pages on demand;
    13,710 for the review's 1-token requests) and their activations shrank the pool (5.8% at
    13,710). vLLM's max_num_seqs defaults to 256 (the stack file's
    source): the batch stops there and the pool is the room beside 256 slots' activations."""
    overrides = {"hardware": "dgx-h100", "stack": "vllm-2024", "serving.batch_slots": "auto"}
    scenario = load_scenario("workloads/llama3.1-8b-1socket.yaml", overrides=overrides)
    assert scenario.stack.max_batch_slots == 256
    assert api.resolve_batch_slots(scenario, api.EngineBackend()) == (256, 256)
    uncapped = load_scenario(
        "workloads/llama3.1-8b-1socket.yaml",
        overrides={**overrides, "stack.max_batch_slots": None},
    )
    assert api.resolve_batch_slots(uncapped, api.EngineBackend()) == (898, 898)
    pool, at_13710 = plan_memory(scenario, 256).kv_pool, plan_memory(scenario, 13710).kv_pool
    assert pool is not None and at_13710 is not None
    assert (pool.pages, at_13710.pages) == (29110, 27421)


def test_a_prefill_server_reserves_its_prompt_and_first_token() -> None:
    """A prefill-role server holds a request's prompt and first token until its KV cache is
    sent on, so it reserves those pages (``kv.paged.held_output``), not the output a decode
    replica will hold; mixed and decode servers reserve prompt plus output."""
    from rdu_sim.serving.kv_pool import kv_pool
    from rdu_sim.serving.step_cache import StepCounts

    kv = PagedKV(page_tokens=64, pages=40, slot_tokens=8192)
    assert kv.request_pages(1000, 1500, "prefill") == 16  # 1,001 tokens
    assert kv.request_pages(1000, 1500, "decode") == kv.request_pages(1000, 1500) == 40
    prefill, mixed = kv_pool(kv, StepCounts(), "prefill"), kv_pool(kv, StepCounts())
    for request in range(2):
        assert prefill.fits(request, 1000, 1500)
        prefill.take(request, 1000, 1500, now=0)
    assert mixed.fits(2, 1000, 1500) and not prefill.fits(2, 1000, 1500)  # 32 of 40 held
    mixed.take(0, 1000, 1500, now=0)
    assert not mixed.fits(1, 1, 1)


def test_compare_times_a_paged_stacks_default_batch_at_what_its_pool_holds(l8: Path) -> None:
    """`compare` without --batch times a paged stack's decode step at the sequences of its
    context the KV pool holds at once (``serving.backend.step_batch``), as `step` does: its
    slots count the smallest requests (2,048 here), far more than 128k-token sequences fit."""
    from rdu_sim.compare import compare
    from rdu_sim.serving.backend import step_batch

    overrides = {"serving.max_context": 131072}
    column = compare(l8, ["dgx-h100"], overrides).columns[0]
    scenario = api.load(l8, overrides)
    held = step_batch(scenario, api.EngineBackend())
    assert column.batch == held and 1 <= held < column.batch_capacity == 2048
    assert column.batch == api.default_step_shape(scenario, "decode").batch
