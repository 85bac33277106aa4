"""PCUGroup timing and accounting, and the systolic-array GEMM efficiency model."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
import simpy

from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.hw import PCUGroup, gemm_efficiency
from rdu_sim.hw.pcu_group import DEFAULT_ARRAY_COLS, DEFAULT_ARRAY_ROWS

PEAK = 638e12 / 1040
R, C = DEFAULT_ARRAY_ROWS, DEFAULT_ARRAY_COLS


def test_compute_time_is_flops_over_pcus_peak_efficiency() -> None:
    env = CountingEnvironment()
    group = PCUGroup(env, n_pcus=96, peak_flops_per_pcu=PEAK)
    done = group.compute(3e12, efficiency=0.8)
    env.run()
    expected = 3e12 / (96 * PEAK * 0.8)
    assert env.now == pytest.approx(expected, rel=1e-12)
    assert done.value == pytest.approx(expected, rel=1e-12)
    assert group.busy.busy_time == pytest.approx(expected, rel=1e-12)
    assert group.matrix_flops == 3e12


def test_work_items_serialize_in_issue_order() -> None:
    env = CountingEnvironment()
    group = PCUGroup(env, 10, 1e12, vector_flops_per_pcu=2.5e11)
    finish: list[float] = []

    def issue(delay: float, flops: float, vector: bool) -> Generator[simpy.Event, Any, None]:
        yield env.timeout(delay)
        yield group.vector(flops) if vector else group.compute(flops)
        finish.append(env.now)

    env.process(issue(0.0, 1e13, False))  # 1 s of matrix work
    env.process(issue(0.5, 2.5e12, True))  # 1 s of vector work, queued behind it
    env.process(issue(5.0, 1e13, False))  # arrives to an idle group
    env.run()
    assert finish == pytest.approx([1.0, 2.0, 6.0])
    assert group.busy.busy_time == pytest.approx(3.0)
    assert group.busy.busy_time <= env.now
    assert group.vector_flops == 2.5e12


def test_busy_counts_an_item_once_its_end_is_processed() -> None:
    env = CountingEnvironment()
    group = PCUGroup(env, 1, 1.0)  # 1 FLOP/s: flops == seconds
    seen: list[float] = []
    before = env.timeout(2.0)  # due with the item's end, processed first (an older event)
    before.callbacks.append(lambda _ev: seen.append(group.busy.busy_time))
    done = group.compute(2.0)
    done.callbacks.append(lambda _ev: seen.append(group.busy.busy_time))
    env.run()
    assert seen == [0.0, 2.0]


@pytest.mark.parametrize("at_once", [True, False])
def test_busy_adds_up_many_items_issued_at_once_or_one_by_one(at_once: bool) -> None:
    env = CountingEnvironment()
    group = PCUGroup(env, 1, 1.0)
    seen: list[float] = []

    def one_by_one() -> Generator[simpy.Event, Any, None]:
        for _ in range(100):
            yield group.compute(1.0)
            seen.append(group.busy.busy_time)

    if at_once:  # more items waiting than are counted at a time, none of them done
        ends = [group.compute(1.0) for _ in range(100)]
        for end in ends[::10]:
            end.callbacks.append(lambda _ev: seen.append(group.busy.busy_time))
        env.run()
        assert seen == [float(k) for k in range(1, 101, 10)]
    else:
        env.process(one_by_one())
        env.run()
        assert seen == [float(k) for k in range(1, 101)]
    assert group.busy.busy_time == 100.0
    assert group.busy.intervals == 100


def test_vector_rate_defaults_to_half_the_matrix_peak() -> None:
    group = PCUGroup(CountingEnvironment(), 4, 1e12)
    assert group.vector_time(1e12) == pytest.approx(2 * group.compute_time(1e12))


def test_bad_arguments_are_rejected() -> None:
    env = CountingEnvironment()
    with pytest.raises(ValueError):
        PCUGroup(env, 0, PEAK)
    with pytest.raises(ValueError):
        PCUGroup(env, 1, -1.0)
    with pytest.raises(ValueError):
        PCUGroup(env, 1, PEAK).compute(1.0, efficiency=0.0)
    with pytest.raises(ValueError):
        gemm_efficiency(0, 1, 1)


def test_gemm_efficiency_is_one_for_aligned_tiles_with_hidden_fill() -> None:
    assert gemm_efficiency(4 * R, 8 * C, 4096, fill_drain_overlap=1.0) == 1.0


def test_gemm_efficiency_aligned_pays_only_fill_and_drain() -> None:
    k = 4096
    expected = k / (k + R + C - 2)
    assert gemm_efficiency(4 * R, 8 * C, k) == pytest.approx(expected)
    assert gemm_efficiency(R, C, 16) < gemm_efficiency(R, C, 1024)  # short k: fill dominates


def test_gemm_efficiency_skinny_m1_is_low() -> None:
    k = 8192
    eff = gemm_efficiency(1, 3840, k)  # 3840 = 120 R = 640 C
    temporal = k / (k + R + C - 2)
    # best orientation puts n on the rows and m=1 on one of C columns
    assert eff == pytest.approx(temporal / C)
    assert eff < 0.5 * gemm_efficiency(256, 3840, k)
    assert gemm_efficiency(1, 3840, k, allow_transpose=False) == pytest.approx(temporal / R)


def test_gemm_efficiency_padding_waste() -> None:
    full = gemm_efficiency(R, C, 1024)
    assert gemm_efficiency(R + 1, C, 1024, allow_transpose=False) == pytest.approx(
        full * (R + 1) / (2 * R)
    )
