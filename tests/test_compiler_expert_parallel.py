"""Expert parallelism (`parallelism.moe_experts: expert`): whole experts, E/tp per socket, and
a step paced by the socket holding the most selected experts. Exact expectations of that
maximum, the busiest socket's bytes in a compiled step, and the invariant that a step
streaming every expert reads the same expert bytes per socket either way."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from rdu_sim import api
from rdu_sim.compiler import Compiler
from rdu_sim.compiler.layout import ExpertPlacement
from rdu_sim.config.errors import ConfigError
from rdu_sim.graph.moe import expected_busiest_socket_experts, expected_distinct_experts
from rdu_sim.shapes import StepShape

DEEPSEEK = "workloads/deepseek-r1-128k-full.yaml"
HIDDEN, INTER = 7168, 2048  # DeepSeek-R1's hidden size and expert intermediate size (FP8)


def brute_force(selected: int, experts: int, sockets: int) -> float:
    """The mean over every selected subset of its busiest socket's count."""
    per = experts // sockets
    counts = [
        max(sum(1 for e in subset if e // per == s) for s in range(sockets))
        for subset in itertools.combinations(range(experts), selected)
    ]
    return sum(counts) / len(counts)


@pytest.mark.parametrize(
    ("selected", "experts", "sockets"), [(2, 4, 2), (3, 8, 4), (4, 12, 3), (5, 10, 5)]
)
def test_busiest_socket_expectation_equals_enumerating_every_subset(
    selected: int, experts: int, sockets: int
) -> None:
    exact = expected_busiest_socket_experts(selected, experts, sockets)
    assert exact == pytest.approx(brute_force(selected, experts, sockets), rel=1e-12)


def test_busiest_socket_expectation_at_the_ends_and_against_sampling() -> None:
    assert expected_busiest_socket_experts(0, 256, 16) == 0
    assert expected_busiest_socket_experts(1, 256, 16) == pytest.approx(1)
    assert expected_busiest_socket_experts(256, 256, 16) == pytest.approx(16)  # all: E/tp
    rng = np.random.default_rng(7)
    draws = [rng.choice(256, 8, replace=False) // 16 for _ in range(20_000)]
    sampled = np.mean([np.bincount(d, minlength=16).max() for d in draws])
    assert expected_busiest_socket_experts(8, 256, 16) == pytest.approx(sampled, abs=0.02)
    with pytest.raises(ValueError, match="divisible"):
        expected_busiest_socket_experts(8, 100, 16)


def test_one_token_lands_within_its_groups_sockets() -> None:
    # DeepSeek-V3: 8 groups of 32 experts, 4 per token; on 16 sockets a group is 2 sockets,
    # so one token's 8 experts fall on 8 sockets of 16 experts; a batch's on all 16
    placement = ExpertPlacement(256, 8, groups=8, groups_per_token=4)
    assert placement.busiest(8, 16) == expected_busiest_socket_experts(8, 128, 8)
    assert placement.busiest(16, 16) == expected_busiest_socket_experts(16, 256, 16)
    # 4 sockets of two groups each: the groups do not map onto whole sockets, so uniform
    assert placement.busiest(8, 4) == expected_busiest_socket_experts(8, 256, 4)
    assert placement.busiest(8, 16) > expected_busiest_socket_experts(8, 256, 16)


def expert_stages(moe_experts: str, batch: int, loading: str = "static") -> dict[str, Any]:
    scenario = api.load(
        DEEPSEEK, [f"parallelism.moe_experts={moe_experts}", f"moe_expert_loading={loading}"]
    )
    program = Compiler(scenario).program(StepShape("decode", batch, 1, 1024))
    moe = next(k for k in program.kernels if k.name == "decoder_moe")
    return {s.name: s for s in moe.stages if s.op == "expert_gemm"}


def expert_reads(moe_experts: str, batch: int) -> dict[str, float]:
    return {name: s.reads["hbm"] for name, s in expert_stages(moe_experts, batch).items()}


def test_streaming_every_expert_the_busiest_socket_still_computes_its_extra_pairs() -> None:
    # 40 tokens x 8 touch ~185 of 256 experts; streaming all of them changes which weights
    # a socket reads, not where the pairs land: the busiest socket's pairs are routed
    # loading's, above the mean share whole experts under tensor slicing compute
    static, routed = expert_stages("expert", 40), expert_stages("expert", 40, "routed")
    tensor = expert_stages("tensor", 40)
    touched = math.ceil(expected_distinct_experts(40, 256, 8))
    assert touched == 185
    share = ExpertPlacement(256, 8, groups=8, groups_per_token=4).busiest(touched, 16) / touched
    assert share > 1.05 / 16
    for name, stage in static.items():
        assert stage.flops == pytest.approx(routed[name].flops, rel=1e-12)
        assert stage.flops == pytest.approx(tensor[name].flops * share * 16, rel=1e-12)


def test_batch_one_reads_the_busiest_sockets_whole_experts() -> None:
    tensor, expert = expert_reads("tensor", 1), expert_reads("expert", 1)
    busiest = expected_busiest_socket_experts(8, 128, 8)
    # one whole expert's bytes: the workload's FP8 block-scaled weights
    gate_up, down = (n * (1 + 4 / 128**2) for n in (HIDDEN * 2 * INTER, INTER * HIDDEN))
    assert tensor["moe.experts_gate_up"] == pytest.approx(8 * gate_up / 16)
    assert expert["moe.experts_gate_up"] == pytest.approx(busiest * gate_up)
    assert expert["moe.experts_down"] == pytest.approx(busiest * down)


def test_a_step_streaming_every_expert_reads_the_same_bytes_either_way() -> None:
    # the shipped workload's static loading streams all 256 experts from 32 slots on
    assert expert_reads("expert", 40) == pytest.approx(expert_reads("tensor", 40), rel=1e-12)


def test_expert_parallel_batch_one_step_is_slower_and_a_full_step_unchanged() -> None:
    def step(moe_experts: str, batch: int) -> float:
        return api.step(DEEPSEEK, [f"parallelism.moe_experts={moe_experts}"], batch=batch).step_s

    assert step("expert", 1) > 1.5 * step("tensor", 1)
    # the busiest socket's extra pairs hide under the expert stream, which bounds the step
    assert step("expert", 40) == pytest.approx(step("tensor", 40), rel=1e-4)


def test_experts_that_do_not_divide_over_the_sockets_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"parallelism\.moe_experts.*does not divide"):
        api.load(
            "workloads/qwen3-235b-a22b-16socket.yaml",
            ["model=mixtral-8x7b", "parallelism.moe_experts=expert"],
        )
