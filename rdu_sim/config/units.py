"""Parse quantities written the way people write them ("1.8 TB/s", "64 GiB", "2 us").

Every quantity is converted once, here at the config edge, into one internal unit:
bytes (int), seconds (float), bytes per second (float) and FLOP/s (float). Nothing past
the config package ever sees a unit string.

Units mean what they say. ``B`` is a byte and ``b`` a bit (``400 Gb/s``, ``400 Gbit/s`` and
``400 Gbps`` are 50 GB/s). Case is matched exactly first; a unit written in another case
is accepted only when every unit it could stand for means the same number (``MS`` is ms:
there is no megasecond; ``TFLOPS`` is TFLOP/s); otherwise it is refused naming the
readings (``gb/s``: GB/s or Gb/s?). The parser is a single left-to-right scan: its time is
linear in the text, and a quantity longer than ``MAX_QUANTITY_CHARS`` is refused before it
is looked at.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, get_args

from pydantic import (
    BeforeValidator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    PlainSerializer,
    StringConstraints,
    TypeAdapter,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from rdu_sim import human
from rdu_sim.config.limits import MAX_TIER_BYTES

MAX_QUANTITY_CHARS = 64
"""Longest quantity string accepted ("613.4615385 GFLOP/s" is 19 characters)."""

_DIGITS = frozenset("0123456789")  # ASCII only: str.isdigit() also accepts "١٢" and "²"
_UNIT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZµμ/")


class UnitError(ValueError):
    """A quantity whose number or unit cannot be understood."""


@dataclass(frozen=True)
class _Unit:
    scale: float  # internal units per one of this unit
    meaning: str  # "gigabits per second", for messages naming the readings


# (symbol, scale, name) of the prefixes people put before bytes and bits; K and k are both
# kilo (KB is the common spelling), and binary prefixes carry an i.
_DECIMAL = [
    ("k", 1e3, "kilo"),
    ("K", 1e3, "kilo"),
    ("M", 1e6, "mega"),
    ("G", 1e9, "giga"),
    ("T", 1e12, "tera"),
    ("P", 1e15, "peta"),
    ("E", 1e18, "exa"),
]
_BINARY = [
    ("Ki", 2.0**10, "kibi"),
    ("Mi", 2.0**20, "mebi"),
    ("Gi", 2.0**30, "gibi"),
    ("Ti", 2.0**40, "tebi"),
    ("Pi", 2.0**50, "pebi"),
    ("Ei", 2.0**60, "exbi"),
]
_PREFIXES = [("", 1.0, ""), *_DECIMAL, *_BINARY]


def _size_entries() -> dict[str, tuple[float, str]]:
    """Byte and bit sizes in bytes: B, kB, KiB, ...; b, kb, Kib, kbit, Kibit, ... (1/8 byte)."""
    entries: dict[str, tuple[float, str]] = {"byte": (1.0, "bytes"), "bytes": (1.0, "bytes")}
    entries["bits"] = (0.125, "bits")
    for symbol, scale, name in _PREFIXES:
        entries[f"{symbol}B"] = (scale, f"{name}bytes")
        entries[f"{symbol}b"] = (scale / 8, f"{name}bits")
        entries[f"{symbol}bit"] = (scale / 8, f"{name}bits")
    return entries


def _bandwidth_entries() -> dict[str, tuple[float, str]]:
    """Every size per second: GB/s, Gb/s, Gbit/s, and the network spellings GBps, Gbps."""
    entries: dict[str, tuple[float, str]] = {}
    for name, (scale, meaning) in _size_entries().items():
        entries[f"{name}/s"] = (scale, f"{meaning} per second")
    for symbol, scale, name in _PREFIXES:
        entries[f"{symbol}Bps"] = (scale, f"{name}bytes per second")
        entries[f"{symbol}bps"] = (scale / 8, f"{name}bits per second")
    return entries


def _flops_entries() -> dict[str, tuple[float, str]]:
    entries: dict[str, tuple[float, str]] = {}
    for symbol, scale, name in [("", 1.0, ""), *_DECIMAL]:
        for spelling in ("FLOP/s", "FLOPS", "FLOPs/s"):
            entries[f"{symbol}{spelling}"] = (scale, f"{name}FLOP per second")
    return entries


class _UnitTable:
    """Unit spellings of one kind of quantity, and their case-insensitive readings.

    ``known`` says which spellings it takes, for "unknown unit" messages and the schema;
    it is written from the same prefix lists the spellings are built from (a test reads
    every spelling against it), so the message never lists fewer units than are taken."""

    def __init__(self, kind: str, known: str, entries: dict[str, tuple[float, str]]) -> None:
        self.kind = kind
        self.known = known
        self.units = {name: _Unit(scale, meaning) for name, (scale, meaning) in entries.items()}
        # lower-cased spelling -> {scale: the first spelling with that scale}
        self.folded: dict[str, dict[float, str]] = {}
        for name, unit in self.units.items():
            self.folded.setdefault(name.casefold(), {}).setdefault(unit.scale, name)

    def scale(self, unit: str, value: Any) -> float:
        """The scale of `unit`: its exact spelling, else a case-insensitive match that is
        unique; an ambiguous spelling is refused naming every reading."""
        if unit == "":
            return 1.0  # a bare number is in the internal unit
        exact = self.units.get(unit)
        if exact is not None:
            return exact.scale
        readings = self.folded.get(unit.casefold(), {})
        if len(readings) == 1:
            return next(iter(readings))
        if readings:
            named = " or ".join(
                f"{name!r} ({self.units[name].meaning})" for name in sorted(readings.values())
            )
            raise UnitError(
                f"{self.kind} unit {unit!r} in {_shown(value)} is ambiguous: write {named}"
            )
        raise UnitError(
            f"unknown {self.kind} unit {unit!r} in {_shown(value)} (known: {self.known})"
        )


def _prefixed(base: str, prefixes: Sequence[tuple[str, float, str]]) -> str:
    """``kB, MB, GB ...``: ``base`` after each prefix (``K``, kilo's other spelling, left
    out: ``k`` stands for both)."""
    return ", ".join(f"{symbol}{base}" for symbol, _, _ in prefixes if symbol != "K")


_SIZES_KNOWN = (
    f"B, {_prefixed('B', _DECIMAL)}, {_prefixed('B', _BINARY)}, bytes; bits: b or bit "
    "after the same prefixes (Gb, Gibit), bits"
)
_BYTE_UNITS = _UnitTable("size", _SIZES_KNOWN, _size_entries())
_BANDWIDTH_UNITS = _UnitTable(
    "bandwidth",
    f"B/s, {_prefixed('B/s', _DECIMAL)}, {_prefixed('B/s', _BINARY)} (or GBps); bits: b/s, "
    "bit/s or bps after the same prefixes (Gb/s, Gbit/s, Gbps)",
    _bandwidth_entries(),
)
_TIME_ENTRIES = {
    "s": (1.0, "seconds"),
    "sec": (1.0, "seconds"),
    "ms": (1e-3, "milliseconds"),
    "us": (1e-6, "microseconds"),
    "µs": (1e-6, "microseconds"),  # MICRO SIGN
    "μs": (1e-6, "microseconds"),  # GREEK SMALL LETTER MU
    "ns": (1e-9, "nanoseconds"),
    "ps": (1e-12, "picoseconds"),
    "min": (60.0, "minutes"),
    "h": (3600.0, "hours"),
}
_TIME_UNITS = _UnitTable("duration", ", ".join(_TIME_ENTRIES), _TIME_ENTRIES)
_FLOPS_UNITS = _UnitTable(
    "compute rate",
    f"FLOP/s, {_prefixed('FLOP/s', _DECIMAL)} (or FLOPS, FLOPs/s: TFLOPS)",
    _flops_entries(),
)
_POWER_ENTRIES = {
    "W": (1.0, "watts"),
    "kW": (1e3, "kilowatts"),
    "MW": (1e6, "megawatts"),
}
_POWER_UNITS = _UnitTable("power", ", ".join(_POWER_ENTRIES), _POWER_ENTRIES)


def _scan_number(text: str, start: int) -> int:
    """End of the decimal number starting at ``text[start]`` (== start when there is none).

    Accepts ``[+-]digits[.digits][e[+-]digits]`` and ``.digits``, ASCII digits only. One
    pass, each character looked at once or twice: linear in the input.
    """
    i, n = start, len(text)
    if i < n and text[i] in "+-":
        i += 1
    whole = i
    while i < n and text[i] in _DIGITS:
        i += 1
    digits = i - whole
    if i < n and text[i] == ".":
        i += 1
        fraction = i
        while i < n and text[i] in _DIGITS:
            i += 1
        digits += i - fraction
    if digits == 0:
        return start
    if i < n and text[i] in "eE":  # an exponent only when digits follow ("1 EB" is a unit)
        j = i + 1
        if j < n and text[j] in "+-":
            j += 1
        exponent = j
        while j < n and text[j] in _DIGITS:
            j += 1
        if j > exponent:
            i = j
    return i


def split_quantity(text: str) -> tuple[str, str] | None:
    """'1.8 TB/s' -> ('1.8', 'TB/s'); None when the text is not a number and a unit.

    At most one run of spaces between the number and the unit; the unit is letters, 'µ'
    and '/' only.
    """
    stripped = text.strip()
    end = _scan_number(stripped, 0)
    if end == 0:
        return None
    unit = stripped[end:].lstrip(" \t")
    if any(c not in _UNIT_CHARS for c in unit):
        return None
    return stripped[:end], unit


_DECIMAL_CHARS = frozenset("0123456789.eE+-")


def parse_decimal(text: str) -> float | None:
    """A plain decimal number ('12', '0.5', '1e3'; ASCII digits, no unit), else None.

    Over these characters float() accepts exactly the numbers the scanner does (no
    underscores, 'nan', 'inf' or non-ASCII digits get that far), at C speed: a trace
    checks a million of them.
    """
    stripped = text.strip()
    if not stripped or not _DECIMAL_CHARS.issuperset(stripped):
        return None
    try:
        return float(stripped)
    except ValueError:
        return None


def _shown(value: Any) -> str:
    """The bad value for a message: short, whatever it is."""
    shown = repr(value) if not isinstance(value, int) or value.bit_length() < 128 else "a huge int"
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _split(value: Any, kind: str, example: str) -> tuple[float, str]:
    if isinstance(value, bool):
        raise UnitError(f"expected a {kind} such as {example!r}, got {value!r}")
    if isinstance(value, int | float):
        try:
            number, unit = float(value), ""
        except OverflowError:  # an int beyond float range
            raise UnitError(f"{kind} is out of range (beyond 1e308)") from None
    elif isinstance(value, str):
        if len(value) > MAX_QUANTITY_CHARS:
            raise UnitError(
                f"expected a {kind} such as {example!r}: a quantity is at most "
                f"{MAX_QUANTITY_CHARS} characters, this one has {len(value)}"
            )
        parts = split_quantity(value)
        if parts is None:
            raise UnitError(f"expected a {kind} such as {example!r}, got {_shown(value)}")
        number, unit = float(parts[0]), parts[1]
    else:
        raise UnitError(f"expected a {kind} such as {example!r}, got {type(value).__name__}")
    if not math.isfinite(number):
        raise UnitError(f"{kind} must be a finite number, got {_shown(value)}")
    return number, unit


def _scaled(number: float, scale: float, kind: str, value: Any) -> float:
    """number * scale, refusing a product beyond float range ("1e300 PiB")."""
    total = number * scale
    if not math.isfinite(total):
        raise UnitError(f"{kind} {_shown(value)} is out of range")
    return total


BARE_RATE_FLOOR = 1e9
"""A bandwidth or FLOP/s written as a bare number is per second, in the internal unit; one
below a billion per second is a forgotten unit, refused naming how it reads. Nothing these
fields describe is that slow: the slowest memory, link or port of a machine (a PCIe lane, a
10 Gb Ethernet port) moves more than 1 GB/s, and one PCU or thread block computes more
than 1 GFLOP/s; but a number written in another unit is: ``bandwidth: 2000`` meaning GB/s,
``8000000`` meaning MB/s (8 MB/s, a step of hours). A slower rate is still taken with its
unit (``100 MB/s``)."""

_EXAMPLE_UNITS: dict[str, tuple[float, tuple[tuple[str, float], ...]]] = {
    "bandwidth": (1e15, (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3))),
    "compute rate": (1e16, (("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6))),
}
"""The unit a refused bare rate is shown with, as a guess at what was meant: the largest
that keeps it at most the ceiling (1 PB/s, 10 PFLOP/s): ``2000 GB/s``, ``8000000 MB/s``."""


def _forgotten_rate(number: float) -> bool:
    """Whether a bare rate reads as a forgotten unit: 1 to :data:`BARE_RATE_FLOOR` per second
    (one below 1 per second is left to the fields' own least rate, 1 per second)."""
    return 1 <= number < BARE_RATE_FLOOR


def _bare_rate(number: float, unit: str, table: _UnitTable, value: Any) -> None:
    """Refuse a bare rate that reads as a forgotten unit (:func:`_forgotten_rate`)."""
    if unit or not _forgotten_rate(number):
        return
    bandwidth = table is _BANDWIDTH_UNITS
    shown = human.bandwidth if bandwidth else human.flops
    per_second = "bytes per second" if bandwidth else "FLOP per second"
    ceiling, examples = _EXAMPLE_UNITS[table.kind]
    example = next((u for u, scale in examples if number * scale <= ceiling), "")
    written = _shown(value).strip("'")
    raise UnitError(
        f"{_shown(value)} without a unit reads as {shown(number)} (a bare {table.kind} is "
        f"{per_second}; one below {shown(BARE_RATE_FLOOR)} is taken for a forgotten unit); write "
        f"the unit, as in '{written} {example or examples[-1][0]}'"
    )


def _parse(value: Any, table: _UnitTable, example: str) -> float:
    number, unit = _split(value, table.kind, example)
    return _scaled(number, table.scale(unit, value), table.kind, value)


def parse_bytes(value: Any) -> int:
    """ "64 GiB" -> 68719476736. Bare numbers are bytes; decimal (GB), binary (GiB), bits (Gb)."""
    return round(_parse(value, _BYTE_UNITS, "64 GiB"))


BARE_CAPACITY_FLOOR = 2**20
"""A memory's capacity written as a bare number is bytes; one below 1 MiB is a forgotten
unit (``capacity: 64`` meaning 64 GiB), refused naming how it reads, as a bare rate below
:data:`BARE_RATE_FLOOR` is: no HBM, DDR or cache tier of a machine is that small. A smaller
capacity is still taken with its unit (``512 KiB``)."""

_CAPACITY_EXAMPLE_UNITS = (("GiB", 2**30), ("MiB", 2**20))
"""The unit a refused bare capacity is shown with, as a guess at what was meant: the larger
that keeps it within a tier's most (``MAX_TIER_BYTES``, 64 TiB), as :data:`_EXAMPLE_UNITS`
for a rate: ``64 GiB``, ``524288 MiB``."""


def _forgotten_capacity(number: float) -> bool:
    """Whether a bare capacity reads as a forgotten unit: 1 to :data:`BARE_CAPACITY_FLOOR`
    bytes."""
    return 1 <= number < BARE_CAPACITY_FLOOR


def parse_capacity(value: Any) -> int:
    """ "64 GiB" -> 68719476736, as :func:`parse_bytes`; a bare number of 1 to
    :data:`BARE_CAPACITY_FLOOR` bytes is refused as a forgotten unit."""
    number, unit = _split(value, _BYTE_UNITS.kind, "64 GiB")
    if not unit and _forgotten_capacity(number):
        written = _shown(value).strip("'")
        example = next(
            (u for u, scale in _CAPACITY_EXAMPLE_UNITS if number * scale <= MAX_TIER_BYTES),
            _CAPACITY_EXAMPLE_UNITS[-1][0],
        )
        raise UnitError(
            f"{_shown(value)} without a unit reads as {human.size(number)} (a bare capacity is "
            f"bytes; one below {human.size(BARE_CAPACITY_FLOOR)} is taken for a forgotten "
            f"unit); write the unit, as in '{written} {example}'"
        )
    return round(_scaled(number, _BYTE_UNITS.scale(unit, value), _BYTE_UNITS.kind, value))


def parse_seconds(value: Any) -> float:
    """ "2 us" -> 2e-6. Bare numbers are seconds."""
    return _parse(value, _TIME_UNITS, "2 us")


BARE_SECONDS_CEILING = 0.1
"""A latency or an overhead (a memory's or a link's first byte, a kernel boundary, the
host's time per step, per slot or per token) written as a bare number is seconds, in the
internal unit; one of a tenth of a second or more (``sync: 10`` meaning 10 us) is a
forgotten unit, refused naming how it reads, where it would otherwise run every kernel
boundary for seconds. No such time of a machine or a serving stack comes near: the shipped
ones are 0.5 us to 1.6 ms. An SLO's target takes the same rule with its own ceiling
(:data:`BARE_TTFT_CEILING`, :data:`BARE_TPOT_CEILING`); a duration of a workload with no
such ceiling (a trace's window, a load refresh) is :data:`Seconds`, a bare number of any
size."""

BARE_TTFT_CEILING = 60.0
"""A time-to-first-token target written as a bare number is seconds; one of a minute or
more is a forgotten unit (``ttft: 500`` meaning 500 ms read as 8.3 minutes), refused as a
bare latency at or above :data:`BARE_SECONDS_CEILING` is. TTFT targets are set at 0.1 to
about 10 s (MLPerf's are 0.45 to 6 s; a long-context one tens of seconds), and one written
in milliseconds is 100 or more. A longer target is still taken with its unit (``2 min``)."""

BARE_TPOT_CEILING = 1.0
"""A time-per-output-token target written as a bare number is seconds; one of a second or
more (``tpot: 40`` meaning 40 ms) is a forgotten unit: a token a second is slower than
anyone reads, and TPOT targets are 10 to 200 ms. A longer one is still taken with its unit."""


def _forgotten_seconds(number: float) -> bool:
    """Whether a bare latency or overhead reads as a forgotten unit: at or above
    :data:`BARE_SECONDS_CEILING` seconds."""
    return number >= BARE_SECONDS_CEILING


def _forgotten_ttft(number: float) -> bool:
    """Whether a bare TTFT target reads as a forgotten unit (:data:`BARE_TTFT_CEILING`)."""
    return number >= BARE_TTFT_CEILING


def _forgotten_tpot(number: float) -> bool:
    """Whether a bare TPOT target reads as a forgotten unit (:data:`BARE_TPOT_CEILING`)."""
    return number >= BARE_TPOT_CEILING


def _guarded_seconds(
    value: Any, forgotten: Callable[[float], bool], longer_than: str, units: Sequence[str]
) -> float:
    """Seconds as :func:`parse_seconds` reads them, refusing a bare number ``forgotten``
    takes for a forgotten unit: how it reads, that it is ``longer_than`` the field's kind
    of time, and the number with each of ``units``."""
    number, unit = _split(value, _TIME_UNITS.kind, "2 us")
    if not unit and forgotten(number):
        n = f"{number:g}"
        shown = [f"'{n} {u}'" for u in units]
        written = f"{', '.join(shown[:-1])} or {shown[-1]}" if len(shown) > 1 else shown[0]
        reads = f"{n} s" if number < 60 else f"{n} s ({human.duration(number)})"
        raise UnitError(
            f"{_shown(value)} without a unit reads as {reads}, longer than {longer_than}; "
            f"write the unit, as in {written}"
        )
    return _scaled(number, _TIME_UNITS.scale(unit, value), _TIME_UNITS.kind, value)


def parse_short_seconds(value: Any) -> float:
    """ "2 us" -> 2e-6, as :func:`parse_seconds`; a bare number at or above
    :data:`BARE_SECONDS_CEILING` is refused as a forgotten unit."""
    return _guarded_seconds(
        value, _forgotten_seconds, "a latency or an overhead takes", ("ns", "us", "ms")
    )


def parse_ttft_target(value: Any) -> float:
    """An SLO's TTFT target, as :func:`parse_seconds`; a bare number at or above
    :data:`BARE_TTFT_CEILING` is refused as a forgotten unit."""
    return _guarded_seconds(
        value, _forgotten_ttft, "a time-to-first-token target is set at", ("ms", "s")
    )


def parse_tpot_target(value: Any) -> float:
    """An SLO's TPOT target, as :func:`parse_seconds`; a bare number at or above
    :data:`BARE_TPOT_CEILING` is refused as a forgotten unit."""
    return _guarded_seconds(
        value, _forgotten_tpot, "a time-per-output-token target is set at", ("ms", "s")
    )


def parse_bandwidth(value: Any) -> float:
    """ "1.8 TB/s" -> 1.8e12 bytes per second; "400 Gb/s" -> 5e10. Bare numbers are B/s."""
    number, unit = _split(value, "bandwidth", "1.8 TB/s")
    if unit and unit.casefold() in _BYTE_UNITS.folded:  # a size, not a rate
        raise UnitError(f"expected a bandwidth such as '1.8 TB/s', got {_shown(value)}")
    _bare_rate(number, unit, _BANDWIDTH_UNITS, value)
    return _scaled(number, _BANDWIDTH_UNITS.scale(unit, value), "bandwidth", value)


def parse_flops(value: Any) -> float:
    """ "638 TFLOP/s" -> 6.38e14 FLOP per second. Bare numbers are FLOP/s."""
    number, unit = _split(value, _FLOPS_UNITS.kind, "638 TFLOP/s")
    _bare_rate(number, unit, _FLOPS_UNITS, value)
    return _scaled(number, _FLOPS_UNITS.scale(unit, value), _FLOPS_UNITS.kind, value)


def parse_watts(value: Any) -> float:
    """ "800 W" -> 800.0, "1.5 kW" -> 1500.0. Bare numbers are watts."""
    return _parse(value, _POWER_UNITS, "800 W")


def _any_case(spelling: str) -> str:
    """A regex matching ``spelling`` with its ASCII letters in either case."""
    return "".join(
        f"[{c.upper()}{c.lower()}]" if c.isascii() and c.isalpha() else re.escape(c)
        for c in spelling
    )


def quantity_pattern(table: _UnitTable) -> str:
    """The JSON Schema pattern of a quantity string of ``table``'s kind: a number (as the
    scanner reads it), spaces or tabs, and one of the table's units in any case (the parser
    also refuses a case-insensitive spelling with two readings, which a pattern cannot)."""
    spellings = sorted({*table.units, *table.folded}, key=lambda u: (-len(u), u))
    units = "|".join(dict.fromkeys(_any_case(u) for u in spellings))
    return rf"^\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[ \t]*({units})?\s*$"


def _quantity(table: _UnitTable, internal: str) -> Any:
    """What the YAML may hold for a quantity: a number in the internal unit (``internal``
    names it, in the schema, so that ``ttft: 500`` reads as 500 seconds before it runs), or
    a string matching :func:`quantity_pattern` (the JSON Schema editors check as you type)."""
    text = Annotated[
        str, StringConstraints(pattern=quantity_pattern(table), max_length=MAX_QUANTITY_CHARS)
    ]
    bare = Annotated[float, Field(description=f"a bare number is {internal}; or give a unit")]
    return bare | Annotated[text, Field(description=f"with a unit: {table.known}")]


@dataclass(frozen=True, slots=True)
class Parsed(BeforeValidator):
    """A ``BeforeValidator`` (a parser taking the value alone) whose JSON Schema input type
    is made into a schema only when a JSON Schema is asked for (``rdu-sim schema``), not
    each time a model holding the field builds its validator: the input types' unions and
    patterns were ~14 M instructions of a cold step's ~640 M, for a schema no step reads.
    The JSON Schema is the one ``BeforeValidator`` gives. For input types of plain values
    only (numbers, strings): a model among them would get its own definitions."""

    def __get_pydantic_core_schema__(
        self, source_type: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        parse: Callable[[Any], Any] = self.func  # type: ignore[assignment]
        return core_schema.no_info_before_validator_function(parse, handler(source_type))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        if handler.mode != "validation":
            return handler(schema)
        given = TypeAdapter(self.json_schema_input_type).core_schema
        return handler(_with_input(schema, self.func, given))


def _with_input(schema: Any, parse: Any, given: CoreSchema) -> Any:
    """``schema`` with the input schema ``given`` set on the before-validator of ``parse``
    inside it (under the constraints a field adds, ``Field(gt=0)``: validators after it),
    as ``BeforeValidator`` sets it when the schema is built."""
    if schema.get("type") == "function-before" and schema["function"]["function"] is parse:
        return {**schema, "json_schema_input_schema": given}
    inner = schema.get("schema")
    if isinstance(inner, dict):
        return {**schema, "schema": _with_input(inner, parse, given)}
    raise TypeError(  # a wrapper pydantic builds otherwise: the schema would lose its input
        f"no before-validator of {getattr(parse, '__name__', parse)} in a {schema.get('type')} "
        "schema"
    )


# Pydantic field types: accept a unit string or a bare number, store the internal unit.
# The JSON Schema (for editors) describes what the YAML may hold: a number or a string.
_TOKEN_SCALES = {"": 1, "k": 2**10, "m": 2**20}
MAX_TOKEN_DIGITS = 9


def parse_tokens(value: Any) -> int:
    """A token count as people write one: ``8192``, ``8k`` (x 1,024), ``128K``, ``1M``
    (x 2^20), as ``human.tokens`` prints them (ASCII digits, at most nine of them)."""
    if isinstance(value, bool):
        raise UnitError(f"expected a token count such as 8192 or 128k, got {value!r}")
    if isinstance(value, int):
        return value
    text = value.strip() if isinstance(value, str) else ""
    suffix = text[-1:].lower() if text[-1:].lower() in ("k", "m") else ""
    digits = text[: len(text) - len(suffix)].rstrip()
    if not (0 < len(digits) <= MAX_TOKEN_DIGITS and digits.isascii() and digits.isdigit()):
        raise UnitError(f"expected a token count such as 8192 or 128k, got {_shown(value)}")
    return int(digits) * _TOKEN_SCALES[suffix]


MAX_TOKENS = 100_000_000
"""Most tokens a token-count field holds."""

Tokens = Annotated[
    int,
    Field(ge=1, le=MAX_TOKENS),
    Parsed(
        parse_tokens,
        json_schema_input_type=Annotated[int, Field(ge=1, le=MAX_TOKENS)]
        | Annotated[str, StringConstraints(pattern=r"^\s*[0-9]{1,9}\s*[kKmM]?\s*$")],
    ),
]
"""A token count field, 1..:data:`MAX_TOKENS`: an integer, or ``128k``-style text
(:func:`parse_tokens`)."""


def _reads_back(forgotten: Callable[[float], bool], unit: str, dumped: Any) -> PlainSerializer:
    """Serialise a guarded quantity as data that reads back: a bare number in the internal
    unit, or, where bare it would be refused as a forgotten unit (a ``512 KiB`` tier, a
    ``0.5 GB/s`` link, a ``500 ms`` latency, each given with its unit), the number with
    ``unit``: ``524288 B``, ``500000000.0 B/s``, ``0.5 s``. A dump then loads as the value it
    holds (``with_overrides`` rebuilds from one; outputs record one). ``dumped``: the type
    a dump holds."""

    def dump(value: float) -> float | str:
        return f"{value!r} {unit}" if forgotten(value) else value

    return PlainSerializer(dump, return_type=dumped)


Bytes = Annotated[
    int,
    Parsed(parse_bytes, json_schema_input_type=_quantity(_BYTE_UNITS, "bytes")),
    PlainSerializer(int),
]
Capacity = Annotated[
    int,
    Parsed(
        parse_capacity,
        json_schema_input_type=_quantity(
            _BYTE_UNITS, "bytes, at least 1 MiB (less is a forgotten unit: write it, as in 64 GiB)"
        ),
    ),
    _reads_back(_forgotten_capacity, "B", int | str),
]
"""A memory tier's capacity (:func:`parse_capacity`)."""
Seconds = Annotated[
    float, Parsed(parse_seconds, json_schema_input_type=_quantity(_TIME_UNITS, "seconds"))
]
ShortSeconds = Annotated[
    float,
    Parsed(
        parse_short_seconds,
        json_schema_input_type=_quantity(
            _TIME_UNITS, "seconds, below 0.1 (more is a forgotten unit: write it, as in 10 us)"
        ),
    ),
    _reads_back(_forgotten_seconds, "s", float | str),
]
"""A latency or an overhead of a machine or a serving stack (:func:`parse_short_seconds`)."""
TTFTSeconds = Annotated[
    float,
    Parsed(
        parse_ttft_target,
        json_schema_input_type=_quantity(
            _TIME_UNITS, "seconds, below 60 (more is a forgotten unit: write it, as in 500 ms)"
        ),
    ),
    _reads_back(_forgotten_ttft, "s", float | str),
]
"""An SLO's time-to-first-token target (:func:`parse_ttft_target`)."""
TPOTSeconds = Annotated[
    float,
    Parsed(
        parse_tpot_target,
        json_schema_input_type=_quantity(
            _TIME_UNITS, "seconds, below 1 (more is a forgotten unit: write it, as in 40 ms)"
        ),
    ),
    _reads_back(_forgotten_tpot, "s", float | str),
]
"""An SLO's time-per-output-token target (:func:`parse_tpot_target`)."""
_BARE_RATE = f"at least {BARE_RATE_FLOOR:.0e} (less is a forgotten unit)".replace("e+0", "e")
BytesPerSecond = Annotated[
    float,
    Parsed(
        parse_bandwidth,
        json_schema_input_type=_quantity(_BANDWIDTH_UNITS, f"bytes per second, {_BARE_RATE}"),
    ),
    _reads_back(_forgotten_rate, "B/s", float | str),
]
FlopsPerSecond = Annotated[
    float,
    Parsed(parse_flops, json_schema_input_type=_quantity(_FLOPS_UNITS, f"FLOP/s, {_BARE_RATE}")),
    _reads_back(_forgotten_rate, "FLOP/s", float | str),
]
Watts = Annotated[
    float, Parsed(parse_watts, json_schema_input_type=_quantity(_POWER_UNITS, "watts"))
]
"""An electrical power (:func:`parse_watts`)."""


UNIT_OF_PARSER: dict[Any, str] = {
    parse_bytes: "bytes",
    parse_capacity: "bytes",
    parse_seconds: "s",
    parse_short_seconds: "s",
    parse_ttft_target: "s",
    parse_tpot_target: "s",
    parse_bandwidth: "bytes/s",
    parse_flops: "FLOP/s",
    parse_watts: "W",
}
"""The internal unit of each quantity type above, by its parser."""


def field_unit(annotation: Any, metadata: Sequence[Any] = ()) -> str:
    """The internal unit of a pydantic field holding a quantity type of this module (``s``,
    ``bytes/s``...), looking through ``X | None``; '' for any other field. ``metadata`` is
    the field's own (pydantic keeps a top-level Annotated's validators there)."""
    for meta in (*metadata, *getattr(annotation, "__metadata__", ())):
        unit = UNIT_OF_PARSER.get(getattr(meta, "func", None))
        if unit:
            return unit
    for arg in get_args(annotation):
        unit = field_unit(arg)
        if unit:
            return unit
    return ""


def _watts(value: float | None, digits: int = 3) -> str:
    return human.si(value, "W", digits)


_HUMAN: dict[str, tuple[Callable[[float | None, int], str], str]] = {
    "s": (human.duration, "s"),
    "bytes": (human.size, "B"),
    "bytes/s": (human.bandwidth, "B/s"),
    "FLOP/s": (human.flops, "FLOP/s"),
    "W": (_watts, "W"),
}
MAX_SHOWN_CHARS = 16
"""Past this a quantity in a message is shown in its internal unit's exponent form."""


def quantity_words(value: float, unit: str, digits: int = 3) -> str:
    """An internal value (``unit``: :data:`UNIT_OF_PARSER`'s) as a message shows it, to
    ``digits`` significant digits: ``500 ns``, ``1.8 TB/s``, ``1 h``; one too large for its
    largest unit in exponent form, ``1e+42 B/s``, not thirty digits of PB/s."""
    shown, internal = _HUMAN[unit]
    text = shown(value, digits)
    return text if len(text) <= MAX_SHOWN_CHARS else f"{value:.3g} {internal}"
