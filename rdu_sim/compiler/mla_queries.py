"""MLA's queries under the sequence_split layout: how every socket gets every head's query.

A sequence-split attention (decode, and SnapKV's window scores) runs every head over the
socket's share of each slot's cached tokens, so every socket needs every head's absorbed
query: q_nope through W_UK into the latent, and the RoPE part, heads x (kv_lora_rank +
qk_rope_head_dim) values a token row (128 x 576 for DeepSeek-V3/R1). The operators that make
them (q_b_proj, the RoPE, W_UK's absorb) are split by heads. Two mechanisms:

- gather: each socket makes its heads' queries and an all-gather before the attention hands
  every socket all of them (`compiler.sharding` splices it; the engine picks its algorithm
  as for any collective): rows x heads x 576 values a layer, of which each socket receives
  (p - 1) / p;
- replicate: q_b_proj and W_UK whole on every socket, which makes every head's queries
  itself: the (p - 1) / p of both that a socket did not read before, read every layer, and
  their FLOPs; no collective. The weights sit whole in every socket's HBM whichever program
  uses them (`compiler.placement.whole_queries` decides which memory plans hold them).

`query_operators` finds the operators to replicate in a layer graph, `query_inputs` what a
socket must gather. The choice, once per program, is `compiler.query_choice`'s. SnapKV's
window queries, which a prefill split by heads stashed, can only be gathered.
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
