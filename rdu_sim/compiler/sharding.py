"""Tensor-parallel sharding: one socket's share of a graph, with the collectives it needs.

Each operator's numbers are divided by its axes' divisors (`ShardPlan.divisor`): FLOPs,
vector FLOPs and activations by the compute axis, weights by the weight axis, KV traffic by
the KV axis; the GEMM shape loses the split dimension. Activation shares follow the GEMM
kind: a column-parallel product reads the whole input and writes its share; a row-parallel
one reads its share and writes a whole partial sum.

Collectives are inserted after operators whose `split.combine` asks for one (and only when
the split really happened):
- sum -> all-reduce of the output (o_proj, FFN down, MoE combine: partial sums);
- gather -> all-gather of the output (LM-head logits split by vocabulary);
- sequence -> reduce-scatter of the partial attention outputs plus their softmax
  statistics (max and sum per query and head, FP32), under the MLA sequence_split layout
  (after W_UV's projection of them when the plan replicates MLA's queries: `deferred`);
- seq_gather -> all-gather of a sequence-split cached prefix (MLA prefill);
- selection -> SnapKV head-summed scores: all-reduce when heads are split, all-gather of
  the sequence shards under sequence_split;
- row_stats -> all-reduce of softmax statistics under sequence_split (max and sum of
  exponentials per row, combined as a log-sum-exp);
- group_sum -> all-reduce of a GQA group's partial SnapKV scores among the sockets sharing
  its KV head (tp > kv_heads), a group of tp / kv_heads sockets.
Payloads are the full tensor (the N of the collective algorithm) of the group, as
CollectiveSpec says.

Under data-parallel attention with all-to-all experts (`ShardPlan.exchange`,
`compiler.expert_exchange`), a MoE layer's router, shared experts and weighted combine run
on the socket's share of its rank's tokens (rows / tp, weights whole), its routed experts on
the busiest socket's token-expert pairs (`ExpertLoad`), and three collectives move the
tokens: a dispatch all-to-all before the routed experts (the hidden states and the routing),
a combine all-to-all after them, and an all-gather inside the rank (tp > 1) where the
tensor-parallel combine's all-reduce would be.

Under sequence_split a sequence-split attention reads every head's queries
(`compiler.mla_queries`): an all-gather of the queries a socket holds only its heads of is
spliced in before it, unless the plan replicates the operators making them (then done whole,
weights and all, and W_UV's projection of the partial outputs too, before their combine); a
plan holding their weights whole keeps them whole in its inventory even when it gathers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from rdu_sim.compiler.expert_exchange import exchange_role
from rdu_sim.compiler.layout import ShardPlan
from rdu_sim.compiler.mla_queries import (
    QUERY_GATHER,
    as_deferred,
    as_projected,
    as_replicated,
    query_inputs,
    query_operators,
    value_projections,
)
from rdu_sim.graph import Operator, op, operators
from rdu_sim.graph.digraph import DiGraph
from rdu_sim.graph.shape import FP32
from rdu_sim.shapes import CollectiveKind, Gemm


def _shard_gemm(gemm: Gemm | None, dim: str | None, ways: int) -> Gemm | None:
    if gemm is None or dim is None or ways == 1:
        return gemm
    return replace(gemm, **{dim: max(1, math.ceil(getattr(gemm, dim) / ways))})


def _token_share(node: Operator, plan: ShardPlan) -> Operator:
    """The socket's share of a token-parallel operator: its rows / tp tokens, whole weights."""
    share = math.ceil(plan.rows / plan.tp) / plan.rows
    gemm = node.gemm
    if gemm is not None:
        gemm = replace(gemm, m=max(1, math.ceil(gemm.m * share - 1e-9)))
    return replace(
        node,
        flops=node.flops * share,
        vector_flops=node.vector_flops * share,
        gemm=gemm,
        act_read_fraction=share,
        act_write_fraction=share,
    )


