"""Read a request trace: CSV or JSONL rows of ``arrival_s``, ``prompt_tokens``, ``output_tokens``.

A trace fixes each request's lengths (and, for open-loop arrivals, its arrival time). The
path in the workload is relative to the workload file. Every bad row is a ConfigError that
names the trace file and the line, so a user can fix the file without a traceback.

Formats (chosen by the file's suffix):
- ``.csv``: a header row naming the columns (any order, extra columns ignored), then rows;
- ``.jsonl`` / ``.ndjson``: one JSON object per line; blank lines are skipped.
``arrival_s`` may be absent (closed-loop and all-at-once arrivals do not need it); when one
row has it, every row must, and arrival times must be >= 0 (they are sorted on use).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rdu_sim.config.errors import ConfigError

MAX_TRACE_BYTES = 512 * 2**20  # a trace larger than this is a mistake
COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class Trace:
    """Parsed trace rows, as parallel arrays (file order)."""

    arrival_s: NDArray[np.float64] | None  # None when the trace has no arrival_s column
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.prompt_tokens.shape[0])


def _fail(file: str, line: int, field: str, message: str) -> ConfigError:
    return ConfigError.single(file, field, message, line)


def _tokens(value: Any, file: str, line: int, field: str) -> int:
    """A positive integer token count (``12`` or ``"12"``; not ``1.5``, not ``true``)."""
    if isinstance(value, bool):
        raise _fail(file, line, field, f"expected a whole number of tokens, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if not text.lstrip("+").isdigit():
            raise _fail(file, line, field, f"expected a whole number of tokens, got {value!r}")
        value = int(text)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise _fail(file, line, field, f"expected a whole number of tokens, got {value!r}")
    if not 1 <= value <= 100_000_000:
        raise _fail(file, line, field, f"must be in 1..100000000, got {value}")
    return value


def _seconds(value: Any, file: str, line: int, field: str) -> float:
    """A finite arrival time in seconds, >= 0."""
    if isinstance(value, bool):
        raise _fail(file, line, field, f"expected seconds, got {value!r}")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise _fail(file, line, field, f"expected seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise _fail(file, line, field, f"must be a finite time >= 0 s, got {value!r}")
    return seconds


def _rows_csv(text: str, file: str) -> list[tuple[int, dict[str, Any]]]:
    lines = text.splitlines()
    reader = csv.reader(lines)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise _fail(file, 1, "", "trace has no header row") from None
    missing = [c for c in COLUMNS[1:] if c not in header]
    if missing:
        raise _fail(
            file,
            1,
            "",
            f"CSV header {header} lacks column(s) {missing}; expected {', '.join(COLUMNS)}",
        )
    rows = []
    for fields in reader:
        line = reader.line_num
        if not fields or all(not f.strip() for f in fields):
            continue
        if len(fields) != len(header):
            raise _fail(
                file, line, "", f"row has {len(fields)} fields, the header has {len(header)}"
            )
        rows.append((line, dict(zip(header, fields, strict=True))))
    return rows


def _rows_jsonl(text: str, file: str) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _fail(file, line, "", f"not valid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise _fail(file, line, "", f"expected a JSON object, got {type(obj).__name__}")
        rows.append((line, obj))
    return rows


def read_trace(path: str | Path, workload_file: str = "") -> Trace:
    """Parse a trace file into arrays; raise ConfigError naming the file and line on bad input."""
    file = Path(path)
    name = str(file)
    if not file.is_file():
        where = workload_file or name
        raise ConfigError.single(
            where,
            "serving.trace",
            f"trace file {name!r} not found (paths are relative to the workload file)",
        )
    if file.stat().st_size > MAX_TRACE_BYTES:
        raise _fail(name, 1, "", f"trace is larger than {MAX_TRACE_BYTES} bytes")
    text = file.read_text(encoding="utf-8")
    suffix = file.suffix.lower()
    if suffix == ".csv":
        rows = _rows_csv(text, name)
    elif suffix in (".jsonl", ".ndjson"):
        rows = _rows_jsonl(text, name)
    else:
        raise ConfigError.single(
            workload_file or name,
            "serving.trace",
            f"trace {name!r}: unknown format {suffix!r}; use .csv or .jsonl",
        )
    if not rows:
        raise _fail(name, 1, "", "trace has no requests")
    has_arrival = any(row.get("arrival_s") not in (None, "") for _, row in rows)
    arrivals: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    for line, row in rows:
        for column in COLUMNS[1:]:
            if row.get(column) in (None, ""):
                raise _fail(name, line, column, "missing value")
        prompts.append(_tokens(row["prompt_tokens"], name, line, "prompt_tokens"))
        outputs.append(_tokens(row["output_tokens"], name, line, "output_tokens"))
        if has_arrival:
            if row.get("arrival_s") in (None, ""):
                raise _fail(name, line, "arrival_s", "missing value (other rows have one)")
            arrivals.append(_seconds(row["arrival_s"], name, line, "arrival_s"))
    return Trace(
        arrival_s=np.asarray(arrivals, dtype=np.float64) if has_arrival else None,
        prompt_tokens=np.asarray(prompts, dtype=np.int64),
        output_tokens=np.asarray(outputs, dtype=np.int64),
    )
