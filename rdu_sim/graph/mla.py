"""Multi-head latent attention (DeepSeek-V2/V3) as operators.

Low-rank projections: q_a_proj -> q_a_norm -> q_b_proj gives per-head q_nope (128) and
q_pe (64); kv_a_proj gives the KV latent (kv_lora_rank = 512) and one shared RoPE key (64);
kv_norm normalises the latent. What is cached, and how attention runs, has three forms:

- cache "latent", decode: the ABSORBED form. q_nope is absorbed by W_UK into the latent
  (`attn.q_absorb`), scores run over kv_lora_rank + rope dims against the cached latent and
  RoPE key, values are the latent itself, and W_UV up-projects the per-head output
  (`attn.v_up`). W_UK and W_UV are the two halves of kv_b_proj, so the layer's matrix FLOPs
  stay 2 x params per token. Cached per token and layer: 512 + 64 values.
- cache "latent", prefill: the NON-ABSORBED form. kv_b_proj up-projects the latent of every
  attended token (cached prefix and prompt) to per-head K_nope and V; attention runs with
  192-dim keys and 128-dim values. The cache write is the latent.
- cache "per_head" (the `head_split` TP layout): kv_b_proj up-projects each NEW token once,
  and the cache holds per-head K (128 + 64) and V (128): 128 x 320 values per token and
  layer, 71x the latent, but split by heads over the TP sockets. Attention is the
  non-absorbed form in both phases.

A mixed step (`StepShape.decode_batch`) runs MLA for its prompts and, under "decode."
names, for its decode rows, each part from its own rows' normed state through its own
projections (which the compiler places per part: under `sequence_split` a part's queries are
gathered or computed whole for its rows alone) to attention in its phase's form; the decode
part re-reads the projections' weights the first holds. o_proj reads both parts' outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.graph.builder import GraphBuilder, PrefixedBuilder
from rdu_sim.graph.operator import Gemm, Operator, Split, TensorSpec
from rdu_sim.graph.ops import act, linear, rmsnorm, rope, softmax
from rdu_sim.graph.shape import FP32, Precision, StepShape, step_parts, token_axes
from rdu_sim.graph.stash import stashed_queries

MlaCache = Literal["latent", "per_head"]
KV_B = "attn.kv_b_proj"  # the weight tensor W_UK and W_UV are halves of


def add_mla(
    b: GraphBuilder,
    xn: tuple[TensorSpec, ...],
    arch: DeepSeekArchitecture,
    shape: StepShape,
    precision: Precision,
    cache: MlaCache,
    out: str,
    stash: int = 0,
    decode_stash: int = 0,
) -> TensorSpec:
    """MLA from the normed hidden state (a tensor for each part's rows) to o_proj's
    (partial-sum) output; returns it.

    ``stash`` > 0: the step also writes the queries of its last ``stash`` tokens (q_nope
    from q_b_proj, the rotated q_pe from rope_q) for a selection (`graph.stash`: a
    compressing prefill's SnapKV selection, a decode step's eviction); ``decode_stash`` > 0:
    a mixed step's decode rows write theirs (under its "decode." names)."""
    attn = tuple(
        _attend(
            PrefixedBuilder(b, prefix, resident=False) if prefix else b,
            xn[i],
            arch,
            part,
            precision,
            cache,
            decode_stash if prefix else stash,
        )
        for i, (prefix, part) in enumerate(step_parts(shape))
    )
    o_proj = linear(
        "attn.o_proj",
        attn[0],
        (act(out, (*token_axes(shape), arch.hidden_size), precision),),
        rows=shape.rows,
        k=arch.heads * arch.v_head_dim,
        n=arch.hidden_size,
        precision=precision,
        split=Split.along("heads", "k", "sum"),
    )
    return b.add(replace(o_proj, inputs=attn)).outputs[0]


def _attend(
    b: GraphBuilder,
    xn: TensorSpec,
    arch: DeepSeekArchitecture,
    shape: StepShape,
    precision: Precision,
    cache: MlaCache,
    stash: int,
) -> TensorSpec:
    """One part's MLA, from its rows' normed state to its attention output (before o_proj):
    the projections, the cache, attention in the part's form."""
    batch, tokens, hidden = xn.shape
    rows, heads = shape.rows, arch.heads
    nope, pe, rank = arch.qk_nope_head_dim, arch.qk_rope_head_dim, arch.kv_lora_rank
    replicated = Split()
    qa = b.add(
        linear(
            "attn.q_a_proj",
            xn,
            (act("q_a", (batch, tokens, arch.q_lora_rank), precision),),
            rows=rows,
            k=hidden,
            n=arch.q_lora_rank,
            precision=precision,
            split=replicated,
        )
    ).outputs[0]
    qan = b.add(rmsnorm("attn.q_a_norm", qa, "q_a_n", precision, replicated)).outputs[0]
    per_head = (batch, tokens, heads)
    window = stashed_queries(arch, batch, min(stash, tokens), precision) if stash else ()
    q_b_proj = linear(
        "attn.q_b_proj",
        qan,
        (act("q_nope", (*per_head, nope), precision), act("q_pe", (*per_head, pe), precision)),
        rows=rows,
        k=arch.q_lora_rank,
        n=heads * (nope + pe),
        precision=precision,
        split=Split.along("heads", "n"),
    )
    q_b = b.add(replace(q_b_proj, outputs=q_b_proj.outputs + window[:1]))
    q_nope, q_pe = q_b.outputs[:2]
    kv_a = b.add(
        linear(
            "attn.kv_a_proj",
            xn,
            (
                act("kv_latent", (batch, tokens, rank), precision),
                act("k_pe", (batch, tokens, pe), precision),
            ),
            rows=rows,
            k=hidden,
            n=rank + pe,
            precision=precision,
            split=replicated,
        )
    )
    latent_raw, k_pe = kv_a.outputs
    latent = b.add(
        rmsnorm("attn.kv_norm", latent_raw, "kv_latent_n", precision, replicated)
    ).outputs[0]
    rope_q = rope("attn.rope_q", q_pe, "q_pe_rope", precision, Split.along("heads"))
    q_pe_r = b.add(replace(rope_q, outputs=rope_q.outputs + window[1:])).outputs[0]
    k_pe_r = b.add(rope("attn.rope_k", k_pe, "k_pe_rope", precision, replicated)).outputs[0]

    form = _attention(cache, shape)
    return form(b, arch, shape, precision, q_nope, q_pe_r, latent, k_pe_r)


AttentionForm = Callable[
    [
        GraphBuilder,
        DeepSeekArchitecture,
        StepShape,
        Precision,
        TensorSpec,
        TensorSpec,
        TensorSpec,
        TensorSpec,
    ],
    TensorSpec,
]


def _attention(cache: MlaCache, shape: StepShape) -> AttentionForm:
    """The form attention takes for this cache and phase (module docstring)."""
    if cache == "per_head":
        return _per_head
    return _absorbed if shape.phase == "decode" else _up_projected


def _latent_cache(
    b: GraphBuilder,
    arch: DeepSeekArchitecture,
    shape: StepShape,
    precision: Precision,
    latent: TensorSpec,
    k_pe: TensorSpec,
) -> tuple[TensorSpec, TensorSpec]:
    """Write the new latents and RoPE keys; stream the cached ones in."""
    rank, pe = arch.kv_lora_rank, arch.qk_rope_head_dim
    per_token = (rank + pe) * precision.kv
    cache_split = Split(kv="mla_cache")
    b.add(
        Operator(
            "attn.kv_write",
            "kv_write",
            inputs=(latent, k_pe),
            kv_write_bytes=shape.rows * per_token,
            split=cache_split,
        )
    )
    # prefill attends with heads split over TP, so a sequence-split cached prefix is gathered
    read_split = Split(kv="mla_cache", combine="seq_gather" if shape.phase == "prefill" else "none")
    c_latent = TensorSpec("c_latent", (shape.batch, shape.cache_len, rank), precision.kv)
    c_pe = TensorSpec("c_pe", (shape.batch, shape.cache_len, pe), precision.kv)
    b.add(
        Operator(
            "attn.kv_read",
            "kv_read",
            outputs=(c_latent, c_pe),
            kv_read_bytes=shape.batch * shape.cache_len * per_token,
            split=read_split,
        )
    )
    return c_latent, c_pe


def _absorbed(
    b: GraphBuilder,
    arch: DeepSeekArchitecture,
    shape: StepShape,
    precision: Precision,
    q_nope: TensorSpec,
    q_pe: TensorSpec,
    latent: TensorSpec,
    k_pe: TensorSpec,
) -> TensorSpec:
    """Decode attention on the latent: W_UK absorbed into q, W_UV applied to the output."""
    batch, tokens, heads = shape.batch, shape.tokens, arch.heads
    nope, pe, vdim, rank = (
        arch.qk_nope_head_dim,
        arch.qk_rope_head_dim,
        arch.v_head_dim,
        arch.kv_lora_rank,
    )
    c_latent, c_pe = _latent_cache(b, arch, shape, precision, latent, k_pe)
    q_lat = act("q_latent", (batch, tokens, heads, rank), precision)
    b.add(
        Operator(
            "attn.q_absorb",
            "batched_gemm",
            inputs=(q_nope,),
            outputs=(q_lat,),
            flops=2 * shape.rows * heads * nope * rank,
            weight_params=heads * nope * rank,
            weight_bytes=heads * nope * rank * precision.weights,
            weight_read_bytes=heads * nope * rank * precision.weights,
            gemm=Gemm(m=shape.rows, n=rank, k=nope, batch=heads),
            split=Split.along("heads", "batch"),
            weights=KV_B,
        )
    )
    pairs = shape.pairs
    # the latent is shared by all heads (MQA-like): one product per slot, heads in m
    attention = Split(compute="attention", kv="mla_cache", gemm_dim="m")
    scores = TensorSpec("scores", (batch, heads, pairs), FP32)
    b.add(
        Operator(
            "attn.score",
            "attention_score",
            inputs=(q_lat, q_pe, latent, k_pe, c_latent, c_pe),
            outputs=(scores,),
            flops=2 * batch * heads * (rank + pe) * pairs,
            gemm=Gemm(m=tokens * heads, n=shape.keys, k=rank + pe, batch=batch),
            split=attention,
        )
    )
    probs = act("probs", scores.shape, precision)
    b.add(softmax("attn.softmax", scores, probs, attention))
    o_latent = act("o_latent", (batch, tokens, heads, rank), precision)
    b.add(
        Operator(
            "attn.value",
            "attention_value",
            inputs=(probs, latent, c_latent),
            outputs=(o_latent,),
            flops=2 * batch * heads * rank * pairs,
            gemm=Gemm(m=tokens * heads, n=rank, k=shape.keys, batch=batch),
            split=Split(compute="attention", kv="mla_cache", gemm_dim="m", combine="sequence"),
        )
    )
    o_v = act("o_heads", (batch, tokens, heads, vdim), precision)
    b.add(
        Operator(
            "attn.v_up",
            "batched_gemm",
            inputs=(o_latent,),
            outputs=(o_v,),
            flops=2 * shape.rows * heads * rank * vdim,
            weight_params=heads * rank * vdim,
            weight_bytes=heads * rank * vdim * precision.weights,
            weight_read_bytes=heads * rank * vdim * precision.weights,
            gemm=Gemm(m=shape.rows, n=vdim, k=rank, batch=heads),
            split=Split.along("heads", "batch"),
            weights=KV_B,
        )
    )
    return o_v


def _up_projected(
    b: GraphBuilder,
    arch: DeepSeekArchitecture,
    shape: StepShape,
    precision: Precision,
    q_nope: TensorSpec,
    q_pe: TensorSpec,
    latent: TensorSpec,
    k_pe: TensorSpec,
) -> TensorSpec:
    """Prefill on a latent cache: kv_b_proj up-projects every attended token's latent."""
    batch, heads, keys = shape.batch, arch.heads, shape.keys
    nope, vdim, rank = arch.qk_nope_head_dim, arch.v_head_dim, arch.kv_lora_rank
    c_latent, c_pe = _latent_cache(b, arch, shape, precision, latent, k_pe)
    up = b.add(
        Operator(
            "attn.kv_b_proj",
            "gemm",
            inputs=(latent, c_latent),
            outputs=(
                act("k_nope", (batch, keys, heads, nope), precision),
                act("v_heads", (batch, keys, heads, vdim), precision),
            ),
            flops=2 * batch * keys * rank * heads * (nope + vdim),
            weight_params=rank * heads * (nope + vdim),
            weight_bytes=rank * heads * (nope + vdim) * precision.weights,
            weight_read_bytes=rank * heads * (nope + vdim) * precision.weights,
            gemm=Gemm(m=batch * keys, n=heads * (nope + vdim), k=rank),
            split=Split.along("heads", "n"),
        )
    )
    k_nope, v = up.outputs
    return _heads_attention(b, arch, shape, precision, (q_nope, q_pe, k_nope, k_pe, c_pe), (v,))


def _per_head(
    b: GraphBuilder,
    arch: DeepSeekArchitecture,
    shape: StepShape,
    precision: Precision,
    q_nope: TensorSpec,
    q_pe: TensorSpec,
    latent: TensorSpec,
    k_pe: TensorSpec,
) -> TensorSpec:
    """Per-head K/V cache: up-project the new tokens once, cache per-head K and V."""
    batch, tokens, heads, cache = shape.batch, shape.tokens, arch.heads, shape.cache_len
    nope, pe, vdim, rank = (
        arch.qk_nope_head_dim,
        arch.qk_rope_head_dim,
        arch.v_head_dim,
        arch.kv_lora_rank,
    )
    up = b.add(
        linear(
            "attn.kv_b_proj",
            latent,
            (
                act("k_nope", (batch, tokens, heads, nope), precision),
                act("v_heads", (batch, tokens, heads, vdim), precision),
            ),
            rows=shape.rows,
            k=rank,
            n=heads * (nope + vdim),
            precision=precision,
            split=Split.along("heads", "n"),
        )
    )
    k_nope, v = up.outputs
    per_token = heads * (nope + pe + vdim) * precision.kv
    cache_split = Split(compute="heads", kv="mla_cache")
    b.add(
        Operator(
            "attn.kv_write",
            "kv_write",
            inputs=(k_nope, k_pe, v),
            kv_write_bytes=shape.rows * per_token,
            split=cache_split,
        )
    )
    c_k = TensorSpec("c_k", (batch, cache, heads, nope + pe), precision.kv)
    c_v = TensorSpec("c_v", (batch, cache, heads, vdim), precision.kv)
    b.add(
        Operator(
            "attn.kv_read",
            "kv_read",
            outputs=(c_k, c_v),
            kv_read_bytes=batch * cache * per_token,
            split=cache_split,
        )
    )
    return _heads_attention(b, arch, shape, precision, (q_nope, q_pe, k_nope, k_pe, c_k), (v, c_v))


def _heads_attention(
    b: GraphBuilder,
    arch: DeepSeekArchitecture,
    shape: StepShape,
    precision: Precision,
    key_inputs: tuple[TensorSpec, ...],
    value_inputs: tuple[TensorSpec, ...],
) -> TensorSpec:
    """Non-absorbed attention: 192-dim keys, 128-dim values, heads split over TP."""
    batch, tokens, heads, pairs = shape.batch, shape.tokens, arch.heads, shape.pairs
    qk, vdim = arch.qk_nope_head_dim + arch.qk_rope_head_dim, arch.v_head_dim
    split = Split.along("heads", "batch")
    scores = TensorSpec("scores", (batch, heads, pairs), FP32)
    b.add(
        Operator(
            "attn.score",
            "attention_score",
            inputs=key_inputs,
            outputs=(scores,),
            flops=2 * batch * heads * qk * pairs,
            gemm=Gemm(m=tokens, n=shape.keys, k=qk, batch=batch * heads),
            split=split,
        )
    )
    probs = act("probs", scores.shape, precision)
    b.add(softmax("attn.softmax", scores, probs, Split.along("heads")))
    o_v = act("o_heads", (batch, tokens, heads, vdim), precision)
    b.add(
        Operator(
            "attn.value",
            "attention_value",
            inputs=(probs, *value_inputs),
            outputs=(o_v,),
            flops=2 * batch * heads * vdim * pairs,
            gemm=Gemm(m=tokens, n=vdim, k=shape.keys, batch=batch * heads),
            split=split,
        )
    )
    return o_v
