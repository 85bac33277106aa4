"""A published trace as parallel arrays, and the row parsing every format shares.

Every format reader (one module each beside this file) turns its file into a
:class:`TraceTable`: arrival times on the trace's own clock (seconds from its earliest
request), prompt and output lengths, Mooncake-style block hashes when the format has them,
and the other columns as strings (for filters and request classes). Rows the format marks
as failed requests (zero tokens: BurstGPT logs failures that way) are not requests: they are
counted in ``skipped``, never silently dropped. Anything else that is not a valid row is a
ConfigError naming the file, the line and the column.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from numpy.typing import NDArray

from rdu_sim.config.errors import ConfigError

MAX_TOKENS = 100_000_000


def fail(file: str, line: int | None, column: str, message: str) -> ConfigError:
    """A ConfigError at ``file:line`` naming the trace column."""
    return ConfigError.single(file, column, message, line)


def tokens(value: Any, file: str, line: int, column: str) -> int:
    """A whole token count in 0..MAX_TOKENS (``12``, ``"12"``, ``12.0``; not ``1.5`` or
    ``true``). Zero is allowed here: the format decides what a zero means."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("+"):
            text = text[1:]
        if text.isascii() and text.isdigit():
            value = int(text)
        else:
            try:
                value = float(text)
            except ValueError:
                raise fail(file, line, column, f"expected a token count, got {value!r}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(file, line, column, f"expected a whole number of tokens, got {value!r}")
    if not 0 <= value <= MAX_TOKENS:
        raise fail(file, line, column, f"must be in 0..{MAX_TOKENS}, got {value}")
    return value


def seconds(value: Any, file: str, line: int, column: str, scale: float = 1.0) -> float:
    """A finite time >= 0, times ``scale`` (1e-3 for milliseconds)."""
    if isinstance(value, bool):
        raise fail(file, line, column, f"expected a time, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise fail(file, line, column, f"expected a time, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise fail(file, line, column, f"must be a finite time >= 0, got {value!r}")
    return number * scale


@dataclass(frozen=True)
class TraceTable:
    """A trace's requests (file order) and what reading it found."""

    format: str
    arrival_s: NDArray[np.float64]  # trace clock: seconds from its earliest request
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    hash_offsets: NDArray[np.int64] | None = None  # request i: values[offsets[i]:offsets[i+1]]
    hash_values: NDArray[np.int64] | None = None
    columns: Mapping[str, NDArray[np.object_]] = field(default_factory=dict)
    skipped: int = 0  # rows that were failed requests in the trace (zero tokens)

    def __len__(self) -> int:
        return int(self.prompt_tokens.shape[0])


class TableBuilder:
    """Collects rows of one trace, then makes the arrays (arrival times shifted to start at 0)."""

    def __init__(self, format: str, with_hashes: bool = False) -> None:
        self.format = format
        self.arrival: list[float] = []
        self.prompt: list[int] = []
        self.output: list[int] = []
        self.offsets: list[int] | None = [0] if with_hashes else None
        self.values: list[int] = []
        self.columns: dict[str, list[str]] = {}
        self.skipped = 0

    def add(
        self,
        arrival_s: float,
        prompt: int,
        output: int,
        hashes: list[int] | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        """One request row (zero-token rows go to :meth:`skip` instead)."""
        self.arrival.append(arrival_s)
        self.prompt.append(prompt)
        self.output.append(output)
        if self.offsets is not None:
            self.values.extend(hashes or ())
            self.offsets.append(len(self.values))
        for name, value in (extra or {}).items():
            self.columns.setdefault(name, []).append(value)

    def skip(self) -> None:
        """A row the trace records as a failed request."""
        self.skipped += 1

    def build(self, file: str) -> TraceTable:
        """The table; a trace without a single request is an error."""
        if not self.prompt:
            detail = f" ({self.skipped} failed rows skipped)" if self.skipped else ""
            raise fail(file, None, "", f"trace has no requests{detail}")
        arrival = np.asarray(self.arrival, dtype=np.float64)
        arrival -= arrival.min()
        return TraceTable(
            format=self.format,
            arrival_s=arrival,
            prompt_tokens=np.asarray(self.prompt, dtype=np.int64),
            output_tokens=np.asarray(self.output, dtype=np.int64),
            hash_offsets=None if self.offsets is None else np.asarray(self.offsets, np.int64),
            hash_values=None if self.offsets is None else np.asarray(self.values, np.int64),
            columns={k: np.asarray(v, dtype=np.object_) for k, v in self.columns.items()},
            skipped=self.skipped,
        )


def open_text(path: Path, file: str) -> TextIO:
    """The trace file as UTF-8 text (a byte-order mark is skipped); ConfigError if unreadable."""
    try:
        return path.open(encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise fail(file, None, "", f"cannot read: {exc.strerror or exc}") from None


def csv_rows(
    path: Path, file: str, required: tuple[str, ...]
) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line, {column: text})`` for each data row of a CSV file with a header row, which must
    name every ``required`` column (any order; other columns kept). Blank lines are skipped;
    a row with a different number of fields than the header is an error."""
    with open_text(path, file) as stream:
        reader = csv.reader(stream)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise fail(file, 1, "", "trace has no header row") from None
        except (csv.Error, UnicodeDecodeError) as exc:
            raise fail(file, 1, "", f"not a CSV trace: {exc}") from None
        missing = [c for c in required if c not in header]
        if missing:
            raise fail(
                file, 1, "", f"CSV header {header} lacks column(s) {missing}; expected {required}"
            )
        try:
            for fields in reader:
                if not fields or all(not f.strip() for f in fields):
                    continue
                if len(fields) != len(header):
                    raise fail(
                        file,
                        reader.line_num,
                        "",
                        f"row has {len(fields)} fields, the header has {len(header)}",
                    )
                yield reader.line_num, dict(zip(header, fields, strict=True))
        except (csv.Error, UnicodeDecodeError) as exc:
            raise fail(file, reader.line_num, "", f"not a CSV trace: {exc}") from None


def first_line(path: Path, file: str) -> str:
    """The first non-blank line of a text file (to tell its format), '' when there is none."""
    with open_text(path, file) as stream:
        try:
            for line in stream:
                if line.strip():
                    return line.strip()
        except UnicodeDecodeError:
            raise fail(file, None, "", "not a text file (not valid UTF-8)") from None
    return ""
