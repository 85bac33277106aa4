"""Parse JSON text within limits no config, trace row or result needs, before they cost.

- brackets nested deeper than `max_depth` are refused by one linear scan before parsing
  (the json module recurses, and 100,000 brackets end in RecursionError);
- integers longer than ``MAX_INT_DIGITS`` are refused before conversion (Python refuses
  past 4300 digits with a ValueError, and converts below that in quadratic time);
- ``NaN`` and ``Infinity``, which the json module accepts but JSON does not, are refused;
- with ``unique_keys``, a key given twice in one object (the json module keeps the last,
  silently) is a DuplicateKeyError, as it is in YAML (``rdu_sim.config.yaml_io``).
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_INT_DIGITS = 40  # as for YAML (rdu_sim.config.yaml_io.MAX_INT_CHARS)
_TOKEN = re.compile(r'\\.|["\[\]{}]')  # an escape (two characters), a quote or a bracket
_LONG_DIGITS = re.compile(f"[0-9]{{{MAX_INT_DIGITS + 1}}}")  # where a long integer could be


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


KEY_ONCE = "a key may appear once in an object (JSON keeps the last)"
"""Why a key given twice is refused, said after the key (a config.json's, a trace row's or
an object nested in one)."""


class DuplicateKeyError(ValueError):
    """A key given twice in one JSON object (``loads(..., unique_keys=True)``)."""

    def __init__(self, key: str) -> None:
        shown = key if len(key) <= 60 else key[:57] + "..."
        super().__init__(f"duplicate key {shown!r}")
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return obj


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonLimitError(
            f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})"
        )
    return int(text)


def _constant(name: str) -> Any:
    raise JsonLimitError(f"{name} is not a number JSON allows")


def loads(text: str, max_depth: int, *, constants: bool = False, unique_keys: bool = False) -> Any:
    """``json.loads`` within the limits; JsonLimitError or json.JSONDecodeError otherwise.
    `constants`: accept NaN and Infinity (what ``json.dumps`` writes for them).
    `unique_keys`: a key twice in one object is a DuplicateKeyError (a file a person
    edits: a config.json), not the last one silently kept."""
    if too_deep(text, max_depth):
        raise JsonLimitError(f"nested more than {max_depth} levels deep")
    # An integer of more than MAX_INT_DIGITS digits has a run of that many digits: without
    # one, every integer converts as the check would let it (a trace row's hash ids are
    # hundreds of integers, each a Python call through ``parse_int``), so skip the check.
    check = _int if _LONG_DIGITS.search(text) else int
    hook = _unique if unique_keys else None
    try:
        if constants:
            return json.loads(text, parse_int=check, object_pairs_hook=hook)
        return json.loads(text, parse_int=check, parse_constant=_constant, object_pairs_hook=hook)
    except RecursionError:  # the scan counts brackets; this is its backstop
        raise JsonLimitError(f"nested more than {max_depth} levels deep") from None
