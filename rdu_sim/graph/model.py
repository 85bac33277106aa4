"""A whole model as graphs: the embedding, each run of decoder layers with its count, the head.

The stack is cut into runs of a repeating body (`models.layers.layer_segments`): Llama has
one run ("decoder"), DeepSeek "decoder_dense" for the first `dense_layers` and
"decoder_moe" for the rest, gpt-oss one run whose body is a sliding-window layer and a
full-attention layer ("decoder_sliding+full", 18 of them for gpt-oss-120b). The layers of a
body share one graph per step (identical at a static shape); `count` says how many bodies
run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rdu_sim.graph.builder import operators
from rdu_sim.graph.decoder import chain_layers, decoder_layer
from rdu_sim.graph.digraph import DiGraph
from rdu_sim.graph.heads import embedding_graph, lm_head_graph
from rdu_sim.graph.mla import MlaCache
from rdu_sim.graph.moe import DEFAULT_EXPERT_LOADING, ExpertLoading
from rdu_sim.graph.shape import Precision, StepShape
from rdu_sim.models.layers import Architecture, layer_kinds, layer_segments, segment_name


@dataclass(frozen=True)
class GraphGroup:
    """`count` identical calls of one graph per step (e.g. 58 MoE layers)."""

    name: str  # "embedding", "decoder", "decoder_dense", "decoder_moe", "lm_head"
    count: int
    graph: DiGraph
    # Rows its tiles stream, when not the step's token rows: a SnapKV selection kernel
    # streams each prompt's keys as one row (its reductions finish a row at its end).
    rows: int | None = None


def decoder_groups(
    arch: Architecture,
    shape: StepShape,
    precision: Precision,
    cache: MlaCache = "latent",
    expert_loading: ExpertLoading = DEFAULT_EXPERT_LOADING,
    stash: Mapping[int | None, int] | None = None,
    decode_stash: Mapping[int | None, int] | None = None,
) -> list[GraphGroup]:
    """The decoder layers, one group per run of a repeating body, in order.
    `expert_loading` applies to MoE layers (see `moe.experts_loaded`); `stash` maps an
    attention window (None: full attention) to the queries its layers stash for a
    selection (`graph.stash`), `decode_stash` likewise for a mixed step's decode rows."""
    stash, decode_stash = stash or {}, decode_stash or {}
    kinds = layer_kinds(arch)
    groups: list[GraphGroup] = []
    names: dict[str, int] = {}
    for segment in layer_segments(kinds):
        base = segment_name(segment, kinds)
        names[base] = names.get(base, 0) + 1
        name = base if names[base] == 1 else f"{base}_{names[base]}"
        layers = [
            decoder_layer(
                arch,
                kind,
                shape,
                precision,
                name=f"{arch.name}.{name}",
                cache=cache,
                expert_loading=expert_loading,
                stash=stash.get(kind.window, 0),
                decode_stash=decode_stash.get(kind.window, 0),
            )
            for kind in segment.body
        ]
        groups.append(
            GraphGroup(name, segment.repeats, chain_layers(layers, f"{arch.name}.{name}"))
        )
    return groups


def model_groups(
    arch: Architecture,
    shape: StepShape,
    precision: Precision,
    cache: MlaCache = "latent",
    expert_loading: ExpertLoading = DEFAULT_EXPERT_LOADING,
    sample: bool = False,
    stash: Mapping[int | None, int] | None = None,
    decode_stash: Mapping[int | None, int] | None = None,
) -> list[GraphGroup]:
    """Embedding, decoder layer groups, LM head (with the sampling when ``sample``: the
    serving stack samples on the device): everything one step runs, in order; ``stash``
    and ``decode_stash`` as `decoder_groups`'s."""
    return [
        GraphGroup("embedding", 1, embedding_graph(arch, shape, precision)),
        *decoder_groups(arch, shape, precision, cache, expert_loading, stash, decode_stash),
        GraphGroup("lm_head", 1, lm_head_graph(arch, shape, precision, sample)),
    ]


@dataclass(frozen=True)
class Totals:
    """Sums over every operator call of a step."""

    flops: float
    vector_flops: float
    weight_params: int  # resident parameters
    weight_read_bytes: float
    kv_read_bytes: float
    kv_write_bytes: float
    collective_bytes: float


def totals(groups: list[GraphGroup]) -> Totals:
    """Sum every operator of every group, each times its group's count."""
    sums: list[float] = [0] * 6  # stays an exact int while every term is one
    params = 0
    for group in groups:
        for node in operators(group.graph):
            params += group.count * node.weight_params
            for i, value in enumerate(
                (
                    node.flops,
                    node.vector_flops,
                    node.weight_read_bytes,
                    node.kv_read_bytes,
                    node.kv_write_bytes,
                    node.collective_bytes,
                )
            ):
                sums[i] += group.count * value
    return Totals(
        flops=sums[0],
        vector_flops=sums[1],
        weight_params=params,
        weight_read_bytes=sums[2],
        kv_read_bytes=sums[3],
        kv_write_bytes=sums[4],
        collective_bytes=sums[5],
    )
