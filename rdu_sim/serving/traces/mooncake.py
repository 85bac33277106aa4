"""Mooncake traces (kvcache-ai/Mooncake, FAST'25): JSONL, one request per line.

``{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}``:
``timestamp`` is milliseconds from the trace's start; ``hash_ids`` names the prompt's blocks
(512 tokens each in the published traces), block ``i`` by a hash of the prompt up to and
including it, so equal ids mean equal prefixes: what a prefix cache keys on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rdu_sim.serving.traces.table import (
    TableBuilder,
    TraceTable,
    fail,
    open_text,
    seconds,
    tokens,
)

NAME = "mooncake"
FIELDS = ("timestamp", "input_length", "output_length")


def _hashes(value: Any, file: str, line: int) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in value
    ):
        raise fail(file, line, "hash_ids", "expected a list of integer block hashes")
    return value


def read(path: Path, file: str) -> TraceTable:
    """Read a Mooncake trace (``hash_ids`` may be absent on a row: no cacheable blocks)."""
    table = TableBuilder(NAME, with_hashes=True)
    with open_text(path, file) as stream:
        line = 0
        try:
            for line, raw in enumerate(stream, start=1):
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise fail(file, line, "", f"not valid JSON: {exc.msg}") from None
                if not isinstance(row, dict):
                    raise fail(file, line, "", f"expected a JSON object, got {type(row).__name__}")
                for name in FIELDS:
                    if name not in row:
                        raise fail(file, line, name, "missing field")
                prompt = tokens(row["input_length"], file, line, "input_length")
                output = tokens(row["output_length"], file, line, "output_length")
                if prompt == 0 or output == 0:
                    table.skip()
                    continue
                arrival = seconds(row["timestamp"], file, line, "timestamp", scale=1e-3)
                table.add(arrival, prompt, output, _hashes(row.get("hash_ids", []), file, line))
        except UnicodeDecodeError:
            raise fail(file, line + 1, "", "not a text file (not valid UTF-8)") from None
    return table.build(file)


def write(path: Path, table: TraceTable) -> None:
    """Write ``table`` as Mooncake JSONL (timestamps rounded to whole milliseconds)."""
    offsets, values = table.hash_offsets, table.hash_values
    with path.open("w", encoding="utf-8") as stream:
        for i, (arrival, prompt, output) in enumerate(
            zip(
                table.arrival_s.tolist(),
                table.prompt_tokens.tolist(),
                table.output_tokens.tolist(),
                strict=True,
            )
        ):
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
