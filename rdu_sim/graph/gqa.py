"""Grouped-query attention (Llama, Qwen, Mistral, Mixtral, gpt-oss) as operators.

    xn -> q/k/v proj (+ biases) -> [q/k norm] -> RoPE -> KV-cache write
                                               -> attention score (q x [cached K ; new K])
                                               -> softmax [+ sink logit] -> value -> o_proj

The cached keys and values stream in from the KV tier (`attn.kv_read`); the new tokens' K
and V come on-chip from the projections and are also written to the cache
(`attn.kv_write`). Attention length follows `shape.attended_pairs` (causal). A
sliding-window layer keeps only the ring of its last window - 1 tokens
(`models.layers.window_tokens`): it reads at most that many cached tokens, writes at most
that many new ones, and each token attends to at most `window` keys. gpt-oss's attention
sinks are a learned logit per head that joins each softmax (one more exponential per row),
not cached tokens. Sharding: query heads split over TP; K/V heads over min(tp, kv_heads).

A mixed step (`StepShape.decode_batch`) runs the projections, norms and RoPE once over all
its rows and attention twice, as serving runtimes launch a context and a generation
attention kernel: the prompts' part as above, the decode rows' ("decode.attn.*") over their
own caches; RoPE hands each part its rows and o_proj reads both parts' outputs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rdu_sim.graph.builder import GraphBuilder
from rdu_sim.graph.operator import Gemm, Operator, Split, TensorSpec
from rdu_sim.graph.ops import act, by_part, linear, rmsnorm, rope, softmax
from rdu_sim.graph.shape import (
    DECODE_PART,
    FP32,
    Precision,
    StepShape,
    attended_keys,
    attended_pairs,
    step_parts,
    token_axes,
)
from rdu_sim.graph.stash import stashed_queries
from rdu_sim.models.layers import GqaArchitecture, window_tokens


def add_gqa(
    b: GraphBuilder,
    xn: tuple[TensorSpec, ...],
    arch: GqaArchitecture,
    shape: StepShape,
    precision: Precision,
    window: int | None,
    out: str,
    stash: int = 0,
    decode_stash: int = 0,
) -> TensorSpec:
    """GQA from the normed hidden state (a tensor for each part's rows) to o_proj's
    (partial-sum) output; returns it.

    ``stash`` > 0: the step also writes the rotated queries of its last ``stash`` tokens
    for a selection (`graph.stash`: a compressing prefill's SnapKV selection, a decode
    step's eviction); ``decode_stash`` > 0: a mixed step's decode rows write theirs."""
    batch, tokens = shape.batch, shape.tokens
    hidden, heads, kv_heads, dim = arch.hidden_size, arch.heads, arch.kv_heads, arch.head_dim
    rows = shape.rows
    axes = token_axes(shape)
    parts = step_parts(shape)
    heads_n = Split.along("heads", "n")
    kv_n = Split.along("kv_heads", "n")
    q = b.add(
        _reading(
            xn,
            "attn.q_proj",
            (act("q", (*axes, heads, dim), precision),),
            rows=rows,
            k=hidden,
            n=heads * dim,
            precision=precision,
            split=heads_n,
            bias=arch.qkv_bias,
        )
    ).outputs[0]
    k = b.add(
        _reading(
            xn,
            "attn.k_proj",
            (act("k", (*axes, kv_heads, dim), precision),),
            rows=rows,
            k=hidden,
            n=kv_heads * dim,
            precision=precision,
            split=kv_n,
            bias=arch.qkv_bias,
        )
    ).outputs[0]
    # v goes from its projection to the attention as it is: one tensor for each part's rows
    v_parts = b.add(
        _reading(
            xn,
            "attn.v_proj",
            by_part("v", parts, (kv_heads, dim), precision),
            rows=rows,
            k=hidden,
            n=kv_heads * dim,
            precision=precision,
            split=kv_n,
            bias=arch.qkv_bias,
        )
    ).outputs
    if arch.qk_norm:  # Qwen3: RMSNorm over each head's query and key, before RoPE
        q = b.add(rmsnorm("attn.q_norm", q, "q_n", precision, Split.along("heads"))).outputs[0]
        k = b.add(rmsnorm("attn.k_norm", k, "k_n", precision, Split.along("kv_heads"))).outputs[0]
    rope_q = rope("attn.rope_q", q, "q_rope", precision, Split.along("heads"))
    stashed = stashed_queries(arch, batch, min(stash, tokens), precision) if stash else ()
    if decode_stash:  # a decode row's one token
        stashed += stashed_queries(arch, shape.decode_batch, 1, precision, DECODE_PART)
    q_parts = by_part("q_rope", parts, (heads, dim), precision)
    q_r = b.add(replace(rope_q, outputs=q_parts + stashed)).outputs[: len(parts)]
    rope_k = rope("attn.rope_k", k, "k_rope", precision, Split.along("kv_heads"))
    k_parts = by_part("k_rope", parts, (kv_heads, dim), precision)
    k_r = b.add(replace(rope_k, outputs=k_parts)).outputs
    attn = tuple(
        _attend(b, arch, part, precision, window, (q_r[i], k_r[i], v_parts[i]), prefix)
        for i, (prefix, part) in enumerate(parts)
    )
    o_proj = linear(
        "attn.o_proj",
        attn[0],
        (act(out, (*axes, hidden), precision),),
        rows=rows,
        k=heads * dim,
        n=hidden,
        precision=precision,
        split=Split.along("heads", "k", "sum"),
        bias=arch.o_bias,
    )
    return b.add(replace(o_proj, inputs=attn)).outputs[0]


def _reading(
    xn: tuple[TensorSpec, ...], name: str, outputs: tuple[TensorSpec, ...], **gemm: Any
) -> Operator:
    """A projection of every row of the step: it reads each part's normed rows."""
    return replace(linear(name, xn[0], outputs, **gemm), inputs=xn)


def _attend(
    b: GraphBuilder,
    arch: GqaArchitecture,
    shape: StepShape,
    precision: Precision,
    window: int | None,
    qkv: tuple[TensorSpec, TensorSpec, TensorSpec],
    prefix: str,
) -> TensorSpec:
    """The KV-cache write and read and the attention of one part of a step (its rows'
    rotated queries and keys and their values); returns its output, before o_proj."""
    q_r, k_r, v = qkv
    batch, tokens = shape.batch, shape.tokens
    heads, kv_heads, dim = arch.heads, arch.kv_heads, arch.head_dim
    per_token = 2 * kv_heads * dim * precision.kv
    kv_split = Split(compute="kv_heads", kv="kv_heads")
    written = window_tokens(tokens, window)
    b.add(
        Operator(
            prefix + "attn.kv_write",
            "kv_write",
            inputs=(k_r, v),
            kv_write_bytes=batch * written * per_token,
            split=kv_split,
        )
    )
    cached = window_tokens(shape.cache_len, window)
    k_cache = TensorSpec(prefix + "k_cache", (batch, cached, kv_heads, dim), precision.kv)
    v_cache = TensorSpec(prefix + "v_cache", (batch, cached, kv_heads, dim), precision.kv)
    b.add(
        Operator(
            prefix + "attn.kv_read",
            "kv_read",
            outputs=(k_cache, v_cache),
            kv_read_bytes=batch * cached * per_token,
            split=kv_split,
        )
    )

    pairs = attended_pairs(tokens, cached, window)
    keys = attended_keys(tokens, cached, window)
    # the query heads of one GQA group share their K/V: one product per slot and KV head
    group = heads // kv_heads
    heads_batch = Split.along("heads", "batch")
    scores = TensorSpec(prefix + "scores", (batch, heads, pairs), FP32)
    b.add(
        Operator(
            prefix + "attn.score",
            "attention_score",
            inputs=(q_r, k_r, k_cache),
            outputs=(scores,),
            flops=2 * batch * heads * dim * pairs,
            gemm=Gemm(m=tokens * group, n=keys, k=dim, batch=batch * kv_heads),
            split=heads_batch,
        )
    )
    probs = act(prefix + "probs", (batch, heads, pairs), precision)
    normalise = softmax(prefix + "attn.softmax", scores, probs, Split.along("heads"))
    if arch.attention_sinks:  # (the logits are the first part's weights; a second re-reads)
        normalise = _with_sinks(normalise, batch * heads * tokens, heads, precision)
        if prefix:
            normalise = replace(normalise, weight_params=0, weight_bytes=0, weights="attn.softmax")
    b.add(normalise)
    attn = act(prefix + "attn", (batch, tokens, heads, dim), precision)
    b.add(
        Operator(
            prefix + "attn.value",
            "attention_value",
            inputs=(probs, v, v_cache),
            outputs=(attn,),
            flops=2 * batch * heads * dim * pairs,
            gemm=Gemm(m=tokens * group, n=dim, k=keys, batch=batch * kv_heads),
            split=heads_batch,
        )
    )
    return attn


def _with_sinks(node: Operator, rows: int, heads: int, precision: Precision) -> Operator:
    """The softmax with gpt-oss's learned sink logit per head: one more term per row (its
    exponential and its share of the sum), and the logits as resident weights."""
    return Operator(
        node.name,
        node.kind,
        inputs=node.inputs,
        outputs=node.outputs,
        vector_flops=node.vector_flops + 2 * rows,
        weight_params=heads,
        weight_bytes=heads * precision.weights,
        weight_read_bytes=heads * precision.weights,
        split=node.split,
    )
