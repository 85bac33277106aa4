"""Model arithmetic, exact: parameter counts, KV bytes per token, weight bytes, decode FLOPs.

The expected numbers are hand counts from the models' public config.json files
(../shared/reference/models.md); each is also recomputed here from the formula written out,
so a wrong preset value and a wrong formula both fail.
"""

from __future__ import annotations

import pytest

from rdu_sim.config import DeepSeekArchitecture, LlamaArchitecture
from rdu_sim.models import (
    UnknownModelError,
    decode_flops_per_token,
    get_model,
    kv_bytes_per_token,
    layer_params,
    model_figures,
    params_active,
    params_total,
    preset_names,
    weight_bytes,
)
from rdu_sim.models.presets import preset


def _deepseek() -> DeepSeekArchitecture:
    arch = get_model("deepseek-r1")
    assert isinstance(arch, DeepSeekArchitecture)
    return arch


def _llama(name: str) -> LlamaArchitecture:
    arch = get_model(name)
    assert isinstance(arch, LlamaArchitecture)
    return arch


def test_deepseek_r1_exact() -> None:
    arch = _deepseek()
    assert (arch.layers, arch.dense_layers, arch.moe_layers) == (61, 3, 58)
    assert params_total(arch) == 671_026_419_200
    assert params_active(arch) == 37_552_297_472
    assert kv_bytes_per_token(arch, 2) == 70_272
    assert kv_bytes_per_token(arch, 1) == 35_136
    assert weight_bytes(arch, 1) == 671_026_419_200


def test_deepseek_r1_by_hand() -> None:
    """671B written out from config_671B.json, without the MTP module."""
    h, vocab = 7168, 129280
    attention = (
        h * 1536
        + 1536  # q_a_proj + q_a_layernorm
        + 1536 * 128 * (128 + 64)  # q_b_proj
        + h * (512 + 64)
        + 512  # kv_a_proj_with_mqa + kv_a_layernorm
        + 512 * 128 * (128 + 128)  # kv_b_proj
        + 128 * 128 * h
    )  # o_proj
    norms = 2 * h
    dense_ffn = 3 * h * 18432
    expert = 3 * h * 2048
    router = 256 * h + 256  # gate weight + e_score_correction_bias
    dense_layer = attention + norms + dense_ffn
    moe_layer = attention + norms + router + expert + 256 * expert
    outside = vocab * h * 2 + h  # embedding, lm_head, final norm
    total = 3 * dense_layer + 58 * moe_layer + outside
    active = 3 * dense_layer + 58 * (attention + norms + router + 9 * expert) + outside
    arch = _deepseek()
    assert params_total(arch) == total
    assert params_active(arch) == active
    assert layer_params(arch, 0).ffn_dense == dense_ffn
    assert layer_params(arch, 3).routed_experts == 256 * expert
    assert 670e9 < total < 672e9 and 37e9 < active < 38e9
    # KV: MLA caches the 512-dim latent and the 64-dim RoPE key per layer
    assert 61 * (512 + 64) * 2 == 70_272


def test_deepseek_decode_flops() -> None:
    """2 FLOPs per weight a token multiplies by (norms, biases, embedding gather excluded),
    plus absorbed MLA attention: scores over 576 dims and values over 512 per head."""
    arch = _deepseek()
    h = 7168
    not_multiplied = (
        129280 * h  # the embedding is a gather
        + 61 * 2 * h
        + h  # RMSNorm weights
        + 61 * (1536 + 512)  # MLA latent norms
        + 58 * 256
    )  # router correction bias
    matmul = params_active(arch) - not_multiplied
    assert decode_flops_per_token(arch, 0) == 2 * matmul
    context = 4096
    attention = 61 * 2 * 128 * context * (576 + 512)
    assert decode_flops_per_token(arch, context) == 2 * matmul + attention


def test_llama_8b_exact() -> None:
    arch = _llama("llama-3.1-8b")
    assert params_total(arch) == 8_030_261_248
    assert params_active(arch) == params_total(arch)  # dense
    assert kv_bytes_per_token(arch, 2) == 131_072
    assert weight_bytes(arch, 2) == 2 * 8_030_261_248
    assert weight_bytes(arch, 0.5) == 8_030_261_248 // 2


