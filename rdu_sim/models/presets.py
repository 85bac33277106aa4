"""Architecture presets of real models, figures from their public config files.

Sources: ../shared/reference/models.md (DeepSeek-V3 config_671B.json; Llama 3.1 config.json);
for the others each model's config.json on Hugging Face (the repository is named in the
preset's docstring). tests/models/ holds project-written config.json files with the same
fields, and tests check that each maps to its preset and that the parameter counts match
the model cards. Presets register by decorator; a duplicate name is refused, an unknown one
lists the valid.
"""

from __future__ import annotations

from collections.abc import Callable

from rdu_sim.config.architecture import (
    DeepSeekArchitecture,
    GqaMoeArchitecture,
    LlamaArchitecture,
)
from rdu_sim.input_errors import InputError
from rdu_sim.models.layers import Architecture

_PRESETS: dict[str, Callable[[], Architecture]] = {}


class UnknownModelError(KeyError, InputError):
    """A model name that is not a preset."""

    def __str__(self) -> str:
        return str(self.args[0])


def preset(*names: str) -> Callable[[Callable[[], Architecture]], Callable[[], Architecture]]:
    """Register a preset factory under one or more names (case-insensitive)."""

    def register(factory: Callable[[], Architecture]) -> Callable[[], Architecture]:
        for name in names:
            key = name.lower()
            if key in _PRESETS:
                raise ValueError(f"model preset {name!r} is already registered")
            _PRESETS[key] = factory
        return factory

    return register


def preset_names() -> list[str]:
    """All registered preset names, sorted."""
    return sorted(_PRESETS)


def model_words(asked: object, name: str) -> str:
    """The model a report names: ``name`` (the architecture's), or the preset the workload
    asked for beside it when that is another model's alias of the same architecture
    ("deepseek-v3 (same architecture as deepseek-r1)"; a spelling of the same name, as
    llama3.1-8b for llama-3.1-8b, is not)."""
    if not isinstance(asked, str) or _PRESETS.get(asked.lower()) is None:
        return name
    if _squashed(asked) == _squashed(name):
        return name
    return f"{asked} (same architecture as {name})"


