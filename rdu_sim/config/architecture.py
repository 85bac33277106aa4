"""Typed model architectures: the shape of a decoder-only transformer, as its config.json says.

Presets live in rdu_sim.models; a workload may also write a custom architecture inline.
Two families: `llama` (GQA attention, dense SwiGLU FFN) and `deepseek` (MLA attention,
first layers dense, the rest MoE with shared and routed experts).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rdu_sim.config.base import StrictModel

_DIM = Field(ge=1, le=1_000_000)


class LlamaArchitecture(StrictModel):
    """Llama-style decoder: GQA attention and a dense SwiGLU FFN in every layer."""

    family: Literal["llama"] = "llama"
    name: str = Field(min_length=1, max_length=200)
    vocab_size: int = _DIM
    hidden_size: int = _DIM
    layers: int = Field(ge=1, le=10_000)
    heads: int = _DIM
    kv_heads: int = _DIM
    head_dim: int = _DIM
    ffn_intermediate: int = _DIM
    max_context: int = Field(ge=1, le=100_000_000)
    tie_embeddings: bool = False

    @model_validator(mode="after")
    def _gqa_groups(self) -> LlamaArchitecture:
        if self.heads % self.kv_heads:
            raise ValueError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        return self


class DeepSeekArchitecture(StrictModel):
    """DeepSeek-V3/R1-style decoder: MLA attention; dense FFN first, then MoE layers."""

    family: Literal["deepseek"] = "deepseek"
    name: str = Field(min_length=1, max_length=200)
    vocab_size: int = _DIM
    hidden_size: int = _DIM
    layers: int = Field(ge=1, le=10_000)
    dense_layers: int = Field(ge=0, le=10_000, description="the first layers, with a dense FFN")
    heads: int = _DIM
    q_lora_rank: int = _DIM
    kv_lora_rank: int = _DIM
    qk_nope_head_dim: int = _DIM
    qk_rope_head_dim: int = _DIM
    v_head_dim: int = _DIM
    ffn_intermediate: int = Field(ge=1, le=1_000_000, description="dense-layer FFN width")
    moe_intermediate: int = Field(ge=1, le=1_000_000, description="one expert's FFN width")
    routed_experts: int = Field(ge=1, le=100_000)
    experts_per_token: int = Field(ge=1, le=100_000)
    shared_experts: int = Field(ge=0, le=1000)
    expert_groups: int = Field(default=1, ge=1, le=100_000)
    groups_per_token: int = Field(default=1, ge=1, le=100_000)
    max_context: int = Field(ge=1, le=100_000_000)
    tie_embeddings: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> DeepSeekArchitecture:
        if self.dense_layers > self.layers:
            raise ValueError(f"dense_layers ({self.dense_layers}) exceeds layers ({self.layers})")
        if self.experts_per_token > self.routed_experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) exceeds "
                f"routed_experts ({self.routed_experts})"
            )
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

    @property
    def moe_layers(self) -> int:
        """Layers with a mixture-of-experts FFN."""
        return self.layers - self.dense_layers


ModelArchitecture = Annotated[
    LlamaArchitecture | DeepSeekArchitecture, Field(discriminator="family")
]