def _expert_share(node: Operator, plan: ShardPlan) -> Operator:
    """The busiest socket's share of a routed-expert operator (`compiler.expert_load`): its
    pairs' work, the weights of the experts they touch, its (E + redundant) / ep expert
    copies resident."""
    model = plan.expert_load
    assert model is not None
    load = model.load(plan.rows, plan.joint_tokens)
    pairs = plan.rows * model.per_token  # the rank graph's token-expert pairs
    share = load.pairs / pairs
    experts, slots = model.experts, len(model.devices[0])  # every device holds as many
    params = math.ceil(node.weight_params / experts * slots)
    gemm = node.gemm
    if gemm is not None:
        touched = max(1.0, load.distinct)
        gemm = replace(
            gemm,
            m=max(1, math.ceil(round(load.pairs / touched, 9))),
            batch=max(1, math.ceil(round(touched, 9))),
        )
    rows_in = math.prod(node.inputs[0].shape[:-1]) if node.inputs else pairs
    return replace(
        node,
        flops=node.flops * share,
        vector_flops=node.vector_flops * share,
        weight_params=params,
        weight_bytes=params * (node.weight_bytes / node.weight_params) if params else 0.0,
        weight_read_bytes=node.weight_bytes / experts * load.distinct if node.gemm else 0.0,
        gemm=gemm,
        act_read_fraction=load.pairs / rows_in,
        act_write_fraction=share,
    )


def shard_operator(node: Operator, plan: ShardPlan) -> Operator:
    """This socket's share of one operator (collectives not included)."""
    role = exchange_role(node)
    if plan.exchange is not None and role == "token":
        return _token_share(node, plan)
    if plan.expert_load is not None and role == "experts":
        return _expert_share(node, plan)
    split = node.split
    compute = plan.divisor(split.compute)
    weights = plan.divisor(split.weights)
    kv = plan.divisor(split.kv)
    dim = split.gemm_dim if node.gemm is not None else None
    if split.compute == "attention" and plan.sequence_split and dim is not None:
        # sequence_split: each socket runs all heads against its share of the keys, which
        # are the n of the score product and the k (reduction) of the value product
        dim = "k" if node.kind == "attention_value" else "n"
    # activations: a stage that only moves KV (cache reads) streams its KV share
    ways = compute if split.compute != "none" else kv
    read_share = 1.0 if dim == "n" else 1 / ways
    partial = (
        split.combine == "sum"
        or (split.combine in ("sequence", "deferred") and plan.sequence_split)
        or (split.combine == "row_stats" and _by_sequence(node, plan))
        or (split.combine == "selection" and not _by_sequence(node, plan))
    )
    write_share = 1.0 if dim == "k" or partial else 1 / ways
    if split.combine == "group_sum":  # a partial sum of this socket's KV heads' scores
        write_share = 1 / plan.divisor("kv_heads")
    params = math.ceil(node.weight_params / weights)
    gemm = _shard_gemm(node.gemm, dim, compute)
    work_share, read_share_of_weights = 1 / compute, 1 / weights
    if plan.experts is not None and split.weights == "experts" and node.gemm and plan.tp > 1:
        # whole experts per socket: the busiest socket's selected experts, and its pairs by
        # the rule routed loading streams (under static loading more experts than the pairs')
        selected = node.gemm.batch
        busiest = plan.experts.busiest(selected, plan.tp)
        read_share_of_weights = busiest / selected
        pairs = math.prod(node.outputs[0].shape[:-1])  # (batch, tokens, k, width)
        tokens = pairs // plan.experts.per_token
        work_share = plan.experts.busiest_pairs_share(tokens, plan.tp)
        gemm = replace(node.gemm, batch=max(1, math.ceil(round(busiest, 9))))
    return replace(
        node,
        flops=node.flops * work_share,
        vector_flops=node.vector_flops * work_share,
        weight_params=params,
        # the share's bytes at the operator's bytes per parameter (mixed dtypes averaged)
        weight_bytes=params * (node.weight_bytes / node.weight_params) if params else 0.0,
        weight_read_bytes=node.weight_read_bytes * read_share_of_weights,
        kv_read_bytes=node.kv_read_bytes / kv,
        kv_write_bytes=node.kv_write_bytes / kv,
        gemm=gemm,
        act_read_fraction=read_share,
        act_write_fraction=write_share,
    )


def _by_sequence(node: Operator, plan: ShardPlan) -> bool:
    """Whether `node` runs on a sequence share of the MLA cache (its keys split by token)."""
    return plan.sequence_split and node.split.compute == "attention"


@dataclass(frozen=True)
class _Collective:
    """A collective following an operator: its kind, payload (the group's whole tensor),
    sockets, and the share of the operator's outputs each socket is left with."""

    kind: CollectiveKind
    payload: float
    group: int
    carried: float = 1.0


