"""Graph operator sums equal the model's own hand counts (rdu_sim.models.figures), exactly.

Conventions checked here:
- a decode step (1 new token) at cache length c attends to c + 1 tokens (the cache plus the
  token itself), so its FLOPs are decode_flops_per_token(arch, c + 1);
- resident weights are summed over the full expert tables (weight_params), so they equal
  weight_bytes whatever the batch; the bytes a step *reads* equal them only once the batch
  touches every expert (and the embedding gather reads only its rows).
"""

from __future__ import annotations

import pytest

from rdu_sim.config.architecture import DeepSeekArchitecture, LlamaArchitecture
from rdu_sim.graph import Precision, model_groups, totals
from rdu_sim.models import (
    decode_flops_per_token,
    get_model,
    params_total,
    weight_bytes,
)
from rdu_sim.models.figures import (
    attention_flops_per_token,
    matmul_params_active,
    params_active,
)
from rdu_sim.shapes import StepShape


def _deepseek() -> DeepSeekArchitecture:
    arch = get_model("deepseek-r1")
    assert isinstance(arch, DeepSeekArchitecture)
    return arch


def _llama(name: str = "llama-3.1-8b") -> LlamaArchitecture:
    arch = get_model(name)
    assert isinstance(arch, LlamaArchitecture)
    return arch


MODELS = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "deepseek-r1", "deepseek-r1-mtp"]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("cache_len", [0, 1, 4095, 131071])
def test_decode_flops_equal_figures(name: str, cache_len: int) -> None:
    arch = get_model(name)
    groups = model_groups(arch, StepShape("decode", 1, 1, cache_len), Precision())
    assert totals(groups).flops == decode_flops_per_token(arch, cache_len + 1)


@pytest.mark.parametrize("cache_len", [0, 8191])
def test_deepseek_per_head_cache_is_the_non_absorbed_count(cache_len: int) -> None:
    arch = get_model("deepseek-r1")
    groups = model_groups(arch, StepShape("decode", 1, 1, cache_len), Precision(), "per_head")
    expected = 2 * matmul_params_active(arch) + attention_flops_per_token(
        arch, cache_len + 1, absorbed=False
    )
    assert totals(groups).flops == expected
    assert expected < decode_flops_per_token(arch, cache_len + 1)


@pytest.mark.parametrize("name", MODELS)
def test_flops_scale_with_batch_in_decode(name: str) -> None:
    arch = get_model(name)
    one = totals(model_groups(arch, StepShape("decode", 1, 1, 100), Precision())).flops
    many = totals(model_groups(arch, StepShape("decode", 7, 1, 100), Precision())).flops
    assert many == 7 * one


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize(("dtype", "size"), [("bf16", 2.0), ("fp8", 1.0), ("int4", 0.5)])
def test_resident_weights_equal_weight_bytes(name: str, dtype: str, size: float) -> None:
    arch = get_model(name)
    groups = model_groups(arch, StepShape("decode", 1, 1, 0), Precision(weights=size))
    params = totals(groups).weight_params
    assert params == params_total(arch)
    assert round(params * size) == weight_bytes(arch, size), dtype


def test_deepseek_reads_every_weight_once_all_experts_are_touched() -> None:
    """At a batch that touches all 256 experts a decode step reads every weight but the
    embedding table, of which it gathers only its rows."""
    arch = get_model("deepseek-r1")
    batch = 4096
    groups = model_groups(arch, StepShape("decode", batch, 1, 0), Precision(weights=1.0))
    read = totals(groups).weight_read_bytes
    table = arch.vocab_size * arch.hidden_size
    rows = batch * arch.hidden_size
    assert read == pytest.approx(weight_bytes(arch, 1.0) - table + rows, rel=1e-9)


def test_deepseek_batch_one_reads_only_active_experts() -> None:
    arch = _deepseek()
    groups = model_groups(arch, StepShape("decode", 1, 1, 0), Precision(weights=1.0))
    expert = 3 * arch.hidden_size * arch.moe_intermediate
    all_read = weight_bytes(arch, 1.0) - arch.vocab_size * arch.hidden_size + arch.hidden_size
    skipped = arch.moe_layers * (arch.routed_experts - arch.experts_per_token) * expert
    assert totals(groups).weight_read_bytes == pytest.approx(all_read - skipped, rel=1e-12)


def test_prefill_attention_is_causal() -> None:
    """t new tokens on c cached: t*c + t(t+1)/2 pairs per head (decode is the t = 1 case)."""
    arch = _llama()
    t, c = 64, 100
    groups = model_groups(arch, StepShape("prefill", 1, t, c), Precision())
    projections = 2 * (matmul_params_active(arch) - arch.vocab_size * arch.hidden_size) * t
    head = 2 * arch.vocab_size * arch.hidden_size  # the last position only
    pairs = t * c + t * (t + 1) // 2
    attention = arch.layers * 2 * 2 * arch.heads * arch.head_dim * pairs
    assert totals(groups).flops == projections + head + attention


def test_the_mtp_module_projects_its_input_on_every_token() -> None:
    """DeepSeek's MTP module (preset deepseek-r1-mtp): eh_proj (2 x 7168 -> 7168) and its
    two RMSNorms are its own parameters, and every drafted token runs the product: 2.54B
    active parameters and 3.23 GFLOP a token at context 0 (hand counts), and a draft step
    of 4 slots x 2 tokens reads the projection once and multiplies 8 rows by it, exactly
    what the same block without the projection lacks."""
    arch = get_model("deepseek-r1-mtp")
    assert isinstance(arch, DeepSeekArchitecture) and arch.mtp_projection
    bare = arch.model_copy(update={"mtp_projection": False})
    h = arch.hidden_size
    assert params_total(arch) - params_total(bare) == 2 * h * h + 2 * h == 102_774_784
    assert params_active(arch) == 2_541_458_688
    assert decode_flops_per_token(arch, 0) == 3_229_483_008
    assert decode_flops_per_token(arch, 0) - decode_flops_per_token(bare, 0) == 4 * h * h
    shape, precision = StepShape("decode", 4, 2, 100), Precision(weights=1.0)
    with_projection = totals(model_groups(arch, shape, precision))
    without = totals(model_groups(bare, shape, precision))
    assert with_projection.flops - without.flops == 2 * 8 * 2 * h * h
    assert with_projection.weight_read_bytes - without.weight_read_bytes == 2 * h * h + 2 * h
    embedding = model_groups(arch, shape, precision)[0].graph
    assert [str(n) for n in embedding] == ["embed.gather", "mtp.enorm", "mtp.hnorm", "mtp.eh_proj"]
    assert sorted(embedding.graph["inputs"]) == ["h_prev", "token_ids"]
