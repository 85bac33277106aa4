"""A draft in the memory plan: a shared draft's weights and KV cache beside the target's (its
weights always in HBM), the verify step's rollback positions and activations, and the batch
capacity that follows; a separate draft leaves the target's plan alone."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rdu_sim.compiler import CapacityError
from rdu_sim.compiler.layout import kv_slot_bytes_per_socket
from rdu_sim.compiler.placement import (
    activation_bytes,
    batch_capacity,
    kv_bytes,
    max_prompt_tokens,
    plan_memory,
    weight_inventory,
)
from rdu_sim.config.dtypes import DTYPE_BYTES
from rdu_sim.graph.shape import INDEX
from rdu_sim.scenario import Scenario, load_scenario

REPO = Path(__file__).resolve().parents[1]
SPECDEC = REPO / "workloads" / "speculative" / "llama3.1-70b-16socket-specdec.yaml"
ANY_BATCH = "stack.batch_programs=any"
"""Every batch runnable: capacities are memory's, which the draft pays in (SambaStack's
programs of powers of two can hide a few slots' difference)."""
PREFILL = REPO / "workloads" / "speculative" / "deepseek-r1-128k-snapstream-specprefill.yaml"
MTP = REPO / "workloads" / "speculative" / "deepseek-r1-16socket-mtp.yaml"
K = 4  # the shipped workload's draft_tokens


def _draft(scenario: Scenario) -> Scenario:
    assert scenario.draft is not None
    return scenario.draft


def test_shared_draft_sits_in_the_targets_plan() -> None:
    spec = load_scenario(SPECDEC)
    draft, slots = _draft(spec), 8
    plan = plan_memory(spec, slots)
    tensors = {t.name: t for t in plan.tensors}
    draft_weights = [t for t in plan.tensors if t.name.startswith("draft/") and t.kind == "weights"]
    assert {t.tier for t in draft_weights} == {"hbm"}
    assert sum(t.bytes for t in draft_weights) == sum(w.bytes for w in weight_inventory(draft))
    slot = spec.kv_policy.slot_tokens() + K  # the verify step's rollback positions
    assert tensors["kv_cache"].bytes == slots * kv_slot_bytes_per_socket(spec, slot)
    assert tensors["draft/kv_cache"].bytes == slots * kv_slot_bytes_per_socket(draft, slot)
    assert plan.tiers["hbm"].kv_bytes == tensors["kv_cache"].bytes + tensors["draft/kv_cache"].bytes
    assert plan.tiers["hbm"].used_bytes <= plan.tiers["hbm"].capacity_bytes


def test_verify_step_activations() -> None:
    """A decode step of k + 1 tokens per slot: hidden states in and out, token ids, logits
    of every new token (the compiler's working set, exactly)."""
    spec = load_scenario(SPECDEC)
    arch, slots = spec.model, 64
    rows = slots * (K + 1)
    decode = 2 * rows * arch.hidden_size * 2 + rows * INDEX + rows * arch.vocab_size * 2
    assert activation_bytes(spec, slots) == decode
    plain = load_scenario(SPECDEC, ["speculation=null"])
    assert activation_bytes(plain, slots) < decode


def test_capacity_pays_for_the_draft() -> None:
    spec = load_scenario(SPECDEC, [ANY_BATCH])
    plain = load_scenario(SPECDEC, ["speculation=null", ANY_BATCH])
    capacity = batch_capacity(spec)
    assert 1 <= capacity < batch_capacity(plain)
    hbm = spec.hardware.hbm.capacity
    weights = sum(w.bytes for w in weight_inventory(spec)) + sum(
        w.bytes for w in weight_inventory(_draft(spec))
    )

    def fits(slots: int) -> bool:
        return weights + kv_bytes(spec, slots) + activation_bytes(spec, slots) <= hbm

    assert fits(capacity) and not fits(capacity + 1)


