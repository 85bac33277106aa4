"""Azure LLM inference traces (Azure/AzurePublicDataset, 2023 and 2024).

CSV with the header ``TIMESTAMP,ContextTokens,GeneratedTokens``; ``TIMESTAMP`` is a wall-clock
time such as ``2023-11-16 18:15:46.6805900`` (up to 7 fractional digits). Arrival times are
taken relative to the earliest row. A row with zero context or generated tokens is not a
servable request: it is counted as skipped.
"""

from __future__ import annotations

import csv
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rdu_sim.serving.traces.table import TableBuilder, TraceTable, csv_rows, fail, tokens

NAME = "azure"
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_timestamp(text: str, file: str, line: int) -> float:
    """``YYYY-MM-DD HH:MM:SS[.fraction]`` (or with a ``T``) -> seconds since 1970 (UTC)."""
    stamp = text.strip().replace("T", " ")
    whole, _, fraction = stamp.partition(".")
    try:
        moment = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        raise fail(
            file, line, "TIMESTAMP", f"expected a time like 2023-11-16 18:15:46.68, got {text!r}"
        ) from None
    if fraction and not (fraction.isascii() and fraction.isdigit()):
        raise fail(file, line, "TIMESTAMP", f"bad fraction of a second in {text!r}")
    return (moment - _EPOCH).total_seconds() + (float("0." + fraction) if fraction else 0.0)


def read(path: Path, file: str) -> TraceTable:
    """Read an Azure LLM inference trace."""
    table = TableBuilder(NAME)
    for line, row in csv_rows(path, file, COLUMNS):
        prompt = tokens(row["ContextTokens"], file, line, "ContextTokens")
        output = tokens(row["GeneratedTokens"], file, line, "GeneratedTokens")
        if prompt == 0 or output == 0:
            table.skip()
            continue
        table.add(parse_timestamp(row["TIMESTAMP"], file, line), prompt, output)
    return table.build(file)


def write(path: Path, table: TraceTable, start: datetime | None = None) -> None:
    """Write ``table`` in the Azure schema, arrival 0 at ``start`` (default 2023-11-16)."""
    origin = start or datetime(2023, 11, 16, 18, 15, 46, tzinfo=UTC)
    with path.open("w", newline="", encoding="utf-8") as stream:
        out = csv.writer(stream, lineterminator="\n")
        out.writerow(COLUMNS)
        for arrival, prompt, output in zip(
            table.arrival_s.tolist(),
            table.prompt_tokens.tolist(),
            table.output_tokens.tolist(),
            strict=True,
        ):
            ticks = round(arrival * 10**7)  # 100 ns ticks, the published precision
            moment = origin + timedelta(microseconds=ticks // 10)
            stamp = moment.strftime("%Y-%m-%d %H:%M:%S") + f".{ticks % 10**7:07d}"
            out.writerow([stamp, prompt, output])
