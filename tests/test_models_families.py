"""The presets of the 2026 families against their model cards, and the per-layer view.

Published totals are the model cards' (or the vendors' release notes'); each test names its
source and the number. Counts the cards give precisely must hold within 1%; rounded ones
("1T", "32B") within the rounding. The project's own exact counts are pinned too, so a
changed formula cannot hide behind the tolerance.
"""

from __future__ import annotations

import pytest

from rdu_sim.config import GqaMoeArchitecture, LlamaArchitecture
from rdu_sim.config.dtypes import DTYPE_BYTES
from rdu_sim.models import (
    get_model,
    kv_bytes,
    kv_bytes_per_token,
    layer_kinds,
    layer_segments,
    params_active,
    params_total,
    weight_bytes,
    window_tokens,
)
from rdu_sim.models.figures import (
    embedding_params,
    params_active_without_embedding,
    routed_expert_matmul_params,
)
from rdu_sim.models.layers import LayerKind, Segment, segment_name
from rdu_sim.models.storage import storage_dtypes

GIB = 2**30

# (preset, published total, published active, tolerance, active convention, source)
PUBLISHED = [
    # Mistral AI, "Mixtral of experts" (Dec 2023): 46.7B total, 12.9B used per token
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.01, "all"),
    # Qwen3-30B-A3B model card: 30.5B in total and 3.3B activated
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02, "all"),
    # Qwen3-235B-A22B model card: 235B in total and 22B activated
    ("qwen3-235b-a22b", 235e9, 22e9, 0.01, "all"),
    # gpt-oss model card (arXiv 2508.10925), Table 1: 116.83B total, 5.13B active
    # (the card's active count leaves out the embedding, a gather)
    ("gpt-oss-120b", 116.83e9, 5.13e9, 0.01, "no_embedding"),
    # same table: gpt-oss-20b 20.91B total, 3.61B active
    ("gpt-oss-20b", 20.91e9, 3.61e9, 0.01, "no_embedding"),
    # Qwen2.5-72B model card: 72.7B parameters
    ("qwen2.5-72b", 72.7e9, 72.7e9, 0.01, "all"),
    # Qwen3-32B model card: 32.8B parameters
    ("qwen3-32b", 32.8e9, 32.8e9, 0.01, "all"),
    # Mistral AI, "Announcing Mistral 7B" (Sep 2023): a 7.3B parameter model
    ("mistral-7b", 7.3e9, 7.3e9, 0.01, "all"),
    # Llama 3.2 model card (meta-llama/Llama-3.2-1B): 1.23B and 3.21B parameters
    ("llama-3.2-1b", 1.23e9, 1.23e9, 0.01, "all"),
    ("llama-3.2-3b", 3.21e9, 3.21e9, 0.01, "all"),
    # Kimi K2 model card: 1T total, 32B activated (both rounded: 1.03T and 32.9B here)
    ("kimi-k2", 1e12, 32e9, 0.03, "all"),
]


@pytest.mark.parametrize(("name", "total", "active", "tolerance", "convention"), PUBLISHED)
def test_presets_match_the_model_cards(
    name: str, total: float, active: float, tolerance: float, convention: str
) -> None:
    arch = get_model(name)
    counted = params_active(arch) if convention == "all" else params_active_without_embedding(arch)
    assert params_total(arch) == pytest.approx(total, rel=tolerance)
    assert counted == pytest.approx(active, rel=tolerance)


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        ("mixtral-8x7b", 46_702_792_704, 12_879_925_248),
        ("qwen3-30b-a3b", 30_532_122_624, 3_353_032_704),
        ("gpt-oss-120b", 116_829_156_672, 5_711_982_912),
        ("gpt-oss-20b", 20_914_757_184, 4_187_440_704),
        ("kimi-k2", 1_026_408_232_448, 32_861_500_928),
    ],
)
def test_exact_counts(name: str, total: int, active: int) -> None:
    arch = get_model(name)
    assert (params_total(arch), params_active(arch)) == (total, active)


