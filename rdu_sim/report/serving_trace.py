"""A serving run as a Perfetto trace: each request on its batch slot, the queue, flow arrows.

``rdu-sim run WORKLOAD --trace FILE`` writes it (open it in ui.perfetto.dev); it is built from
the run's per-request columns and state series (``RunResult.requests()``, ``timeseries()``),
the same records ``--out`` writes as CSV, so it decides nothing about timing. Chrome "Trace
Event Format", one process ``serving``:

* ``slot k`` tracks (one per batch slot): ``prefill r<i>`` from admission to the first
  token and ``decode r<i>`` from the first token to the last, with the request's lengths,
  queueing delay, TTFT and TPOT as arguments; a slot runs one request at a time, so its
  slices never overlap;
* ``queue k`` tracks: ``queued r<i>`` from arrival to admission, each on the first queue
  lane free at its arrival (greedy interval partitioning, at most :data:`MAX_QUEUE_LANES`
  lanes; a request beyond them shows in the counters only);
* counters ``requests waiting``, ``slots prefilling``, ``slots decoding``;
* a flow arrow per request (``ph`` ``s`` / ``t`` / ``f``, id = request) from its queue slice
  through its prefill to its decode slice, each bound at the slice's midpoint.

Times are microseconds from the start of the run; ``otherData`` holds the run's provenance
and headline figures.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rdu_sim.report.files import write_file
from rdu_sim.report.trace import trace_us

__all__ = ["MAX_QUEUE_LANES", "serving_trace", "write_serving_trace"]

PID = 1
MAX_QUEUE_LANES = 32
"""Queue lanes drawn at most (a run whose queue grows past this shows the rest in the
``requests waiting`` counter)."""

_COUNTERS: tuple[tuple[str, str], ...] = (
    ("waiting", "requests waiting"),
    ("prefilling", "slots prefilling"),
    ("decoding", "slots decoding"),
)
"""(series column, counter track) pairs."""


def _queue_lanes(arrival: NDArray[Any], admit: NDArray[Any]) -> dict[int, int]:
    """Request -> queue lane, the first lane free at its arrival (in arrival order)."""
    lanes: dict[int, int] = {}
    free_at: list[tuple[float, int]] = []  # (time the lane frees, lane)
    spare: list[int] = []
    order = sorted((float(arrival[i]), i) for i in range(arrival.size) if admit[i] > arrival[i])
    for start, request in order:
        while free_at and free_at[0][0] <= start:
            heapq.heappush(spare, heapq.heappop(free_at)[1])
        if spare:
            lane = heapq.heappop(spare)
        elif len(free_at) < MAX_QUEUE_LANES:
            lane = len(free_at)
        else:
            continue
        lanes[request] = lane
        heapq.heappush(free_at, (float(admit[request]), lane))
    return lanes


def _thread(tid: int, name: str) -> list[dict[str, Any]]:
    return [
        {"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": name}},
        {
            "name": "thread_sort_index",
            "ph": "M",
            "pid": PID,
            "tid": tid,
            "args": {"sort_index": tid},
        },
    ]


def _number(value: Any) -> float | None:
    number = float(value)
    return None if math.isnan(number) else round(number, 12)


def serving_trace(
    requests: Mapping[str, NDArray[Any]],
    series: Mapping[str, NDArray[Any]],
    batch_slots: int,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The trace as a JSON-ready dict (``traceEvents`` plus ``otherData``)."""
    arrival, admit = requests["arrival_s"], requests["admit_s"]
    first, finish, slot = requests["first_token_s"], requests["finish_s"], requests["slot"]
    started = (admit >= 0) & (slot >= 0)  # unset times are -1 ps
    lanes = _queue_lanes(np.where(started, arrival, 0.0), np.where(started, admit, 0.0))
    queue_tid = batch_slots + 1  # slot k is thread k + 1; queue lanes follow
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": "serving"}}
    ]
    for k in range(batch_slots):
        events += _thread(k + 1, f"slot {k}")
    for lane in range(max(lanes.values(), default=-1) + 1):
        events += _thread(queue_tid + lane, f"queue {lane}")
    for i in np.flatnonzero(started):
        request = int(i)
        args = {
            "request": request,
            "prompt_tokens": int(requests["prompt_tokens"][i]),
            "output_tokens": int(requests["output_tokens"][i]),
            "slot": int(slot[i]),
            "queue_delay_s": _number(requests["queue_delay_s"][i]),
            "ttft_s": _number(requests["ttft_s"][i]),
            "tpot_s": _number(requests["tpot_s"][i]),
        }
        spans: list[tuple[str, int, float, float]] = []  # (name, tid, start s, end s)
        if request in lanes:
            spans.append((f"queued r{request}", queue_tid + lanes[request], arrival[i], admit[i]))
        tid = int(slot[i]) + 1
        if first[i] >= admit[i] >= 0:
            spans.append((f"prefill r{request}", tid, admit[i], first[i]))
        if finish[i] > first[i] >= 0:
            spans.append((f"decode r{request}", tid, first[i], finish[i]))
        for index, (name, track, start, end) in enumerate(spans):
            phase = name.split(" ", 1)[0]
            events.append(
                {
                    "name": name,
                    "cat": phase,
                    "ph": "X",
                    "ts": trace_us(start),
                    "dur": trace_us(end - start),
                    "pid": PID,
                    "tid": track,
                    "args": args,
                }
            )
            if len(spans) < 2:
                continue
            flow: dict[str, Any] = {
                "name": f"request {request}",
                "cat": "request",
                "id": request,
                "ph": "s" if index == 0 else "f" if index == len(spans) - 1 else "t",
                "ts": trace_us((start + end) / 2),
                "pid": PID,
                "tid": track,
            }
            if flow["ph"] == "f":
                flow["bp"] = "e"  # bind to the enclosing slice, not the next one
            events.append(flow)
    for column, name in _COUNTERS:
        for time_s, value in zip(series["time_s"], series[column], strict=True):
            events.append(
                {
                    "name": name,
                    "ph": "C",
                    "ts": trace_us(float(time_s)),
                    "pid": PID,
                    "tid": 0,
                    "args": {"value": int(value)},
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": dict(metadata or {})}


def write_serving_trace(
    path: str | Path,
    requests: Mapping[str, NDArray[Any]],
    series: Mapping[str, NDArray[Any]],
    batch_slots: int,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write :func:`serving_trace` to ``path`` (all or nothing: a WriteError names it)."""
    trace = serving_trace(requests, series, batch_slots, metadata)
    return write_file(Path(path), lambda handle: json.dump(trace, handle, sort_keys=True))
