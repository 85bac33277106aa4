"""Sharding conserves work: the TP sockets together do the unsharded work, plus exactly the
replication the layout documents, plus the collectives."""

from __future__ import annotations

import math

import pytest

from rdu_sim.compiler import ShardPlan, shard_graph
from rdu_sim.config.architecture import DeepSeekArchitecture, LlamaArchitecture
from rdu_sim.graph import GraphGroup, Precision, model_groups, operators, totals
from rdu_sim.graph.check import graph_problems
from rdu_sim.graph.digraph import find_cycle
from rdu_sim.models import get_model
from rdu_sim.shapes import StepShape

DECODE = StepShape("decode", 4, 1, 2048)
PREFILL = StepShape("prefill", 1, 512, 256)

# Operators every socket runs whole (replicated) with matrix FLOPs or weights
DEEPSEEK_REPLICATED = {
    "attn.q_a_proj",
    "attn.kv_a_proj",
    "moe.router",
    "embed.gather",
    "attn_norm",
    "ffn_norm",
    "attn.q_a_norm",
    "attn.kv_norm",
    "final_norm",
}
LLAMA_REPLICATED = {"embed.gather", "attn_norm", "ffn_norm", "final_norm"}


def _per_socket(groups: list[GraphGroup], plan: ShardPlan) -> list[GraphGroup]:
    return [GraphGroup(g.name, g.count, shard_graph(g.graph, plan)) for g in groups]


def _replicated(groups: list[GraphGroup], names: set[str], attr: str) -> float:
    return float(
        sum(
            g.count * getattr(node, attr)
            for g in groups
            for node in operators(g.graph)
            if node.name in names
        )
    )


def _collectives(groups: list[GraphGroup]) -> list[tuple[str, str, float]]:
    return [
        (g.name, node.name, node.collective_bytes)
        for g in groups
        for node in operators(g.graph)
        if node.collective
    ]


@pytest.mark.parametrize("shape", [DECODE, PREFILL])
@pytest.mark.parametrize("layout", ["replicated", "sequence_split", "head_split"])
def test_deepseek_conservation(shape: StepShape, layout: str) -> None:
    arch = get_model("deepseek-r1")
    tp = 16
    cache = "per_head" if layout == "head_split" else "latent"
    whole = model_groups(arch, shape, Precision(weights=1.0), cache)  # type: ignore[arg-type]
    sharded = _per_socket(whole, ShardPlan(tp, layout))
    unsharded, socket = totals(whole), totals(sharded)
    extra_flops = (tp - 1) * _replicated(whole, DEEPSEEK_REPLICATED, "flops")
    assert tp * socket.flops == pytest.approx(unsharded.flops + extra_flops, rel=1e-12)
    extra_params = (tp - 1) * _replicated(whole, DEEPSEEK_REPLICATED, "weight_params")
    assert tp * socket.weight_params == unsharded.weight_params + extra_params
    # the KV cache is replicated only by the replicated layout
    kv_copies = tp if layout == "replicated" else 1
    assert tp * socket.kv_write_bytes == pytest.approx(kv_copies * unsharded.kv_write_bytes)
    assert tp * socket.kv_read_bytes == pytest.approx(kv_copies * unsharded.kv_read_bytes)
    for group in sharded:
        assert graph_problems(group.graph) == []
        assert find_cycle(group.graph) is None


