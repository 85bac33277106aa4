"""Parse JSON text within limits no config, trace row or result needs, before they cost.

- brackets nested deeper than `max_depth` are refused by one linear scan before parsing
  (the json module recurses, and 100,000 brackets end in RecursionError);
- integers longer than ``MAX_INT_DIGITS`` are refused before conversion (Python refuses
  past 4300 digits with a ValueError, and converts below that in quadratic time);
- ``NaN`` and ``Infinity``, which the json module accepts but JSON does not, are refused.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_INT_DIGITS = 40  # as for YAML (rdu_sim.config.yaml_io.MAX_INT_CHARS)
_TOKEN = re.compile(r'\\.|["\[\]{}]')  # an escape (two characters), a quote or a bracket


class JsonLimitError(ValueError):
    """JSON text that exceeds one of the limits above (the message says which)."""


def too_deep(text: str, max_depth: int) -> bool:
    """True if brackets outside strings nest deeper than `max_depth` (one linear scan)."""
    if text.count("[") + text.count("{") <= max_depth:
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
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonLimitError(
            f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})"
        )
    return int(text)


def _constant(name: str) -> Any:
    raise JsonLimitError(f"{name} is not a number JSON allows")


def loads(text: str, max_depth: int, *, constants: bool = False) -> Any:
    """``json.loads`` within the limits; JsonLimitError or json.JSONDecodeError otherwise.
    `constants`: accept NaN and Infinity (what ``json.dumps`` writes for them)."""
    if too_deep(text, max_depth):
        raise JsonLimitError(f"nested more than {max_depth} levels deep")
    try:
        if constants:
            return json.loads(text, parse_int=_int)
        return json.loads(text, parse_int=_int, parse_constant=_constant)
    except RecursionError:  # the scan counts brackets; this is its backstop
        raise JsonLimitError(f"nested more than {max_depth} levels deep") from None
