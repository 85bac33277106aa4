"""Extreme but positive values: refused by bounds that follow from the internal units, or
stopped where seconds become the serving clock's integer picoseconds; never a crash.

- rates (B/s, FLOP/s, Hz), also times their efficiency, are >= 1 per second, so every
  duration (work / rate) is a finite float;
- a socket keeps at least one usable PCU and PMU, and a kernel with more stages than the
  usable units is a CapacityError;
- serving time is int64 picoseconds: arrivals past 2^62 ps are refused where they are read
  or drawn, and a run whose steps would carry the clock past 2^63 ps stops with an error
  naming its longest step.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rdu_sim import api
from rdu_sim.compiler.errors import CapacityError
from rdu_sim.config.errors import ConfigError
from rdu_sim.scenario import load_scenario
from rdu_sim.serving.clock import (
    MAX_ARRIVAL_S,
    MAX_PS,
    PS_PER_S,
    SimulatedTimeError,
    advance,
    step_ps,
)

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"


def test_clock_bounds_are_the_int64_range() -> None:
    assert MAX_PS == 2**63 - 1
    assert MAX_ARRIVAL_S * PS_PER_S == 2**62
    assert advance(MAX_PS - 5, 5, lambda: 1.0) == MAX_PS
    with pytest.raises(SimulatedTimeError, match=r"2\^63 ps.*longest step takes 1 s"):
        advance(MAX_PS - 5, 6, lambda: 1.0)
    assert step_ps(1e-15, "x") == 1  # never a zero-length step
    assert step_ps(2.5, "x") == 2_500_000_000_000
    for seconds in (float("inf"), float("nan"), 1e7):
        with pytest.raises(SimulatedTimeError, match="x takes"):
            step_ps(seconds, "x")


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("hw.socket.hbm.bandwidth=5e-324", "must be at least 1 B/s, got 4.94e-324 B/s"),
        ("hw.socket.pcu.peak_flops=0.5", "must be at least 1 FLOP/s, got 0.5 FLOP/s"),
        ("hw.socket.pcu.vector_flops=1e-300", "must be at least 1 FLOP/s"),
        ("hw.socket.pmu.bandwidth=1e-300", "must be at least 1 B/s"),
        ("hw.system.intra_node_link.bandwidth=5e-324", "must be at least 1 B/s"),
        ("hw.socket.hbm.efficiency=1e-300", "bandwidth x efficiency"),
        ("hw.socket.pcu.max_gemm_efficiency=1e-300", "peak_flops x max_gemm_efficiency"),
        ("hw.socket.pcu.count=1", "leaves no usable PCU"),
        ("hw.socket.pmu.count=1", "leaves no usable PMU"),
        ("hw.socket.usable_fraction=1e-300", "leaves no usable PCU"),
    ],
)
def test_rates_and_counts_that_would_divide_by_zero_are_refused(override: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_scenario(LLAMA, [override])
    assert words in str(info.value)
    assert override.split("=")[0].removeprefix("hw.").rsplit(".", 1)[0] in str(info.value)


def test_a_kernel_with_more_stages_than_usable_units_is_a_capacity_error() -> None:
    scenario = load_scenario(LLAMA, ["hw.socket.pcu.count=3", "hw.socket.usable_fraction=1"])
    with pytest.raises(CapacityError, match="stages, each needing a PCU and a PMU"):
        api.step(scenario)


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("hw.socket.hbm.bandwidth=1 MB/s", "would pass 9.223e+06 s"),
        ("hw.socket.pcu.peak_flops=1000 FLOP/s", "beyond the serving clock's range"),
        ("hw.socket.kernel.layer_loop=3600 s", "would pass 9.223e+06 s"),
    ],
)
def test_a_run_that_would_overflow_the_clock_stops_naming_the_workload(
    override: str, words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        api.run(LLAMA, [override, "serving.requests=4"])
    issue = info.value.issues[0]
    assert issue.file == str(LLAMA) and issue.field == "serving"
    assert words in issue.message


def test_poisson_arrivals_past_the_clock_are_refused_before_simulating() -> None:
    arrival = "serving.arrival={process: poisson, rate: 1e-6}"
    with pytest.raises(ConfigError) as info:
        api.run(LLAMA, [arrival, "serving.requests=10"])
    issue = info.value.issues[0]
    assert issue.field == "serving.arrival.rate"
    assert "beyond 4.612e+06 s" in issue.message
    assert (
        len(
            api.run(
                LLAMA, ["serving.arrival={process: poisson, rate: 2}", "serving.requests=3"]
            ).records.arrival_ps
        )
        == 3
    )
