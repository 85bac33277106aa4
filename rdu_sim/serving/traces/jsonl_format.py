"""JSON Lines traces: one JSON object per line; blank lines are skipped.

Each line is parsed on its own, so memory is one line. A line nesting brackets more than
``MAX_JSON_DEPTH`` deep is refused before it is parsed (the json module recurses), and
integers longer than 40 digits before they are converted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from rdu_sim.serving.traces.lines import TraceLines
from rdu_sim.serving.traces.registry import Row, register_format
from rdu_sim.serving.traces.values import COLUMNS

MAX_JSON_DEPTH = 32
"""Deepest bracket nesting in one line (a row is one flat object: depth 1)."""

_MAX_INT_DIGITS = 40
_TOKEN = re.compile(r'\\.|["\[\]{}]')  # an escape (two characters), a quote or a bracket


def _too_deep(text: str) -> bool:
    """True if brackets outside strings nest deeper than MAX_JSON_DEPTH (one linear scan)."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return False
    depth = 0
    in_string = False
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token == '"':
            in_string = not in_string
        elif in_string or len(token) == 2:
            continue
        elif token in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        else:
            depth -= 1
    return False


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


@register_format("jsonl", (".jsonl", ".ndjson"), "one JSON object per line")
def jsonl_rows(lines: TraceLines) -> Iterator[Row]:
    """Rows of a JSONL trace (only the columns used)."""
    for text in lines:
        if not text.strip():
            continue
        if _too_deep(text):
            raise lines.error(f"not valid JSON: nested more than {MAX_JSON_DEPTH} levels deep")
        try:
            obj = json.loads(text, parse_int=_int, parse_constant=_constant)
        except json.JSONDecodeError as exc:
            raise lines.error(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
        except (ValueError, RecursionError) as exc:
            raise lines.error(f"not valid JSON: {exc}"[:200]) from None
        if not isinstance(obj, dict):
            raise lines.error(f"expected a JSON object, got {type(obj).__name__}")
        yield lines.line, {name: obj[name] for name in COLUMNS if name in obj}
