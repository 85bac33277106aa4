"""Typed model architectures: the shape of a decoder-only transformer, as its config.json says.

Presets live in rdu_sim.models; a workload may also write an architecture inline, or point
at a Hugging Face config.json (`model: {config_json: path}`, read by
`rdu_sim.models.hf_config`). Three families:

- `llama`: GQA attention and a dense SwiGLU FFN in every layer (Llama 3.x, Qwen2.5/3,
  Mistral);
- `gqa_moe`: GQA attention and a mixture of experts (Mixtral, Qwen3-MoE, gpt-oss), the
  first `dense_layers` (and any `mlp_only_layers`) with a dense FFN;
- `deepseek`: MLA attention; dense FFN first, then MoE layers with shared and routed
  experts (DeepSeek-V3/R1, Kimi K2).

GQA layers may differ per layer in their attention window (`layer_types`: full or sliding
attention, as gpt-oss alternates them; every layer sliding when only `sliding_window` is
given, as Mistral 7B v0.1). The per-layer view is `rdu_sim.models.layers.layer_kinds`.
"""

from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from rdu_sim.config.base import StrictModel, as_tuple
from rdu_sim.config.dtypes import WeightDtype


def _dim(description: str) -> Any:
    """A model dimension (1 to a million) and what it is."""
    return Field(ge=1, le=1_000_000, description=description)


AttentionType = Literal["full_attention", "sliding_attention"]
"""Hugging Face's `layer_types` values the simulator models."""


MAX_LAYERS = 10_000
"""The most decoder layers a model may have (its per-layer tables are built for each)."""
MAX_NAME_CHARS = 200
"""The longest model name a report shows."""


class _Decoder(StrictModel):
    """What every family has: sizes of the residual stream, the vocabulary and the stack."""

    name: str = Field(
        min_length=1, max_length=MAX_NAME_CHARS, description="the model's name in reports"
    )
    vocab_size: int = _dim("tokens in the vocabulary (rows of the embedding and LM head)")
    hidden_size: int = _dim("width of the residual stream")
    layers: int = Field(ge=1, le=MAX_LAYERS, description="decoder layers")
    max_context: int = Field(
        ge=1, le=100_000_000, description="longest context the model supports, in tokens"
    )
    tie_embeddings: bool = Field(
        default=False, description="the LM head reuses the embedding table's weights"
    )
    weight_dtype: WeightDtype | None = Field(
        default=None,
        description="the released weights' dtype (config.json torch_dtype / "
        "quantization_config); the default of a workload's dtypes.weights",
    )
    expert_dtype: WeightDtype | None = Field(
        default=None,
        description="the released routed experts' dtype when it differs (gpt-oss: mxfp4)",
    )


class _Gqa(StrictModel):
    """Grouped-query attention, with the per-model details that change parameter counts."""

    heads: int = _dim("query heads per layer")
    kv_heads: int = _dim("key/value heads per layer (heads is a multiple of it)")
    head_dim: int = _dim("width of one attention head")
    qkv_bias: bool = Field(default=False, description="q/k/v projections have biases (Qwen2.5)")
    o_bias: bool = Field(default=False, description="o_proj has a bias (gpt-oss)")
    qk_norm: bool = Field(default=False, description="RMSNorm of each head's query and key (Qwen3)")
    attention_sinks: bool = Field(
        default=False, description="a learned sink logit per head in the softmax (gpt-oss)"
    )
    sliding_window: int | None = Field(
        default=None, ge=2, le=100_000_000, description="tokens a sliding-window layer sees"
    )
    layer_types: Annotated[tuple[AttentionType, ...] | None, BeforeValidator(as_tuple)] = Field(
        default=None,
        description="attention of each layer; default: every layer sliding when "
        "sliding_window is given, else every layer full",
    )

    @model_validator(mode="after")
    def _attention(self) -> Self:
        if self.heads % self.kv_heads:
            raise ValueError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        layers: int = getattr(self, "layers", 0)
        if self.layer_types is not None:
            if len(self.layer_types) != layers:
                raise ValueError(
                    f"layer_types has {len(self.layer_types)} entries for {layers} layers"
                )
            if "sliding_attention" in self.layer_types and self.sliding_window is None:
                raise ValueError("layer_types has sliding_attention layers but no sliding_window")
        return self

    def attention_windows(self) -> tuple[int | None, ...]:
        """Each layer's attention window in tokens (None: full attention)."""
        layers: int = getattr(self, "layers", 0)
        types = self.layer_types or (
            ("sliding_attention" if self.sliding_window else "full_attention",) * layers
        )
        return tuple(self.sliding_window if t == "sliding_attention" else None for t in types)


class _Moe(StrictModel):
    """Routed (and shared) experts, and which layers have them."""

    dense_layers: int = Field(
        default=0, ge=0, le=MAX_LAYERS, description="the first layers, with a dense FFN"
    )
    moe_intermediate: int = Field(ge=1, le=1_000_000, description="one expert's FFN width")
    routed_experts: int = Field(ge=1, le=100_000, description="routed experts per MoE layer")
    experts_per_token: int = Field(
        ge=1, le=100_000, description="routed experts the router picks for each token"
    )
    shared_experts: int = Field(
        default=0, ge=0, le=1000, description="experts every token goes through as well"
    )
    router_bias: bool = Field(
        default=False,
        description="the router adds a bias per expert (gpt-oss; DeepSeek's correction bias)",
    )
    expert_bias: bool = Field(default=False, description="expert projections have biases (gpt-oss)")

    @model_validator(mode="after")
    def _experts(self) -> Self:
        layers: int = getattr(self, "layers", 0)
        if self.dense_layers > layers:
            raise ValueError(f"dense_layers ({self.dense_layers}) exceeds layers ({layers})")
        if self.experts_per_token > self.routed_experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) exceeds "
                f"routed_experts ({self.routed_experts})"
            )
        return self

    def moe_layer_flags(self) -> tuple[bool, ...]:
        """Whether each layer's FFN is a mixture of experts."""
        layers: int = getattr(self, "layers", 0)
        return tuple(i >= self.dense_layers for i in range(layers))

    @property
    def moe_layers(self) -> int:
        """Layers with a mixture-of-experts FFN."""
        return sum(self.moe_layer_flags())


