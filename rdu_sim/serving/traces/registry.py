"""The trace formats rdu-sim reads, by name and file suffix: one module per format.

A format turns the lines of a file into rows (a line number and a mapping of column ->
value); the reader (``traces.reader``) checks the values, applies the limits and builds the
arrays, so a new format (Azure, Mooncake, BurstGPT...) is one module with one decorated
function. Registering a name or a suffix twice is refused. A format may own no suffix (the
published traces, whose files are plain .csv or .jsonl): it is then chosen by name, or by
the first line of the file (the format choice of ``traces.reader``). A published format's clock
starts at its earliest request and marks a failed request by zero tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdu_sim.serving.traces.lines import TraceLines

Row = tuple[int, Mapping[str, Any]]  # (line number, column -> value)
RowReader = Callable[[TraceLines], Iterator[Row]]


@dataclass(frozen=True)
class TraceFormat:
    """A registered format: what it is called, the suffixes it owns and its row reader."""

    name: str
    suffixes: tuple[str, ...]
    description: str
    rows: RowReader
    published: bool = False  # a published trace: its own clock, zero tokens = a failed request


_FORMATS: dict[str, TraceFormat] = {}


def register_format(
    name: str, suffixes: tuple[str, ...], description: str, *, published: bool = False
) -> Callable[[RowReader], RowReader]:
    """Decorator: register `rows` as the reader of files ending in `suffixes`."""

    def decorate(rows: RowReader) -> RowReader:
        if name in _FORMATS:
            raise ValueError(f"trace format {name!r} is already registered")
        taken = {s for f in _FORMATS.values() for s in f.suffixes}
        clash = sorted(set(suffixes) & taken)
        if clash:
            raise ValueError(f"trace suffix(es) {', '.join(clash)} already registered")
        _FORMATS[name] = TraceFormat(name, tuple(suffixes), description, rows, published)
        return rows

    return decorate


def formats() -> list[TraceFormat]:
    """Every registered format, in registration order."""
    return list(_FORMATS.values())


def get_format(name: str) -> TraceFormat:
    """The format registered as `name`; KeyError listing the valid names otherwise."""
    try:
        return _FORMATS[name]
    except KeyError:
        raise KeyError(f"unknown trace format {name!r}; valid: {', '.join(_FORMATS)}") from None


def format_for(path: Path) -> TraceFormat | None:
    """The format owning `path`'s suffix (case-insensitive), or None."""
    suffix = path.suffix.lower()
    return next((f for f in _FORMATS.values() if suffix in f.suffixes), None)


def known_suffixes() -> str:
    """'.csv, .jsonl, .ndjson' for messages."""
    return ", ".join(s for f in _FORMATS.values() for s in f.suffixes)
