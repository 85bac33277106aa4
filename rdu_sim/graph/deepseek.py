"""One DeepSeek-V3/R1 decoder layer: MLA attention, then a dense FFN or a MoE.

x -> attn_norm -> MLA (see `mla`) -> o_proj -> residual
  -> ffn_norm -> dense SwiGLU (first `dense_layers`) | MoE (the rest) -> residual -> y

The layer is `decoder.decoder_layer`; this names it by its FFN.
"""

from __future__ import annotations

from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.graph.decoder import decoder_layer
from rdu_sim.graph.digraph import DiGraph
from rdu_sim.graph.mla import MlaCache
from rdu_sim.graph.moe import DEFAULT_EXPERT_LOADING, ExpertLoading
from rdu_sim.graph.shape import Precision, StepShape
from rdu_sim.models.layers import FfnKind, LayerKind


def deepseek_layer(
    arch: DeepSeekArchitecture,
    shape: StepShape,
    precision: Precision,
    *,
    ffn: FfnKind,
    cache: MlaCache = "latent",
    expert_loading: ExpertLoading = DEFAULT_EXPERT_LOADING,
) -> DiGraph:
    """The graph of one DeepSeek decoder layer with a dense or MoE feed-forward."""
    return decoder_layer(
        arch,
        LayerKind(ffn),
        shape,
        precision,
        name=f"{arch.name}.decoder_{ffn}",
        cache=cache,
        expert_loading=expert_loading,
    )