class LlamaArchitecture(_Decoder, _Gqa):
    """Llama-style decoder: GQA attention and a dense SwiGLU FFN in every layer."""

    family: Literal["llama"] = Field(default="llama", description="the architecture family")
    ffn_intermediate: int = _dim("FFN width (SwiGLU gate and up projections)")


class GqaMoeArchitecture(_Decoder, _Gqa, _Moe):
    """GQA attention and a mixture of experts (Mixtral, Qwen3-MoE, gpt-oss)."""

    family: Literal["gqa_moe"] = Field(default="gqa_moe", description="the architecture family")
    ffn_intermediate: int | None = Field(
        default=None, ge=1, le=1_000_000, description="dense-layer FFN width (dense layers only)"
    )
    mlp_only_layers: Annotated[tuple[int, ...], BeforeValidator(as_tuple)] = Field(
        default=(), description="further layers (0-based) with a dense FFN (Qwen3-MoE)"
    )

    @model_validator(mode="after")
    def _dense(self) -> Self:
        bad = [i for i in self.mlp_only_layers if not 0 <= i < self.layers]
        if bad:
            raise ValueError(f"mlp_only_layers {bad} are not layers of 0..{self.layers - 1}")
        if not all(self.moe_layer_flags()) and self.ffn_intermediate is None:
            raise ValueError("dense layers need ffn_intermediate")
        return self

    def moe_layer_flags(self) -> tuple[bool, ...]:
        """MoE from `dense_layers` on, except the `mlp_only_layers`."""
        dense = set(self.mlp_only_layers)
        return tuple(i >= self.dense_layers and i not in dense for i in range(self.layers))


class DeepSeekArchitecture(_Decoder, _Moe):
    """DeepSeek-V3/R1-style decoder: MLA attention; dense FFN first, then MoE layers."""

    family: Literal["deepseek"] = Field(default="deepseek", description="the architecture family")
    dense_layers: int = Field(ge=0, le=MAX_LAYERS, description="the first layers, with a dense FFN")
    heads: int = _dim("attention heads per layer")
    q_lora_rank: int = _dim("rank of MLA's low-rank query projection")
    kv_lora_rank: int = _dim("rank of MLA's compressed key/value latent (what the cache holds)")
    qk_nope_head_dim: int = _dim("per-head query/key width without rotary embedding")
    qk_rope_head_dim: int = _dim("per-head query/key width with rotary embedding (cached)")
    v_head_dim: int = _dim("per-head value width")
    ffn_intermediate: int = Field(ge=1, le=1_000_000, description="dense-layer FFN width")
    shared_experts: int = Field(ge=0, le=1000, description="experts every token goes through")
    router_bias: bool = Field(
        default=True, description="the router's score-correction bias per expert"
    )
    expert_groups: int = Field(
        default=1, ge=1, le=100_000, description="groups the routed experts are split into"
    )
    groups_per_token: int = Field(
        default=1, ge=1, le=100_000, description="groups a token's experts are chosen from"
    )
    mtp_projection: bool = Field(
        default=False,
        description="the model is a multi-token-prediction module: its input is the RMSNorms "
        "of the token's embedding and of the previous position's hidden state, concatenated "
        "and projected 2 x hidden_size -> hidden_size (DeepSeek-V3's enorm, hnorm, eh_proj)",
    )

    @model_validator(mode="after")
    def _groups(self) -> Self:
        if self.routed_experts % self.expert_groups:
            raise ValueError(
                f"routed_experts ({self.routed_experts}) must be a multiple of "
                f"expert_groups ({self.expert_groups})"
            )
        if self.groups_per_token > self.expert_groups:
            raise ValueError(
                f"groups_per_token ({self.groups_per_token}) exceeds "
                f"expert_groups ({self.expert_groups})"
            )
        return self


ModelArchitecture = Annotated[
    LlamaArchitecture | GqaMoeArchitecture | DeepSeekArchitecture,
    Field(discriminator="family"),
]


class ConfigJsonModel(StrictModel):
    """`model: {config_json: path}`: the architecture read from a Hugging Face config.json."""

    config_json: str = Field(
        min_length=1,
        description="a local config.json (or its folder), relative to the workload file, or a "
        "shipped one by its folder's name (`rdu-sim examples` lists them)",
    )
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAME_CHARS,
        description="default: the file's folder",
    )


class ConfigJsonKeys(BaseModel):
    """A config.json's own keys written inline as a workload's model (`model_type` marks
    them); mapped by `rdu_sim.models.hf_config`, which checks every key it reads."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True, defer_build=True)

    model_type: str = Field(description="Hugging Face model_type (mixtral, qwen3_moe, ...)")
    name: str | None = Field(
        default=None, min_length=1, max_length=MAX_NAME_CHARS, description="default: model_type"
    )
