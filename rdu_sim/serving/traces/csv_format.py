"""CSV traces: a header row naming the columns (any order, extra columns ignored, none named
twice, whatever the format), then rows.

The csv module parses the stream, so a quoted field may hold commas and newlines (a value
is then checked as a whole, never split at the newline). A field is at most
``csv.field_size_limit()`` characters (131,072 by default); quoting is strict.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator

from rdu_sim.config.show import cut_middle
from rdu_sim.serving.traces.lines import TraceLines
from rdu_sim.serving.traces.registry import Row, register_format
from rdu_sim.serving.traces.values import COLUMNS, READ, REQUIRED


def csv_records(lines: TraceLines) -> tuple[list[str], Iterator[Row]]:
    """The header of a CSV file and its data rows keyed by every header name (blank lines
    skipped; a row with another number of fields than the header is a bad row,
    ``TraceLines.bad_row``)."""
    reader = csv.reader(lines, strict=True)

    def parsed() -> Iterator[list[str]]:
        while True:
            try:
                yield next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                limit = csv.field_size_limit()
                raise lines.error(
                    f"not valid CSV: {exc} (a field is at most {limit:,} characters)"
                    if "field limit" in str(exc)
                    else f"not valid CSV: {exc}"
                ) from None

    records = parsed()
    header = [name.strip() for name in next(records, [])]
    if not header:
        raise lines.error("trace has no header row", line=1)
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:  # which one would a row's value come from? (every CSV format: one rule)
        shown = [cut_middle(name, 40) for name in repeated[:10]]
        raise lines.error(f"CSV header names column(s) {shown} more than once", line=1)

    def rows() -> Iterator[Row]:
        for fields in records:
            if not fields or all(not field.strip() for field in fields):
                continue
            if len(fields) != len(header):
                lines.bad_row(f"row has {len(fields)} fields, the header has {len(header)}")
                continue
            yield reader.line_num, dict(zip(header, fields, strict=True))

    return header, rows()


def header_lacks(lines: TraceLines, header: list[str], missing: list[str], expected: str) -> None:
    """Refuse a header without the columns a format needs (names shown cut to 40 characters)."""
    if missing:
        names = [cut_middle(name, 40) for name in header[:20]] + (["..."] if header[20:] else [])
        raise lines.error(
            f"CSV header {names} lacks column(s) {missing}; expected {expected}", line=1
        )


PUBLISHED_HEADERS = (
    "Azure's TIMESTAMP, ContextTokens, GeneratedTokens; BurstGPT's Timestamp, Request tokens, "
    "Response tokens"
)
"""The published CSV headers a trace may have instead (the format choice of ``traces.reader``)."""


@register_format("csv", (".csv",), "comma-separated, with a header row")
def csv_rows(lines: TraceLines) -> Iterator[Row]:
    """Rows of a CSV trace, keyed by the header's column names (only the columns used)."""
    header, records = csv_records(lines)
    expected = f"{', '.join(COLUMNS)} (or a published trace's header: {PUBLISHED_HEADERS})"
    header_lacks(lines, header, [c for c in REQUIRED if c not in header], expected)
    for line, row in records:
        yield line, {name: row[name] for name in READ if name in row}