def _collective_for(node: Operator, plan: ShardPlan) -> _Collective | None:
    """The collective that must follow `node` on this plan, or None."""
    if plan.tp == 1:
        return None
    combine = node.split.combine
    if plan.exchange is not None and exchange_role(node) == "token" and combine == "sum":
        # the weighted combine ran on this socket's tokens: the rank gathers them back
        return _Collective("allgather", sum(t.bytes for t in node.outputs), plan.tp)
    outputs = sum(t.bytes for t in node.outputs)
    split = plan.divisor(node.split.compute) > 1
    if combine == "sum" and split:
        return _Collective("allreduce", outputs, plan.tp)
    if combine == "gather" and split:
        return _Collective("allgather", outputs, plan.tp)
    if combine == "sequence" and plan.sequence_split:
        batch, tokens, heads = node.outputs[0].shape[:3]
        stats = batch * tokens * heads * 2 * FP32
        # a reduce-scatter leaves each socket its share
        return _Collective("reduce_scatter", outputs + stats, plan.tp, 1 / plan.tp)
    if combine == "seq_gather" and plan.sequence_split and outputs > 0:
        return _Collective("allgather", outputs, plan.tp)
    if combine == "selection" and split:
        kind: CollectiveKind = "allgather" if _by_sequence(node, plan) else "allreduce"
        return _Collective(kind, outputs, plan.tp)
    if combine == "row_stats" and _by_sequence(node, plan):
        return _Collective("allreduce", outputs, plan.tp)
    if combine == "group_sum" and plan.kv_heads and plan.tp > plan.kv_heads:
        # each KV head's scores, summed over the sockets holding its query heads
        share = 1 / plan.kv_heads
        return _Collective("allreduce", outputs * share, plan.tp // plan.kv_heads, share)
    return None


def shard_graph(graph: DiGraph, plan: ShardPlan) -> DiGraph:
    """One socket's graph: sharded operators, collectives spliced in after their producers.

    The result keeps the `inputs`/`outputs` graph attributes and adds `output_nodes`
    (tensor name -> the node that finally produces it, after any collective).
    """
    sharded = DiGraph(
        name=graph.name,
        inputs=graph.graph.get("inputs", {}),
        outputs=graph.graph.get("outputs", {}),
    )
    final: dict[str, str] = {}  # tensor -> its last producer in the sharded graph
    queries = query_operators(graph, plan) if plan.whole_queries else frozenset()
    values = value_projections(graph, plan) if queries else {}
    deferred = frozenset(values.values()) if plan.replicate_queries else frozenset()
    for node in operators(graph):
        if node.name in queries and plan.replicate_queries:
            node = as_replicated(node)
        elif node.name in values and plan.replicate_queries:
            node = as_projected(node)
        elif node.name in deferred:
            node = as_deferred(node)
        share = shard_operator(node, plan)
        if node.name in queries or node.name in values:  # held whole, whatever this step reads
            share = replace(share, weight_params=node.weight_params, weight_bytes=node.weight_bytes)
        gathered = _add_query_gather(sharded, final, node, plan)
        dispatched = _add_exchange(sharded, final, node, plan, "dispatch")
        sharded.add_node(node.name, op=share)
        arriving = [
            t
            for source in graph.predecessors(node.name)
            for t in graph.edges[source, node.name]["tensors"]
        ]
        # kernel inputs gathered arrive from the gather too
        for tensor in arriving + [t for t in gathered if t not in arriving]:
            _connect(sharded, dispatched.get(tensor, final[tensor]), node.name, tensor)
        for tensor in node.outputs:
            final[tensor.name] = node.name
        collective = _collective_for(node, plan)
        if collective is not None:
            kind = collective.kind
            name = f"{node.name}.{kind}"
            sharded.add_node(
                name,
                op=Operator(
                    name,
                    kind,
                    inputs=node.outputs,
                    outputs=node.outputs,
                    collective=kind,
                    collective_bytes=collective.payload,
                    group=collective.group,
                    act_read_fraction=share.act_write_fraction,
                    act_write_fraction=collective.carried,
                ),
            )
            for tensor in node.outputs:
                _connect(sharded, node.name, name, tensor.name)
                final[tensor.name] = name
        _add_exchange(sharded, final, node, plan, "combine")
    sharded.graph["output_nodes"] = {t: final[t] for t in sharded.graph["outputs"]}
    return sharded


def _add_query_gather(
    graph: DiGraph, final: dict[str, str], node: Operator, plan: ShardPlan
) -> tuple[str, ...]:
    """Before a sequence-split attention ``node``, an all-gather of the queries each socket
    holds only its heads of (made in ``graph`` or kernel inputs); the names gathered."""
    producers = {t.name: op(graph, final[t.name]) for t in node.inputs if t.name in final}
    queries = query_inputs(node, producers, plan)
    if not queries:
        return ()
    name = node.name + QUERY_GATHER
    graph.add_node(
        name,
        op=Operator(
            name,
            "allgather",
            inputs=queries,
            outputs=queries,
            collective="allgather",
            collective_bytes=sum(t.bytes for t in queries),
            group=plan.tp,
            act_read_fraction=1 / plan.tp,
        ),
    )
    for tensor in queries:
        if tensor.name in final:
            _connect(graph, final[tensor.name], name, tensor.name)
        final[tensor.name] = name
    return tuple(t.name for t in queries)


def _dispatches(node: Operator, plan: ShardPlan) -> bool:
    """Whether the dispatch all-to-all comes before ``node``: the routed experts' first
    product, which reads the hidden states and the routing."""
    if plan.exchange is None or node.kind != "expert_gemm":
        return False
    return any(t.name.endswith("moe.routing") for t in node.inputs)


def _combines(node: Operator, plan: ShardPlan) -> bool:
    """Whether the combine all-to-all follows ``node``: the routed experts' last product."""
    if plan.exchange is None or node.kind != "expert_gemm":
        return False
    return not _dispatches(node, plan)


def _add_exchange(
    graph: DiGraph,
    final: dict[str, str],
    node: Operator,
    plan: ShardPlan,
    direction: Literal["dispatch", "combine"],
) -> dict[str, str]:
    """Splice an all-to-all in where ``node`` needs one (`_dispatches`, `_combines`): before
    it (dispatch: the inputs it reads from the all-to-all, returned; other readers of them,
    the weighted combine reading the routing, read their own tokens') or after it (combine:
    its outputs, for every later reader). Its payload is one copy of each of the socket's
    tokens (the dispatch's hidden state with its routing, the combine's expert output); the
    combine leaves the busiest socket, whose share is ``ExpertLoad.imbalance`` above the
    mean. When the ranks run different shapes (``joint_tokens``) the busiest socket returns
    what it served of every rank's tokens, its pairs over the experts a token picks, plus
    the symmetric form's rounding of its rank's share (a device's ceil(rows / tp)): the
    same payload where every rank runs this shape, and none growing as a rank's rows
    shrink."""
    dispatch = direction == "dispatch"
    if not (_dispatches(node, plan) if dispatch else _combines(node, plan)):
        return {}
    exchange = plan.exchange
    assert exchange is not None
    tokens = exchange.device_tokens(plan.rows)
    load = exchange.load(plan.rows, plan.joint_tokens)
    tensors = node.inputs if dispatch else node.outputs
    per_token = exchange.dispatch_bytes if dispatch else exchange.combine_bytes
    if dispatch:
        payload = tokens * per_token
    elif plan.joint_tokens:
        served = load.pairs / exchange.load_model.per_token
        payload = per_token * (served + (tokens - plan.rows / exchange.tp) * load.imbalance)
    else:
        payload = tokens * per_token * load.imbalance
    name = f"{node.name}.{direction}"
    share = tokens / plan.rows
    graph.add_node(
        name,
        op=Operator(
            name,
            "alltoall",
            inputs=tensors,
            outputs=tensors,
            collective="alltoall",
            collective_bytes=payload,
            group=exchange.devices,
            act_read_fraction=share,
            act_write_fraction=load.pairs / math.prod(tensors[0].shape[:-1]) if dispatch else share,
            exchange=exchange.spec(plan.phase, direction),
        ),
    )
    for tensor in tensors:
        _connect(graph, final[tensor.name] if dispatch else node.name, name, tensor.name)
        if not dispatch:
            final[tensor.name] = name
    return {t.name: name for t in tensors} if dispatch else {}


def _connect(graph: DiGraph, source: str, target: str, tensor: str) -> None:
    if graph.has_edge(source, target):
        graph.edges[source, target]["tensors"].append(tensor)
    else:
        graph.add_edge(source, target, tensors=[tensor])
