"""Parse quantities written the way people write them ("1.8 TB/s", "64 GiB", "2 us").

Every quantity is converted once, here at the config edge, into one internal unit:
bytes (int), seconds (float), bytes per second (float), FLOP/s (float) and hertz
(float). Nothing past the config package ever sees a unit string.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

_NUMBER = r"(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
_PATTERN = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>[A-Za-zµ/]*)\s*$")

_BYTE_UNITS: dict[str, float] = {
    "": 1,
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "pb": 1e15,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pib": 2**50,
}
_TIME_UNITS: dict[str, float] = {
    "": 1.0,
    "s": 1.0,
    "sec": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "ns": 1e-9,
    "ps": 1e-12,
    "min": 60.0,
    "h": 3600.0,
}
_FREQ_UNITS: dict[str, float] = {"": 1.0, "hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}
_FLOPS_UNITS: dict[str, float] = {
    "": 1.0,
    "flop/s": 1.0,
    "flops": 1.0,
    "gflop/s": 1e9,
    "gflops": 1e9,
    "tflop/s": 1e12,
    "tflops": 1e12,
    "pflop/s": 1e15,
    "pflops": 1e15,
}


class UnitError(ValueError):
    """A quantity whose number or unit cannot be understood."""


def _split(value: Any, kind: str, example: str) -> tuple[float, str]:
    if isinstance(value, bool):
        raise UnitError(f"expected a {kind} such as {example!r}, got {value!r}")
    if isinstance(value, int | float):
        try:
            number, unit = float(value), ""
        except OverflowError:  # an int beyond float range
            raise UnitError(f"{kind} is out of range (beyond 1e308)") from None
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        if not match:
            raise UnitError(f"expected a {kind} such as {example!r}, got {value!r}")
        number, unit = float(match["num"]), match["unit"]
    else:
        raise UnitError(f"expected a {kind} such as {example!r}, got {type(value).__name__}")
    if not math.isfinite(number):
        raise UnitError(f"{kind} must be a finite number, got {value!r}")
    return number, unit


def _lookup(unit: str, table: dict[str, float], kind: str, value: Any) -> float:
    scale = table.get(unit.lower())
    if scale is None:
        known = ", ".join(sorted(k for k in table if k))
        raise UnitError(f"unknown {kind} unit {unit!r} in {value!r} (known: {known})")
    return scale


def _scaled(number: float, scale: float, kind: str, value: Any) -> float:
    """number * scale, refusing a product beyond float range ("1e300 PiB")."""
    total = number * scale
    if not math.isfinite(total):
        raise UnitError(f"{kind} {value!r} is out of range")
    return total


def parse_bytes(value: Any) -> int:
    """ "64 GiB" -> 68719476736. Bare numbers are bytes. Decimal (GB) and binary (GiB) prefixes."""
    number, unit = _split(value, "size", "64 GiB")
    return round(_scaled(number, _lookup(unit, _BYTE_UNITS, "size", value), "size", value))


def parse_seconds(value: Any) -> float:
    """ "2 us" -> 2e-6. Bare numbers are seconds."""
    number, unit = _split(value, "duration", "2 us")
    return _scaled(number, _lookup(unit, _TIME_UNITS, "duration", value), "duration", value)


def parse_hertz(value: Any) -> float:
    """ "1.6 GHz" -> 1.6e9."""
    number, unit = _split(value, "frequency", "1.6 GHz")
    return _scaled(number, _lookup(unit, _FREQ_UNITS, "frequency", value), "frequency", value)


def parse_bandwidth(value: Any) -> float:
    """ "1.8 TB/s" -> 1.8e12 bytes per second. Bare numbers are bytes per second."""
    number, unit = _split(value, "bandwidth", "1.8 TB/s")
    lowered = unit.lower()
    if lowered.endswith("/s"):
        size_unit = lowered[:-2]
    elif lowered == "":
        size_unit = ""
    else:
        raise UnitError(f"expected a bandwidth such as '1.8 TB/s', got {value!r}")
    scale = _lookup(size_unit, _BYTE_UNITS, "bandwidth", value)
    return _scaled(number, scale, "bandwidth", value)


def parse_flops(value: Any) -> float:
    """ "638 TFLOP/s" -> 6.38e14 FLOP per second."""
    number, unit = _split(value, "compute rate", "638 TFLOP/s")
    scale = _lookup(unit, _FLOPS_UNITS, "compute rate", value)
    return _scaled(number, scale, "compute rate", value)


def _format(value: float, table: list[tuple[float, str]]) -> str:
    for scale, name in table:
        if abs(value) >= scale:
            return f"{value / scale:.4g} {name}"
    return f"{value:.4g} {table[-1][1]}" if table[-1][0] == 1 else f"{value:.4g}"


def format_bytes(value: float) -> str:
    """68719476736 -> '64 GiB' (binary prefixes, for people)."""
    return _format(
        value, [(2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "B")]
    )


def format_seconds(value: float) -> str:
    """0.0123 -> '12.3 ms'."""
    return _format(value, [(1, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"), (1e-12, "ps")])


def format_bandwidth(value: float) -> str:
    """1.8e12 -> '1.8 TB/s'."""
    return _format(value, [(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1, "B/s")])


# Pydantic field types: accept a unit string or a bare number, store the internal unit.
# The JSON Schema (for editors) describes what the YAML may hold: a number or a string.
_QUANTITY = float | str
Bytes = Annotated[
    int, BeforeValidator(parse_bytes, json_schema_input_type=_QUANTITY), PlainSerializer(int)
]
Seconds = Annotated[float, BeforeValidator(parse_seconds, json_schema_input_type=_QUANTITY)]
Hertz = Annotated[float, BeforeValidator(parse_hertz, json_schema_input_type=_QUANTITY)]
BytesPerSecond = Annotated[
    float, BeforeValidator(parse_bandwidth, json_schema_input_type=_QUANTITY)
]
FlopsPerSecond = Annotated[float, BeforeValidator(parse_flops, json_schema_input_type=_QUANTITY)]
