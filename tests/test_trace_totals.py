"""Step traces cross-checked against the step's own report (differential tests): the work
summed over a trace's tiles is the step's, the trace spans the step, a GPU's kernel calls
sit one after another on its stream, every traced socket shows what the engine did."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

import pytest

from rdu_sim import api
from rdu_sim.engine.timing import StepTiming
from rdu_sim.report.trace import chrome_trace

ROUNDING_US = 1e-7
"""Below the trace's quantum (a picosecond, ``trace_us``): a gap or overlap of one quantum
between abutting slices is a defect, float noise of adding two rounded numbers is not."""


def _step(workload: str, overrides: dict[str, Any] | None = None, **shape: Any) -> StepTiming:
    cost = api.step(workload, overrides, record=True, **shape)
    timing = cost.detail
    assert isinstance(timing, StepTiming) and timing.records is not None
    return timing


def _events(timing: StepTiming) -> list[dict[str, Any]]:
    assert timing.records is not None
    events: list[dict[str, Any]] = chrome_trace(timing.records)["traceEvents"]
    return events


def _tracks(events: list[dict[str, Any]]) -> dict[tuple[int, str], list[dict[str, Any]]]:
    """Each (socket, track name)'s slices, by start."""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    out: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            out[(e["pid"], names[(e["pid"], e["tid"])])].append(e)
    for slices in out.values():
        slices.sort(key=lambda e: (e["ts"], e["dur"]))
    return out


def _overlaps(slices: list[dict[str, Any]]) -> int:
    return sum(
        1 for a, b in itertools.pairwise(slices) if b["ts"] < a["ts"] + a["dur"] - ROUNDING_US
    )


