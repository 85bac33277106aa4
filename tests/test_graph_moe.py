"""The distinct-expert model: its formula, its limits, and the seeded sampler agreeing with it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.graph import (
    Precision,
    StepShape,
    expected_distinct_experts,
    op,
    sample_distinct_experts,
)
from rdu_sim.graph.deepseek import deepseek_layer
from rdu_sim.models import get_model


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
    assert np.mean(samples) == pytest.approx(expected_distinct_experts(tokens, 256, 8),
                                             rel=0.02)


def test_sampler_is_seeded_and_stops_when_all_touched() -> None:
    a = [sample_distinct_experts(np.random.default_rng(7), 20, 256, 8) for _ in range(3)]
    assert len(set(a)) == 1
    assert sample_distinct_experts(np.random.default_rng(0), 10_000_000, 256, 8) == 256
    assert sample_distinct_experts(np.random.default_rng(0), 1, 256, 8) == 8


def test_moe_layer_reads_the_expected_distinct_experts() -> None:
    arch = get_model("deepseek-r1")
    assert isinstance(arch, DeepSeekArchitecture)
    for batch in (1, 16, 300):
        graph = deepseek_layer(arch, StepShape("decode", batch, 1, 10), Precision(weights=1.0),
                               ffn="moe")
        expert_bytes = 2 * arch.hidden_size * arch.moe_intermediate
        distinct = expected_distinct_experts(batch, 256, 8)
        assert op(graph, "moe.experts_gate_up").weight_read_bytes == pytest.approx(
            distinct * expert_bytes)
        # the FLOPs follow the tokens, not the experts
        assert op(graph, "moe.experts_gate_up").flops == batch * 8 * 2 * expert_bytes
