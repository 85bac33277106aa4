"""Traces for clusters: any registered format into a :class:`TraceTable`, and writers.

    table = read_table(Path("mooncake_trace.jsonl"), "auto")

Formats (``traces.registry``): the project's ``csv`` and ``jsonl`` (``arrival_s``,
``prompt_tokens``, ``output_tokens``), and the published ``azure`` (Azure LLM inference CSV),
``mooncake`` (JSONL with block ``hash_ids``) and ``burstgpt`` (CSV), one module each. ``auto``
tells them apart by the file's first line. The file is read as a stream within the limits
of the workload traces (``traces.reader``, ``traces.lines``); each value passes the checks of
``traces.values`` (a zero token count is a failed request in the published traces: counted
as skipped); arrival times are shifted to start at the earliest request and must then fit
the serving clock. Writers produce small files in the same schemas for tests, benchmarks and
the shipped samples (nothing is downloaded).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rdu_sim.config.errors import ConfigError
from rdu_sim.config.units import parse_decimal
from rdu_sim.config.yaml_io import file_problem
from rdu_sim.serving.clock import MAX_ARRIVAL_S
from rdu_sim.serving.traces import azure, burstgpt, mooncake
from rdu_sim.serving.traces.lines import MAX_LINE_BYTES, TraceLines
from rdu_sim.serving.traces.reader import MAX_TRACE_BYTES
from rdu_sim.serving.traces.registry import formats, get_format
from rdu_sim.serving.traces.table import TableBuilder, TraceTable
from rdu_sim.serving.traces.values import COLUMNS, ValueProblem, tokens

Writer = Callable[[Path, TraceTable], None]
_USED = ("arrival_s", "prompt_tokens", "output_tokens", "hash_ids")


def write_csv(path: Path, table: TraceTable) -> None:
    """Write ``table`` as a project CSV trace (arrival times in seconds)."""
    with path.open("w", newline="", encoding="utf-8") as stream:
        out = csv.writer(stream, lineterminator="\n")
        out.writerow(COLUMNS)
        for arrival, prompt, output in table.requests():
            out.writerow([repr(arrival), prompt, output])


SOURCE_COLUMNS: dict[str, dict[str, str]] = {
    azure.NAME: azure.SOURCE,
    mooncake.NAME: mooncake.SOURCE,
    burstgpt.NAME: burstgpt.SOURCE,
}
"""Per published format, the file's own column behind each row key (errors name it)."""

WRITERS: dict[str, Writer] = {
    "csv": write_csv,
    azure.NAME: azure.write,
    mooncake.NAME: mooncake.write,
    burstgpt.NAME: burstgpt.write,
}


def format_names() -> list[str]:
    """Every format a cluster's ``traffic.format`` may name (besides ``auto``)."""
    return [f.name for f in formats()]


def detect(path: Path, file: str) -> str:
    """The format of a trace file, from its first line (ConfigError when none fits)."""
    try:
        with path.open("rb") as stream:
            head = stream.readline(MAX_LINE_BYTES).decode("utf-8", "replace").lstrip("\ufeff")
    except OSError as exc:
        raise ConfigError.single(file, "", f"cannot read: {exc.strerror or exc}") from None
    line = head.strip()
    if line.startswith("{"):
        return mooncake.NAME if '"input_length"' in line else "jsonl"
    header = {name.strip() for name in line.split(",")}
    if "ContextTokens" in header:
        return azure.NAME
    if "Request tokens" in header:
        return burstgpt.NAME
    if "prompt_tokens" in header:
        return "csv"
    raise ConfigError.single(
        file,
        "",
        f"cannot tell the trace format from its first line {line[:80]!r}; set traffic.format "
        f"to one of {', '.join(format_names())}",
        1,
    )


def _skipped(value: Any) -> bool:
    """A zero token count: a failed request in the published traces."""
    return value == 0 or (isinstance(value, str) and value.strip() in ("0", "0.0"))


def _arrival(value: Any) -> float:
    number = parse_decimal(value) if isinstance(value, str) and len(value) <= 64 else value
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise ValueProblem(f"expected seconds, got {str(value)[:40]!r}")
    seconds = float(number)
    if not math.isfinite(seconds):
        raise ValueProblem(f"must be a finite time, got {str(value)[:40]!r}")
    return seconds


def _row(table: TableBuilder, lines: TraceLines, line: int, row: Mapping[str, Any]) -> None:
    column = "arrival_s"
    try:
        if row.get(column) in (None, ""):
            raise ValueProblem("a cluster replays arrival times: every row needs one")
        arrival = _arrival(row[column])
        column = "prompt_tokens"
        if _skipped(row.get(column)) or _skipped(row.get("output_tokens")):
            table.skip()
            return
        prompt = tokens(row.get(column))
        column = "output_tokens"
        output = tokens(row.get(column))
    except ValueProblem as exc:
        shown = SOURCE_COLUMNS.get(table.format, {}).get(column, column)
        raise lines.error(str(exc), shown, line) from None
    extra = {k: str(v) for k, v in row.items() if k not in _USED}
    table.add(arrival, prompt, output, row.get("hash_ids", ()), extra)


def read_table(path: Path, format: str, file: str | None = None) -> TraceTable:
    """Read a trace of ``format`` (or ``auto``); errors name ``file`` (default: the path)."""
    name = file or str(path)
    problem = file_problem(path)
    if problem is not None:
        raise ConfigError.single(name, "", f"trace: {problem}")
    chosen = detect(path, name) if format == "auto" else format
    trace_format = get_format(chosen)
    if path.stat().st_size > MAX_TRACE_BYTES:
        raise ConfigError.single(name, "", f"trace is larger than {MAX_TRACE_BYTES} bytes", 1)
    table = TableBuilder(chosen, with_hashes=chosen == mooncake.NAME)
    with path.open("rb") as stream:
        lines = TraceLines(stream, name)
        for line, row in trace_format.rows(lines):
            _row(table, lines, line, row)
        if not table.prompt:
            detail = f" ({table.skipped} failed rows skipped)" if table.skipped else ""
            raise lines.error(f"trace has no requests{detail}", line=1)
    built = table.build()
    span = float(built.arrival_s.max())
    if span > MAX_ARRIVAL_S:
        raise ConfigError.single(
            name,
            "arrival_s",
            f"the trace spans {span:.4g} s, beyond the {MAX_ARRIVAL_S:.4g} s the serving clock "
            "holds; use traffic.start and traffic.end to replay a window",
        )
    return built
