"""SnapKV selection operators: real work that grows with prompt x window."""

from __future__ import annotations

import pytest

from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.graph import Precision, op, operators, snapkv_graph, totals
from rdu_sim.graph.model import GraphGroup
from rdu_sim.models import get_model
from rdu_sim.shapes import Selection


def _selection(prompt: int, window: int = 32) -> Selection:
    return Selection(
        prompt_tokens=prompt,
        window=window,
        scored_keys=prompt,
        candidates=prompt - 2052,
        topk=30716,
        kept=32768,
        kernel_size=7,
        pooling="max",
    )


@pytest.mark.parametrize("name", ["llama-3.1-8b", "deepseek-r1"])
def test_selection_operators_are_present_and_costed(name: str) -> None:
    graph = snapkv_graph(get_model(name), 1, _selection(65536), Precision())
    kinds = [node.kind for node in operators(graph)]
    for kind in ("kv_read", "attention_score", "softmax", "reduce", "pool", "topk", "gather"):
        assert kind in kinds
    assert op(graph, "snapkv.score").flops > 0
    assert op(graph, "snapkv.softmax").vector_flops > 0
    assert op(graph, "snapkv.softmax").outputs[0].dtype_bytes == 4.0  # FP32
    gather = op(graph, "snapkv.gather")
    assert gather.kv_write_bytes > 0 and gather.kv_read_bytes == gather.kv_write_bytes


def test_mla_scores_in_the_absorbed_latent_space() -> None:
    arch = get_model("deepseek-r1")
    assert isinstance(arch, DeepSeekArchitecture)
    graph = snapkv_graph(arch, 2, _selection(40000, 16), Precision())
    rank, pe = arch.kv_lora_rank, arch.qk_rope_head_dim
    assert op(graph, "snapkv.score").flops == 2 * 2 * arch.heads * 16 * 40000 * (rank + pe)
    assert op(graph, "snapkv.q_absorb").weight_params == 0  # re-reads kv_b_proj's W_UK
    assert op(graph, "snapkv.k_read").kv_read_bytes == 2 * 40000 * (rank + pe) * 2


@pytest.mark.parametrize("name", ["llama-3.1-8b", "deepseek-r1"])
def test_work_grows_with_prompt_times_window(name: str) -> None:
    arch = get_model(name)

    def flops(prompt: int, window: int) -> float:
        graph = snapkv_graph(arch, 1, _selection(prompt, window), Precision())
        return totals([GraphGroup("s", 1, graph)]).flops

    def score(prompt: int, window: int) -> float:
        return op(
            snapkv_graph(arch, 1, _selection(prompt, window), Precision()), "snapkv.score"
        ).flops

    assert score(80000, 32) == 2 * score(40000, 32) == score(40000, 64)
    assert flops(40000, 64) == pytest.approx(2 * flops(40000, 32))  # all of it is per query
    assert flops(80000, 32) > 1.9 * flops(40000, 32)
    big = totals([GraphGroup("s", 1, snapkv_graph(arch, 1, _selection(80000), Precision()))])
    small = totals([GraphGroup("s", 1, snapkv_graph(arch, 1, _selection(40000), Precision()))])
    assert big.vector_flops > 1.9 * small.vector_flops
    assert big.kv_read_bytes > small.kv_read_bytes