def _work(events: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """Per socket: FLOPs and bytes per tier summed over the tile slices, a fast-forwarded
    kernel's times ``calls / simulated_layers`` (the trace's rule, as the engine's)."""
    scale = {
        (e["pid"], e["args"]["kernel"]): e["args"]["calls"] / e["args"]["simulated_layers"]
        for e in events
        if e["ph"] == "X" and e["name"].startswith("fast-forward")
    }
    out: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in events:
        if e["ph"] != "X" or e["cat"] not in ("stage", "gpu"):
            continue
        args = e["args"]
        f = scale.get((e["pid"], args.get("kernel")), 1.0)
        for key, value in args.items():
            if key in ("matrix_flops", "vector_flops"):
                out[e["pid"]][key] += value * f
            elif key.endswith(("_read_bytes", "_write_bytes", "_sent_bytes")):
                out[e["pid"]][key.split("_")[0]] += value * f
    return out


def _assert_work_is_the_reports(timing: StepTiming, sockets: int) -> None:
    work = _work(_events(timing))
    assert sorted(work) == list(range(sockets))
    for socket, totals in work.items():
        for tier in ("hbm", "ddr", "p2p"):
            expected = timing.bytes_by_tier[tier]
            assert totals.get(tier, 0.0) == pytest.approx(expected, rel=1e-12), (socket, tier)
        assert totals["matrix_flops"] == pytest.approx(timing.flops, rel=1e-12)
        assert totals["vector_flops"] == pytest.approx(timing.vector_flops, rel=1e-12)


@pytest.mark.parametrize(
    ("workload", "overrides", "shape", "sockets"),
    [
        ("llama3.1-8b-1socket", None, {}, 1),  # tiles ready at once (kv_read) included
        ("llama3.1-8b-1socket", None, {"phase": "prefill", "tokens": 512}, 1),
        ("llama3.1-8b-1socket", {"memory.weights": "streamed"}, {}, 1),  # DDR
        ("llama3.1-8b-8socket", {"engine.all_sockets": True}, {"batch": 1}, 8),  # links
        # fast-forwarded layers on every socket
        ("llama3.1-8b-8socket", {"engine.all_sockets": True}, {"phase": "prefill"}, 8),
        ("llama3.1-8b-8socket", None, {"batch": 1}, 1),  # the symmetric shortcut
    ],
)
def test_sn40l_trace_work_is_the_steps(
    workload: str, overrides: dict[str, Any] | None, shape: dict[str, Any], sockets: int
) -> None:
    """FLOPs and bytes per tier over a trace's tiles are the report's, on every socket."""
    timing = _step(workload, overrides, **shape)
    if sockets > 1 or shape.get("batch") == 1:
        assert timing.bytes_by_tier["p2p"] > 0
    _assert_work_is_the_reports(timing, sockets)


def test_every_tile_has_its_slice() -> None:
    """A tile whose operands were ready at once has a zero-length slice (it was dropped,
    with its bytes: kv_read had tiles 0, 2, 4, 6 of 8)."""
    timing = _step("llama3.1-8b-1socket")
    kv = _tracks(_events(timing))[(0, "stage/attn.kv_read")]
    layers = {e["args"]["layer"] for e in kv}
    assert {(e["args"]["layer"], e["args"]["tile"]) for e in kv} == {
        (layer, tile) for layer in layers for tile in range(timing.tiles_per_stage)
    }
    assert any(e["dur"] == 0 for e in kv)


def test_fast_forward_is_marked_on_every_socket_and_calls_are_the_kernels() -> None:
    timing = _step("llama3.1-8b-8socket", {"engine.all_sockets": True}, phase="prefill")
    events = _events(timing)
    marks = [e for e in events if e["ph"] == "X" and e["name"].startswith("fast-forward")]
    assert sorted(e["pid"] for e in marks) == list(range(8))
    decoder = timing.kernel("decoder")
    assert decoder.simulated_iterations < decoder.calls
    for mark in marks:
        assert mark["args"]["calls"] == decoder.calls
        assert mark["args"]["simulated_layers"] == decoder.simulated_iterations
        assert mark["args"]["skipped_layers"] == decoder.calls - decoder.simulated_iterations
    layers = [e for e in events if e["ph"] == "X" and e["args"].get("kernel") == "decoder"]
    layers = [e for e in layers if e["cat"] == "kernel"]
    assert len(layers) == 8 * decoder.simulated_iterations
    assert {e["args"]["calls"] for e in layers} == {decoder.calls}  # not the cut's count


def test_sn40l_trace_spans_the_step_host_included() -> None:
    """The stack's serial host time follows the device on the runtime track."""
    timing = _step("llama3.1-8b-1socket")
    assert timing.host_serial_s > 0 and timing.runtime_s > 0
    tracks = _tracks(_events(timing))
    slices = [e for track in tracks.values() for e in track]
    end = max(e["ts"] + e["dur"] for e in slices)
    assert end == pytest.approx(timing.step_s * 1e6, abs=1e-6)
    runtime = tracks[(0, "runtime")]
    assert sum(e["dur"] for e in runtime) == pytest.approx(timing.runtime_s * 1e6, abs=1e-6)
    assert runtime[0]["ts"] == pytest.approx(timing.device_s * 1e6, abs=1e-6)
    device = [e for (_, name), track in tracks.items() if name != "runtime" for e in track]
    assert max(e["ts"] + e["dur"] for e in device) == pytest.approx(timing.device_s * 1e6, abs=1e-6)


def test_gpu_kernel_calls_each_at_their_own_start() -> None:
    """A GPU's kernel calls one after another on its stream: no overlap on the kernel track
    or any segment's, the calls' slices sum to the kernels' times, their end is the device's
    (each call was drawn from its kernel's first call on: 517 overlapping pairs)."""
    timing = _step("llama3.1-70b-decode", {"hardware": "dgx-h100"}, batch=1)
    events = _events(timing)
    tracks = _tracks(events)
    kernel = tracks[(0, "kernel")]
    for name, track in tracks.items():
        assert _overlaps(track) == 0, name
    assert sum(e["dur"] for e in kernel) == pytest.approx(
        sum(k.time_s for k in timing.kernels) * 1e6, rel=1e-9
    )
    assert max(e["ts"] + e["dur"] for e in kernel) == pytest.approx(timing.device_s * 1e6, abs=1e-6)
    for k in timing.kernels:
        calls = [e for e in kernel if e["name"] == k.name]
        assert len(calls) == (1 if k.looped else k.calls), k.name
    assert {e["pid"] for e in events} == {0}  # the GPUs run in lockstep: GPU 0 is drawn
    _assert_work_is_the_reports(timing, 1)


def test_gpu_trace_shows_the_stacks_host_work_beside_the_device() -> None:
    timing = _step("llama3.1-70b-decode", {"hardware": "dgx-h100"}, batch=1)
    assert timing.host_overlapped_s > 0
    (runtime,) = _tracks(_events(timing))[(0, "runtime")]
    assert runtime["ts"] == 0
    assert runtime["dur"] == pytest.approx(timing.host_overlapped_s * 1e6, abs=1e-6)
