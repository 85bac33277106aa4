"""The distinct-expert model: its formula, its limits, and the seeded sampler agreeing with it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.graph import (
    Precision,
    expected_distinct_experts,
    experts_data_dependent,
    experts_loaded,
    op,
    sample_distinct_experts,
)
from rdu_sim.graph.deepseek import deepseek_layer
from rdu_sim.graph.moe import static_schedule
from rdu_sim.models import get_model
from rdu_sim.shapes import StepShape


def test_limits() -> None:
    assert expected_distinct_experts(0, 256, 8) == 0.0
    assert expected_distinct_experts(1, 256, 8) == pytest.approx(8.0)
    assert expected_distinct_experts(100_000, 256, 8) == pytest.approx(256.0)
    assert expected_distinct_experts(5, 8, 8) == 8.0


def test_formula_and_monotone() -> None:
    values = [expected_distinct_experts(t, 256, 8) for t in range(1, 300)]
    assert all(b > a for a, b in itertools.pairwise(values))
    assert values[63] == pytest.approx(256 * (1 - (1 - 8 / 256) ** 64))
    assert 8 < values[1] < 16  # two tokens: 8 + 8 * 248/256


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        expected_distinct_experts(1, 8, 9)
    with pytest.raises(ValueError):
        expected_distinct_experts(-1, 8, 2)


@pytest.mark.parametrize("tokens", [1, 4, 32, 128])
def test_sampler_mean_matches_expectation(tokens: int) -> None:
    rng = np.random.default_rng(1234)
    samples = [sample_distinct_experts(rng, tokens, 256, 8) for _ in range(400)]
    assert all(min(256, 8) <= s <= min(256, 8 * tokens) for s in samples)
    assert np.mean(samples) == pytest.approx(expected_distinct_experts(tokens, 256, 8), rel=0.02)


def test_sampler_is_seeded_and_stops_when_all_touched() -> None:
    a = [sample_distinct_experts(np.random.default_rng(7), 20, 256, 8) for _ in range(3)]
    assert len(set(a)) == 1
    assert sample_distinct_experts(np.random.default_rng(0), 10_000_000, 256, 8) == 256
    assert sample_distinct_experts(np.random.default_rng(0), 1, 256, 8) == 8


def test_moe_layer_reads_the_expected_distinct_experts() -> None:
    arch = get_model("deepseek-r1")
    assert isinstance(arch, DeepSeekArchitecture)
    for batch in (1, 16, 300):
        graph = deepseek_layer(
            arch, StepShape("decode", batch, 1, 10), Precision(weights=1.0), ffn="moe"
        )
        expert_bytes = 2 * arch.hidden_size * arch.moe_intermediate
        distinct = expected_distinct_experts(batch, 256, 8)
        assert op(graph, "moe.experts_gate_up").weight_read_bytes == pytest.approx(
            distinct * expert_bytes
        )
        # the FLOPs follow the tokens, not the experts
        assert op(graph, "moe.experts_gate_up").flops == batch * 8 * 2 * expert_bytes


def test_experts_loaded_static_is_the_worst_case_count() -> None:
    """A static schedule streams min(E, tokens * k) experts: 8 for one token, every expert
    from 32 decode slots on (32 x 8 = 256); routed streams the expected touched count."""
    assert experts_loaded(1, 256, 8, "static") == 8.0
    assert experts_loaded(20, 256, 8, "static") == 160.0
    assert experts_loaded(32, 256, 8, "static") == 256.0
    assert experts_loaded(40, 256, 8, "static") == 256.0
    assert experts_loaded(40, 256, 8, "routed") == expected_distinct_experts(40, 256, 8)
    assert experts_loaded(40, 256, 8, "routed") < 200  # ~184 touched by 40 tokens
    with pytest.raises(ValueError, match="moe_expert_loading"):
        experts_loaded(4, 256, 8, "dynamic")  # type: ignore[arg-type]


def test_streaming_all_experts_reads_every_one_known_at_compile_time() -> None:
    """The static schedule the compiler may take instead of the gather (``all``) streams all
    E experts, none selected by the router; the workload's ``static`` maps to it only when the
    compiler streams every expert, ``routed`` never."""
    assert experts_loaded(1, 256, 8, "all") == 256.0
    assert experts_data_dependent(1, 256, 8, "static")
    assert not experts_data_dependent(1, 256, 8, "all")
    assert static_schedule("static", True) == "all"
    assert static_schedule("static", False) == "static"
    assert static_schedule("routed", True) == "routed"
    arch = get_model("deepseek-r1")
    assert isinstance(arch, DeepSeekArchitecture)
    shape = StepShape("decode", 3, 1, 10)
    every = deepseek_layer(arch, shape, Precision(weights=1.0), ffn="moe", expert_loading="all")
    for name in ("moe.experts_gate_up", "moe.experts_down"):
        node = op(every, name)
        assert node.weight_read_bytes == node.weight_bytes  # every expert, once
        assert node.weights_selected_by == ""
        assert node.gemm is not None and node.gemm.batch == 256 and node.gemm.m == 1


@pytest.mark.parametrize("batch", [1, 20, 40, 158])
def test_static_loading_streams_more_weights_but_does_the_same_flops(batch: int) -> None:
    arch = get_model("deepseek-r1")
    assert isinstance(arch, DeepSeekArchitecture)
    shape = StepShape("decode", batch, 1, 10)
    routed = deepseek_layer(arch, shape, Precision(weights=1.0), ffn="moe")
    static = deepseek_layer(arch, shape, Precision(weights=1.0), ffn="moe", expert_loading="static")
    for name in ("moe.experts_gate_up", "moe.experts_down"):
        per_expert = op(routed, name).weight_read_bytes / expected_distinct_experts(batch, 256, 8)
        assert op(static, name).weight_read_bytes == pytest.approx(min(256, 8 * batch) * per_expert)
        assert op(static, name).flops == op(routed, name).flops
        assert op(static, name).weight_params == op(routed, name).weight_params


def test_workload_field_reaches_the_compiled_step() -> None:
    """`moe_expert_loading: static` makes a 40-slot DeepSeek decode stream all 256 experts,
    so the step moves more weight bytes than with routed loading; resident bytes are equal."""
    from rdu_sim.compiler import Compiler
    from rdu_sim.scenario import load_scenario

    path = "workloads/deepseek-r1-128k-full.yaml"
    shape = StepShape("decode", batch=40, tokens=1, cache_len=1024)
    routed = Compiler(load_scenario(path, overrides={"moe_expert_loading": "routed"}))
    static = Compiler(load_scenario(path, overrides={"moe_expert_loading": "static"}))
    r, s = routed.program(shape), static.program(shape)
    assert routed.batch_capacity() == static.batch_capacity()
    moved_r = sum(r.bytes_by_tier().values())
    moved_s = sum(s.bytes_by_tier().values())
    assert s.flops == r.flops
    # fp8_block (FP8 and a 4-byte scale per 128 x 128 block), per socket, all MoE layers
    expert_bytes = 58 * 3 * 7168 * 2048 * (1 + 4 / 128**2) / 16
    assert moved_s - moved_r == pytest.approx(
        (256 - expected_distinct_experts(40, 256, 8)) * expert_bytes, rel=1e-6
    )


@pytest.mark.parametrize(
    ("batch", "loading", "selected"),
    [
        (1, "static", True),
        (31, "static", True),
        (32, "static", False),
        (40, "static", False),
        (1, "routed", True),
        (40, "routed", True),
    ],
)
def test_expert_weights_wait_for_the_router_while_the_set_is_data_dependent(
    batch: int, loading: str, selected: bool
) -> None:
    """Which experts a step streams is known only after routing, unless it streams them
    all (a static schedule from E / k = 32 tokens, or below that when the compiler finds
    streaming every expert faster: ``Program.expert_schedule``): then the addresses are
    fixed."""
    from rdu_sim.scenario import load_scenario
    from rdu_sim.serving.backend import EngineBackend

    assert experts_data_dependent(batch, 256, 8, loading) is selected  # type: ignore[arg-type]
    arch = get_model("deepseek-r1")
    assert isinstance(arch, DeepSeekArchitecture)
    graph = deepseek_layer(
        arch,
        StepShape("decode", batch, 1, 10),
        Precision(weights=1.0),
        ffn="moe",
        expert_loading=loading,  # type: ignore[arg-type]
    )
    for name in ("moe.experts_gate_up", "moe.experts_down"):
        assert op(graph, name).weights_selected_by == ("moe.routing" if selected else "")
    assert op(graph, "moe.shared.gate_proj").weights_selected_by == ""
    scenario = load_scenario(
        "workloads/deepseek-r1-128k-full.yaml", overrides={"moe_expert_loading": loading}
    )
    program = EngineBackend().compiler(scenario).program(StepShape("decode", batch, 1, 1024))
    moe = next(k for k in program.kernels if k.name == "decoder_moe")
    chosen = {s.name: s.selected_by for s in moe.stages if s.selected_by}
    expected = {"moe.experts_gate_up": "moe.topk", "moe.experts_down": "moe.topk"}
    gathers = selected and program.expert_schedule != "all"
    assert chosen == (expected if gathers else {})
    if loading == "static":  # a small cache: the gather at batch 1, every expert at 31
        assert program.expert_schedule == ("gather" if batch == 1 else "all")
    else:
        assert program.expert_schedule == ""


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_expert_gemm_shape_is_exact_where_the_expectation_is_an_integer(batch: int) -> None:
    """One token's experts are exactly k (8.0, computed as 7.999...): one row per expert and
    k active experts, routed or static, not two rows (which would double the GEMM's
    efficiency at batch 1)."""
    arch = get_model("deepseek-r1")
    assert isinstance(arch, DeepSeekArchitecture)
    shape = StepShape("decode", batch, 1, 10)
    for loading in ("routed", "static"):
        graph = deepseek_layer(
            arch, shape, Precision(weights=1.0), ffn="moe", expert_loading=loading
        )
        gemm = op(graph, "moe.experts_gate_up").gemm
        assert gemm is not None
        if batch == 1 or loading == "static":
            assert (gemm.m, gemm.batch) == (1, 8 * batch)


def test_graph_default_expert_loading_is_the_workloads() -> None:
    """The graph builders' default equals the workload field's (config cannot import graph)."""
    from rdu_sim.config.workload import WorkloadConfig
    from rdu_sim.graph.moe import DEFAULT_EXPERT_LOADING

    field = WorkloadConfig.model_fields["moe_expert_loading"]
    assert field.default == DEFAULT_EXPERT_LOADING
