"""Derived figures of an architecture: parameter counts, KV bytes per token, decode FLOPs.

These are the hand-countable numbers the graph builders must sum to exactly (tests check it).
Conventions:
- parameters count every weight, norms included; `params_active` counts what one token
  touches: all attention and dense weights, the router, the shared experts and
  `experts_per_token` routed experts, plus the embedding and LM head;
- FLOPs count matrix products only (2 per multiply-add), as is usual; elementwise work
  (norms, softmax, activations) is tracked by the graph separately as vector FLOPs;
- the embedding lookup is a gather (no FLOPs); the LM head is a GEMM; so is an MTP module's
  input projection (DeepSeek's eh_proj), counted with its two norms outside the layers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rdu_sim.config.architecture import DeepSeekArchitecture, LlamaArchitecture
from rdu_sim.models.layers import Architecture, LayerKind, layer_kinds, window_tokens

__all__ = ["Architecture"]


@dataclass(frozen=True)
class LayerParams:
    """Parameter counts of one decoder layer, split by where they sit."""

    attention: int  # projections, their biases, MLA's latent norms, Qwen3's q/k norms, sinks
    norms: int  # the layer's two RMSNorms
    ffn_dense: int  # a dense SwiGLU FFN (0 in MoE layers)
    router: int  # MoE gate weights and bias (0 in dense layers)
    shared_experts: int
    routed_experts: int  # all routed experts
    one_expert: int  # one routed expert (its biases included)

    @property
    def total(self) -> int:
        return (
            self.attention
            + self.norms
            + self.ffn_dense
            + self.router
            + self.shared_experts
            + self.routed_experts
        )


def swiglu_params(hidden: int, intermediate: int) -> int:
    """Gate, up and down projections of a SwiGLU FFN."""
    return 3 * hidden * intermediate


def attention_matmul_params(arch: Architecture) -> int:
    """Attention weights that take part in matrix products (biases and norms excluded)."""
    h = arch.hidden_size
    if not isinstance(arch, DeepSeekArchitecture):
        return h * arch.heads * arch.head_dim * 2 + 2 * h * arch.kv_heads * arch.head_dim
    qk_head = arch.qk_nope_head_dim + arch.qk_rope_head_dim
    q_a = h * arch.q_lora_rank
    q_b = arch.q_lora_rank * arch.heads * qk_head
    kv_a = h * (arch.kv_lora_rank + arch.qk_rope_head_dim)
    kv_b = arch.kv_lora_rank * arch.heads * (arch.qk_nope_head_dim + arch.v_head_dim)
    o = arch.heads * arch.v_head_dim * h
    return q_a + q_b + kv_a + kv_b + o


def attention_params(arch: Architecture) -> int:
    """Attention weights of one layer: the products' weights plus their biases and norms
    (MLA: q_a and kv_a layernorms; GQA: q/k/v and o biases, Qwen3's per-head q and k norms,
    gpt-oss's sink logit per head)."""
    extra = 0
    if isinstance(arch, DeepSeekArchitecture):
        extra = arch.q_lora_rank + arch.kv_lora_rank
    else:
        if arch.qkv_bias:
            extra += (arch.heads + 2 * arch.kv_heads) * arch.head_dim
        if arch.o_bias:
            extra += arch.hidden_size
        if arch.qk_norm:
            extra += 2 * arch.head_dim
        if arch.attention_sinks:
            extra += arch.heads
    return attention_matmul_params(arch) + extra


def expert_bias_params(arch: Architecture) -> int:
    """Biases of one routed expert: gate/up (2 x its width) and down (hidden), or 0."""
    if isinstance(arch, LlamaArchitecture) or not arch.expert_bias:
        return 0
    return 2 * arch.moe_intermediate + arch.hidden_size


def router_params(arch: Architecture) -> int:
    """The MoE gate: a weight per expert and hidden unit, plus a bias per expert if any."""
    if isinstance(arch, LlamaArchitecture):
        return 0
    return arch.routed_experts * (arch.hidden_size + (1 if arch.router_bias else 0))


def _kind_params(arch: Architecture, kind: LayerKind) -> LayerParams:
    h = arch.hidden_size
    attention, norms = attention_params(arch), 2 * h
    if kind.ffn == "dense":
        assert arch.ffn_intermediate is not None  # the architecture checks dense layers have it
        return LayerParams(attention, norms, swiglu_params(h, arch.ffn_intermediate), 0, 0, 0, 0)
    assert not isinstance(arch, LlamaArchitecture)
    expert = swiglu_params(h, arch.moe_intermediate)
    one = expert + expert_bias_params(arch)
    return LayerParams(
        attention,
        norms,
        0,
        router_params(arch),
        arch.shared_experts * expert,
        arch.routed_experts * one,
        one,
    )


def layer_params(arch: Architecture, layer: int) -> LayerParams:
    """Parameters of decoder layer `layer` (0-based)."""
    return _kind_params(arch, layer_kinds(arch)[layer])


def _by_kind(arch: Architecture) -> Counter[LayerKind]:
    """How many layers of each kind (the figures are sums over kinds)."""
    return Counter(layer_kinds(arch))


def embedding_params(arch: Architecture) -> int:
    """Token embedding table."""
    return arch.vocab_size * arch.hidden_size


def lm_head_params(arch: Architecture) -> int:
    """Output projection (0 extra when tied to the embedding)."""
    return 0 if arch.tie_embeddings else arch.vocab_size * arch.hidden_size


def mtp_projection_matmul_params(arch: Architecture) -> int:
    """A multi-token-prediction module's input projection, 2 x hidden -> hidden (eh_proj;
    0 for any other model)."""
    if not isinstance(arch, DeepSeekArchitecture) or not arch.mtp_projection:
        return 0
    return 2 * arch.hidden_size * arch.hidden_size


def mtp_projection_params(arch: Architecture) -> int:
    """The MTP module's input: eh_proj and its two RMSNorms (enorm, hnorm); 0 otherwise."""
    matmul = mtp_projection_matmul_params(arch)
    return matmul + 2 * arch.hidden_size if matmul else 0


def _outside_layers(arch: Architecture) -> int:
    """Embedding, LM head, the final norm, and an MTP module's input projection."""
    return (
        embedding_params(arch)
        + lm_head_params(arch)
        + arch.hidden_size
        + mtp_projection_params(arch)
    )


def params_total(arch: Architecture) -> int:
    """Every parameter (a DeepSeek model's own MTP module left out: the preset
    deepseek-r1-mtp is that module as a model of its own)."""
    layers = sum(n * _kind_params(arch, k).total for k, n in _by_kind(arch).items())
    return layers + _outside_layers(arch)


def _active_layer(arch: Architecture, kind: LayerKind) -> int:
    p = _kind_params(arch, kind)
    routed = 0
    if p.routed_experts and not isinstance(arch, LlamaArchitecture):
        routed = arch.experts_per_token * p.one_expert
    return p.attention + p.norms + p.ffn_dense + p.router + p.shared_experts + routed


def params_active(arch: Architecture) -> int:
    """Parameters one token touches (embedding row counted as the whole table, as is usual)."""
    layers = sum(n * _active_layer(arch, k) for k, n in _by_kind(arch).items())
    return layers + _outside_layers(arch)


def params_active_without_embedding(arch: Architecture) -> int:
    """`params_active` without the embedding table: a token gathers one row of it. Model
    cards differ on whether they count it (Qwen's and Mistral's do, gpt-oss's does not);
    a tied table stays, as the LM head."""
    return params_active(arch) - (0 if arch.tie_embeddings else embedding_params(arch))


def routed_expert_matmul_params(arch: Architecture) -> int:
    """Weights of every routed expert's products (biases excluded), all layers: the part a
    model may store in its own expert dtype (gpt-oss: MXFP4)."""
    if isinstance(arch, LlamaArchitecture):
        return 0
    expert = swiglu_params(arch.hidden_size, arch.moe_intermediate)
    return arch.moe_layers * arch.routed_experts * expert


def kv_values_per_token_per_layer(arch: Architecture) -> int:
    """Cached values per token per layer: K and V heads (GQA) or MLA's latent + RoPE key."""
    if isinstance(arch, DeepSeekArchitecture):
        return arch.kv_lora_rank + arch.qk_rope_head_dim
    return 2 * arch.kv_heads * arch.head_dim


def kv_bytes_per_token(arch: Architecture, dtype_bytes: float) -> int:
    """KV-cache bytes one token occupies across all layers, while it is inside every
    sliding window (before any TP layout choice)."""
    return round(arch.layers * kv_values_per_token_per_layer(arch) * dtype_bytes)


def kv_bytes_per_token_past_windows(arch: Architecture, dtype_bytes: float) -> int:
    """KV-cache bytes each further token adds once a sequence is longer than every sliding
    window: the full-attention layers' alone, a sliding layer's ring staying W - 1 tokens
    (`layers.window_tokens`); `kv_bytes_per_token` for a model without windows."""
    full = sum(1 for kind in layer_kinds(arch) if kind.window is None)
    return round(full * kv_values_per_token_per_layer(arch) * dtype_bytes)


def kv_bytes(arch: Architecture, tokens: int, dtype_bytes: float) -> int:
    """KV-cache bytes of one sequence of `tokens` tokens, all layers: a sliding-window layer
    holds only its ring (`layers.window_tokens`)."""
    held = sum(window_tokens(tokens, kind.window) for kind in layer_kinds(arch))
    return round(held * kv_values_per_token_per_layer(arch) * dtype_bytes)


def weight_bytes(
    arch: Architecture, dtype_bytes: float, expert_dtype_bytes: float | None = None
) -> int:
    """Bytes of all weights: the routed experts' products at `expert_dtype_bytes` (default:
    the same as the rest), everything else (their biases included) at `dtype_bytes`."""
    experts = routed_expert_matmul_params(arch)
    rest = params_total(arch) - experts
    per_expert = dtype_bytes if expert_dtype_bytes is None else expert_dtype_bytes
    return round(rest * dtype_bytes + experts * per_expert)


def matmul_params_active(arch: Architecture) -> int:
    """Weights one decode token multiplies by (norms, biases and the embedding gather excluded)."""
    total = lm_head_params(arch) if not arch.tie_embeddings else embedding_params(arch)
    total += mtp_projection_matmul_params(arch)
    attention = attention_matmul_params(arch)
    for kind, n in _by_kind(arch).items():
        p = _kind_params(arch, kind)
        total += n * (attention + p.ffn_dense + p.shared_experts)
        if p.routed_experts and not isinstance(arch, LlamaArchitecture):
            expert = swiglu_params(arch.hidden_size, arch.moe_intermediate)
            total += n * (arch.routed_experts * arch.hidden_size + arch.experts_per_token * expert)
    return total


def attention_flops_per_token(arch: Architecture, context: int, absorbed: bool = True) -> int:
    """Score and value products of one token against `context` tokens, all layers (a
    sliding-window layer attends to at most its window).

    MLA in decode runs "absorbed": scores over the latent (kv_lora_rank + rope dims) and
    values over the latent; the up-projections become per-head matrices already counted in
    the attention weights. Non-absorbed MLA attends with 192-dim keys and 128-dim values.
    """
    if isinstance(arch, DeepSeekArchitecture):
        if absorbed:
            score_dim = arch.kv_lora_rank + arch.qk_rope_head_dim
            per_key = 2 * arch.heads * (score_dim + arch.kv_lora_rank)
        else:
            score_dim = arch.qk_nope_head_dim + arch.qk_rope_head_dim
            per_key = 2 * arch.heads * (score_dim + arch.v_head_dim)
        return arch.layers * per_key * context
    per_key = 2 * arch.heads * arch.head_dim * 2
    keys = sum(
        n * (context if kind.window is None else min(context, kind.window))
        for kind, n in _by_kind(arch).items()
    )
    return per_key * keys


def decode_flops_per_token(arch: Architecture, context: int) -> int:
    """Matrix-product FLOPs to decode one token attending to `context` tokens."""
    return 2 * matmul_params_active(arch) + attention_flops_per_token(arch, context)


@dataclass(frozen=True)
class ModelFigures:
    """What `rdu-sim inspect model` prints."""

    name: str
    family: str
    layers: int
    moe_layers: int
    sliding_window_layers: int
    params_total: int
    params_active: int
    params_active_without_embedding: int
    kv_bytes_per_token: int  # while the token is inside every sliding window
    kv_bytes_per_token_past_windows: int  # a further token's once past every window
    longest_window: int | None  # the widest sliding window, in tokens (None: no window)
    kv_bytes_per_sequence: int  # one max_context sequence, sliding windows applied
    max_context: int
    weight_bytes: int
    decode_flops_per_token: int  # decoding one token after ``context`` cached tokens
    context: int  # cached tokens: the decoded token attends to them and itself
    attended_tokens: int  # context + 1, as a decode step on ``context`` cached tokens
    kv_dtype: str
    weight_dtype: str
    expert_dtype: str | None


def model_figures(
    arch: Architecture,
    *,
    kv_dtype: str,
    kv_dtype_bytes: float,
    weight_dtype: str,
    weight_dtype_bytes: float,
    context: int,
    expert_dtype: str | None = None,
    expert_dtype_bytes: float | None = None,
) -> ModelFigures:
    """All derived figures of an architecture at the given precisions and context: the
    ``context`` cached tokens a decoded token follows, which it attends to with itself, as
    ``rdu_sim.shapes``' decode step on that cache does (one convention: ``inspect model
    --context C``'s FLOPs are ``rdu-sim step``'s on C cached tokens, a token)."""
    kinds = layer_kinds(arch)
    return ModelFigures(
        name=arch.name,
        family=arch.family,
        layers=arch.layers,
        moe_layers=sum(k.ffn == "moe" for k in kinds),
        sliding_window_layers=sum(k.window is not None for k in kinds),
        params_total=params_total(arch),
        params_active=params_active(arch),
        params_active_without_embedding=params_active_without_embedding(arch),
        kv_bytes_per_token=kv_bytes_per_token(arch, kv_dtype_bytes),
        kv_bytes_per_token_past_windows=kv_bytes_per_token_past_windows(arch, kv_dtype_bytes),
        longest_window=max((k.window for k in kinds if k.window is not None), default=None),
        kv_bytes_per_sequence=kv_bytes(arch, arch.max_context, kv_dtype_bytes),
        max_context=arch.max_context,
        weight_bytes=weight_bytes(arch, weight_dtype_bytes, expert_dtype_bytes),
        decode_flops_per_token=decode_flops_per_token(arch, context + 1),
        context=context,
        attended_tokens=context + 1,
        kv_dtype=kv_dtype,
        weight_dtype=weight_dtype,
        expert_dtype=expert_dtype,
    )
