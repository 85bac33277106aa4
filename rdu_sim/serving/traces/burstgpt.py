"""BurstGPT traces (HPMLL/BurstGPT): CSV of ChatGPT and GPT-4 requests served on Azure.

Header ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``; ``Timestamp``
is seconds from the trace's start. A row with zero response tokens is a failed request (the
``BurstGPT_*.csv`` files keep them; the ``without_fails`` files do not): it is counted as
skipped. ``Model`` and ``Log Type`` (and any other column) are kept for ``traffic.filter``
and ``classes.column``.
"""

from __future__ import annotations

import csv
from pathlib import Path

from rdu_sim.serving.traces.table import (
    TableBuilder,
    TraceTable,
    csv_rows,
    seconds,
    tokens,
)

NAME = "burstgpt"
COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
_USED = ("Timestamp", "Request tokens", "Response tokens", "Total tokens")


def read(path: Path, file: str) -> TraceTable:
    """Read a BurstGPT trace."""
    table = TableBuilder(NAME)
    for line, row in csv_rows(path, file, _USED):
        prompt = tokens(row["Request tokens"], file, line, "Request tokens")
        output = tokens(row["Response tokens"], file, line, "Response tokens")
        if prompt == 0 or output == 0:
            table.skip()
            continue
        arrival = seconds(row["Timestamp"], file, line, "Timestamp")
        extra = {k: v.strip() for k, v in row.items() if k not in _USED}
        table.add(arrival, prompt, output, extra=extra)
    return table.build(file)


def write(path: Path, table: TraceTable) -> None:
    """Write ``table`` in the BurstGPT schema (Model and Log Type from its columns, if any)."""
    n = len(table)
    model = table.columns.get("Model")
    log_type = table.columns.get("Log Type")
    with path.open("w", newline="", encoding="utf-8") as stream:
        out = csv.writer(stream, lineterminator="\n")
        out.writerow(COLUMNS)
        for i in range(n):
            prompt = int(table.prompt_tokens[i])
            output = int(table.output_tokens[i])
            out.writerow(
                [
                    repr(float(table.arrival_s[i])),
                    "ChatGPT" if model is None else model[i],
                    prompt,
                    output,
                    prompt + output,
                    "Conversation log" if log_type is None else log_type[i],
                ]
            )
