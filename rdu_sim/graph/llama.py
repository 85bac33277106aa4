"""One Llama decoder layer (GQA attention, SwiGLU FFN) as a dataflow graph.

    x -> attn_norm -> q/k/v proj -> RoPE -> KV-cache write
                                         -> attention score (q x [cached K ; new K])
                                         -> softmax -> attention value -> o_proj
      -> residual -> ffn_norm -> gate/up -> SiLU-gating -> down -> residual -> y

The attention is `gqa.add_gqa`, the layer `decoder.decoder_layer`; this is the view of a
dense GQA model's (first) layer.
"""

from __future__ import annotations

from rdu_sim.config.architecture import LlamaArchitecture
from rdu_sim.graph.decoder import decoder_layer
from rdu_sim.graph.digraph import DiGraph
from rdu_sim.graph.shape import Precision, StepShape
from rdu_sim.models.layers import layer_kinds


def llama_layer(arch: LlamaArchitecture, shape: StepShape, precision: Precision) -> DiGraph:
    """The graph of one Llama decoder layer (the first layer's kind) at `shape`."""
    kind = layer_kinds(arch)[0]
    return decoder_layer(arch, kind, shape, precision, name=f"{arch.name}.decoder")
