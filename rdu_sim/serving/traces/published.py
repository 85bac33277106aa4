"""The published trace formats for callers: writers, and the one reader's entry points.

    table = read_table(Path("mooncake_trace.jsonl"), "auto")

Formats (``traces.registry``): the project's ``csv`` and ``jsonl`` (``arrival_s``,
``prompt_tokens``, ``output_tokens``), and the published ``azure`` (Azure LLM inference CSV),
``mooncake`` (JSONL with block ``hash_ids``) and ``burstgpt`` (CSV), one module each. The
reading (format detection, checks, limits) is ``traces.reader``'s, the same for a workload's
``serving.trace`` and a cluster's ``traffic.trace``; ``read_table`` (with ``Blocks``, the
block size a prefix cache checks ``hash_ids`` against), ``trace_problem``, ``detect`` and
``format_names`` are re-exported here. Writers produce small files in the same schemas for
tests, benchmarks and the shipped samples (nothing is downloaded).
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

from rdu_sim.serving.traces import azure, burstgpt, mooncake
from rdu_sim.serving.traces.reader import (
    SOURCE_COLUMNS,
    Blocks,
    detect,
    format_names,
    read_table,
    trace_problem,
)
from rdu_sim.serving.traces.table import TraceTable
from rdu_sim.serving.traces.values import COLUMNS

__all__ = [
    "SOURCE_COLUMNS",
    "WRITERS",
    "Blocks",
    "detect",
    "format_names",
    "read_table",
    "trace_problem",
    "write_csv",
]

Writer = Callable[[Path, TraceTable], None]


def write_csv(path: Path, table: TraceTable) -> None:
    """Write ``table`` as a project CSV trace (arrival times in seconds)."""
    with path.open("w", newline="", encoding="utf-8") as stream:
        out = csv.writer(stream, lineterminator="\n")
        out.writerow(COLUMNS)
        for arrival, prompt, output in table.requests():
            out.writerow([repr(arrival), prompt, output])


WRITERS: dict[str, Writer] = {
    "csv": write_csv,
    azure.NAME: azure.write,
    mooncake.NAME: mooncake.write,
    burstgpt.NAME: burstgpt.write,
}
