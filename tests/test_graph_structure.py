"""Every graph is a DAG whose operators' inputs match their producers' outputs; exports work."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import networkx as nx
import pytest

from rdu_sim.graph import (
    GraphBuilder,
    Operator,
    Precision,
    TensorSpec,
    check_graph,
    graph_problems,
    model_groups,
    op,
    selection_graphs,
    to_dot,
    write_graphml,
)
from rdu_sim.graph.digraph import DiGraph, find_cycle
from rdu_sim.models import get_model
from rdu_sim.shapes import Selection, StepShape

SHAPES = [
    StepShape("decode", 3, 1, 500),
    StepShape("prefill", 2, 300, 0),
    StepShape("prefill", 1, 128, 1024),
    StepShape("decode", 1, 1, 0),
]


def _all_graphs() -> list[tuple[str, DiGraph]]:
    graphs = []
    for name in ["llama-3.1-8b", "deepseek-r1"]:
        arch = get_model(name)
        caches = ["latent", "per_head"] if arch.family == "deepseek" else ["latent"]
        for shape in SHAPES:
            for cache in caches:
                for stash in ({}, {None: 32}):
                    for group in model_groups(
                        arch,
                        shape,
                        Precision(1.0, 2.0, 2.0),
                        cache,  # type: ignore[arg-type]
                        stash=stash,
                    ):
                        label = f"{name}/{shape}/{cache}/stash{stash}/{group.name}"
                        graphs.append((label, group.graph))
        sel = Selection(
            prompt_tokens=5000,
            window=32,
            scored_keys=5000,
            candidates=2900,
            topk=1000,
            kept=3000,
            kernel_size=7,
            pooling="max",
        )
        for cache in caches:
            for kernel, graph in selection_graphs(arch, 2, sel, Precision(), cache):  # type: ignore[arg-type]
                graphs.append((f"{name}/{kernel}/{cache}", graph))
    return graphs


@pytest.mark.parametrize(
    ("label", "graph"), _all_graphs(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_graph_is_a_sound_dag(label: str, graph: DiGraph) -> None:
    assert find_cycle(graph) is None, label
    assert graph_problems(graph) == [], label
    for name in graph.nodes:
        node = op(graph, name)
        assert node.flops >= 0 and node.vector_flops >= 0
        assert node.weight_read_bytes >= 0 and node.kv_read_bytes >= 0


def test_layer_graphs_hold_the_expected_operators() -> None:
    llama = model_groups(get_model("llama-3.1-8b"), SHAPES[0], Precision())[1].graph
    assert {
        "attn_norm",
        "attn.q_proj",
        "attn.k_proj",
        "attn.v_proj",
        "attn.rope_q",
        "attn.kv_write",
        "attn.score",
        "attn.softmax",
        "attn.value",
        "attn.o_proj",
        "attn.residual",
        "ffn_norm",
        "ffn.gate_proj",
        "ffn.up_proj",
        "ffn.silu_mul",
        "ffn.down_proj",
        "ffn.residual",
    } <= set(llama.nodes)
    groups = model_groups(get_model("deepseek-r1"), SHAPES[0], Precision())
    assert [g.name for g in groups] == ["embedding", "decoder_dense", "decoder_moe", "lm_head"]
    assert [g.count for g in groups] == [1, 3, 58, 1]
    moe = groups[2].graph
    assert {
        "attn.q_a_proj",
        "attn.q_a_norm",
        "attn.q_b_proj",
        "attn.kv_a_proj",
        "attn.kv_norm",
        "attn.q_absorb",
        "attn.v_up",
        "moe.router",
        "moe.topk",
        "moe.shared.down_proj",
        "moe.experts_gate_up",
        "moe.experts_down",
        "moe.combine",
    } <= set(moe.nodes)
    assert "ffn.down_proj" in groups[1].graph and "moe.router" not in groups[1].graph
    prefill = model_groups(get_model("deepseek-r1"), SHAPES[1], Precision())[2].graph
    assert "attn.kv_b_proj" in prefill and "attn.q_absorb" not in prefill


def test_a_shape_mismatch_is_caught() -> None:
    x = TensorSpec("x", (2, 4), 2.0)
    b = GraphBuilder("broken", [x])
    b.add(Operator("a", "rmsnorm", inputs=(x,), outputs=(TensorSpec("y", (2, 4), 2.0),)))
    b.add(Operator("b", "residual", inputs=(TensorSpec("y", (2, 5), 2.0),)))
    graph = b.finish([])
    problems = graph_problems(graph)
    assert len(problems) == 1 and "'y'" in problems[0] and "(2, 5)" in problems[0]
    with pytest.raises(ValueError, match="not sound"):
        check_graph(graph)


def test_a_cycle_is_caught() -> None:
    graph = model_groups(get_model("llama-3.1-8b"), SHAPES[0], Precision())[1].graph.copy()
    graph.add_edge("ffn.residual", "attn_norm", tensors=[])
    assert any("cycle" in p for p in graph_problems(graph))


def test_builder_refuses_unknown_and_duplicate_tensors() -> None:
    x = TensorSpec("x", (1,), 2.0)
    b = GraphBuilder("g", [x])
    with pytest.raises(ValueError, match="nothing produces"):
        b.add(Operator("a", "rope", inputs=(TensorSpec("z", (1,), 2.0),)))
    b.add(Operator("b", "rope", inputs=(x,), outputs=(TensorSpec("y", (1,), 2.0),)))
    with pytest.raises(ValueError, match="two producers"):
        b.add(Operator("c", "rope", inputs=(x,), outputs=(TensorSpec("y", (1,), 2.0),)))
    with pytest.raises(ValueError, match="already"):
        b.add(replace(op(b.graph, "b"), outputs=()))


def test_dot_and_graphml_export(tmp_path: Path) -> None:
    graph = model_groups(get_model("deepseek-r1"), SHAPES[0], Precision())[2].graph
    dot = to_dot(graph)
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    assert dot.count(" -> ") == len(graph.edges)
    assert '"moe.experts_down"' in dot
    path = tmp_path / "layer.graphml"
    write_graphml(graph, path)
    back = nx.read_graphml(path)
    assert set(back.nodes) == set(graph.nodes)
    assert back.nodes["moe.router"]["flops"] == op(graph, "moe.router").flops
