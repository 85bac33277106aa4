"""BurstGPT traces (HPMLL/BurstGPT): CSV of ChatGPT and GPT-4 requests served on Azure.

Header ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``; ``Timestamp``
is seconds from the trace's start. A row with zero response tokens is a failed request (the
``BurstGPT_*.csv`` files keep them; the ``without_fails`` files do not): ``published``
counts it as skipped. ``Model`` and ``Log Type`` (and any other column) are kept for
``traffic.filter`` and ``classes.column``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from rdu_sim.serving.traces.csv_format import csv_records, header_lacks
from rdu_sim.serving.traces.lines import TraceLines
from rdu_sim.serving.traces.registry import Row, register_format
from rdu_sim.serving.traces.table import TraceTable

NAME = "burstgpt"
COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
SOURCE = {
    "arrival_s": "Timestamp",
    "prompt_tokens": "Request tokens",
    "output_tokens": "Response tokens",
}
"""The file's column behind each row key (for messages)."""
_USED = {column: key for key, column in SOURCE.items()}


@register_format(
    NAME,
    (),
    "BurstGPT CSV: Timestamp, Model, Request/Response tokens, Log Type",
    published=True,
)
def burstgpt_rows(lines: TraceLines) -> Iterator[Row]:
    """Rows of a BurstGPT trace: the three used columns renamed, the others kept as text."""
    header, records = csv_records(lines)
    header_lacks(lines, header, [c for c in _USED if c not in header], ", ".join(COLUMNS))
    for line, row in records:
        out = {_USED.get(name, name): value.strip() for name, value in row.items()}
        out.pop("Total tokens", None)  # derived; not used
        yield line, out


def write(path: Path, table: TraceTable) -> None:
    """Write ``table`` in the BurstGPT schema (Model and Log Type from its columns, if any)."""
    model = table.columns.get("Model")
    log_type = table.columns.get("Log Type")
    with path.open("w", newline="", encoding="utf-8") as stream:
        out = csv.writer(stream, lineterminator="\n")
        out.writerow(COLUMNS)
        for i in range(len(table)):
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
