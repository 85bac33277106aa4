"""Azure LLM inference traces (Azure/AzurePublicDataset, 2023 and 2024).

CSV with the header ``TIMESTAMP,ContextTokens,GeneratedTokens``; ``TIMESTAMP`` is a wall-clock
time such as ``2023-11-16 18:15:46.6805900`` (up to 7 fractional digits), read as seconds
since 1970 (the table starts the clock at the earliest row). A row with zero context or
generated tokens is not a servable request: ``published.read_table`` counts it as skipped.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rdu_sim.serving.traces.csv_format import csv_records, header_lacks
from rdu_sim.serving.traces.lines import TraceLines
from rdu_sim.serving.traces.registry import Row, register_format
from rdu_sim.serving.traces.table import TraceTable

NAME = "azure"
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
SOURCE = {
    "arrival_s": "TIMESTAMP",
    "prompt_tokens": "ContextTokens",
    "output_tokens": "GeneratedTokens",
}
"""The file's column behind each row key (for messages)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_timestamp(text: str) -> float | None:
    """``YYYY-MM-DD HH:MM:SS[.fraction]`` (or with a ``T``; ASCII digits) -> seconds since
    1970 (UTC), or None."""
    stamp = text.strip().replace("T", " ")
    if not stamp.isascii():  # strptime reads fullwidth and other scripts' digits
        return None
    whole, _, fraction = stamp.partition(".")
    try:
        moment = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    if fraction and not (len(fraction) <= 9 and fraction.isascii() and fraction.isdigit()):
        return None
    return (moment - _EPOCH).total_seconds() + (float("0." + fraction) if fraction else 0.0)


@register_format(
    NAME,
    (),
    "Azure LLM inference CSV: TIMESTAMP, ContextTokens, GeneratedTokens",
    published=True,
)
def azure_rows(lines: TraceLines) -> Iterator[Row]:
    """Rows of an Azure trace as ``arrival_s`` (seconds since 1970), ``prompt_tokens``,
    ``output_tokens``."""
    header, records = csv_records(lines)
    header_lacks(lines, header, [c for c in COLUMNS if c not in header], ", ".join(COLUMNS))
    for line, row in records:
        stamp = parse_timestamp(row["TIMESTAMP"])
        if stamp is None:
            lines.bad_row(
                f"expected a time like 2023-11-16 18:15:46.68, got {row['TIMESTAMP'][:40]!r}",
                "TIMESTAMP",
                line,
            )
            continue
        yield (
            line,
            {
                "arrival_s": stamp,
                "prompt_tokens": row["ContextTokens"],
                "output_tokens": row["GeneratedTokens"],
            },
        )


def write(path: Path, table: TraceTable, start: datetime | None = None) -> None:
    """Write ``table`` in the Azure schema, arrival 0 at ``start`` (default 2023-11-16)."""
    origin = start or datetime(2023, 11, 16, 18, 15, 46, tzinfo=UTC)
    with path.open("w", newline="", encoding="utf-8") as stream:
        out = csv.writer(stream, lineterminator="\n")
        out.writerow(COLUMNS)
        for arrival, prompt, output in table.requests():
            ticks = round(arrival * 10**7)  # 100 ns ticks, the published precision
            moment = origin + timedelta(microseconds=ticks // 10)
            stamp = moment.strftime("%Y-%m-%d %H:%M:%S") + f".{ticks % 10**7:07d}"
            out.writerow([stamp, prompt, output])
