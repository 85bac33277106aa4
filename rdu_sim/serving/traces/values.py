"""The columns a trace row holds and the checks every value passes, whatever the format.

- ``prompt_tokens``, ``output_tokens``: whole numbers in 1..100,000,000 (the workload's own
  bound), written with ASCII digits (``"١٢"`` is not twelve here, whatever Python's
  ``int()`` thinks);
- ``arrival_s``: optional, a finite time in 0..``MAX_ARRIVAL_S`` s (2^62 ps, the serving
  clock's bound: ``rdu_sim.serving.clock``), an ASCII decimal number;
- ``acceptance``: optional, a request's per-token acceptance rate under speculative
  decoding, an ASCII decimal number in 0..1;
- ``expert``: optional, the expert a request needs in a Composition of Experts (the
  workload's ``coe``), a whole number in 0..``MAX_EXPERT``;
- a published trace's time (``clock_seconds``): any finite number of seconds on the trace's
  own clock (a wall-clock time, say), ASCII digits only, shifted later to start at 0;
- any other column (a BurstGPT ``Model``, an extra Mooncake field) is kept as text
  (``column_text``), the form a cluster's ``traffic.filter`` and ``classes.column`` match.

Every digit a trace reader accepts is ASCII, whatever the format: Python's ``int()``,
``float()`` and ``strptime`` accept other scripts' digits, these checks do not.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rdu_sim.config.show import shown_json
from rdu_sim.config.units import parse_decimal
from rdu_sim.serving.clock import MAX_ARRIVAL_S

COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
REQUIRED = COLUMNS[1:]
READ = (*COLUMNS, "acceptance", "expert")  # every column a trace's rows are read for
MAX_EXPERT = 99_999  # coe.experts' own bound, less one (experts count from 0)
MAX_TOKENS = 100_000_000
_MAX_DIGITS = 12  # more digits than any token count in range


class ValueProblem(ValueError):
    """A value that fails its column's check (the reader adds the file, line and column)."""


def tokens(value: Any) -> int:
    """A positive whole number of tokens (``12``, ``"12"``, ``12.0``; not ``1.5`` or ``true``)."""
    if type(value) is str and value.isascii() and value.isdigit() and len(value) <= _MAX_DIGITS:
        count = int(value)  # the common case, a CSV field: checked at C speed
        if 1 <= count <= MAX_TOKENS:
            return count
    if isinstance(value, str):
        text = value.strip().removeprefix("+")
        if not (0 < len(text) <= _MAX_DIGITS and text.isascii() and text.isdigit()):
            raise ValueProblem(f"expected a whole number of tokens, got {shown_json(value)}")
        value = int(text)
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueProblem(f"expected a whole number of tokens, got {shown_json(value)}")
    if not 1 <= value <= MAX_TOKENS:
        raise ValueProblem(f"must be in 1..{MAX_TOKENS}, got {shown_json(value)}")
    return value


def seconds(value: Any) -> float:
    """An arrival time in seconds, finite, in 0..MAX_ARRIVAL_S."""
    number: float | None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int | float):
        number = float(value) if not isinstance(value, int) or value.bit_length() < 1024 else None
    elif isinstance(value, str) and len(value) <= 64:
        number = parse_decimal(value)
    else:
        number = None
    if number is None:
        raise ValueProblem(f"expected seconds (an ASCII decimal number), got {shown_json(value)}")
    if not (math.isfinite(number) and 0 <= number <= MAX_ARRIVAL_S):
        raise ValueProblem(
            f"must be a time in 0..{MAX_ARRIVAL_S:.4g} s (the serving clock's range), "
            f"got {shown_json(value)}"
        )
    return number


def probability(value: Any) -> float:
    """A rate in 0..1 (an ASCII decimal number)."""
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value) if not isinstance(value, int) or abs(value) <= 1 else None
    elif isinstance(value, str) and len(value) <= 64:
        number = parse_decimal(value)
    if number is None or not (math.isfinite(number) and 0 <= number <= 1):
        raise ValueProblem(
            f"expected a rate in 0..1 (an ASCII decimal number), got {shown_json(value)}"
        )
    return number


def expert(value: Any) -> int:
    """An expert's index: a whole number in 0..MAX_EXPERT (``3``, ``"3"``, ``3.0``)."""
    if isinstance(value, str):
        text = value.strip()
        if not (0 < len(text) <= 6 and text.isascii() and text.isdigit()):
            raise ValueProblem(
                f"expected an expert's index (a whole number), got {shown_json(value)}"
            )
        value = int(text)
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_EXPERT:
        raise ValueProblem(
            f"expected an expert's index in 0..{MAX_EXPERT}, got {shown_json(value)}"
        )
    return value


def clock_seconds(value: Any) -> float:
    """A published trace's time in seconds on its own clock: finite, an ASCII decimal
    number when written as text (the reader shifts the clock to start at 0)."""
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value) if not isinstance(value, int) or value.bit_length() < 1024 else None
    elif isinstance(value, str) and len(value) <= 64:
        number = parse_decimal(value)
    if number is None or not math.isfinite(number):
        raise ValueProblem(
            f"expected a finite time in seconds (ASCII digits), got {shown_json(value)}"
        )
    return number


def column_text(value: Any) -> str:
    """A kept column's value as text: a string as it is, any other JSON value as JSON
    (``true``, ``3``, ``["a"]``), so a filter written in YAML matches it the same way."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
