"""The kernel boundaries as a resource of the step: their time is every call's launch and
sync (the kernels' overheads), a step of many short kernels names them as its bound, and
the reports say which device and stack ran."""

from __future__ import annotations

import pytest

from rdu_sim import api
from rdu_sim.config.hardware_file import device_noun
from rdu_sim.engine.timing import StepTiming
from rdu_sim.report.bound import RESOURCES, step_bound
from rdu_sim.report.console import header, machine, memory_table, served_by
from rdu_sim.report.summary import summarize

SEVENTY_B = "llama3.1-70b-decode"
LLAMA_1S = "llama3.1-8b-1socket"


def _timing(workload: str, overrides: dict[str, object], batch: int) -> StepTiming:
    detail = api.step(workload, overrides, batch=batch).detail
    assert isinstance(detail, StepTiming)
    return detail


def test_a_gpu_step_of_short_kernels_is_bound_by_their_boundaries() -> None:
    """Llama-3.1-70B at batch 1 on 8 H200s: ~800 kernels, each paying the boundary's sync,
    spend more device time at their boundaries than reading HBM; the bound says so, and its
    time is the kernels' overheads summed (two ways of computing the same thing)."""
    overrides = {"hardware": "dgx-h200"}
    timing = _timing(SEVENTY_B, overrides, batch=1)
    bound = step_bound(timing, api.load(SEVENTY_B, overrides).hardware)
    assert bound.boundaries_s == pytest.approx(sum(k.overhead_s for k in timing.kernels))
    calls = sum(k.calls for k in timing.kernels)
    sync = api.load(SEVENTY_B, overrides).hardware.gpu.kernel.sync  # type: ignore[union-attr]
    assert bound.boundaries_s == pytest.approx(calls * sync, rel=1e-9)
    assert bound.bound == "boundaries"
    assert bound.boundaries_s > bound.hbm_s > 0
    assert bound.resource == RESOURCES["boundaries"]
    assert timing.step_s >= bound.limit_s


def test_a_large_batch_leaves_the_boundaries_behind() -> None:
    """The same step at 32 slots reads 32 slots' KV: the HBM binds again, the boundaries'
    time unchanged (one sync per call, whatever the batch)."""
    overrides = {"hardware": "dgx-h200"}
    small = step_bound(_timing(SEVENTY_B, overrides, 1), api.load(SEVENTY_B, overrides).hardware)
    large = step_bound(_timing(SEVENTY_B, overrides, 32), api.load(SEVENTY_B, overrides).hardware)
    assert large.bound == "hbm"
    assert large.boundaries_s == pytest.approx(small.boundaries_s, rel=1e-12)


def test_sn40l_boundaries_are_its_kernels_launch_and_sync_and_looping_removes_most() -> None:
    """On SN40L the boundaries' time is each call's program and argument load and sync:
    unlooped, a call per layer and kernel; looped, one call per kernel."""
    looped = _timing(LLAMA_1S, {"stack": "none"}, batch=1)
    unlooped = _timing(LLAMA_1S, {"stack": "none", "kernel_looping": False}, batch=1)
    hardware = api.load(LLAMA_1S).hardware
    for timing in (looped, unlooped):
        bound = step_bound(timing, hardware)
        assert bound.boundaries_s == pytest.approx(sum(k.overhead_s for k in timing.kernels))
        assert 0 < bound.boundaries_s < timing.step_s
    unlooped_s = step_bound(unlooped, hardware).boundaries_s
    assert unlooped_s > 5 * step_bound(looped, hardware).boundaries_s


def test_the_run_report_names_the_device_and_leaves_out_tiers_it_lacks() -> None:
    """On a GPU system the report counts GPUs, not sockets, and shows no SRAM or DDR rows;
    with no stack it says the device ran alone."""
    gpu = summarize(api.run(SEVENTY_B, {"hardware": "dgx-h200", "serving.requests": 4}))
    assert gpu.device == "GPU" and machine(gpu) == "8 GPUs, tp=8"
    rows = [str(cell) for cell in memory_table(gpu).columns[0].cells]
    assert rows == ["HBM"]
    assert "served by tensorrt-llm" in header(gpu).plain
    alone = summarize(api.run(LLAMA_1S, {"stack": "none", "serving.requests": 2}))
    assert alone.device == "socket" and machine(alone) == "1 socket"
    assert [str(c) for c in memory_table(alone).columns[0].cells] == ["SRAM", "HBM", "DDR"]
    assert "on the device alone (no serving stack)" in header(alone).plain
    assert served_by("vllm-2024") == "served by vllm-2024"
    assert device_noun(api.load(LLAMA_1S).hardware) == "socket"


def test_the_sn40l_engine_reports_busy_time_of_exactly_its_unit_kinds() -> None:
    """``UNIT_KINDS`` lists the keys of an SN40L step's busy times, boundaries among them."""
    from rdu_sim.engine import UNIT_KINDS

    timing = _timing(LLAMA_1S, {"stack": "none"}, batch=4)
    assert tuple(timing.busy_s) == UNIT_KINDS
    assert set(timing.utilization) == set(UNIT_KINDS)