def test_a_draft_that_does_not_fit_is_refused() -> None:
    """The target's 10.21 GiB of weights fit 12 GiB of HBM; 34 slots' KV cache (11.7 GiB)
    leaves 267 MiB for the draft's 607 MiB, which a shared draft keeps in HBM."""
    spec = load_scenario(SPECDEC, ["hw.socket.hbm.capacity=12 GiB"])
    with pytest.raises(CapacityError, match=r"draft's weights .* do not fit in the 267\.3 MiB"):
        plan_memory(spec, 34)


def test_separate_draft_leaves_the_targets_plan_alone() -> None:
    overrides = [
        "parallelism.tp=8",
        ANY_BATCH,
        "speculation.placement=separate",
        "speculation.draft_tp=8",
    ]
    separate = load_scenario(SPECDEC, overrides)
    plain = load_scenario(SPECDEC, ["parallelism.tp=8", "speculation=null"])
    plan = plan_memory(separate, 4)
    assert not any(t.name.startswith("draft/") for t in plan.tensors)
    # only the verify step's rollback positions and activations differ from plain decoding
    slot = plain.kv_policy.slot_tokens()
    assert kv_bytes(separate, 4) == 4 * kv_slot_bytes_per_socket(plain, slot + K)
    assert batch_capacity(separate) > batch_capacity(load_scenario(SPECDEC, overrides[:2]))


def test_speculative_prefill_draft_keeps_one_prompt_as_scratch() -> None:
    """The draft's cache of the longest prompt (and its look-ahead) while it scores it: no
    slot of its own."""
    spec = load_scenario(PREFILL)
    draft = _draft(spec)
    plain = load_scenario(PREFILL, ["speculation=null"])
    assert kv_bytes(spec, 16) == kv_bytes(plain, 16)
    prompt = max_prompt_tokens(spec)
    scratch = kv_slot_bytes_per_socket(draft, prompt + 8)
    assert activation_bytes(spec, 16) >= scratch
    assert activation_bytes(spec, 16) >= activation_bytes(plain, 16)


def test_an_mtp_draft_holds_one_block_and_reads_the_targets_embeddings() -> None:
    """DeepSeek's MTP module: one MoE block of its own in the plan; the embedding table and
    LM head are the target's, held once. The same draft not sharing them holds them again."""
    mtp = load_scenario(MTP, [ANY_BATCH])
    own = load_scenario(MTP, ["speculation.shares_embeddings=false", ANY_BATCH])
    draft = _draft(mtp)
    assert draft.model.layers == 1 and draft.model.name == "deepseek-r1-mtp"

    def draft_weights(scenario: Scenario) -> dict[str, int]:
        plan = plan_memory(scenario, 1)
        return {
            t.name.removeprefix("draft/"): t.bytes
            for t in plan.tensors
            if t.name.startswith("draft/") and t.kind == "weights"
        }

    shared, held = draft_weights(mtp), draft_weights(own)
    inventory = {w.key: w.bytes for w in weight_inventory(draft)}
    assert held == inventory
    ends = {k: b for k, b in inventory.items() if k.startswith(("embedding/embed", "lm_head/"))}
    assert set(ends) >= {"embedding/embed.gather", "lm_head/lm_head"}
    assert shared == {k: b for k, b in inventory.items() if k not in ends}
    assert any("moe.experts" in k for k in shared)  # the MoE block is its own
    # so is the module's input projection beside the gather, 2 x 7168 -> 7168, and its norms
    weight = mtp.workload.dtypes.weights or "bf16"
    assert shared["embedding/mtp.eh_proj"] == math.ceil(2 * 7168 * 7168 * DTYPE_BYTES[weight])
    assert {"embedding/mtp.enorm", "embedding/mtp.hnorm"} <= set(shared)
    # the target's own tensors are the same in both plans; capacity gains what is not held
    target = sum(w.bytes for w in weight_inventory(mtp))
    assert plan_memory(mtp, 1).tiers["hbm"].weights_bytes == target + sum(shared.values())
    assert batch_capacity(mtp) > batch_capacity(own)


