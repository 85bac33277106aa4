"""One decoder layer of any family, as a dataflow graph: attention, then a feed-forward.

    x -> attn_norm -> GQA (`gqa`) | MLA (`mla`) -> residual
      -> ffn_norm -> dense SwiGLU | MoE (`ffn`) -> residual -> y

What varies per layer (`models.layers.LayerKind`): the FFN (dense or MoE) and, for GQA, the
attention window. `chain_layers` joins the layers of a repeating body (gpt-oss's sliding
and full layer) into one graph, the body of one looped kernel.
"""

from __future__ import annotations

from dataclasses import replace

from rdu_sim.config.architecture import DeepSeekArchitecture, LlamaArchitecture
from rdu_sim.graph.builder import GraphBuilder, operators
from rdu_sim.graph.digraph import DiGraph
from rdu_sim.graph.ffn import add_moe, add_swiglu
from rdu_sim.graph.gqa import add_gqa
from rdu_sim.graph.mla import MlaCache, add_mla
from rdu_sim.graph.moe import DEFAULT_EXPERT_LOADING, ExpertLoading
from rdu_sim.graph.operator import Split, TensorSpec
from rdu_sim.graph.ops import act, by_part, residual, rmsnorm
from rdu_sim.graph.shape import DECODE_PART, Precision, StepShape, step_parts, token_axes
from rdu_sim.graph.stash import stash_names
from rdu_sim.models.layers import Architecture, LayerKind

LAYER_INPUT, LAYER_OUTPUT = "x", "y"


def decoder_layer(
    arch: Architecture,
    kind: LayerKind,
    shape: StepShape,
    precision: Precision,
    *,
    name: str,
    cache: MlaCache = "latent",
    expert_loading: ExpertLoading = DEFAULT_EXPERT_LOADING,
    stash: int = 0,
    decode_stash: int = 0,
) -> DiGraph:
    """The graph of one decoder layer of `kind` at `shape`; with ``stash`` > 0 its attention
    also writes the queries of the last ``stash`` tokens for a selection (a compressing
    prefill's, a decode step's eviction), as outputs of the layer (`graph.stash`); with
    ``decode_stash`` > 0, a mixed step's decode rows' queries for their eviction."""
    x = act(LAYER_INPUT, (*token_axes(shape), arch.hidden_size), precision)
    b = GraphBuilder(name, [x])
    # the normed state as one tensor for each attention part's rows (one: no decode rows)
    norm = rmsnorm("attn_norm", x, "xn", precision, Split())
    parts = by_part("xn", step_parts(shape), (arch.hidden_size,), precision)
    xn = b.add(replace(norm, outputs=parts)).outputs
    if isinstance(arch, DeepSeekArchitecture):
        o = add_mla(
            b, xn, arch, shape, precision, cache, out="o", stash=stash, decode_stash=decode_stash
        )
    else:
        window = kind.window
        o = add_gqa(
            b, xn, arch, shape, precision, window, out="o", stash=stash, decode_stash=decode_stash
        )
    h1 = b.add(residual("attn.residual", x, o, "h1", precision)).outputs[0]
    h1n = b.add(rmsnorm("ffn_norm", h1, "h1n", precision, Split())).outputs[0]
    if kind.ffn == "dense":
        assert arch.ffn_intermediate is not None  # the architecture checks dense layers have it
        d = add_swiglu(
            b,
            h1n,
            prefix="ffn",
            intermediate=arch.ffn_intermediate,
            out="ffn_out",
            precision=precision,
            combine="sum",
        )
    else:
        assert not isinstance(arch, LlamaArchitecture)
        d = add_moe(b, h1n, arch, shape, precision, out="ffn_out", loading=expert_loading)
    b.add(residual("ffn.residual", h1, d, LAYER_OUTPUT, precision))
    stashed = stash_names(arch) if stash else ()
    stashed += stash_names(arch, DECODE_PART) if decode_stash else ()
    return b.finish([LAYER_OUTPUT, *stashed])


def chain_layers(layers: list[DiGraph], name: str) -> DiGraph:
    """Consecutive layers as one graph: layer i's operators and tensors prefixed "l{i}.",
    layer i's output feeding layer i + 1's input, its other outputs (stashed window
    queries) outputs of the body. One layer is returned as it is."""
    if len(layers) == 1:
        return layers[0]
    first: TensorSpec = layers[0].graph["inputs"][LAYER_INPUT]
    b = GraphBuilder(name, [first])
    incoming = LAYER_INPUT
    extra: list[str] = []
    for i, graph in enumerate(layers):
        prefix = f"l{i}."

        def rename(spec: TensorSpec, prefix: str = prefix, incoming: str = incoming) -> TensorSpec:
            new = incoming if spec.name == LAYER_INPUT else prefix + spec.name
            return replace(spec, name=new)

        for node in operators(graph):
            b.add(
                replace(
                    node,
                    name=prefix + node.name,
                    inputs=tuple(rename(t) for t in node.inputs),
                    outputs=tuple(rename(t) for t in node.outputs),
                )
            )
        extra += [prefix + name for name in graph.graph["outputs"] if name != LAYER_OUTPUT]
        incoming = prefix + LAYER_OUTPUT
    return b.finish([incoming, *extra])
