"""MLA's queries and values under the sequence_split layout: how every socket gets every
head's query, and where the partial attention outputs are combined.

A sequence-split attention (decode, and SnapKV's window scores) runs every head over the
socket's share of each slot's cached tokens, so every socket needs every head's absorbed
query: q_nope through W_UK into the latent, and the RoPE part, heads x (kv_lora_rank +
qk_rope_head_dim) values a token row (128 x 576 for DeepSeek-V3/R1). The operators that make
them (q_b_proj, the RoPE, W_UK's absorb) are split by heads. Two mechanisms:

- gather: each socket makes its heads' queries and an all-gather before the attention hands
  every socket all of them (`compiler.sharding` splices it; the engine picks its algorithm
  as for any collective): rows x heads x 576 values a layer, of which each socket receives
  (p - 1) / p;
- replicate: q_b_proj and kv_b_proj (W_UK and W_UV, its two halves) whole on every socket,
  which makes every head's queries itself: the (p - 1) / p of both that a socket did not
  read before, read every layer, and their FLOPs; no collective. With W_UV whole, each
  socket also projects its partial attention output (every head, kv_lora_rank values) to
  v_head_dim before the reduce-scatter that combines the partials, which then moves
  heads x v_head_dim values a row (128 x 128 for DeepSeek-V3/R1) instead of heads x
  kv_lora_rank (128 x 512): the projection is linear, so projecting the partials and
  summing equals summing and projecting. The weights sit whole in every socket's HBM
  whichever program uses them (`compiler.placement.whole_queries` decides which memory
  plans hold them).

`query_operators` finds the operators to replicate in a layer graph, `query_inputs` what a
socket must gather, `value_projections` the projections that run before the combine. The
choice, once per program, is `compiler.query_choice`'s. SnapKV's window queries, which a
prefill split by heads stashed, can only be gathered.
"""

from __future__ import annotations

from dataclasses import replace

from rdu_sim.compiler.layout import ShardPlan
from rdu_sim.compiler.tensor_shares import HEADS, input_share, output_share
from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.graph import Operator, TensorSpec, operators
from rdu_sim.graph.digraph import DiGraph
from rdu_sim.graph.operator import REPLICATED
from rdu_sim.scenario import Scenario

QUERY_GATHER = ".query_allgather"
"""The suffix of the all-gather of the queries (after the attention operator's name)."""
QUERY_READERS = frozenset({"attention_score", "flash_attention"})
"""The attention operators that read the queries (the value product reads probabilities)."""


def chooses_queries(scenario: Scenario) -> bool:
    """Whether the scenario's MLA attention is split by sequence, so its compiler chooses how
    the queries reach every socket (and reads the links to choose)."""
    return (
        isinstance(scenario.model, DeepSeekArchitecture)
        and scenario.workload.parallelism.mla_cache_layout == "sequence_split"
        and scenario.tp > 1
    )


def reads_queries(node: Operator, plan: ShardPlan) -> bool:
    """Whether ``node`` is a sequence-split attention reading every head's queries."""
    return plan.sequence_split and node.split.compute == "attention" and node.kind in QUERY_READERS


def _share(tensor: str, producers: dict[str, Operator], plan: ShardPlan) -> str:
    producer = producers.get(tensor)
    return input_share(tensor) if producer is None else output_share(producer, plan)


def query_inputs(
    node: Operator, producers: dict[str, Operator], plan: ShardPlan
) -> tuple[TensorSpec, ...]:
    """The inputs of a sequence-split attention ``node`` of which a socket holds only its
    heads (``producers``: each tensor's producer, kernel inputs absent)."""
    if not reads_queries(node, plan):
        return ()
    return tuple(t for t in node.inputs if _share(t.name, producers, plan) == HEADS)


def query_operators(graph: DiGraph, plan: ShardPlan) -> frozenset[str]:
    """The operators of ``graph`` making the per-head queries its sequence-split attention
    reads, back to the first whole tensors (q_b_proj, the RoPE, W_UK's absorb); empty when
    a query is a kernel input (SnapKV's stashed window queries), which no socket can make."""
    producers = {t.name: node for node in operators(graph) for t in node.outputs}
    found: set[str] = set()
    for node in operators(graph):
        waiting = list(query_inputs(node, producers, plan))
        while waiting:
            tensor = waiting.pop()
            maker = producers.get(tensor.name)
            if maker is None:
                return frozenset()
            found.add(maker.name)
            waiting.extend(t for t in maker.inputs if _share(t.name, producers, plan) == HEADS)
    return frozenset(found)


def as_replicated(node: Operator) -> Operator:
    """``node`` done whole on every socket (every head's queries, the weights whole)."""
    return replace(node, split=REPLICATED)


def value_projections(graph: DiGraph, plan: ShardPlan) -> dict[str, str]:
    """The per-head products of ``graph`` that read a sequence-split attention's partial
    output (W_UV's up-projection, whose weights are kv_b_proj's other half), each mapped to
    the attention it reads: run whole on every socket, before the combine, when the plan
    replicates the queries. An attention any other operator reads keeps its combine."""
    if not plan.sequence_split:
        return {}
    attention = {
        t.name: node.name
        for node in operators(graph)
        if node.split.compute == "attention" and node.split.combine == "sequence"
        for t in node.outputs
    }
    readers: dict[str, list[Operator]] = {}
    for node in operators(graph):
        for source in {attention[t.name] for t in node.inputs if t.name in attention}:
            readers.setdefault(source, []).append(node)
    return {
        node.name: source
        for source, nodes in readers.items()
        if all(_projects(node) for node in nodes)
        for node in nodes
    }


def _projects(node: Operator) -> bool:
    """Whether ``node`` is a per-head product that reads weights (linear in its input; a
    mixed step's decode part reads the weights its prefill part holds, so it reads, not
    holds, them)."""
    return node.split.compute == HEADS and node.weight_read_bytes > 0 and node.gemm is not None


def as_projected(node: Operator) -> Operator:
    """A value projection (`value_projections`) done whole on every socket on its partial
    input, whose combine it carries."""
    return replace(node, split=replace(REPLICATED, combine="sequence"))


def as_deferred(node: Operator) -> Operator:
    """A sequence-split attention whose combine the projection after it carries."""
    return replace(node, split=replace(node.split, combine="deferred"))