def test_gpt_oss_120b_by_hand() -> None:
    """Every tensor of one gpt-oss layer (transformers' GptOss modules), written out."""
    h, heads, kv, d, e, inter = 2880, 64, 8, 64, 128, 2880
    attention = (
        h * heads * d + heads * d  # q_proj + bias
        + 2 * (h * kv * d + kv * d)  # k_proj, v_proj + biases
        + heads * d * h + h  # o_proj + bias
        + heads  # sinks
    )  # fmt: skip
    router = e * h + e
    experts = e * (h * 2 * inter + 2 * inter) + e * (inter * h + h)  # gate_up, down + biases
    layer = attention + router + experts + 2 * h
    total = 36 * layer + 2 * 201088 * h + h
    arch = get_model("gpt-oss-120b")
    assert params_total(arch) == total
    one_expert = h * 2 * inter + 2 * inter + inter * h + h
    assert params_active_without_embedding(arch) == (
        36 * (attention + router + 4 * one_expert + 2 * h) + 201088 * h + h
    )


@pytest.mark.parametrize(
    ("name", "gib"),
    # gpt-oss model card, Table 1: checkpoint sizes 60.8 GiB and 12.8 GiB (MXFP4 experts,
    # everything else BF16)
    [("gpt-oss-120b", 60.8), ("gpt-oss-20b", 12.8)],
)
def test_gpt_oss_checkpoint_size(name: str, gib: float) -> None:
    arch = get_model(name)
    weights, experts = storage_dtypes(arch)
    assert (weights, experts) == ("bf16", "mxfp4")
    size = weight_bytes(arch, DTYPE_BYTES[weights], DTYPE_BYTES[experts])
    assert size / GIB == pytest.approx(gib, rel=0.01)
    rest = params_total(arch) - routed_expert_matmul_params(arch)
    assert size == round(rest * 2 + routed_expert_matmul_params(arch) * 4.25 / 8)


def test_block_scaled_dtypes() -> None:
    """FP8 with one FP32 scale per 128 x 128 block; MXFP4: 4 bits + an 8-bit scale per 32."""
    assert DTYPE_BYTES["fp8_block"] == 1 + 4 / (128 * 128)
    assert DTYPE_BYTES["mxfp4"] * 8 == 4.25
    arch = get_model("kimi-k2")
    assert storage_dtypes(arch) == ("fp8_block", "fp8_block")
    assert weight_bytes(arch, DTYPE_BYTES["fp8_block"]) == round(
        params_total(arch) * (1 + 4 / 16384)
    )
    # a workload's choice wins over the released dtype; experts follow it unless the model
    # ships them differently
    assert storage_dtypes(arch, "bf16") == ("bf16", "bf16")
    assert storage_dtypes(get_model("gpt-oss-20b"), "fp8") == ("fp8", "mxfp4")
    assert storage_dtypes(get_model("gpt-oss-20b"), "fp8", "fp8") == ("fp8", "fp8")
    assert storage_dtypes(get_model("llama-3.1-8b")) == ("bf16", "bf16")


def test_layer_kinds_of_each_family() -> None:
    ds = layer_kinds(get_model("deepseek-r1"))
    assert ds == (LayerKind("dense"),) * 3 + (LayerKind("moe"),) * 58
    oss = layer_kinds(get_model("gpt-oss-120b"))
    assert oss[:2] == (LayerKind("moe", 128), LayerKind("moe", None))
    assert sum(k.window == 128 for k in oss) == 18
    assert layer_kinds(get_model("mistral-7b")) == (LayerKind("dense", 4096),) * 32
    assert layer_kinds(get_model("mixtral-8x7b")) == (LayerKind("moe"),) * 32
    assert layer_kinds(get_model("kimi-k2"))[:2] == (LayerKind("dense"), LayerKind("moe"))


