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


def json_objects(lines: TraceLines) -> Iterator[Row]:
    """Each non-blank line of a JSONL file as an object (line number, the object)."""
    for text in lines:
        if not text.strip():
            continue
        try:
            obj = loads(text, MAX_JSON_DEPTH, unique_keys=True)
        except json.JSONDecodeError as exc:
            raise lines.error(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
        except DuplicateKeyError as exc:
            raise lines.error(f"{exc}; {KEY_ONCE}") from None
        except JsonLimitError as exc:
            raise lines.error(f"not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise lines.error(f"expected a JSON object, got {type(obj).__name__}")
        yield lines.line, obj


@register_format("jsonl", (".jsonl", ".ndjson"), "one JSON object per line")
def jsonl_rows(lines: TraceLines) -> Iterator[Row]:
    """Rows of a JSONL trace (only the columns used)."""
    for line, obj in json_objects(lines):
        yield line, {name: obj[name] for name in READ if name in obj}