def _squashed(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


def get_model(name: str) -> Architecture:
    """The preset architecture named `name`; UnknownModelError lists the valid names."""
    factory = _PRESETS.get(name.lower())
    if factory is None:
        raise UnknownModelError(
            f"unknown model {name!r}; valid presets: {', '.join(preset_names())}"
        )
    return factory()


@preset("deepseek-r1", "deepseek-r1-0528", "deepseek-v3")
def deepseek_r1() -> Architecture:
    """DeepSeek-R1 (671B, 37B active): MLA, 61 layers of which 3 dense, 256 routed experts."""
    return DeepSeekArchitecture(
        name="deepseek-r1",
        vocab_size=129280,
        hidden_size=7168,
        layers=61,
        dense_layers=3,
        heads=128,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        ffn_intermediate=18432,
        moe_intermediate=2048,
        routed_experts=256,
        experts_per_token=8,
        shared_experts=1,
        expert_groups=8,
        groups_per_token=4,
        max_context=163840,
        weight_dtype="fp8_block",  # released in FP8 with 128x128 block scales
    )


@preset("deepseek-r1-mtp", "deepseek-v3-mtp")
def deepseek_r1_mtp() -> Architecture:
    """DeepSeek-R1's multi-token-prediction module as a model (DeepSeek-V3 technical report,
    section 2.2; layer 61 of the released checkpoint, num_nextn_predict_layers 1): the
    RMSNorms of the next token's embedding and of the main model's hidden state (enorm,
    hnorm), their concatenation projected 2 x 7168 -> 7168 (eh_proj, 102,760,448
    parameters), one MoE decoder block of R1's shape, and R1's embedding table and LM head,
    which a draft reads from the target (``speculation.shares_embeddings``)."""
    return deepseek_r1().model_copy(
        update={"name": "deepseek-r1-mtp", "layers": 1, "dense_layers": 0, "mtp_projection": True}
    )


def _llama31(name: str, layers: int, hidden: int, heads: int, ffn: int) -> Architecture:
    return LlamaArchitecture(
        name=name,
        vocab_size=128256,
        hidden_size=hidden,
        layers=layers,
        heads=heads,
        kv_heads=8,
        head_dim=128,
        ffn_intermediate=ffn,
        max_context=131072,
    )


@preset("llama-3.1-8b", "llama3.1-8b")
def llama31_8b() -> Architecture:
    """Llama 3.1 8B."""
    return _llama31("llama-3.1-8b", 32, 4096, 32, 14336)


@preset("llama-3.1-70b", "llama3.1-70b")
def llama31_70b() -> Architecture:
    """Llama 3.1 70B."""
    return _llama31("llama-3.1-70b", 80, 8192, 64, 28672)


@preset("llama-3.1-405b", "llama3.1-405b")
def llama31_405b() -> Architecture:
    """Llama 3.1 405B."""
    return _llama31("llama-3.1-405b", 126, 16384, 128, 53248)


def _llama32(name: str, layers: int, hidden: int, heads: int, head_dim: int) -> Architecture:
    """Llama 3.2's text models: Llama 3.1's vocabulary (the same tokenizer, so they draft for
    Llama 3.1), GQA with 8 KV heads, an 8192-wide FFN, tied embeddings."""
    return LlamaArchitecture(
        name=name,
        vocab_size=128256,
        hidden_size=hidden,
        layers=layers,
        heads=heads,
        kv_heads=8,
        head_dim=head_dim,
        ffn_intermediate=8192,
        tie_embeddings=True,
        max_context=131072,
    )


@preset("llama-3.2-1b", "llama3.2-1b")
def llama32_1b() -> Architecture:
    """Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json): 16 layers, hidden 2048, 32 heads
    of 64."""
    return _llama32("llama-3.2-1b", 16, 2048, 32, 64)


@preset("llama-3.2-3b", "llama3.2-3b")
def llama32_3b() -> Architecture:
    """Llama 3.2 3B (meta-llama/Llama-3.2-3B config.json): 28 layers, hidden 3072, 24 heads
    of 128."""
    return _llama32("llama-3.2-3b", 28, 3072, 24, 128)


@preset("llama-3.3-70b")
def llama33_70b() -> Architecture:
    """Llama 3.3 70B (meta-llama/Llama-3.3-70B-Instruct): Llama 3.1 70B's architecture."""
    return _llama31("llama-3.3-70b", 80, 8192, 64, 28672)


@preset("mistral-7b", "mistral-7b-v0.1")
def mistral_7b() -> Architecture:
    """Mistral 7B v0.1 (mistralai/Mistral-7B-v0.1): GQA, every layer a 4096-token window."""
    return LlamaArchitecture(
        name="mistral-7b",
        vocab_size=32000,
        hidden_size=4096,
        layers=32,
        heads=32,
        kv_heads=8,
        head_dim=128,
        ffn_intermediate=14336,
        max_context=32768,
        sliding_window=4096,
        weight_dtype="bf16",
    )


@preset("qwen2.5-72b")
def qwen25_72b() -> Architecture:
    """Qwen2.5-72B (Qwen/Qwen2.5-72B): GQA with q/k/v biases."""
    return LlamaArchitecture(
        name="qwen2.5-72b",
        vocab_size=152064,
        hidden_size=8192,
        layers=80,
        heads=64,
        kv_heads=8,
        head_dim=128,
        ffn_intermediate=29568,
        max_context=131072,
        qkv_bias=True,
        weight_dtype="bf16",
    )


@preset("qwen3-32b")
def qwen3_32b() -> Architecture:
    """Qwen3-32B (Qwen/Qwen3-32B): GQA with per-head q/k RMSNorm."""
    return LlamaArchitecture(
        name="qwen3-32b",
        vocab_size=151936,
        hidden_size=5120,
        layers=64,
        heads=64,
        kv_heads=8,
        head_dim=128,
        ffn_intermediate=25600,
        max_context=40960,
        qk_norm=True,
        weight_dtype="bf16",
    )


@preset("mixtral-8x7b")
def mixtral_8x7b() -> Architecture:
    """Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1): GQA, 8 experts, 2 per token."""
    return GqaMoeArchitecture(
        name="mixtral-8x7b",
        vocab_size=32000,
        hidden_size=4096,
        layers=32,
        heads=32,
        kv_heads=8,
        head_dim=128,
        moe_intermediate=14336,
        routed_experts=8,
        experts_per_token=2,
        max_context=32768,
        weight_dtype="bf16",
    )


def _qwen3_moe(
    name: str, layers: int, hidden: int, heads: int, inter: int, ffn: int
) -> Architecture:
    return GqaMoeArchitecture(
        name=name,
        vocab_size=151936,
        hidden_size=hidden,
        layers=layers,
        heads=heads,
        kv_heads=4,
        head_dim=128,
        qk_norm=True,
        ffn_intermediate=ffn,
        moe_intermediate=inter,
        routed_experts=128,
        experts_per_token=8,
        max_context=40960,
        weight_dtype="bf16",
    )


@preset("qwen3-30b-a3b")
def qwen3_30b_a3b() -> Architecture:
    """Qwen3-30B-A3B (Qwen/Qwen3-30B-A3B): GQA with q/k norms, 128 experts, 8 per token."""
    return _qwen3_moe("qwen3-30b-a3b", 48, 2048, 32, 768, 6144)


@preset("qwen3-235b-a22b")
def qwen3_235b_a22b() -> Architecture:
    """Qwen3-235B-A22B (Qwen/Qwen3-235B-A22B): GQA with q/k norms, 128 experts, 8 per token."""
    return _qwen3_moe("qwen3-235b-a22b", 94, 4096, 64, 1536, 12288)


def _gpt_oss(name: str, layers: int, experts: int) -> Architecture:
    return GqaMoeArchitecture(
        name=name,
        vocab_size=201088,
        hidden_size=2880,
        layers=layers,
        heads=64,
        kv_heads=8,
        head_dim=64,
        qkv_bias=True,
        o_bias=True,
        attention_sinks=True,
        sliding_window=128,
        layer_types=("sliding_attention", "full_attention") * (layers // 2),
        moe_intermediate=2880,
        routed_experts=experts,
        experts_per_token=4,
        router_bias=True,
        expert_bias=True,
        max_context=131072,
        weight_dtype="bf16",
        expert_dtype="mxfp4",
    )


@preset("gpt-oss-120b")
def gpt_oss_120b() -> Architecture:
    """gpt-oss-120b (openai/gpt-oss-120b): GQA with sinks, sliding (128) and full layers
    alternating, 128 experts (4 per token) in MXFP4."""
    return _gpt_oss("gpt-oss-120b", 36, 128)


@preset("gpt-oss-20b")
def gpt_oss_20b() -> Architecture:
    """gpt-oss-20b (openai/gpt-oss-20b): as gpt-oss-120b with 24 layers and 32 experts."""
    return _gpt_oss("gpt-oss-20b", 24, 32)


@preset("kimi-k2", "kimi-k2-instruct")
def kimi_k2() -> Architecture:
    """Kimi K2 (moonshotai/Kimi-K2-Instruct): DeepSeek-V3's architecture with 64 heads,
    384 experts, one dense layer; FP8 block-scaled weights."""
    return DeepSeekArchitecture(
        name="kimi-k2",
        vocab_size=163840,
        hidden_size=7168,
        layers=61,
        dense_layers=1,
        heads=64,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        ffn_intermediate=18432,
        moe_intermediate=2048,
        routed_experts=384,
        experts_per_token=8,
        shared_experts=1,
        max_context=131072,
        weight_dtype="fp8_block",
    )