def test_segments_are_runs_of_a_repeating_body() -> None:
    d, m = LayerKind("dense"), LayerKind("moe")
    s, f = LayerKind("moe", 128), LayerKind("moe")
    assert layer_segments((d,) * 3 + (m,) * 58) == (Segment((d,), 3), Segment((m,), 58))
    assert layer_segments((s, f) * 18) == (Segment((s, f), 18),)
    # a body must repeat to beat single layers; ties go to the shorter body
    assert layer_segments((d, m, m)) == (Segment((d,), 1), Segment((m,), 2))
    assert layer_segments((d, m) * 3 + (m,)) == (Segment((d, m), 3), Segment((m,), 1))
    for kinds in ((d,) * 3 + (m,) * 58, (s, f) * 18, (d, m, d, s, f, s, f, m, m, m)):
        segments = layer_segments(kinds)
        assert sum((seg.body * seg.repeats for seg in segments), ()) == kinds


def test_segment_names_say_what_differs() -> None:
    d, m = LayerKind("dense"), LayerKind("moe")
    s, f = LayerKind("moe", 128), LayerKind("moe")
    ds = (d,) * 3 + (m,) * 58
    assert [segment_name(x, ds) for x in layer_segments(ds)] == ["decoder_dense", "decoder_moe"]
    oss = (s, f) * 18
    assert [segment_name(x, oss) for x in layer_segments(oss)] == ["decoder_sliding+full"]
    assert segment_name(Segment((m,), 32), (m,) * 32) == "decoder"


def test_sliding_windows_bound_the_kv_cache() -> None:
    """A window-W layer keeps its last W - 1 tokens; full layers keep them all."""
    assert window_tokens(10, None) == 10
    assert (window_tokens(100, 128), window_tokens(127, 128), window_tokens(10**6, 128)) == (
        100,
        127,
        127,
    )
    oss = get_model("gpt-oss-120b")
    per_layer = 2 * 8 * 64 * 2  # K and V, 8 heads of 64, BF16
    assert kv_bytes_per_token(oss, 2) == 36 * per_layer
    assert kv_bytes(oss, 100, 2) == 36 * 100 * per_layer
    assert kv_bytes(oss, 131072, 2) == (18 * 131072 + 18 * 127) * per_layer
    mistral = get_model("mistral-7b")
    assert kv_bytes(mistral, 32768, 2) == 32 * 4095 * 2 * 8 * 128 * 2
    llama = get_model("llama-3.1-8b")
    assert kv_bytes(llama, 1000, 2) == 1000 * kv_bytes_per_token(llama, 2)


def test_qwen3_moe_dense_layers() -> None:
    """mlp_only_layers (from decoder_sparse_step / mlp_only_layers) have a dense FFN."""
    base = get_model("qwen3-30b-a3b")
    assert isinstance(base, GqaMoeArchitecture)
    mixed = base.model_copy(update={"mlp_only_layers": (0, 47)})
    kinds = layer_kinds(mixed)
    assert [k.ffn for k in kinds].count("dense") == 2
    assert kinds[0].ffn == kinds[47].ffn == "dense"
    expert = 3 * 2048 * 768
    dense = 3 * 2048 * 6144
    router = 128 * 2048
    assert params_total(base) - params_total(mixed) == 2 * (128 * expert + router - dense)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"layer_types": ("full_attention",) * 3}, "3 entries for 48 layers"),
        ({"layer_types": ("sliding_attention",) * 48}, "no sliding_window"),
        ({"mlp_only_layers": (48,)}, "not layers"),
        ({"mlp_only_layers": (0,), "ffn_intermediate": None}, "ffn_intermediate"),
        ({"experts_per_token": 129}, "exceeds"),
        ({"kv_heads": 5}, "multiple of kv_heads"),
    ],
)
def test_gqa_moe_rules(changes: dict[str, object], message: str) -> None:
    data = get_model("qwen3-30b-a3b").model_dump() | changes
    with pytest.raises(ValueError, match=message):
        GqaMoeArchitecture.model_validate(data)


def test_embedding_conventions() -> None:
    """params_active counts the embedding table (as Qwen's cards do); the gpt-oss card
    counts only the unembedding. A tied table stays in, as the LM head."""
    arch = get_model("llama-3.1-8b")
    assert isinstance(arch, LlamaArchitecture)
    assert params_active(arch) - params_active_without_embedding(arch) == embedding_params(arch)
    tied = arch.model_copy(update={"tie_embeddings": True})
    assert params_active_without_embedding(tied) == params_active(tied)
