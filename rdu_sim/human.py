"""Numbers as people read them: the one place that formats a quantity for a person.

Every report, table, figure label and message that shows a size, a duration, a rate or a
count uses these, so the same quantity reads the same everywhere and none reads
``1.01e+03 MiB``, ``3.46e+03 ms`` or ``1 sockets``. Parsing the other way (``"1.8 TB/s"`` ->
bytes per second) is ``rdu_sim.config.units``; JSON keeps the raw numbers. Imports nothing of
rdu_sim, so any room may use it (error messages too).

Rules: three significant digits by default (``digits``), thousands separated by commas,
never an exponent for numbers a report shows (at most 0.001 below the smallest unit of a
table); sizes in binary units (KiB, MiB, GiB, TiB: capacities are powers of two); rates and
bandwidths in decimal (GB/s, TFLOP/s: as datasheets quote them); durations in the unit that
fits, from ns to days.
"""

from __future__ import annotations

import math

__all__ = [
    "bandwidth",
    "count",
    "duration",
    "flops",
    "in_unit",
    "number",
    "percent",
    "rate",
    "ratio",
    "si",
    "size",
    "tokens",
]

MISSING = "-"
"""What a missing value (None, NaN) shows as."""

_SIZES = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))
_DECIMAL = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_DURATIONS = (  # (shown from, seconds per unit, unit): hours up to two days, then days
    (2 * 86400.0, 86400.0, "days"),
    (3600.0, 3600.0, "h"),
    (60.0, 60.0, "min"),
    (1.0, 1.0, "s"),
)
_SHORT_DURATIONS = ((1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))


def _missing(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def number(value: float | None, digits: int = 3) -> str:
    """``digits`` significant digits, commas between thousands, no exponent above 1e-4:
    ``1,374``, ``12.3``, ``0.116``, ``0``."""
    if _missing(value):
        return MISSING
    assert value is not None
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude < 1e-4:
        return f"{value:.{digits}g}"
    if magnitude >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    decimals = digits - 1 - math.floor(math.log10(magnitude))
    text = f"{value:.{decimals}f}"
    if float(text) and abs(float(text)) >= 10 ** (digits - 1):  # 99.96 rounds to 100.0
        return f"{value:,.0f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def count(value: int, noun: str, plural: str | None = None) -> str:
    """``1 socket``, ``16 sockets``, ``1,000 requests`` (``plural`` for irregular nouns)."""
    word = noun if value == 1 else plural or f"{noun}s"
    return f"{value:,} {word}"


def size(value: float | None, digits: int = 3) -> str:
    """Bytes in binary units: ``520 MiB``, ``1,010 MiB``, ``1.5 GiB``, ``0 B``."""
    if _missing(value):
        return MISSING
    assert value is not None
    for scale, unit in _SIZES:
        if abs(value) >= scale:
            return f"{number(value / scale, digits)} {unit}"
    return f"{value:,.0f} B"


def _decimal(value: float, unit: str, digits: int) -> str:
    for scale, prefix in _DECIMAL:
        if abs(value) >= scale:
            return f"{number(value / scale, digits)} {prefix}{unit}"
    return f"{number(value, digits)} {unit}"


def bandwidth(value: float | None, digits: int = 3) -> str:
    """Bytes per second in decimal units: ``1.8 TB/s``, ``64 GB/s``."""
    return MISSING if _missing(value) else _decimal(float(value or 0), "B/s", digits)


def flops(value: float | None, digits: int = 3) -> str:
    """FLOP per second in decimal units: ``638 TFLOP/s``."""
    return MISSING if _missing(value) else _decimal(float(value or 0), "FLOP/s", digits)


def duration(value: float | None, digits: int = 3) -> str:
    """Seconds in the unit that fits: ``812 ns``, ``12.3 ms``, ``4.56 s``, ``58.5 min``,
    ``26.3 h`` (up to two days), ``3.2 days``."""
    if _missing(value):
        return MISSING
    assert value is not None
    magnitude = abs(value)
    if magnitude == 0:
        return "0 s"
    for threshold, scale, unit in _DURATIONS:
        if magnitude >= threshold:
            return f"{number(value / scale, digits)} {unit}"
    for scale, unit in _SHORT_DURATIONS:
        if magnitude >= scale:
            return f"{number(value / scale, digits)} {unit}"
    return f"{number(value / 1e-12, digits)} ps"


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """A decimal SI prefix: ``1.2 G``, ``34.5 kFLOP`` (counts, FLOPs, bytes on a wire)."""
    return MISSING if _missing(value) else _decimal(float(value or 0), unit, digits).rstrip()


def in_unit(value: float | None, unit: str, digits: int = 3) -> str:
    """A value in a unit named by a word: ``fraction`` as a percentage, ``x`` as a ratio,
    anything else as a number followed by the unit (``1,832 tokens/s``)."""
    if unit == "fraction":
        return MISSING if _missing(value) else f"{number(100 * float(value or 0), digits)}%"
    if unit == "x":
        return ratio(value, digits)
    return rate(value, unit, digits).rstrip()


def rate(value: float | None, unit: str, digits: int = 3) -> str:
    """A rate with its unit, at least one decimal below 100: ``2,779 tok/s``, ``22.2
    tok/s``, ``0.49 req/s``."""
    return MISSING if _missing(value) else f"{number(value, digits)} {unit}"


def percent(fraction: float | None, decimals: int = 1, *, signed: bool = False) -> str:
    """A fraction as a percentage: ``62.1%`` (``decimals`` after the point); ``signed``
    always shows the sign, as an error does: ``+12.3%``, ``-4.0%``."""
    if _missing(fraction):
        return MISSING
    sign = "+" if signed else ""
    return f"{100 * float(fraction or 0):{sign}.{decimals}f}%"


def target_percent(fraction: float) -> str:
    """A share as a target is written, to its last digit and no further: ``95%``, ``99.9%``
    (``percent`` pads to fixed decimals: ``95.000%``, or rounds ``99.95%`` up to 100)."""
    return f"{round(100 * fraction, 9):.12g}%"


def ratio(value: float | None, digits: int = 3) -> str:
    """A ratio: ``3.95x``."""
    return MISSING if _missing(value) else f"{number(value, digits)}x"


def tokens(value: float) -> str:
    """A token count as people say it: ``512``, ``8k``, ``128k``, ``1M`` (powers of two in
    k = 1024), else ``1.5k``-style thousands."""
    if value >= 2**20 and value % 2**20 == 0:
        return f"{int(value) // 2**20}M"
    if value >= 1024 and value % 1024 == 0:
        return f"{int(value) // 1024}k"
    if value >= 1000:
        return f"{number(value / 1000, 2)}k"
    return f"{value:g}"
