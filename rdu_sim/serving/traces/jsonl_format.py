"""JSON Lines traces: one JSON object per line; blank lines are skipped.

Each line is parsed on its own, so memory is one line, within ``rdu_sim.config.json_text``'s
limits: nesting at most ``MAX_JSON_DEPTH`` (a row is one flat object), integers of at most
40 digits, no NaN or Infinity, no key given twice in one object (json keeps the last
silently), a row's or one nested in it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from rdu_sim.config.json_text import KEY_ONCE, DuplicateKeyError, JsonLimitError, loads
from rdu_sim.serving.traces.lines import TraceLines
from rdu_sim.serving.traces.registry import Row, register_format
from rdu_sim.serving.traces.values import READ

MAX_JSON_DEPTH = 32
"""Deepest bracket nesting in one line (a row is one flat object: depth 1)."""


def json_problem(text: str, exc: json.JSONDecodeError) -> str:
    """What is wrong with the JSON of one line (``text``, its line end removed), its column
    counted in that line: a line that ends inside a string, or before its object closes,
    is said to be cut off (a truncated file's last line, most often)."""
    if exc.msg.startswith("Unterminated string"):
        return (
            f"not valid JSON: unterminated string from column {exc.colno} (the line ends "
            "inside it: cut off?)"
        )
    if exc.pos >= len(text.rstrip()):
        return (
            f"not valid JSON: the line ends at column {exc.colno - 1} before the object "
            "closes (cut off?)"
        )
    return f"not valid JSON: {exc.msg} (column {exc.colno})"


def json_objects(lines: TraceLines) -> Iterator[Row]:
    """Each non-blank line of a JSONL file as an object (line number, the object); a line
    that is not one is a bad row (``TraceLines.bad_row``)."""
    for line in lines:
        text = line.rstrip("\r\n")  # a column counts in the line, not past its end
        if not text.strip():
            continue
        try:
            obj = loads(text, MAX_JSON_DEPTH, unique_keys=True)
        except json.JSONDecodeError as exc:
            lines.bad_row(json_problem(text, exc))
            continue
        except DuplicateKeyError as exc:
            lines.bad_row(f"{exc}; {KEY_ONCE}")
            continue
        except JsonLimitError as exc:
            lines.bad_row(f"not valid JSON: {exc}")
            continue
        if not isinstance(obj, dict):
            lines.bad_row(f"expected a JSON object, got {type(obj).__name__}")
            continue
        yield lines.line, obj


@register_format("jsonl", (".jsonl", ".ndjson"), "one JSON object per line")
def jsonl_rows(lines: TraceLines) -> Iterator[Row]:
    """Rows of a JSONL trace (only the columns used)."""
    for line, obj in json_objects(lines):
        yield line, {name: obj[name] for name in READ if name in obj}
