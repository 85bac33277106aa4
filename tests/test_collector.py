"""The cyclic collector is paused while a step is compiled and simulated, and restored."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from rdu_sim import api
from rdu_sim.des.collector import collector_paused
from rdu_sim.engine.gpu.engine import GpuEngine

ROOT = Path(__file__).resolve().parents[1]


def test_paused_inside_and_restored() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: the outer block still owns the state
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restored_after_an_error() -> None:
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_left_paused_when_paused_before() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_step_runs_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    """EngineBackend.step_cost compiles and simulates with the collector off."""
    seen: list[bool] = []
    simulate = GpuEngine.simulate_step

    def watched(self: GpuEngine, program: object) -> object:
        seen.append(gc.isenabled())
        return simulate(self, program)  # type: ignore[arg-type]

    monkeypatch.setattr(GpuEngine, "simulate_step", watched)
    cost = api.step(
        ROOT / "workloads" / "ep" / "deepseek-r1-h100.yaml",
        {"serving.max_context": 2048},
        batch=1,
    )
    assert cost.step_s > 0
    assert seen and not any(seen)
    assert gc.isenabled()
