"""Graphs of the new families sum to the models' hand counts, exactly, window by window.

Same conventions as test_graph_sums: a decode step at cache c attends to c + 1 tokens, so
its FLOPs are decode_flops_per_token(arch, c + 1); a sliding-window layer attends to at most
its window, keeps its last window - 1 tokens, and that is all it reads.
"""

from __future__ import annotations

import pytest

from rdu_sim.config.dtypes import DTYPE_BYTES
from rdu_sim.graph import Precision, StepShape, check_graph, model_groups, operators, totals
from rdu_sim.graph.shape import attended_pairs
from rdu_sim.models import (
    decode_flops_per_token,
    get_model,
    layer_kinds,
    params_total,
    weight_bytes,
    window_tokens,
)
from rdu_sim.models.figures import kv_values_per_token_per_layer, matmul_params_active

NEW = [
    "mixtral-8x7b",
    "qwen3-30b-a3b",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "kimi-k2",
    "qwen2.5-72b",
    "mistral-7b",
    "qwen3-32b",
]


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("cache_len", [0, 1, 126, 127, 128, 4095, 4096, 131071])
def test_decode_flops_equal_figures(name: str, cache_len: int) -> None:
    arch = get_model(name)
    groups = model_groups(arch, StepShape("decode", 1, 1, cache_len), Precision())
    assert totals(groups).flops == decode_flops_per_token(arch, cache_len + 1)


@pytest.mark.parametrize("name", NEW)
def test_every_group_is_sound_and_covers_every_layer(name: str) -> None:
    arch = get_model(name)
    groups = model_groups(arch, StepShape("prefill", 2, 300, 50), Precision())
    for group in groups:
        check_graph(group.graph)
    decoders = [g for g in groups if g.name.startswith("decoder")]
    layers = sum(
        g.count * sum(1 for n in g.graph if str(n).endswith("attn_norm")) for g in decoders
    )
    assert layers == arch.layers


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize(
    ("weights", "experts"), [("bf16", None), ("fp8_block", None), ("bf16", "mxfp4")]
)
def test_resident_weights_equal_the_figures(name: str, weights: str, experts: str | None) -> None:
    arch = get_model(name)
    w = DTYPE_BYTES[weights]
    e = None if experts is None else DTYPE_BYTES[experts]
    groups = model_groups(arch, StepShape("decode", 1, 1, 0), Precision(weights=w, experts=e))
    params = sum(g.count * n.weight_params for g in groups for n in operators(g.graph))
    stored = sum(g.count * n.weight_bytes for g in groups for n in operators(g.graph))
    assert params == totals(groups).weight_params == params_total(arch)
    assert stored == pytest.approx(weight_bytes(arch, w, e), abs=1.0)


def test_gpt_oss_is_one_looped_body_of_two_layers() -> None:
    arch = get_model("gpt-oss-120b")
    groups = model_groups(arch, StepShape("decode", 4, 1, 1000), Precision())
    assert [(g.name, g.count) for g in groups] == [
        ("embedding", 1),
        ("decoder_sliding+full", 18),
        ("lm_head", 1),
    ]
    body = groups[1].graph
    assert {"l0.attn_norm", "l1.attn_norm", "l0.moe.router", "l1.attn.o_proj"} <= set(body)
    # layer 0's output is layer 1's input; the body's input and output are the layers'
    assert body.has_edge("l0.ffn.residual", "l1.attn_norm")
    assert list(body.graph["inputs"]) == ["x"] and list(body.graph["outputs"]) == ["l1.y"]


@pytest.mark.parametrize(
    ("batch", "tokens", "cache"), [(1, 1, 0), (3, 1, 5000), (1, 300, 0), (2, 90, 60), (1, 2000, 40)]
)
def test_sliding_window_reads_and_attends_within_its_window(
    batch: int, tokens: int, cache: int
) -> None:
    """KV read, KV written and attention pairs of each layer, against a count written out."""
    arch = get_model("gpt-oss-20b")
    precision = Precision()
    groups = model_groups(arch, StepShape("prefill", batch, tokens, cache), precision)
    per_token = kv_values_per_token_per_layer(arch) * precision.kv
    read = written = pairs = 0
    for kind in layer_kinds(arch):
        held = window_tokens(cache, kind.window)
        read += batch * held * per_token
        written += batch * window_tokens(tokens, kind.window) * per_token
        span = kind.window or 10**12
        pairs += batch * sum(min(held + i, span) for i in range(1, tokens + 1))
    sums = totals(groups)
    assert sums.kv_read_bytes == read
    assert sums.kv_write_bytes == written
    attention = 2 * 2 * arch.heads * arch.head_dim * pairs
    projections = 2 * (matmul_params_active(arch) - arch.vocab_size * arch.hidden_size) * tokens
    head = 2 * arch.vocab_size * arch.hidden_size  # the last position of each slot
    assert sums.flops == batch * projections + batch * head + attention


@pytest.mark.parametrize("window", [None, 1, 2, 7, 128])
def test_attended_pairs_closed_form(window: int | None) -> None:
    for tokens in (1, 2, 5, 130, 300):
        for cached in range(0, 140, 7):
            if window is not None:
                cached = min(cached, window - 1)
            span = window or 10**12
            brute = sum(min(cached + i, span) for i in range(1, tokens + 1))
            assert attended_pairs(tokens, cached, window) == brute


def test_mixtral_batch_one_reads_two_experts_per_layer() -> None:
    arch = get_model("mixtral-8x7b")
    groups = model_groups(arch, StepShape("decode", 1, 1, 0), Precision(weights=1.0))
    expert = 3 * 4096 * 14336
    all_read = params_total(arch) - arch.vocab_size * arch.hidden_size + arch.hidden_size
    assert totals(groups).weight_read_bytes == pytest.approx(all_read - 32 * 6 * expert, rel=1e-12)


def test_gpt_oss_experts_stream_at_their_dtype() -> None:
    """MXFP4 experts cost 4.25 bits per weight on the wire too; their biases stay BF16."""
    arch = get_model("gpt-oss-20b")
    shape = StepShape("decode", 4096, 1, 0)  # touches every expert
    bf16 = totals(model_groups(arch, shape, Precision())).weight_read_bytes
    mx = totals(model_groups(arch, shape, Precision(experts=DTYPE_BYTES["mxfp4"])))
    experts = 24 * 32 * 3 * 2880 * 2880
    assert bf16 - mx.weight_read_bytes == pytest.approx(experts * (2 - 0.53125), rel=1e-9)
