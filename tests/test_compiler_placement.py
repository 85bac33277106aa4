"""Tier placement: within capacity, spill by bandwidth need, clear errors; batch capacity."""

from __future__ import annotations

import pytest

from rdu_sim.compiler import (
    CapacityError,
    Compiler,
    activation_bytes,
    batch_capacity,
    capacity_words,
    kv_bytes,
    plan_memory,
    slot_tokens,
    weight_inventory,
    whole_queries,
)
from rdu_sim.compiler.errors import SlotsCapacityError, WeightsCapacityError
from rdu_sim.compiler.program import Placement
from rdu_sim.scenario import Scenario, load_scenario
from rdu_sim.shapes import StepShape

WORKLOADS = [
    "deepseek-r1-128k-snapstream",
    "deepseek-r1-128k-full",
    "llama3.1-8b-1socket",
    "llama3.1-8b-8socket",
]


@pytest.mark.parametrize("workload", WORKLOADS)
def test_placement_never_exceeds_a_tier(workload: str) -> None:
    scenario = load_scenario(f"workloads/{workload}.yaml")
    capacity = batch_capacity(scenario)
    for slots in {1, capacity // 2 or 1, capacity}:
        placement = plan_memory(scenario, slots)
        for tier, usage in placement.tiers.items():
            assert 0 <= usage.used_bytes <= usage.capacity_bytes, (tier, slots)
        hbm = placement.tiers["hbm"]
        assert hbm.kv_bytes == kv_bytes(scenario, slots)
        assert hbm.activations_bytes == activation_bytes(scenario, slots)
        whole = whole_queries(scenario, slots)  # MLA's query weights whole on every socket
        weights = sum(w.bytes for w in weight_inventory(scenario, whole_queries=whole))
        assert hbm.weights_bytes + placement.tiers["ddr"].weights_bytes == weights
        assert placement.tiers["ddr"].weights_bytes == 0  # at or below capacity nothing spills


ANY_BATCH = {"stack.batch_programs": "any"}
"""A stack that runs every batch: the capacity is memory's alone."""


@pytest.mark.parametrize("workload", WORKLOADS)
def test_batch_capacity_is_the_largest_that_fits(workload: str) -> None:
    scenario = load_scenario(f"workloads/{workload}.yaml", overrides=ANY_BATCH)
    capacity = batch_capacity(scenario)
    hbm = scenario.hardware.socket.hbm.capacity
    # the plan at capacity holds MLA's query weights whole when its step replicates them
    whole = whole_queries(scenario, capacity)
    weights = sum(w.bytes for w in weight_inventory(scenario, whole_queries=whole))

    def need(slots: int) -> int:
        return weights + kv_bytes(scenario, slots) + activation_bytes(scenario, slots)

    assert capacity >= 1
    assert need(capacity) <= hbm < need(capacity + 1)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_stack_of_power_of_two_programs_runs_the_largest_power_of_two_that_fits(
    workload: str,
) -> None:
    scenario = load_scenario(f"workloads/{workload}.yaml")
    assert scenario.stack.batch_programs == "powers_of_two"  # SambaNova's stacks
    fits = batch_capacity(load_scenario(f"workloads/{workload}.yaml", overrides=ANY_BATCH))
    runs = batch_capacity(scenario)
    assert runs & (runs - 1) == 0 and runs <= fits < 2 * runs


def test_the_stack_runs_at_most_its_cap_and_then_a_batch_it_has_a_program_for() -> None:
    scenario = load_scenario("workloads/deepseek-r1-128k-snapstream.yaml")
    assert [scenario.stack.runnable_batch(n) for n in (0, 1, 2, 3, 139, 256)] == [
        0,
        1,
        2,
        2,
        128,
        256,
    ]
    capped = scenario.stack.model_copy(update={"max_batch_slots": 100})
    assert capped.runnable_batch(139) == 64  # the cap first, then the program
    every = scenario.stack.model_copy(update={"batch_programs": "any"})
    assert every.runnable_batch(139) == 139


def test_snapstream_grows_deepseek_batch_by_the_cache_ratio() -> None:
    # on links fast enough that both plans gather the MLA queries, so both hold the same
    # weights (at the shipped link SnapStream's holds the query weights whole: 136 slots)
    gathering = {"hw.system.intra_node_link.bandwidth": 128e9, **ANY_BATCH}
    full = load_scenario("workloads/deepseek-r1-128k-full.yaml", overrides=gathering)
    snap = load_scenario("workloads/deepseek-r1-128k-snapstream.yaml", overrides=gathering)
    ratio = slot_tokens(full) / slot_tokens(snap)
    assert ratio == 4.0  # 131072 vs budget 32768
    grown = batch_capacity(snap) / batch_capacity(full)
    # KV dominates what is left beside the weights, so the batch grows by about the ratio
    assert 0.9 * ratio <= grown <= ratio * 1.05
    assert batch_capacity(full) >= 20


def test_snapstream_reserves_the_selection_scratch_only_where_a_layer_selects() -> None:
    # Mistral-7B: every layer slides over 4,096 tokens, so its ring (4,095) never exceeds a
    # 4,096-token budget and no layer compresses: no scratch, the same slots as full
    def scenario(policy: str, **kv: int) -> Scenario:
        overrides = {
            "model": "mistral-7b",
            "kv.policy": policy,
            "serving.max_context": 32768,
            "serving.prompt_tokens.high": 16384,
        }
        overrides.update({f"kv.{key}": value for key, value in kv.items()})
        return load_scenario(
            "workloads/llama3.1-8b-1socket.yaml", overrides={**overrides, **ANY_BATCH}
        )

    full, snap = scenario("full"), scenario("snapstream", budget=4096)
    assert activation_bytes(snap, 1) == activation_bytes(full, 1)
    assert batch_capacity(snap) == batch_capacity(full)
    # a budget below the window compresses every layer's ring: the scratch is back
    assert activation_bytes(scenario("snapstream", budget=3072), 1) > activation_bytes(full, 1)


def test_mla_layouts_order_the_batch_capacity() -> None:
    def capacity(layout: str) -> int:
        scenario = load_scenario(
            "workloads/deepseek-r1-128k-full.yaml",
            overrides={"parallelism.mla_cache_layout": layout, "serving.max_context": 16384},
        )
        return batch_capacity(scenario)

    assert capacity("sequence_split") > capacity("replicated") > capacity("head_split") >= 1


def test_over_large_model_gets_the_clear_error() -> None:
    """405B on one socket: under ``memory.weights: hbm`` the weights alone outgrow HBM, which
    every memory plan refuses as the capacity does (explicit slots too); streamed from DDR,
    they outgrow its 1 GiB, and the plan says so."""
    overrides = {
        "model": "llama-3.1-405b",
        "hw.socket.ddr.capacity": "1 GiB",
        "serving.batch_slots": 1,
        "serving.max_context": 8192,
    }
    scenario = load_scenario("workloads/llama3.1-8b-1socket.yaml", overrides=overrides)
    with pytest.raises(WeightsCapacityError, match="the weights alone do not fit"):
        plan_memory(scenario, 1)
    with pytest.raises(CapacityError, match="the weights alone do not fit"):
        batch_capacity(scenario)
    scenario = load_scenario(
        "workloads/llama3.1-8b-1socket.yaml",
        overrides={**overrides, "memory.weights": "streamed"},
    )
    with pytest.raises(CapacityError) as info:
        plan_memory(scenario, 1)
    message = str(info.value)
    for words in (
        "llama-3.1-405b",
        "weights",
        "do not fit",
        "parallelism.tp",
        "hw.socket.ddr.capacity",
        "fp8",
    ):
        assert words in message


def test_no_room_for_a_compressed_slot_names_the_budget_and_offers_lowering_it() -> None:
    """Under a compressing policy a slot holds the budget, not max_context: the error says
    where the slot's size comes from and offers the budget (or the ratio it came from)."""
    head_split = {"parallelism.mla_cache_layout": "head_split"}
    scenario = load_scenario("workloads/deepseek-r1-128k-snapstream.yaml", overrides=head_split)
    with pytest.raises(CapacityError) as raised:
        batch_capacity(scenario)
    message = str(raised.value)
    assert "(a slot of 32768 tokens, kv.budget 32768 of kv.policy snapstream)" in message
    assert "lower kv.budget (now 32768)" in message
    assert "max_context 131072 tokens" not in message
    assert "a step's activations" in message  # the selection's scratch of the longest prompt
    ratio = {**head_split, "kv.budget": None, "kv.compression_ratio": 4}
    scenario = load_scenario("workloads/deepseek-r1-128k-snapstream.yaml", overrides=ratio)
    with pytest.raises(CapacityError, match=r"raise kv\.compression_ratio \(now 4: a slot"):
        batch_capacity(scenario)


def test_too_many_slots_names_the_capacity() -> None:
    """The error names what memory holds (the most an explicit batch runs) and what 'auto'
    picks of it (SambaStack's power of two)."""
    scenario = load_scenario("workloads/deepseek-r1-128k-full.yaml")
    capacity = batch_capacity(scenario)
    holds = batch_capacity(scenario, runnable=False)
    assert (capacity, holds) == (32, 40)
    told = f"at most {holds} fit beside the weights; 'auto' picks {capacity}, the most of them"
    with pytest.raises(CapacityError, match=told):
        plan_memory(scenario, 10 * capacity)
    plan_memory(scenario, holds)  # an explicit batch up to memory's count runs as given
    every = load_scenario("workloads/deepseek-r1-128k-full.yaml", overrides=ANY_BATCH)
    with pytest.raises(CapacityError, match=f"at most {holds} fit beside the weights; 'auto'"):
        plan_memory(every, 10 * capacity)
    # through the compiler, whose view leaves out the links the capacity weighs
    compiler = Compiler(load_scenario("workloads/deepseek-r1-128k-full.yaml"))
    with pytest.raises(CapacityError, match=f"'auto' picks {capacity}"):
        compiler.placement(10 * capacity)


def test_the_capacity_words_say_what_memory_holds_what_the_stack_runs_and_which_binds() -> None:
    """One rule (`capacity_words`) for the run's report and the capacity error: memory's
    count, the stack's and why the stack's is lower; an explicit batch says it was set and,
    when the stack has no program of it, that it runs as if one were compiled."""

    def words(**overrides: object) -> tuple[str, str]:
        scenario = load_scenario("workloads/llama3.1-8b-1socket.yaml", overrides=overrides)
        holds = batch_capacity(scenario, runnable=False)
        runs = batch_capacity(scenario)
        slots = scenario.workload.serving.slots_for(lambda: runs)
        return capacity_words(scenario, holds, runs, slots), scenario.stack.batch_limit(holds)

    auto = words(**{"serving.batch_slots": "auto"})
    assert auto == (
        "at most 48 fit beside the weights; 'auto' picks 32, the most of them the stack runs "
        "(its batch_programs: powers_of_two)",
        "batch_programs",
    )
    explicit, _ = words(**{"serving.max_context": 32768, "serving.batch_slots": 12})
    assert explicit == (
        "serving.batch_slots sets 12; at most 12 fit beside the weights; 'auto' would pick 8, "
        "the most of them the stack runs (its batch_programs: powers_of_two); the stack has "
        "no 12-slot program, so it runs 12 as if one were compiled for it"
    )
    assert words(**{"serving.batch_slots": "auto", **ANY_BATCH}) == (
        "at most 48 fit beside the weights; 'auto' picks that",
        "memory",
    )
    capped = {"serving.batch_slots": "auto", "stack.max_batch_slots": 20}
    assert words(**capped)[1] == "batch_programs"  # 20 is no power of two: 16 runs
    assert words(**{**capped, **ANY_BATCH}) == (
        "at most 48 fit beside the weights; 'auto' picks 20, the most of them the stack runs "
        "(its max_batch_slots: 20)",
        "max_batch_slots",
    )
    # above the stack's max_batch_slots (not a missing program): said in its own terms
    over, _ = words(**{"serving.batch_slots": 24, "stack.max_batch_slots": 20, **ANY_BATCH})
    assert over.endswith(
        "; the stack batches at most 20 (its max_batch_slots), so it runs 24 as if its "
        "max_batch_slots were 24"
    )
    assert "program" not in over


def test_the_capacity_words_separate_thousands() -> None:
    """Counts in the capacity words read as every other count does (`human.count`): a paged
    pool on an H200 holds thousands of requests, ``4,436``, of which 'auto' picks ``2,048``
    (a field's own value, ``max_batch_slots: 2048``, reads as its file writes it)."""
    scenario = load_scenario(
        "workloads/llama3.1-70b-decode.yaml", overrides={"hardware": "dgx-h200"}
    )
    holds = batch_capacity(scenario, runnable=False)
    runs = batch_capacity(scenario)
    said = capacity_words(scenario, holds, runs, 32)
    assert holds > 1000 and f"at most {holds:,} fit in the KV pool" in said
    assert f"'auto' would pick {runs:,}, the most" in said
    assert f"(its max_batch_slots: {scenario.stack.max_batch_slots})" in said


def test_an_explicit_batch_beyond_what_fits_says_where_its_kv_cache_is() -> None:
    """An explicit batch above what fits beside the weights is a what-if that runs: the
    words say where the extra slots' KV cache is, and that is where the memory plan put it.
    On a GPU under TensorRT-LLM (kv_memory_fraction 0.9) 14 slots of 4 GiB fit in the
    stack's share, and 16 fit in HBM outside it (a GPU has no DDR: the plan holds every
    weight in HBM); on SN40L 6 fit beside the weights, and under a hot set of all HBM a 7th
    takes HBM from them, which then sit in DDR; under ``memory.weights: hbm``, which keeps
    every weight in HBM, the 7th is refused."""

    def explained(overrides: dict[str, object]) -> tuple[str, Scenario, int]:
        scenario = load_scenario("workloads/llama3.1-8b-1socket.yaml", overrides=overrides)
        holds = batch_capacity(scenario, runnable=False)
        slots = scenario.workload.serving.slots_for(lambda: 0)
        return capacity_words(scenario, holds, batch_capacity(scenario), slots), scenario, slots

    # static slots on the GPU (a paged pool's words: tests/test_paged_kv_pool.py)
    gpu = {
        "hardware": "dgx-h100",
        "serving.max_context": 32768,
        "stack.max_batch_slots": 4,
        "stack.kv_page_tokens": None,
    }
    told, scenario, slots = explained({**gpu, "serving.batch_slots": 16})
    assert told == (
        "serving.batch_slots sets 16; at most 14 fit beside the weights in the stack's KV "
        "share (kv_memory_fraction 0.9); 'auto' would pick 4, the most of them the stack runs "
        "(its max_batch_slots: 4); the KV cache of the 2 slots beyond them takes HBM outside "
        "that share; the stack batches at most 4 (its max_batch_slots), so it runs 16 as if "
        "its max_batch_slots were 16"
    )
    hbm = plan_memory(scenario, slots).tiers
    assert hbm["hbm"].used_bytes <= hbm["hbm"].capacity_bytes and hbm["ddr"].capacity_bytes == 0
    # without the share, 16 fit beside the weights: the share is what held 14
    whole = load_scenario(
        "workloads/llama3.1-8b-1socket.yaml", overrides={**gpu, "stack.kv_memory_fraction": 1}
    )
    assert batch_capacity(whole, runnable=False) >= 16

    sn40l = {"serving.max_context": 65536, "serving.batch_slots": 7}
    hot = {"memory.weights": "hot_set", "memory.hot_set_fraction": 1.0}
    told, scenario, slots = explained({**sn40l, **hot})
    assert told == (
        "serving.batch_slots sets 7; at most 6 fit beside the weights; 'auto' would pick 4, "
        "the most of them the stack runs (its batch_programs: powers_of_two); the KV cache of "
        "the 1 slot beyond them takes HBM the weights would have had, which the steps read "
        "from DDR instead; the stack has no 7-slot program, so it runs 7 as if one were "
        "compiled for it"
    )
    assert plan_memory(scenario, slots).tiers["ddr"].weights_bytes > 0
    assert plan_memory(scenario, 6).tiers["ddr"].weights_bytes == 0
    told, scenario, slots = explained(sn40l)
    assert told.startswith("serving.batch_slots sets 7; at most 6 fit beside the weights; ")
    assert "beyond them" not in told
    with pytest.raises(SlotsCapacityError) as refused:
        plan_memory(scenario, slots)
    assert "short, and memory.weights hbm keeps every weight in HBM; lower serving." in str(
        refused.value
    )
    assert "(memory.weights hot_set or streamed, now hbm)" in str(refused.value)
    assert plan_memory(scenario, 6).tiers["ddr"].weights_bytes == 0


def test_weights_beyond_a_gpus_hbm_name_the_batch_that_fits() -> None:
    """A GPU has no DDR: weights that do not fit in HBM beside the batch's KV cache do not
    fit at all, and the error says so (no 'DDR 0 B') and names the smaller batch that fits
    beside them (with 'auto', tp=1 on an H200 runs 3 slots of Llama 3.1 70B); when not even
    one slot fits beside the weights, lowering the batch is not offered."""
    h200 = load_scenario(
        "workloads/llama3.1-70b-decode.yaml",
        # static slots of max_context each (a paged pool holds requests instead)
        overrides={"hardware": "dgx-h200", "parallelism.tp": 1, "stack.kv_page_tokens": None},
    )
    assert batch_capacity(h200, runnable=False) == batch_capacity(h200) == 3
    with pytest.raises(CapacityError) as raised:
        plan_memory(h200, 32)
    message = str(raised.value)
    assert (
        "beside the KV cache of 32 slots and activations, and a GPU has no DDR, so the other "
        in message
    )
    assert "DDR 0 B" not in message
    assert (
        ": lower serving.batch_slots (at most 3 fit beside the weights in the stack's KV "
        in message
    )
    # at the workload's file and its layout, the override that set it named
    assert message.startswith("workloads/llama3.1-70b-decode.yaml: parallelism: ")
    assert message.endswith(
        "store weights in fp8 (dtypes.weights, now bf16) or raise "
        "parallelism.tp (now 1, up to the 8 GPUs) (from --set parallelism.tp)"
    )
    plan_memory(h200, 3)  # what it names fits
    h100 = load_scenario(
        "workloads/llama3.1-70b-decode.yaml",
        overrides={"hardware": "dgx-h100", "parallelism.tp": 1},
    )
    with pytest.raises(CapacityError) as raised:
        plan_memory(h100, 32)
    assert "serving.batch_slots" not in str(raised.value)  # 131 GiB of weights: none fit


def test_a_gpus_kv_capacity_error_keeps_its_weights_in_hbm() -> None:
    """The KV cache's error says the weights may spill to DDR on SN40L only where
    ``memory.weights`` reads them from there: a GPU, and ``hbm``, keep them in HBM."""
    # static slots on the GPU too (a paged pool's plan holds the pool, whatever the slots)
    overrides = {
        "serving.max_context": 65536,
        "serving.batch_slots": 16,
        "stack.kv_page_tokens": None,
    }
    for hardware, weights, where in (
        ("sn40l", "hot_set", "which may spill to DDR"),
        ("sn40l", "hbm", "which memory.weights hbm keeps in HBM too"),
        ("dgx-h100", "hbm", "which a GPU keeps in HBM too"),
    ):
        scenario = load_scenario(
            "workloads/llama3.1-8b-1socket.yaml",
            overrides={**overrides, "hardware": hardware, "memory.weights": weights},
        )
        with pytest.raises(
            CapacityError, match=f"even without the weights \\(14.96 GiB, {where}: "
        ):
            plan_memory(scenario, 16)


def test_weights_spill_lowest_bandwidth_need_first() -> None:
    scenario = load_scenario(
        "workloads/deepseek-r1-128k-snapstream.yaml",
        overrides={
            "hw.socket.hbm.capacity": "41 GiB",
            "serving.batch_slots": 8,
            "memory.weights": "hot_set",
            "memory.hot_set_fraction": 1.0,
        },
    )  # 40.78 GiB of weights a socket: a hot set of all of them, the 8 slots push some out
    placement = plan_memory(scenario, 8)
    for usage in placement.tiers.values():
        assert usage.used_bytes <= usage.capacity_bytes
    need = {w.key: w.need for w in weight_inventory(scenario, 8)}
    in_ddr = {t.name for t in placement.tensors if t.tier == "ddr"}
    in_hbm = {t.name for t in placement.tensors if t.tier == "hbm" and t.kind == "weights"}
    assert "embedding/embed.gather" in in_ddr
    assert any("experts" in key for key in in_ddr)
    assert not any(key.endswith("attn.q_b_proj") for key in in_ddr)
    only_ddr = in_ddr - in_hbm
    assert max(need[k] for k in only_ddr) <= min(need[k] for k in in_hbm - in_ddr)

    program = Compiler(scenario).program(StepShape("decode", 8, 1, slot_tokens(scenario)))
    stages = {(k.name, s.name): s for k in program.kernels for s in k.stages}
    assert stages[("embedding", "embed.gather")].reads.get("ddr", 0) > 0
    assert stages[("decoder_moe", "moe.experts_down")].reads.get("ddr", 0) > 0
    assert stages[("decoder_moe", "attn.q_b_proj")].reads.get("ddr", 0) == 0
    assert program.bytes_by_tier()["ddr"] > 0


def test_a_share_of_all_memory_bounds_the_kv_cache_with_the_weights_inside_it() -> None:
    """vLLM's gpu_memory_utilization (the stack's memory_utilization, 0.9): weights,
    activations and KV cache together within 90% of HBM, against TensorRT-LLM's
    free_gpu_memory_fraction (kv_memory_fraction, 0.9): 90% of what the weights and
    activations leave. The batch capacity is the largest batch whose KV fits each rule."""
    from rdu_sim.compiler.placement import activation_bytes, batch_capacity, kv_bytes

    def capacity(stack: str) -> tuple[int, int, Scenario]:
        scenario = load_scenario(
            "workloads/llama3.1-8b-1socket.yaml",
            # static slots, so the capacity is slots x max_context within each room (a paged
            # pool is the same room in pages: tests/test_paged_kv_pool.py)
            overrides={"hardware": "dgx-h100", "stack": stack, "stack.kv_page_tokens": None},
        )
        return batch_capacity(scenario), scenario.hardware.hbm.capacity, scenario

    vllm, hbm, scenario = capacity("vllm-2024")
    trt, _, trt_scenario = capacity("tensorrt-llm")
    weights = plan_memory(scenario, 1).tiers["hbm"].used_bytes - kv_bytes(scenario, 1)
    weights -= activation_bytes(scenario, 1)

    def room(slots: int, share_of_all: bool) -> float:
        act = activation_bytes(scenario, slots)
        return 0.9 * hbm - weights - act if share_of_all else 0.9 * (hbm - weights - act)

    for slots, share_of_all in ((vllm, True), (trt, False)):
        assert kv_bytes(scenario, slots) <= room(slots, share_of_all)
        assert kv_bytes(scenario, slots + 1) > room(slots + 1, share_of_all)
    assert vllm < trt  # 10% of all memory is more than 10% of what the weights leave
    assert "memory_utilization 0.9" in capacity_words(scenario, vllm, vllm)
    assert "kv_memory_fraction 0.9" in capacity_words(trt_scenario, trt, trt)


def test_two_bounds_on_the_kv_cache_are_refused() -> None:
    from rdu_sim.config.stack import StackConfig

    with pytest.raises(ValueError, match="set one"):
        StackConfig.model_validate(
            {"name": "x", "runs_on": "gpu", "kv_memory_fraction": 0.9, "memory_utilization": 0.9}
        )
    from rdu_sim.config.errors import ConfigError

    with pytest.raises(
        ConfigError,
        match=r"vllm-2024.yaml:\d+: memory_utilization: 0.9 and "
        r"kv_memory_fraction 0.8 both bound the KV cache",
    ):
        load_scenario(
            "workloads/llama3.1-8b-1socket.yaml",
            overrides={
                "hardware": "dgx-h100",
                "stack": "vllm-2024",
                "stack.kv_memory_fraction": 0.8,
            },
        )
    stack = StackConfig.model_validate({"name": "x", "runs_on": "gpu", "memory_utilization": 0.5})
    assert stack.kv_room(100.0, 30.0, 5.0) == 15.0
    assert stack.model_copy(update={"memory_utilization": None}).kv_room(100.0, 30.0, 5.0) == 65.0


def test_a_prefix_cache_takes_the_kv_caches_room_not_the_stacks_reserve() -> None:
    """The prefix cache's default size is the HBM the stack leaves its KV cache beside the
    slots' (``StackConfig.kv_room``); with no share set it is all the memory the plan leaves
    free. A paged stack's (vLLM's) lives in its KV pool, the room (vLLM's 10% reserve of
    all memory not in it) in whole pages: its blocks share the whole pool (at most every
    page, in whole blocks of pages), and the second number is one block's pages."""
    from types import SimpleNamespace

    from rdu_sim.api_cluster import _prefix_blocks

    def blocks(stack: str) -> tuple[tuple[int, int], Placement, int]:
        scenario = load_scenario(
            "workloads/llama3.1-8b-1socket.yaml",
            overrides={"hardware": "dgx-h100", "stack": stack, "serving.batch_slots": 8},
        )
        placement = plan_memory(scenario, 8)
        prefix = SimpleNamespace(capacity=None, block_tokens=512)
        cluster = SimpleNamespace(config=SimpleNamespace(prefix_cache=prefix))
        pool = SimpleNamespace(role="mixed", scenario=scenario)
        hbm = placement.tiers["hbm"]
        per_block = 512 * hbm.kv_bytes / (8 * scenario.kv_policy.slot_tokens())
        return _prefix_blocks(cluster, pool, placement), placement, int(per_block)  # type: ignore[arg-type]

    (none, pages), placement, per_block = blocks("none")
    assert none == int(placement.tiers["hbm"].free_bytes // per_block) > 0 and pages == 0
    (vllm, pages), placement, _ = blocks("vllm-2024")
    pool = placement.kv_pool
    assert pool is not None and pool.page_tokens == 16
    assert pages == 512 // 16
    assert vllm == pool.pages // pages > 0
