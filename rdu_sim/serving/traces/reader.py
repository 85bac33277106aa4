"""Read a request trace into arrays: ``arrival_s`` (optional), ``prompt_tokens``,
``output_tokens``, streaming, within stated limits, every problem a ConfigError naming the
trace file and the line.

A trace fixes each request's lengths (and, for open-loop arrivals, its arrival time). Its
format is chosen by the file's suffix from the registry (``traces.registry``). Only the
first ``max_rows`` rows are read (``serving.requests`` of them: the rest would be unused),
so time and memory follow the requests, not the file. ``arrival_s`` may be absent
(closed-loop and all-at-once arrivals do not need it); when the first row has it, every
row must, and none may without it.

Limits: a regular file of at most ``MAX_TRACE_BYTES``; UTF-8 text, lines of at most
``MAX_LINE_BYTES`` and at most ``MAX_TRACE_LINES`` lines (``traces.lines``); values as
``traces.values`` states; a format's own limits in its module.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rdu_sim.config.errors import ConfigError
from rdu_sim.config.show import cut_middle
from rdu_sim.config.yaml_io import file_problem
from rdu_sim.serving.traces.lines import TraceLines
from rdu_sim.serving.traces.registry import RowReader, format_for, known_suffixes
from rdu_sim.serving.traces.values import (
    MAX_TOKENS,
    ValueProblem,
    expert,
    probability,
    seconds,
    tokens,
)

MAX_TRACE_BYTES = 512 * 2**20  # a trace larger than this is a mistake
MAX_TRACE_ROWS = 1_000_000  # serving.requests' own bound: no run uses more rows

__all__ = ["MAX_TOKENS", "MAX_TRACE_BYTES", "MAX_TRACE_ROWS", "Trace", "read_trace"]


@dataclass(frozen=True)
class Trace:
    """Parsed trace rows, as parallel arrays (file order)."""

    arrival_s: NDArray[np.float64] | None  # None when the trace has no arrival_s column
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    # a request's per-token acceptance rate under speculative decoding (None: no column)
    acceptance: NDArray[np.float64] | None = None
    # the expert each request needs in a Composition of Experts (None: no column)
    expert: NDArray[np.int64] | None = None

    def __len__(self) -> int:
        return int(self.prompt_tokens.shape[0])


def _refuse(name: str, workload_file: str, message: str) -> ConfigError:
    """An error about the trace file as a whole, named from the workload's field."""
    return ConfigError.single(
        workload_file or name, "serving.trace", f"trace {cut_middle(name)!r}: {message}"
    )


def read_trace(path: str | Path, workload_file: str = "", max_rows: int = MAX_TRACE_ROWS) -> Trace:
    """The first `max_rows` rows of a trace file; ConfigError naming the file and line."""
    file = Path(path)
    name = str(file)
    problem = file_problem(file)
    if problem == "file not found":
        raise _refuse(name, workload_file, "not found (paths are relative to the workload file)")
    if problem is not None:
        raise _refuse(name, workload_file, problem)
    trace_format = format_for(file)
    if trace_format is None:
        raise _refuse(
            name, workload_file, f"unknown format {file.suffix!r}; use {known_suffixes()}"
        )
    try:
        size = file.stat().st_size
        stream = file.open("rb")
    except OSError as exc:
        raise _refuse(name, workload_file, f"cannot open: {exc.strerror or exc}") from None
    if size > MAX_TRACE_BYTES:
        stream.close()
        raise ConfigError.single(name, "", f"trace is larger than {MAX_TRACE_BYTES} bytes", 1)
    with stream:
        try:
            return _arrays(TraceLines(stream, name), trace_format.rows, max(1, max_rows))
        except ConfigError as exc:
            if not workload_file:
                raise
            note = f" (the serving.trace of {cut_middle(workload_file)})"
            raise ConfigError([replace(i, message=i.message + note) for i in exc.issues]) from None


def _arrays(lines: TraceLines, rows: RowReader, max_rows: int) -> Trace:
    """Check each row's values and collect them compactly (8 bytes per value)."""
    arrivals = array("d")
    prompts = array("q")
    outputs = array("q")
    rates = array("d")
    experts = array("q")
    optional: tuple[tuple[str, Callable[[Any], Any], Any], ...] = (
        ("arrival_s", seconds, arrivals),
        ("acceptance", probability, rates),
        ("expert", expert, experts),
    )
    has: dict[str, bool] = {}  # whether the optional columns are there (from the first row)
    for line, row in rows(lines):
        column = "prompt_tokens"
        try:
            prompt = tokens(row.get(column))
            column = "output_tokens"
            output = tokens(row.get(column))
            for column, check, values in optional:
                present = row.get(column) not in (None, "")
                if has.setdefault(column, present) != present:
                    raise ValueProblem(
                        "missing value (other rows have one)"
                        if has[column]
                        else "a value where earlier rows have none"
                    )
                if present:
                    values.append(check(row[column]))
        except ValueProblem as exc:
            missing = row.get(column) in (None, "") and column in ("prompt_tokens", "output_tokens")
            raise lines.error("missing value" if missing else str(exc), column, line) from None
        prompts.append(prompt)
        outputs.append(output)
        if len(prompts) >= max_rows:
            break
    if not prompts:
        raise lines.error("trace has no requests", line=1)
    return Trace(
        arrival_s=np.frombuffer(arrivals, dtype=np.float64).copy() if has["arrival_s"] else None,
        prompt_tokens=np.frombuffer(prompts, dtype=np.int64).copy(),
        output_tokens=np.frombuffer(outputs, dtype=np.int64).copy(),
        acceptance=np.frombuffer(rates, dtype=np.float64).copy() if has["acceptance"] else None,
        expert=np.frombuffer(experts, dtype=np.int64).copy() if has["expert"] else None,
    )
