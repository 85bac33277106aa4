"""Derived figures of an architecture: parameter counts, KV bytes per token, decode FLOPs.

These are the hand-countable numbers the graph builders must sum to exactly (tests check it).
Conventions:
- parameters count every weight, norms included; `params_active` counts what one token
  touches: all attention and dense weights, the router, the shared experts and
  `experts_per_token` routed experts, plus the embedding and LM head;
- FLOPs count matrix products only (2 per multiply-add), as is usual; elementwise work
  (norms, softmax, activations) is tracked by the graph separately as vector FLOPs;
- the embedding lookup is a gather (no FLOPs); the LM head is a GEMM.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdu_sim.config.architecture import DeepSeekArchitecture, LlamaArchitecture

Architecture = LlamaArchitecture | DeepSeekArchitecture


@dataclass(frozen=True)
class LayerParams:
    """Parameter counts of one decoder layer, split by where they sit."""

    attention: int  # projections (and MLA's latent norms)
    norms: int  # the layer's two RMSNorms
    ffn_dense: int  # a dense SwiGLU FFN (0 in MoE layers)
    router: int  # MoE gate weights and bias (0 in dense layers)
    shared_experts: int
    routed_experts: int  # all routed experts
    one_expert: int  # one routed expert

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


def attention_params(arch: Architecture) -> int:
    """Attention weights of one layer (bias-free)."""
    h = arch.hidden_size
    if isinstance(arch, LlamaArchitecture):
        q = h * arch.heads * arch.head_dim
        kv = 2 * h * arch.kv_heads * arch.head_dim
        o = arch.heads * arch.head_dim * h
        return q + kv + o
    qk_head = arch.qk_nope_head_dim + arch.qk_rope_head_dim
    q_a = h * arch.q_lora_rank + arch.q_lora_rank  # projection + q_a_layernorm
    q_b = arch.q_lora_rank * arch.heads * qk_head
    kv_a = h * (arch.kv_lora_rank + arch.qk_rope_head_dim) + arch.kv_lora_rank  # + norm
    kv_b = arch.kv_lora_rank * arch.heads * (arch.qk_nope_head_dim + arch.v_head_dim)
    o = arch.heads * arch.v_head_dim * h
    return q_a + q_b + kv_a + kv_b + o


def attention_matmul_params(arch: Architecture) -> int:
    """Attention weights that take part in matrix products (norm weights excluded)."""
    if isinstance(arch, LlamaArchitecture):
        return attention_params(arch)
    return attention_params(arch) - arch.q_lora_rank - arch.kv_lora_rank


def layer_params(arch: Architecture, layer: int) -> LayerParams:
    """Parameters of decoder layer `layer` (0-based)."""
    h = arch.hidden_size
    attn = attention_params(arch)
    norms = 2 * h
    if isinstance(arch, LlamaArchitecture) or layer < arch.dense_layers:
        return LayerParams(attn, norms, swiglu_params(h, arch.ffn_intermediate), 0, 0, 0, 0)
    expert = swiglu_params(h, arch.moe_intermediate)
    router = arch.routed_experts * h + arch.routed_experts  # gate weight + correction bias
    return LayerParams(
        attn, norms, 0, router, arch.shared_experts * expert, arch.routed_experts * expert, expert
    )


def embedding_params(arch: Architecture) -> int:
    """Token embedding table."""
    return arch.vocab_size * arch.hidden_size


def lm_head_params(arch: Architecture) -> int:
    """Output projection (0 extra when tied to the embedding)."""
    return 0 if arch.tie_embeddings else arch.vocab_size * arch.hidden_size


def params_total(arch: Architecture) -> int:
    """Every parameter (without DeepSeek's MTP module)."""
    layers = sum(layer_params(arch, i).total for i in range(arch.layers))
    return layers + embedding_params(arch) + lm_head_params(arch) + arch.hidden_size


def _active_layer(arch: Architecture, layer: int) -> int:
    p = layer_params(arch, layer)
    routed = arch.experts_per_token * p.one_expert if isinstance(arch, DeepSeekArchitecture) else 0
    return (
        p.attention
        + p.norms
        + p.ffn_dense
        + p.router
        + p.shared_experts
        + (routed if p.routed_experts else 0)
    )


def params_active(arch: Architecture) -> int:
    """Parameters one token touches (embedding row counted as the whole table, as is usual)."""
    layers = sum(_active_layer(arch, i) for i in range(arch.layers))
    return layers + embedding_params(arch) + lm_head_params(arch) + arch.hidden_size


def kv_values_per_token_per_layer(arch: Architecture) -> int:
    """Cached values per token per layer: K and V heads (GQA) or MLA's latent + RoPE key."""
    if isinstance(arch, LlamaArchitecture):
        return 2 * arch.kv_heads * arch.head_dim
    return arch.kv_lora_rank + arch.qk_rope_head_dim


def kv_bytes_per_token(arch: Architecture, dtype_bytes: float) -> int:
    """KV-cache bytes one token occupies across all layers (before any TP layout choice)."""
    return round(arch.layers * kv_values_per_token_per_layer(arch) * dtype_bytes)


def weight_bytes(arch: Architecture, dtype_bytes: float) -> int:
    """Bytes of all weights at one storage precision."""
    return round(params_total(arch) * dtype_bytes)


def matmul_params_active(arch: Architecture) -> int:
    """Weights one decode token multiplies by (norms, biases and the embedding gather excluded)."""
    total = lm_head_params(arch) if not arch.tie_embeddings else embedding_params(arch)
    for i in range(arch.layers):
        p = layer_params(arch, i)
        total += attention_matmul_params(arch) + p.ffn_dense + p.shared_experts
        if p.routed_experts and isinstance(arch, DeepSeekArchitecture):
            total += arch.routed_experts * arch.hidden_size  # router GEMM
            total += arch.experts_per_token * p.one_expert
    return total


def attention_flops_per_token(arch: Architecture, context: int, absorbed: bool = True) -> int:
    """Score and value products of one token against `context` cached tokens, all layers.

    MLA in decode runs "absorbed": scores over the latent (kv_lora_rank + rope dims) and
    values over the latent; the up-projections become per-head matrices already counted in
    the attention weights. Non-absorbed MLA attends with 192-dim keys and 128-dim values.
    """
    if isinstance(arch, LlamaArchitecture):
        per_layer = 2 * arch.heads * arch.head_dim * context * 2
    elif absorbed:
        score_dim = arch.kv_lora_rank + arch.qk_rope_head_dim
        per_layer = 2 * arch.heads * context * (score_dim + arch.kv_lora_rank)
    else:
        score_dim = arch.qk_nope_head_dim + arch.qk_rope_head_dim
        per_layer = 2 * arch.heads * context * (score_dim + arch.v_head_dim)
    return arch.layers * per_layer


def decode_flops_per_token(arch: Architecture, context: int) -> int:
    """Matrix-product FLOPs to decode one token attending to `context` cached tokens."""
    return 2 * matmul_params_active(arch) + attention_flops_per_token(arch, context)


@dataclass(frozen=True)
class ModelFigures:
    """What `rdu-sim inspect model` prints."""

    name: str
    family: str
    layers: int
    params_total: int
    params_active: int
    kv_bytes_per_token: int
    weight_bytes: int
    decode_flops_per_token: int
    context: int
    kv_dtype: str
    weight_dtype: str


def model_figures(
    arch: Architecture,
    *,
    kv_dtype: str,
    kv_dtype_bytes: float,
    weight_dtype: str,
    weight_dtype_bytes: float,
    context: int,
) -> ModelFigures:
    """All derived figures of an architecture at the given precisions and context."""
    return ModelFigures(
        name=arch.name,
        family=arch.family,
        layers=arch.layers,
        params_total=params_total(arch),
        params_active=params_active(arch),
        kv_bytes_per_token=kv_bytes_per_token(arch, kv_dtype_bytes),
        weight_bytes=weight_bytes(arch, weight_dtype_bytes),
        decode_flops_per_token=decode_flops_per_token(arch, context),
        context=context,
        kv_dtype=kv_dtype,
        weight_dtype=weight_dtype,
    )
