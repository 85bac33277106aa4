"""Write the engine's trace records as a Chrome trace JSON that opens in ui.perfetto.dev.

Format (the Chrome "Trace Event Format", JSON object form): ``traceEvents`` holds

* ``ph: "M"`` metadata naming each socket (a process, ``pid`` = socket index) and each of its
  tracks (a thread: ``agcu`` launches, syncs and fast-forwarded layers, ``kernel`` calls and
  layers, ``runtime`` the serving stack's host work around the step (socket 0), one
  ``stage/<name>`` track per stage with a slice per tile it computes; a GPU: ``host`` its
  kernel launches and ``gpu/segment<i>`` a slice per tile of each segment);
* ``ph: "X"`` complete slices with ``ts`` and ``dur`` in microseconds, named for what they
  are (``decoder layer 3``, ``attn.q_proj layer 3 tile 5``) with arguments: a kernel
  layer's kernel, layer and calls; a tile's kernel, stage, operator, layer, tile, matrix and
  vector FLOPs, SRAM bytes, bytes read and written per off-chip tier and, on the tile that
  starts a collective chunk, the bytes its socket sends on the links (``p2p_sent_bytes``);
  a fast-forward's kernel, calls, simulated and skipped layers. Every tile has its slice,
  one whose operands were ready at once a zero-length one. Summed over the tiles, with a
  fast-forwarded kernel's scaled by ``calls / simulated_layers`` (as the engine scales its
  work), FLOPs and bytes per tier are the step's (``StepTiming.bytes_by_tier``, socket 0's;
  each socket's its own); the trace spans the step, host time included;
* ``ph: "C"`` counters, one track per tier and link of each socket: ``HBM``, ``DDR`` and
  ``P2P links`` bytes in flight (the links': each collective chunk's sent bytes from its
  start until it is done).

``rdu-sim step --trace`` simulates every socket of the TP group (``engine.all_sockets``) so
the trace holds them all; ``--trace-sockets one`` keeps the symmetric one-socket simulation.
A GPU system's GPUs run in lockstep and the engine simulates GPU 0 (``sockets_simulated``
in ``otherData``): its trace has that GPU only, and no counters. A pipelined step's trace
holds every stage (``engine.pipeline.pipeline_records``): stage ``s``'s sockets numbered
after the earlier stages', each micro-batch's records at its start on the stage, a
``pipeline`` track of micro-batches and idle gaps and a ``hand-off`` track on each stage's
first socket.

The engine only emits records (``StepTiming.records`` with ``record=True``); this module
decides nothing about timing. Nothing is written until ``write_chrome_trace`` is called.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rdu_sim.engine.records import TraceRecords
from rdu_sim.engine.timing import StepTiming
from rdu_sim.report.files import write_file

_US = 1e6
_FIXED_TRACKS = ("agcu", "kernel")
_TILE_TRACKS = ("stage/", "gpu/")  # a slice per tile: SN40L stages, GPU segments
_COUNTER_LABELS = {"hbm": "HBM", "ddr": "DDR", "p2p": "P2P links"}


def trace_us(seconds: float) -> float:
    """Seconds as a trace's microseconds, rounded to the picosecond (the serving clock's
    unit): a 7 us launch shows as 7.0, not 6.999999999999999 (float noise of seconds x 1e6)."""
    return round(seconds * _US, 6)


def _dur_us(start_s: float, dur_s: float) -> float:
    """A slice's duration in microseconds as its rounded end less its rounded start, so a
    slice that ends where the next begins meets it in the file too (rounding each on its
    own can leave them a picosecond apart, overlapping)."""
    return round(trace_us(start_s + dur_s) - trace_us(start_s), 6)


def _kernel_at(records: TraceRecords) -> Callable[[int, float], str | None]:
    """The kernel running on a socket at a time (from its ``kernel`` track's slices; kernels
    run one after another, so they never overlap)."""
    spans: dict[int, list[tuple[float, float, str]]] = {}
    for s in records.slices:
        if s.track == "kernel":
            kernel = str(dict(s.args).get("kernel", s.name))
            spans.setdefault(s.socket, []).append((s.start_s, s.start_s + s.dur_s, kernel))
    for socket_spans in spans.values():
        socket_spans.sort()
    starts = {socket: [span[0] for span in v] for socket, v in spans.items()}

    def at(socket: int, time_s: float) -> str | None:
        index = bisect.bisect_right(starts.get(socket, []), time_s) - 1
        if index < 0:
            return None
        _start, end, kernel = spans[socket][index]
        return kernel if time_s <= end else None

    return at


def _track_ids(records: TraceRecords) -> dict[tuple[int, str], int]:
    """Thread ids per (socket, track): AGCU and kernel first, then stages in order of use."""
    ids: dict[tuple[int, str], int] = {}
    sockets = sorted({s.socket for s in records.slices} | {c.socket for c in records.counters})
    for socket in sockets:
        for track in _FIXED_TRACKS:
            ids[(socket, track)] = len(ids) + 1
    for s in records.slices:
        key = (s.socket, s.track)
        if key not in ids:
            ids[key] = len(ids) + 1
    return ids


def chrome_trace(records: TraceRecords, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """The trace as a JSON-ready dict (``traceEvents`` plus ``otherData``)."""
    ids = _track_ids(records)
    kernel_at = _kernel_at(records)
    events: list[dict[str, Any]] = []
    for socket in sorted({sock for sock, _ in ids}):
        events.append(
            {
                "name": "process_name",
                "ph": "M",
                "pid": socket,
                "tid": 0,
                "args": {"name": f"socket {socket}"},
            }
        )
        events.append(
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": socket,
                "tid": 0,
                "args": {"sort_index": socket},
            }
        )
    for (socket, track), tid in ids.items():
        events.append(
            {"name": "thread_name", "ph": "M", "pid": socket, "tid": tid, "args": {"name": track}}
        )
        events.append(
            {
                "name": "thread_sort_index",
                "ph": "M",
                "pid": socket,
                "tid": tid,
                "args": {"sort_index": tid},
            }
        )
    for s in records.slices:
        args: dict[str, Any] = dict(s.args)
        if s.track.startswith(_TILE_TRACKS):
            kernel = kernel_at(s.socket, s.start_s)
            if kernel is not None:
                args = {"kernel": kernel, **args}
        events.append(
            {
                "name": s.name,
                "cat": s.track.split("/", 1)[0],
                "ph": "X",
                "ts": trace_us(s.start_s),
                "dur": _dur_us(s.start_s, s.dur_s),
                "pid": s.socket,
                "tid": ids[(s.socket, s.track)],
                "args": args,
            }
        )
    for c in records.counters:
        events.append(
            {
                "name": f"{_COUNTER_LABELS.get(c.name, c.name)} bytes in flight",
                "ph": "C",
                "ts": trace_us(c.time_s),
                "pid": c.socket,
                "tid": 0,
                "args": {"bytes": c.value},
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": dict(metadata or {})}


def step_metadata(timing: StepTiming) -> dict[str, Any]:
    """The step's headline figures, shown by Perfetto under the trace's metadata."""
    return {
        "step_s": timing.step_s,
        "phase": timing.phase,
        "batch": timing.batch,
        "context": timing.context,
        "tp": timing.tp,
        "sockets_simulated": timing.sockets_simulated,
        "events": timing.events,
        "hbm_bandwidth_fraction": timing.hbm_bandwidth_fraction,
    }


def write_chrome_trace(
    timing: StepTiming, path: str | Path, extra: dict[str, Any] | None = None
) -> Path:
    """Write ``timing``'s records to ``path`` (parents created, all or nothing: a WriteError
    naming the path when it cannot be written); returns the path. ``extra`` joins the
    trace's metadata (``otherData``: the step's provenance, say).

    Raises ValueError when the step was simulated without ``record=True``.
    """
    if timing.records is None:
        raise ValueError("this StepTiming has no trace records: simulate with record=True")
    trace = chrome_trace(timing.records, {**step_metadata(timing), **(extra or {})})
    return write_file(Path(path), lambda handle: json.dump(trace, handle))