PAGED_PREFILL = {
    "hardware": "dgx-h100",
    "parallelism.tp": 8,
    "serving.prompt_tokens": 4096,
    "serving.output_tokens": 64,
    "speculation.decoding": None,
    "speculation.prefill.keep_ratio": 0.25,
    "speculation.prefill.chunk_tokens": 32,
    "speculation.prefill.look_ahead": 8,
}
"""Speculative prefill on TensorRT-LLM (a paged KV pool of 64-token pages): the target keeps
1,024 of each 4,096-token prompt."""


def test_a_paged_pool_counts_the_prompt_tokens_the_target_keeps() -> None:
    """A request reserves its kept prompt tokens and its output (1,088 tokens: 17 pages),
    as the scheduler reserves them, not its whole prompt (4,160: 65 pages): the capacity,
    what ``auto`` picks and the report's smallest request all count 17."""
    from rdu_sim import api
    from rdu_sim.compiler.placement import smallest_request_pages

    sets = {**PAGED_PREFILL, "serving.batch_slots": "auto", "serving.requests": 4}
    scenario = load_scenario(SPECDEC, sets)
    assert smallest_request_pages(scenario) == 17
    assert smallest_request_pages(load_scenario(SPECDEC, {**sets, "speculation": None})) == 65
    run = api.run(SPECDEC, sets)
    summary = run.summary()
    pool = summary.kv_pool
    assert pool is not None and pool.smallest_request_pages == 17
    assert summary.batch_slots == summary.batch_capacity == pool.pages // 17 > 1000
    assert "(17 pages of 64 tokens; each request reserves its kept prompt tokens" in (
        summary.capacity
    )
    # the scheduler reserved exactly that: the 4 requests together at the peak
    assert pool.peak_pages == 4 * 17


def test_a_request_whose_kept_tokens_fit_the_pool_is_not_refused() -> None:
    """``check_pool`` holds a request's kept prompt against the pool, as the scheduler
    admits it: 17 pages fit a pool of 20, which the whole prompt's 65 would not."""
    import numpy as np

    from rdu_sim.config.errors import ConfigError
    from rdu_sim.kv.paged import PagedKV
    from rdu_sim.serving.limits import check_pool

    pool = PagedKV(page_tokens=64, pages=20, slot_tokens=131072)
    prompts, outputs = np.array([4096, 4000]), np.array([64, 64])
    check_pool(load_scenario(SPECDEC, PAGED_PREFILL), pool, prompts, outputs)
    with pytest.raises(ConfigError, match=r"2 of 2 requests reserve more KV pages.* 65 pages"):
        check_pool(
            load_scenario(SPECDEC, {**PAGED_PREFILL, "speculation": None}), pool, prompts, outputs
        )


def test_a_shared_drafts_kv_on_a_paged_stack_is_its_share_of_every_page() -> None:
    """On a paged stack each page holds the draft's KV beside the target's (64 tokens x
    (40,960 + 4,096) B on each of 8 GPUs: 70B's and 1B's bf16 KV per token over tp 8), so
    the draft's KV is the pool's pages x 64 x 4,096 B, not 0, and the plan's two KV tensors
    add up to the pool."""
    from rdu_sim import api
    from rdu_sim.compiler.placement import DRAFT_PREFIX

    run = api.run(SPECDEC, {"hardware": "dgx-h100", "parallelism.tp": 8, "serving.requests": 2})
    pool = run.placement.kv_pool
    assert pool is not None and pool.page_bytes == 64 * (40_960 + 4_096)
    spec = run.summary().speculation
    assert spec is not None
    assert spec.draft_memory.kv_bytes == pool.pages * 64 * 4_096
    kv = {t.name: t.bytes for t in run.placement.tensors if t.kind == "kv"}
    assert kv == {
        "kv_cache": pool.pages * 64 * 40_960,
        f"{DRAFT_PREFIX}kv_cache": pool.pages * 64 * 4_096,
    }
    assert sum(kv.values()) == run.placement.tiers["hbm"].kv_bytes == pool.pages * pool.page_bytes
