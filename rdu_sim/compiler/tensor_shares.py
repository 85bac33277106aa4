"""What one socket holds of each tensor after tensor-parallel sharding, and a check that every
operator reads its inputs in the form its own split computes on.

A tensor's share on one socket (`Share`):
- ``whole``: all of it (replicated work; the result of an all-reduce or an all-gather; a
  kernel input, except SnapKV's window queries, which each socket stashed for its heads);
- an axis (``heads``, ``kv_heads``, ``ffn``, ``experts``, ``vocab``, ``sequence``,
  ``tokens``): its part along that axis (``sequence``: the cached tokens of the MLA
  sequence_split layout; ``tokens``: the socket's share of its rank's tokens, under
  data-parallel attention with all-to-all experts; ``experts``: under that exchange, the
  token-expert pairs dispatched to the socket's experts);
- ``partial``: a partial sum over the sockets (a row-parallel product, a sequence-split
  attention's partial output, or its projection through W_UV held whole, and its rows'
  softmax statistics, SnapKV's head sum over a
  socket's heads, a GQA group's scores summed over the sockets sharing its KV head).

What an operator may read: a replicated operator and a column-parallel product (split ``n``)
read whole tensors; an operator split along an axis reads whole tensors or tensors split the
same way (a query head also reads its KV head's share; a KV head reads its query heads'
shares when each socket holds whole KV groups); only a sum reads partial sums (the MoE
combine, and the all-reduce and reduce-scatter that finish them), and a whole linear
product that carries a partial attention output to its own combine (W_UV's); an all-gather reads a
split; an all-to-all anything but a partial sum. `share_problems` lists every edge of a
sharded graph that breaks this: a consumer reading what its producer's split leaves partial
or split another way, with no collective between them (how a simulated step could assume
data no socket has).
"""

from __future__ import annotations

from rdu_sim.compiler.expert_exchange import exchange_role
from rdu_sim.compiler.layout import ShardPlan
from rdu_sim.graph import Operator, operators
from rdu_sim.graph.digraph import DiGraph
from rdu_sim.graph.stash import STASHED_BY_HEADS

Share = str
"""``whole``, ``partial`` or the axis a tensor is split along (module docstring)."""
WHOLE, PARTIAL, SEQUENCE, HEADS = "whole", "partial", "sequence", "heads"
TOKENS, EXPERTS = "tokens", "experts"
SUMS = frozenset({"moe_combine"})
"""Operators that add partial sums into a partial sum (the MoE combine's weighted sum)."""
REDUCING_COLLECTIVES = frozenset({"allreduce", "reduce_scatter"})


def work_axis(node: Operator, plan: ShardPlan) -> Share:
    """The axis ``node``'s work is split along on ``plan`` (``whole``: every socket does all
    of it). MLA attention and the cache's reads and writes follow the cache layout: by
    cached tokens under sequence_split, by heads otherwise (when split at all). Under an
    all-to-all exchange of experts a MoE layer's token operators run on the socket's share
    of its rank's tokens, its routed experts on the pairs dispatched to it."""
    split = node.split
    role = exchange_role(node) if plan.exchange is not None else None
    if role == "token":
        return WHOLE if plan.tp == 1 else TOKENS
    if role == "experts":
        return EXPERTS
    if split.compute == "attention" or (split.compute == "none" and split.kv == "mla_cache"):
        if plan.divisor(split.kv if split.compute == "none" else "attention") == 1:
            return WHOLE
        return SEQUENCE if plan.sequence_split else HEADS
    if split.compute == "none":
        return WHOLE if plan.divisor(split.kv) == 1 else split.kv
    return WHOLE if plan.divisor(split.compute) == 1 else split.compute


