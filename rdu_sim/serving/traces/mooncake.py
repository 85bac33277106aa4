"""Mooncake traces (kvcache-ai/Mooncake, FAST'25): JSONL, one request per line.

``{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}``:
``timestamp`` is milliseconds from the trace's start; ``hash_ids`` names the prompt's blocks (512
tokens each in the published traces), block ``i`` by a hash of the prompt up to and including it, so
equal ids mean equal prefixes: what a prefix cache keys on. Every block is named, the last partial
one included: ``ceil(input_length / 512)`` ids in every row of the published traces, which a cluster
checks against its ``prefix_cache.block_tokens`` (``reader.blocks_problem``). A row may lack
``hash_ids`` (no cacheable blocks). Any other field of a row is kept as a column (as text,
``values.column_text``), for a cluster's ``traffic.filter`` and ``classes.column``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rdu_sim.config.show import shown_json
from rdu_sim.config.units import parse_decimal
from rdu_sim.serving.traces.jsonl_format import json_objects
from rdu_sim.serving.traces.lines import TraceLines
from rdu_sim.serving.traces.registry import Row, register_format
from rdu_sim.serving.traces.table import TraceTable
from rdu_sim.serving.traces.values import ValueProblem

NAME = "mooncake"
FIELDS = ("timestamp", "input_length", "output_length")
SOURCE = {
    "arrival_s": "timestamp",
    "prompt_tokens": "input_length",
    "output_tokens": "output_length",
}
"""The file's field behind each row key (for messages)."""
_OWN = (*FIELDS, "hash_ids", *SOURCE)
"""Fields read as the request's own (any other field is kept as a column: ``type``, say)."""
MAX_BLOCKS = 1_000_000  # hash_ids of one request: 512 billion tokens at Mooncake's blocks


def _milliseconds(value: Any) -> float:
    """A row's ``timestamp`` in seconds: milliseconds >= 0, a JSON number or an ASCII decimal
    number in a string (``"1000"``: every numeric column of every format is read so,
    ``traces.values``); ValueProblem saying which of the two rules it fails."""
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value) if not isinstance(value, int) or value.bit_length() < 1024 else None
    elif isinstance(value, str) and len(value) <= 64:
        number = parse_decimal(value)
    if number is None:
        raise ValueProblem(
            f"expected milliseconds (an ASCII decimal number), got {shown_json(value)}"
        )
    if not math.isfinite(number):  # (1e400 reads as inf)
        raise ValueProblem(f"must be a finite time >= 0 ms, got {shown_json(value)}")
    if number < 0:
        raise ValueProblem(f"must be a time >= 0 ms, got {shown_json(value)}")
    return number / 1000


def _int64s(values: list[Any]) -> bool:
    """Whether every value is an int (not a bool) of magnitude below 2^63: the types and the
    extremes checked by C loops (a row holds hundreds of hash ids)."""
    return not values or (
        set(map(type, values)) == {int} and min(values) > -(2**63) and max(values) < 2**63
    )


@register_format(
    NAME,
    (),
    "Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids",
    published=True,
)
def mooncake_rows(lines: TraceLines) -> Iterator[Row]:
    """Rows of a Mooncake trace as ``arrival_s``, ``prompt_tokens``, ``output_tokens`` and
    ``hash_ids`` (a row failing a check is a bad row, ``TraceLines.bad_row``)."""
    for line, obj in json_objects(lines):
        missing = next((name for name in FIELDS if name not in obj), None)
        if missing is not None:
            lines.bad_row("missing field", missing, line)
            continue
        try:
            arrival = _milliseconds(obj["timestamp"])
        except ValueProblem as problem:
            lines.bad_row(str(problem), "timestamp", line)
            continue
        hashes = obj.get("hash_ids", [])
        if not isinstance(hashes, list) or len(hashes) > MAX_BLOCKS or not _int64s(hashes):
            lines.bad_row(
                f"expected a list of at most {MAX_BLOCKS:,} integer block hashes", "hash_ids", line
            )
            continue
        if len(set(hashes)) != len(hashes):  # block i names the first i + 1 blocks: all differ
            repeated = next(h for i, h in enumerate(hashes) if h in hashes[:i])
            lines.bad_row(
                f"block hash {repeated} appears twice: a block's hash names the prompt's whole "
                "prefix up to it, so the blocks of one prompt differ",
                "hash_ids",
                line,
            )
            continue
        row = {name: value for name, value in obj.items() if name not in _OWN}
        row.update(
            arrival_s=arrival,
            prompt_tokens=obj["input_length"],
            output_tokens=obj["output_length"],
        )
        if "hash_ids" in obj:  # (a row without them is told apart: its blocks are unknown)
            row["hash_ids"] = hashes
        yield line, row


def write(path: Path, table: TraceTable) -> None:
    """Write ``table`` as Mooncake JSONL (timestamps rounded to whole milliseconds)."""
    offsets, values = table.hash_offsets, table.hash_values
    with path.open("w", encoding="utf-8") as stream:
        for i, (arrival, prompt, output) in enumerate(table.requests()):
            hashes: list[int] = (
                []
                if offsets is None or values is None
                else values[offsets[i] : offsets[i + 1]].tolist()
            )
            row = {
                "timestamp": round(arrival * 1000),
                "input_length": prompt,
                "output_length": output,
                "hash_ids": hashes,
            }
            stream.write(json.dumps(row) + "\n")