def test_deepseek_collectives_by_layout() -> None:
    arch = get_model("deepseek-r1")
    assert isinstance(arch, DeepSeekArchitecture)
    whole = model_groups(arch, DECODE, Precision())
    hidden = DECODE.rows * arch.hidden_size * 2.0
    # sequence_split: every head's queries gathered before the attention, its partial
    # outputs reduce-scattered after it
    split = {"attn.score.query_allgather", "attn.value.reduce_scatter"}
    for layout, extra in (("replicated", set()), ("sequence_split", split)):
        found = _collectives(_per_socket(whole, ShardPlan(16, layout)))
        by_group = {g: {n for gg, n, _ in found if gg == g} for g, _, _ in found}
        assert by_group["decoder_moe"] == {"attn.o_proj.allreduce", "moe.combine.allreduce"} | extra
        assert by_group["decoder_dense"] >= {"attn.o_proj.allreduce", "ffn.down_proj.allreduce"}
        assert by_group["lm_head"] == {"lm_head.allgather"}
        assert "embedding" not in by_group  # replicated gather: no collective
        for _, name, payload in found:
            if name.endswith("allreduce"):
                assert payload == hidden
    # sequence_split: partial attention outputs (latent per head) plus FP32 max and sum
    payloads = {
        (g, n): b for g, n, b in _collectives(_per_socket(whole, ShardPlan(16, "sequence_split")))
    }
    latent = DECODE.rows * arch.heads * arch.kv_lora_rank * 2.0
    stats = DECODE.rows * arch.heads * 2 * 4.0
    assert payloads[("decoder_moe", "attn.value.reduce_scatter")] == latent + stats


def test_tp_one_changes_nothing() -> None:
    arch = get_model("deepseek-r1")
    whole = model_groups(arch, DECODE, Precision())
    one = _per_socket(whole, ShardPlan(1, "sequence_split"))
    assert totals(one) == totals(whole)
    assert _collectives(one) == []


@pytest.mark.parametrize(("tp", "kv_copies"), [(1, 1), (4, 1), (8, 1), (16, 2)])
def test_llama_conservation_and_kv_head_replication(tp: int, kv_copies: int) -> None:
    """K/V heads split over min(tp, kv_heads) sockets: beyond 8 they are replicated."""
    arch = get_model("llama-3.1-8b")
    assert isinstance(arch, LlamaArchitecture)
    whole = model_groups(arch, DECODE, Precision())
    plan = ShardPlan(tp, kv_heads=arch.kv_heads)
    sharded = _per_socket(whole, plan)
    unsharded, socket = totals(whole), totals(sharded)
    kv_proj = {"attn.k_proj", "attn.v_proj"}
    extra = (kv_copies - 1) * _replicated(whole, kv_proj, "flops")
    assert tp * socket.flops == pytest.approx(unsharded.flops + extra, rel=1e-12)
    extra_params = (tp - 1) * _replicated(whole, LLAMA_REPLICATED, "weight_params") + (
        kv_copies - 1
    ) * _replicated(whole, kv_proj, "weight_params")
    assert tp * socket.weight_params == unsharded.weight_params + extra_params
    assert tp * socket.kv_read_bytes == pytest.approx(kv_copies * unsharded.kv_read_bytes)
    collectives = _collectives(sharded)
    assert len(collectives) == (0 if tp == 1 else 3)  # o_proj, down_proj, LM-head gather
    hidden = DECODE.rows * arch.hidden_size * 2.0
    logits = DECODE.rows * arch.vocab_size * 2.0
    expected = 0.0 if tp == 1 else 2 * arch.layers * hidden + logits
    assert socket.collective_bytes == expected


def test_gemm_shapes_lose_the_split_dimension() -> None:
    arch = get_model("llama-3.1-8b")
    assert isinstance(arch, LlamaArchitecture)
    graph = model_groups(arch, DECODE, Precision())[1].graph
    socket = shard_graph(graph, ShardPlan(8, kv_heads=8))
    q = next(n for n in operators(socket) if n.name == "attn.q_proj")
    o = next(n for n in operators(socket) if n.name == "attn.o_proj")
    assert q.gemm is not None and o.gemm is not None
    assert (q.gemm.n, q.gemm.k) == (arch.heads * arch.head_dim // 8, arch.hidden_size)
    assert (o.gemm.n, o.gemm.k) == (arch.hidden_size, arch.heads * arch.head_dim // 8)
    assert o.act_write_fraction == 1.0  # a row-parallel product writes a whole partial sum
    assert math.isclose(q.act_write_fraction, 1 / 8)