def output_share(node: Operator, plan: ShardPlan) -> Share:
    """What one socket holds of ``node``'s outputs on ``plan``."""
    if node.kind in ("allreduce", "allgather"):
        return WHOLE
    if node.kind == "reduce_scatter":
        return HEADS  # the sequence-split attention's combine hands each socket its heads
    if node.exchange is not None:  # an all-to-all: out to the experts, or back to the tokens
        return EXPERTS if node.exchange.direction == "dispatch" else _tokens(plan)
    axis = work_axis(node, plan)
    combine = node.split.combine
    if combine in ("sequence", "deferred") and plan.sequence_split:
        return PARTIAL  # a sequence share's attention output, projected whole or not
    if axis in (WHOLE, TOKENS):  # a token operator's sums are over its own tokens' experts
        return axis
    if combine == "row_stats":  # a row's statistics over the socket's keys
        return PARTIAL if axis == SEQUENCE else axis
    if combine == "group_sum" and plan.kv_heads and plan.tp > plan.kv_heads:
        return PARTIAL  # the group's heads' sum, shared by the sockets of its KV head
    if combine == "selection":
        return axis if axis == SEQUENCE else PARTIAL  # a sum over the socket's heads
    if combine == "sum":
        return PARTIAL
    if node.split.gemm_dim == "k":  # row-parallel: a partial sum
        return PARTIAL
    return axis


def _tokens(plan: ShardPlan) -> Share:
    return WHOLE if plan.tp == 1 else TOKENS


def input_share(tensor: str) -> Share:
    """What one socket holds of a kernel input: SnapKV's stashed window queries by heads,
    everything else whole."""
    return HEADS if tensor in STASHED_BY_HEADS else WHOLE


def _compatible(axis: Share, share: Share, plan: ShardPlan) -> bool:
    if share == axis:
        return True
    if axis == HEADS and share == "kv_heads":  # a query head's socket holds its KV head
        return True
    # a KV head's query heads all on its socket
    return axis == "kv_heads" and share == HEADS and plan.divisor("kv_heads") == plan.tp


def reads(node: Operator, share: Share, plan: ShardPlan) -> bool:
    """Whether ``node`` can run on an input of which each socket holds ``share``."""
    if node.kind in REDUCING_COLLECTIVES:
        return share == PARTIAL
    if node.kind == "allgather":
        return share not in (WHOLE, PARTIAL)
    if node.kind == "alltoall":
        return share != PARTIAL
    if share == PARTIAL:
        return node.kind in SUMS or _carries(node, plan)
    if share == WHOLE:
        return True
    axis = work_axis(node, plan)
    if axis == WHOLE or node.split.gemm_dim == "n":
        return False
    return _compatible(axis, share, plan)


def _carries(node: Operator, plan: ShardPlan) -> bool:
    """Whether ``node`` is a whole linear product carrying a sequence-split partial to its own
    combine (W_UV's projection of MLA's partial attention outputs: `compiler.mla_queries`)."""
    return (
        node.split.combine == "sequence"
        and plan.sequence_split
        and work_axis(node, plan) == WHOLE
        and node.gemm is not None
    )


def _describe(share: Share) -> str:
    if share in (WHOLE, PARTIAL):
        return {WHOLE: "whole", PARTIAL: "as a partial sum"}[share]
    return f"split by {share}"


def share_problems(graph: DiGraph, plan: ShardPlan) -> list[str]:
    """Every input of a sharded graph (``compiler.sharding.shard_graph``'s, collectives
    included) that its consumer cannot run on, one sentence each (empty when sound)."""
    problems: list[str] = []
    for node in operators(graph):
        arriving: dict[str, Operator] = {}
        for source in graph.predecessors(node.name):
            producer: Operator = graph.nodes[source]["op"]
            for tensor in graph.edges[source, node.name]["tensors"]:
                arriving[tensor] = producer
        for spec in node.inputs:
            if spec.bytes == 0:  # nothing to hold (a prefill with no cached prefix)
                continue
            producer_op = arriving.get(spec.name)
            share = (
                input_share(spec.name) if producer_op is None else output_share(producer_op, plan)
            )
            if reads(node, share, plan):
                continue
            source = "the kernel's input" if producer_op is None else repr(producer_op.name)
            problems.append(
                f"{node.name!r} (work {_describe(work_axis(node, plan))}) reads {spec.name!r} "
                f"{_describe(share)} from {source} with no collective between them"
            )
    return problems