def test_llama_8b_by_hand() -> None:
    h, layers, vocab = 4096, 32, 128256
    attention = h * 32 * 128 + 2 * h * 8 * 128 + 32 * 128 * h
    ffn = 3 * h * 14336
    total = layers * (attention + ffn + 2 * h) + 2 * vocab * h + h
    assert params_total(_llama("llama-3.1-8b")) == total == 8_030_261_248
    assert layers * 2 * 8 * 128 * 2 == 131_072


def test_llama_8b_decode_flops() -> None:
    arch = _llama("llama-3.1-8b")
    matmul = 8_030_261_248 - 128256 * 4096 - (32 * 2 * 4096 + 4096)
    assert decode_flops_per_token(arch, 0) == 2 * matmul == 15_009_316_864
    context = 8192
    attention = 32 * 2 * 32 * 128 * context * 2  # QK^T and PV, 2 FLOPs per multiply-add
    assert decode_flops_per_token(arch, context) == 2 * matmul + attention


@pytest.mark.parametrize(
    ("name", "params", "kv"),
    [
        ("llama-3.1-70b", 70_553_706_496, 327_680),
        ("llama-3.1-405b", 405_853_388_800, 516_096),
    ],
)
def test_llama_large_exact(name: str, params: int, kv: int) -> None:
    arch = _llama(name)
    assert params_total(arch) == params
    assert kv_bytes_per_token(arch, 2) == kv
    assert kv == arch.layers * 2 * arch.kv_heads * arch.head_dim * 2


def test_figures_bundle_matches_functions() -> None:
    arch = _deepseek()
    figures = model_figures(
        arch,
        kv_dtype="fp8",
        kv_dtype_bytes=1,
        weight_dtype="fp8",
        weight_dtype_bytes=1,
        context=1024,
    )
    assert figures.params_total == params_total(arch)
    assert figures.params_active == params_active(arch)
    assert figures.kv_bytes_per_token == 35_136
    assert figures.weight_bytes == params_total(arch)
    # 1,024 cached tokens: the decoded token attends to them and itself (rdu_sim.shapes)
    assert figures.decode_flops_per_token == decode_flops_per_token(arch, 1025)
    assert (figures.layers, figures.context, figures.kv_dtype) == (61, 1024, "fp8")
    assert figures.attended_tokens == 1025


def test_tied_embeddings_count_once() -> None:
    untied = _llama("llama-3.1-8b")
    tied = untied.model_copy(update={"tie_embeddings": True})
    assert params_total(untied) - params_total(tied) == 128256 * 4096
    # the LM head still multiplies: tying removes parameters, not FLOPs
    assert decode_flops_per_token(tied, 0) == decode_flops_per_token(untied, 0)


def test_presets_and_aliases() -> None:
    names = preset_names()
    assert {"deepseek-r1", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b"} <= set(names)
    assert names == sorted(names)
    assert get_model("Llama3.1-8B") == get_model("llama-3.1-8b")
    assert get_model("deepseek-v3") == get_model("deepseek-r1")


def test_unknown_model_lists_valid_names() -> None:
    with pytest.raises(UnknownModelError) as info:
        get_model("gpt-5")
    message = str(info.value)
    assert "gpt-5" in message
    for name in preset_names():
        assert name in message


def test_duplicate_preset_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        preset("llama-3.1-8b")(lambda: get_model("llama-3.1-8b"))


def test_presets_are_fresh_objects() -> None:
    """A caller cannot change a preset for everyone else (frozen models, new per call)."""
    a = get_model("llama-3.1-8b")
    with pytest.raises(ValueError):
        a.layers = 4  # type: ignore[misc]
    assert get_model("llama-3.1-8b").layers == 32


@pytest.mark.parametrize(
    "changes",
    [
        {"heads": 30},  # not a multiple of kv_heads 8
        {"layers": 0},
        {"hidden_size": -1},
    ],
)
def test_llama_rules(changes: dict[str, int]) -> None:
    data = _llama("llama-3.1-8b").model_dump() | changes
    with pytest.raises(ValueError):
        LlamaArchitecture.model_validate(data)


@pytest.mark.parametrize(
    "changes",
    [
        {"dense_layers": 62},
        {"experts_per_token": 300},
        {"expert_groups": 7},
        {"groups_per_token": 9},
    ],
)
def test_deepseek_rules(changes: dict[str, int]) -> None:
    data = _deepseek().model_dump() | changes
    with pytest.raises(ValueError):
        DeepSeekArchitecture.model_validate(data)
