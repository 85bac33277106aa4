"""Render a user's value inside a message: short and bounded, whatever the value is.

A message must never cost more than the input that caused it: a 10 MB string, a list of
200,000 items or an integer of a million bits is shown by its kind and size, never in full
(``repr`` of such an integer even raises ValueError past 4300 digits).
"""

from __future__ import annotations

import reprlib
from typing import Any

MAX_SHOWN_CHARS = 80
MAX_INT_BITS_SHOWN = 128  # beyond this an integer is shown by its size


def cut_middle(text: str, limit: int = 200) -> str:
    """`text`, or its head and tail around " ... " when longer than `limit` (paths stay
    recognisable by both ends)."""
    if len(text) <= limit:
        return text
    half = (limit - 5) // 2
    return f"{text[:half]} ... {text[-half:]}"


def _huge_int(value: int) -> str:
    return f"an integer of {value.bit_length()} bits"


def shown(value: Any) -> str:
    """A bad value for a "got ..." message: scalars as repr (cut), containers by type."""
    if isinstance(value, dict | list | set | tuple):
        return type(value).__name__
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS_SHOWN:
        return _huge_int(value)
    if isinstance(value, str | bytes) and len(value) > MAX_SHOWN_CHARS:
        return repr(value[: MAX_SHOWN_CHARS - 3])[: MAX_SHOWN_CHARS - 3] + "..."
    text = repr(value)
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 3] + "..."


def shown_json(value: Any) -> str:
    """A bad value a JSON file gave, as the file wrote it: ``true``, ``false``, ``null``
    (not Python's ``True``, ``None``); else as :func:`shown` says it."""
    if isinstance(value, bool) or value is None:
        return "null" if value is None else str(value).lower()
    return shown(value)


class _Short(reprlib.Repr):
    """reprlib with a few items per container and huge integers shown by size."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxlist = self.maxtuple = self.maxset = self.maxdict = 6
        self.maxstring = self.maxother = 40

    def repr_int(self, x: int, level: int) -> str:
        return _huge_int(x) if x.bit_length() > MAX_INT_BITS_SHOWN else repr(x)

    def repr_str(self, x: str, level: int) -> str:
        return reprlib.Repr.repr_str(self, x[: self.maxstring + 1], level)


_SHORT = _Short()


def short(value: Any) -> str:
    """A compact rendering of any value, containers included: `[1024, 4096, ...]`."""
    if isinstance(value, str):
        return value if len(value) <= MAX_SHOWN_CHARS else value[: MAX_SHOWN_CHARS - 3] + "..."
    return _SHORT.repr(value)
