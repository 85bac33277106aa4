"""A faster memory or link can make a step slower, by a bounded amount (docs/memory.md,
"Faster memory, slower step").

A step's collectives share each socket's P2P port, first come first served. A faster HBM (or
link, or PMU) changes when the stages' chunks reach the port, and so the order the port
serves them in: on the link-bound DeepSeek-R1 steps a chunk on the critical path can queue
behind a chunk that is not, and the link idles later, waiting for the producers the late
chunk holds back (a greedy schedule's anomaly, as Graham's, not an error of the
simulation). The bytes, the FLOPs and every unit's work stay the same; only that idle time
grows. These tests sweep each bandwidth over the shipped workloads' steps and pin what
docs/memory.md states: where the link does not bind, a faster HBM is never slower; where it
does, never more than ``BOUND`` slower than at any lower bandwidth of the sweep.
"""

from __future__ import annotations

import itertools

import pytest

from rdu_sim import api

BOUND = 0.05
"""The most a faster bandwidth may slow a step, against the fastest step at any lower
bandwidth of the sweep: measured 4.6% (DeepSeek-R1 full attention, 3.3 TB/s against 3.1),
4.3% (SnapStream, 4.4 TB/s against 3.6) and 2.9% (SnapStream, a 68 GB/s link against 66)."""

HBM_TB_S = [round(1.8 + 0.1 * i, 1) for i in range(43)]
"""1.8 TB/s (the shipped SN40L) to 6 TB/s, fine enough to land on the anomalies."""

LINK_GB_S = [20 + 2 * i for i in range(31)]
"""20 to 80 GB/s per direction around the shipped 33.53 GB/s."""

PMU_GB_S = [round(102.4 + 12.8 * i, 1) for i in range(25)]
"""Half to twice the shipped 204.8 GB/s per PMU."""

LINK_BOUND = [("deepseek-r1-128k-snapstream", None), ("deepseek-r1-128k-full", None)]
"""The shipped steps the P2P link binds at a fast HBM (TP16 over one port per socket): their
default decode step (every batch slot)."""

NOT_LINK_BOUND = [
    ("deepseek-r1-128k-snapstream", 1),
    ("llama3.1-70b-decode", None),
    ("llama3.1-8b-1socket", None),
    ("llama3.1-8b-8socket", None),
    ("qwen3-235b-a22b-16socket", None),
    ("gpt-oss-120b-8socket", None),
]
"""Shipped decode steps the HBM binds over the whole sweep (or no link at all)."""


def steps(workload: str, batch: int | None, field: str, values: list[str]) -> list[float]:
    """The step time at each value of ``field``."""
    return [api.step(workload, {field: v}, batch=batch).step_s for v in values]


def worst_rise(times: list[float]) -> float:
    """The most a step is slower than the fastest one before it (0 if never)."""
    return max(max(t / min(times[:i]) - 1 for i, t in enumerate(times) if i), 0.0)


@pytest.mark.slow
@pytest.mark.parametrize(("workload", "batch"), LINK_BOUND)
def test_a_faster_hbm_is_at_most_five_percent_slower_where_the_link_binds(
    workload: str, batch: int | None
) -> None:
    times = steps(workload, batch, "hw.socket.hbm.bandwidth", [f"{v} TB/s" for v in HBM_TB_S])
    assert worst_rise(times) <= BOUND
    assert times[-1] < 0.6 * times[0]  # the HBM binds at 1.8 TB/s: a faster one pays off


@pytest.mark.slow
@pytest.mark.parametrize(("workload", "batch"), NOT_LINK_BOUND)
def test_a_faster_hbm_is_never_slower_where_the_link_does_not_bind(
    workload: str, batch: int | None
) -> None:
    times = steps(workload, batch, "hw.socket.hbm.bandwidth", [f"{v} TB/s" for v in HBM_TB_S])
    assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(times))


def test_the_documented_anomaly_is_there() -> None:
    # docs/memory.md's figures: 4.4 TB/s is slower than 3.6 (the port's order), and both far
    # faster than the shipped 1.8 TB/s; if a change removes the anomaly, update the doc
    shipped, at_36, at_44 = steps(
        "deepseek-r1-128k-snapstream",
        None,
        "hw.socket.hbm.bandwidth",
        ["1.8 TB/s", "3.6 TB/s", "4.4 TB/s"],
    )
    assert at_36 < at_44 <= (1 + BOUND) * at_36
    assert at_44 < 0.6 * shipped


@pytest.mark.slow
@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("hw.system.intra_node_link.bandwidth", [f"{v} GB/s" for v in LINK_GB_S]),
        ("hw.socket.pmu.bandwidth", [f"{v} GB/s" for v in PMU_GB_S]),
    ],
)
def test_a_faster_link_or_pmu_is_at_most_five_percent_slower(field: str, values: list[str]) -> None:
    times = steps("deepseek-r1-128k-snapstream", None, field, values)
    assert worst_rise(times) <= BOUND
    assert times[-1] < times[0]
