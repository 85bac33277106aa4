"""Fusion: the kernels one step runs, each a sharded graph called `calls` times.

- "embedding": the token gather, one call;
- the decoder layers: one kernel per layer kind, the whole layer fused into one call
  ("decoder" for Llama; "decoder_dense" and "decoder_moe" for DeepSeek), `calls` = the
  number of such layers;
- "snapkv_select": in a prefill whose prompt the KV policy compresses, the SnapKV
  selection of each layer, a kernel of its own (`calls` = layers) so its time is reported
  on its own;
- "lm_head": final norm and vocabulary projection, one call.

Inside a decoder kernel every operator is a pipeline stage, except attention: the score,
softmax and value products are fused into one flash-attention stage ("attn.flash"), as in
SN40L's fused attention kernel, whose attention weights never leave the stage (which is
why SnapStream recomputes the window's scores outside it). Streaming the full score matrix
between stages would cost more PMU bandwidth than the socket has in a long prefill.

Kernel looping (`kernel_looping` in the workload) marks kernels with more than one call
`looped`: their calls run as one call with a pipelined outer loop over the layers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import networkx as nx

from rdu_sim.compiler.layout import mla_cache_form, precision, shard_plan
from rdu_sim.compiler.program import StaticShape
from rdu_sim.compiler.sharding import shard_graph
from rdu_sim.graph import (
    GraphBuilder,
    GraphGroup,
    Operator,
    SelectionShape,
    StepShape,
    model_groups,
    op,
    operators,
    snapkv_graph,
)
from rdu_sim.kv import make_policy
from rdu_sim.scenario import Scenario

ATTENTION_CHAIN = ("attn.score", "attn.softmax", "attn.value")
FLASH = "attn.flash"


@dataclass(frozen=True)
class KernelGraph:
    """A fused kernel before stage allocation: one socket's sharded graph."""

    name: str
    calls: int
    looped: bool
    graph: nx.DiGraph


def step_shape(shape: StaticShape) -> StepShape:
    """The graph room's view of a StaticShape."""
    return StepShape(shape.phase, shape.batch, shape.tokens, shape.cache_len)


def selection_shape(scenario: Scenario, shape: StaticShape) -> SelectionShape | None:
    """The SnapKV selection a prefill step runs, or None (decode, no compression, select=False).

    The prompt is `cache_len + tokens` (a chunked prefill's last chunk sees the whole
    prompt); the policy decides whether it compresses and what it keeps.
    """
    if shape.phase != "prefill" or shape.select is False:
        return None
    serving = scenario.workload.serving
    policy = make_policy(scenario.workload.kv, serving.max_context)
    prompt = min(shape.cache_len + shape.tokens, serving.max_context)
    selection = policy.selection(prompt)
    if selection is None:
        return None
    return SelectionShape(
        prompt=selection.scored_keys,
        window=selection.window,
        candidates=selection.candidates,
        topk=selection.topk,
        kept=selection.kept,
        kernel_size=selection.kernel_size,
    )


def graph_groups(scenario: Scenario, shape: StaticShape) -> list[GraphGroup]:
    """The unsharded graphs of one step, in execution order, with their call counts."""
    prec, cache = precision(scenario), mla_cache_form(scenario)
    groups = model_groups(
        scenario.model, step_shape(shape), prec, cache, scenario.workload.moe_expert_loading
    )
    selection = selection_shape(scenario, shape)
    if selection is not None:
        select = GraphGroup(
            "snapkv_select",
            scenario.model.layers,
            snapkv_graph(scenario.model, shape.batch, selection, prec, cache),
        )
        groups.insert(len(groups) - 1, select)
    return groups


def fuse_attention(graph: nx.DiGraph) -> nx.DiGraph:
    """The graph with attention score -> softmax -> value merged into one "attn.flash" stage.

    The fused operator keeps the sum of the three's work, the score product's GEMM shape
    (the larger of the two products), and the value's combine (its output is what leaves).
    Graphs without the chain are returned unchanged.
    """
    if not all(name in graph for name in ATTENTION_CHAIN):
        return graph
    chain = [op(graph, name) for name in ATTENTION_CHAIN]
    internal = {t.name for node in chain[:-1] for t in node.outputs}
    inputs = {t.name: t for node in chain for t in node.inputs if t.name not in internal}
    score, value = chain[0], chain[-1]
    fused = Operator(
        FLASH,
        "flash_attention",
        inputs=tuple(inputs.values()),
        outputs=value.outputs,
        flops=sum(n.flops for n in chain),
        vector_flops=sum(n.vector_flops for n in chain),
        kv_read_bytes=sum(n.kv_read_bytes for n in chain),
        kv_write_bytes=sum(n.kv_write_bytes for n in chain),
        gemm=score.gemm,
        split=replace(score.split, combine=value.split.combine),
    )
    builder = GraphBuilder(str(graph.name), graph.graph["inputs"].values())
    for node in operators(graph):
        if node.name == score.name:
            builder.add(fused)
        elif node.name not in ATTENTION_CHAIN:
            builder.add(node)
    return builder.finish(graph.graph["outputs"])


def kernel_graphs(scenario: Scenario, shape: StaticShape) -> list[KernelGraph]:
    """The fused, sharded kernels of one step on one socket."""
    plan = shard_plan(scenario)
    looping = scenario.workload.kernel_looping
    return [
        KernelGraph(
            group.name,
            group.count,
            looping and group.count > 1,
            shard_graph(fuse_attention(group.graph), plan),
        )
        for group in graph_groups(scenario, shape)
    ]
