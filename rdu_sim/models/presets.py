"""Architecture presets of real models, figures from their public config files.

Sources: ../shared/reference/models.md (DeepSeek-V3 config_671B.json; Llama 3.1 config.json).
Presets register by decorator; a duplicate name is refused, an unknown one lists the valid.
"""

from __future__ import annotations

from collections.abc import Callable

from rdu_sim.config.architecture import DeepSeekArchitecture, LlamaArchitecture

Architecture = LlamaArchitecture | DeepSeekArchitecture

_PRESETS: dict[str, Callable[[], Architecture]] = {}


class UnknownModelError(KeyError):
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
