"""The project's own trace format: CSV or JSONL with ``arrival_s``, ``prompt_tokens``,
``output_tokens`` (read by ``serving.traces.reader``, the reader single workloads use)."""

from __future__ import annotations

import csv
from pathlib import Path

from rdu_sim.serving.traces.reader import read_trace
from rdu_sim.serving.traces.table import TableBuilder, TraceTable, fail
from rdu_sim.serving.traces.values import COLUMNS

NAME = "rdu"


def read(path: Path, file: str) -> TraceTable:
    """Read a project trace; a cluster replays arrivals, so ``arrival_s`` is required."""
    trace = read_trace(path, file)
    if trace.arrival_s is None:
        raise fail(file, 1, "arrival_s", "a cluster replays arrival times: add an arrival_s column")
    table = TableBuilder(NAME)
    for arrival, prompt, output in zip(
        trace.arrival_s.tolist(),
        trace.prompt_tokens.tolist(),
        trace.output_tokens.tolist(),
        strict=True,
    ):
        table.add(arrival, prompt, output)
    return table.build(file)


def write(path: Path, table: TraceTable) -> None:
    """Write ``table`` as a project CSV trace (arrival times in seconds)."""
    with path.open("w", newline="", encoding="utf-8") as stream:
        out = csv.writer(stream, lineterminator="\n")
        out.writerow(COLUMNS)
        for arrival, prompt, output in zip(
            table.arrival_s.tolist(),
            table.prompt_tokens.tolist(),
            table.output_tokens.tolist(),
            strict=True,
        ):
            out.writerow([repr(arrival), prompt, output])
