"""Trace records from the engine and the Chrome/Perfetto JSON written from them."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from test_engine_programs import deepseek_like_program, hardware, kernel, program, stage

from rdu_sim.compiler.program import CollectiveSpec
from rdu_sim.config.workload import EngineConfig
from rdu_sim.engine import simulate_step
from rdu_sim.report.trace import chrome_trace, write_chrome_trace

HW = hardware(zero=False)


def traced_program() -> object:
    layer = [
        stage("norm", pcus=4, vector_flops=1e6, hbm=1e5, out=1e5),
        stage("mm", pcus=100, flops=1e10, hbm=1e8, ddr=1e6, inputs=("norm",), out=1e5),
        stage(
            "ar",
            pcus=2,
            vector_flops=1e5,
            inputs=("mm",),
            out=1e5,
            collective=CollectiveSpec("allreduce", 1e5, 4),
        ),
    ]
    return program(
        [
            kernel("embed", [stage("e", pcus=1, hbm=1e4, out=1e4)], calls=2),
            kernel("layer", layer, calls=4, looped=True),
        ],
        tp=4,
    )


def test_records_cover_kernels_stage_tiles_and_bytes_in_flight() -> None:
    t = simulate_step(traced_program(), HW, record=True)  # type: ignore[arg-type]
    assert t.records is not None
    tracks = {s.track for s in t.records.slices}
    assert {"kernel", "agcu", "stage/mm", "stage/norm"} <= tracks
    # one compute slice per tile per layer of the GEMM stage
    assert sum(1 for s in t.records.slices if s.track == "stage/mm") == 4 * 8
    # the unlooped embedding's two calls, the looped layer's four iterations
    names = [s.name for s in t.records.slices if s.track == "kernel"]
    assert names == ["embed", "embed", *(f"layer layer {i}" for i in range(4))]
    counters = {c.name for c in t.records.counters}
    assert {"hbm", "ddr", "p2p"} <= counters
    for name in ("hbm", "ddr", "p2p"):
        last = [c for c in t.records.counters if c.name == name][-1]
        assert last.value == 0.0  # everything issued has landed
    assert all(
        s.start_s >= 0 and s.start_s + s.dur_s <= t.step_s * (1 + 1e-9) for s in t.records.slices
    )
    # stage slices never overlap (a stage's PCUs are one FIFO server)
    mm = sorted((s for s in t.records.slices if s.track == "stage/mm"), key=lambda s: s.start_s)
    for a, b in itertools.pairwise(mm):
        assert a.start_s + a.dur_s <= b.start_s + 1e-15


def test_no_records_unless_asked() -> None:
    t = simulate_step(traced_program(), HW)  # type: ignore[arg-type]
    assert t.records is None
    with pytest.raises(ValueError, match="record=True"):
        write_chrome_trace(t, "never-written.json")
    assert not Path("never-written.json").exists()


def test_chrome_trace_json_has_metadata_slices_and_counters(tmp_path: Path) -> None:
    t = simulate_step(traced_program(), HW, record=True)  # type: ignore[arg-type]
    path = write_chrome_trace(t, tmp_path / "sub" / "step.json")
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    phases = {e["ph"] for e in events}
    assert phases == {"M", "X", "C"}
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"agcu", "kernel", "stage/mm"} <= names
    assert any(e["name"] == "process_name" and e["args"]["name"] == "socket 0" for e in events)
    slices = [e for e in events if e["ph"] == "X"]
    end_us = max(e["ts"] + e["dur"] for e in slices)
    assert end_us == pytest.approx(t.step_s * 1e6, rel=1e-9)  # microseconds
    assert all(e["dur"] >= 0 for e in slices)
    assert data["otherData"]["step_s"] == t.step_s


def test_all_sockets_trace_has_one_process_per_socket() -> None:
    t = simulate_step(traced_program(), HW, EngineConfig(all_sockets=True), record=True)  # type: ignore[arg-type]
    assert t.records is not None
    trace = chrome_trace(t.records)
    sockets = {e["pid"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert sockets == {0, 1, 2, 3}


def test_fast_forwarded_layers_are_marked_in_the_trace() -> None:
    t = simulate_step(deepseek_like_program(tp=16, batch=8), hardware(), record=True)
    assert t.records is not None
    marks = [s for s in t.records.slices if s.name.startswith("fast-forward")]
    assert len(marks) == 1 and marks[0].track == "agcu"
    moe = t.kernel("decoder_moe")
    assert marks[0].dur_s == pytest.approx(
        (moe.calls - moe.simulated_iterations) * (moe.period_s or 0.0), rel=1e-9
    )


def test_slices_say_what_they_are_and_carry_their_work(tmp_path: Path) -> None:
    """A tile's slice names its stage, layer and tile; its arguments hold the kernel (the one
    running on that socket then), the operator, FLOPs and bytes per tier, which sum over the
    tiles and layers to the stage's work per call x calls."""
    t = simulate_step(traced_program(), HW, record=True)  # type: ignore[arg-type]
    assert t.records is not None
    events = chrome_trace(t.records)["traceEvents"]
    mm = [e for e in events if e["ph"] == "X" and e["args"].get("stage") == "mm"]
    assert mm[0]["name"] == "mm layer 0 tile 0"
    assert {e["args"]["kernel"] for e in mm} == {"layer"}
    assert {e["args"]["op"] for e in mm} == {"gemm"}
    assert sum(e["args"]["matrix_flops"] for e in mm) == pytest.approx(4 * 1e10)
    assert sum(e["args"]["hbm_read_bytes"] for e in mm) == pytest.approx(4 * 1e8)
    assert sum(e["args"]["ddr_read_bytes"] for e in mm) == pytest.approx(4 * 1e6)
    layers = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
    assert [e["args"].get("layer") for e in layers] == [None, None, 0, 1, 2, 3]
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert {"HBM bytes in flight", "DDR bytes in flight", "P2P links bytes in flight"} <= counters
