"""One DeepSeek-V3/R1 decoder layer: MLA attention, then a dense FFN or a MoE.

x -> attn_norm -> MLA (see `mla`) -> o_proj -> residual
  -> ffn_norm -> dense SwiGLU (first `dense_layers`) | MoE (the rest) -> residual -> y
"""

from __future__ import annotations

from typing import Literal

import networkx as nx

from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.graph.builder import GraphBuilder
from rdu_sim.graph.ffn import add_moe, add_swiglu
from rdu_sim.graph.mla import MlaCache, add_mla
from rdu_sim.graph.moe import ExpertLoading
from rdu_sim.graph.operator import Split
from rdu_sim.graph.ops import act, residual, rmsnorm
from rdu_sim.graph.shape import Precision, StepShape

FfnKind = Literal["dense", "moe"]


def deepseek_layer(
    arch: DeepSeekArchitecture,
    shape: StepShape,
    precision: Precision,
    *,
    ffn: FfnKind,
    cache: MlaCache = "latent",
    expert_loading: ExpertLoading = "routed",
) -> nx.DiGraph:
    """The graph of one DeepSeek decoder layer with a dense or MoE feed-forward."""
    x = act("x", (shape.batch, shape.tokens, arch.hidden_size), precision)
    b = GraphBuilder(f"{arch.name}.decoder_{ffn}", [x])
    xn = b.add(rmsnorm("attn_norm", x, "xn", precision, Split())).outputs[0]
    o = add_mla(b, xn, arch, shape, precision, cache, out="o")
    h1 = b.add(residual("attn.residual", x, o, "h1", precision)).outputs[0]
    h1n = b.add(rmsnorm("ffn_norm", h1, "h1n", precision, Split())).outputs[0]
    if ffn == "dense":
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
        d = add_moe(b, h1n, arch, shape, precision, out="ffn_out", loading=expert_loading)
    b.add(residual("ffn.residual", h1, d, "y", precision))
    return b.finish(["y"])
