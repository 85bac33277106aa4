"""One Llama decoder layer (GQA attention, SwiGLU FFN) as a dataflow graph.

    x -> attn_norm -> q/k/v proj -> RoPE -> KV-cache write
                                         -> attention score (q x [cached K ; new K])
                                         -> softmax -> attention value -> o_proj
      -> residual -> ffn_norm -> gate/up -> SiLU-gating -> down -> residual -> y

The cached keys and values stream in from the KV tier (`attn.kv_read`, `cache_len` tokens
per slot); the new tokens' K and V come on-chip from the projections and are also written
to the cache (`attn.kv_write`). Attention length follows `StepShape.pairs` (causal).
Sharding: query heads and FFN columns split over TP; K/V heads over min(tp, kv_heads).
"""

from __future__ import annotations

import networkx as nx

from rdu_sim.config.architecture import LlamaArchitecture
from rdu_sim.graph.builder import GraphBuilder
from rdu_sim.graph.ffn import add_swiglu
from rdu_sim.graph.operator import Gemm, Operator, Split, TensorSpec
from rdu_sim.graph.ops import act, linear, residual, rmsnorm, rope, softmax
from rdu_sim.graph.shape import FP32, Precision, StepShape


def llama_layer(arch: LlamaArchitecture, shape: StepShape, precision: Precision) -> nx.DiGraph:
    """The graph of one Llama decoder layer at `shape`."""
    batch, tokens, cache = shape.batch, shape.tokens, shape.cache_len
    hidden, heads, kv_heads, dim = arch.hidden_size, arch.heads, arch.kv_heads, arch.head_dim
    rows = shape.rows
    x = act("x", (batch, tokens, hidden), precision)
    b = GraphBuilder(f"{arch.name}.decoder", [x])
    xn = b.add(rmsnorm("attn_norm", x, "xn", precision, Split())).outputs[0]

    heads_n = Split.along("heads", "n")
    kv_n = Split.along("kv_heads", "n")
    q = b.add(
        linear(
            "attn.q_proj",
            xn,
            (act("q", (batch, tokens, heads, dim), precision),),
            rows=rows,
            k=hidden,
            n=heads * dim,
            precision=precision,
            split=heads_n,
        )
    ).outputs[0]
    new_kv = (batch, tokens, kv_heads, dim)
    k = b.add(
        linear(
            "attn.k_proj",
            xn,
            (act("k", new_kv, precision),),
            rows=rows,
            k=hidden,
            n=kv_heads * dim,
            precision=precision,
            split=kv_n,
        )
    ).outputs[0]
    v = b.add(
        linear(
            "attn.v_proj",
            xn,
            (act("v", new_kv, precision),),
            rows=rows,
            k=hidden,
            n=kv_heads * dim,
            precision=precision,
            split=kv_n,
        )
    ).outputs[0]
    q_r = b.add(rope("attn.rope_q", q, "q_rope", precision, Split.along("heads"))).outputs[0]
    k_r = b.add(rope("attn.rope_k", k, "k_rope", precision, Split.along("kv_heads"))).outputs[0]

    per_token = 2 * kv_heads * dim * precision.kv
    kv_split = Split(compute="kv_heads", kv="kv_heads")
    b.add(
        Operator(
            "attn.kv_write",
            "kv_write",
            inputs=(k_r, v),
            kv_write_bytes=rows * per_token,
            split=kv_split,
        )
    )
    cached = (batch, cache, kv_heads, dim)
    k_cache = TensorSpec("k_cache", cached, precision.kv)
    v_cache = TensorSpec("v_cache", cached, precision.kv)
    b.add(
        Operator(
            "attn.kv_read",
            "kv_read",
            outputs=(k_cache, v_cache),
            kv_read_bytes=batch * cache * per_token,
            split=kv_split,
        )
    )

    pairs = shape.pairs
    # the query heads of one GQA group share their K/V: one product per slot and KV head
    group = heads // kv_heads
    heads_batch = Split.along("heads", "batch")
    scores = TensorSpec("scores", (batch, heads, pairs), FP32)
    b.add(
        Operator(
            "attn.score",
            "attention_score",
            inputs=(q_r, k_r, k_cache),
            outputs=(scores,),
            flops=2 * batch * heads * dim * pairs,
            gemm=Gemm(m=tokens * group, n=shape.keys, k=dim, batch=batch * kv_heads),
            split=heads_batch,
        )
    )
    probs = act("probs", (batch, heads, pairs), precision)
    b.add(softmax("attn.softmax", scores, probs, Split.along("heads")))
    attn = act("attn", (batch, tokens, heads, dim), precision)
    b.add(
        Operator(
            "attn.value",
            "attention_value",
            inputs=(probs, v, v_cache),
            outputs=(attn,),
            flops=2 * batch * heads * dim * pairs,
            gemm=Gemm(m=tokens * group, n=dim, k=shape.keys, batch=batch * kv_heads),
            split=heads_batch,
        )
    )
    o = b.add(
        linear(
            "attn.o_proj",
            attn,
            (act("o", x.shape, precision),),
            rows=rows,
            k=heads * dim,
            n=hidden,
            precision=precision,
            split=Split.along("heads", "k", "sum"),
        )
    ).outputs[0]
    h1 = b.add(residual("attn.residual", x, o, "h1", precision)).outputs[0]
    h1n = b.add(rmsnorm("ffn_norm", h1, "h1n", precision, Split())).outputs[0]
    d = add_swiglu(
        b,
        h1n,
        prefix="ffn",
        intermediate=arch.ffn_intermediate,
        out="ffn_out",
        precision=precision,
        combine="sum",
    )
    b.add(residual("ffn.residual", h1, d, "y", precision))
    return b.finish(["y"])
