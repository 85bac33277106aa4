"""Fuzz: unit strings. Any text is a value or a UnitError, fast; a generated quantity means
what its spelling says (a differential against an independent table of prefixes)."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdu_sim.config.units import (
    MAX_QUANTITY_CHARS,
    UnitError,
    parse_bandwidth,
    parse_bytes,
    parse_decimal,
    parse_flops,
    parse_seconds,
    split_quantity,
)

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None)
PARSERS = [parse_bytes, parse_seconds, parse_bandwidth, parse_flops]

# Independent of rdu_sim.config.units: what each prefix and base unit mean.
PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
PREFIX.update({"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40})
BASE = {"B": 1.0, "b": 1 / 8, "bit": 1 / 8}

hostile_text = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=" \t0123456789.eE+-/bBkKMGTiµμ,_xs\u0660\u00b2", max_size=200),
    st.builds(
        lambda digits, spaces, tail: digits + " " * spaces + tail,
        st.text(alphabet="0123456789.", min_size=1, max_size=30),
        st.integers(0, 100_000),
        st.text(max_size=3),
    ),
)


@SETTINGS
@given(text=hostile_text)
def test_any_text_is_a_value_or_a_unit_error_in_linear_time(text: str) -> None:
    start = time.process_time()
    for parse in PARSERS:
        try:
            value = parse(text)
        except UnitError as exc:
            assert len(str(exc)) < 400
        else:
            assert len(text) <= MAX_QUANTITY_CHARS
            assert math.isfinite(value)
    split_quantity(text * 3)  # the scanner alone, no length cap
    assert time.process_time() - start < 0.2


@SETTINGS
@given(
    number=st.floats(0, 1e6, allow_nan=False),
    prefix=st.sampled_from(sorted(PREFIX)),
    base=st.sampled_from(sorted(BASE)),
    rate=st.booleans(),
    space=st.sampled_from(["", " ", "  "]),
)
def test_generated_quantities_mean_what_they_say(
    number: float, prefix: str, base: str, rate: bool, space: str
) -> None:
    unit = prefix + base + ("/s" if rate else "")
    text = f"{number!r}{space}{unit}"
    expected = number * PREFIX[prefix] * BASE[base]
    if rate:
        assert parse_bandwidth(text) == pytest.approx(expected, rel=1e-12, abs=1e-300)
    else:
        assert parse_bytes(text) == round(expected)
    # Lower-cased, the base is "b" or "bit": a bit, never a byte. It means that, or is
    # refused when the prefix's case mattered (mb: MB or Mb? kib: KiB or Kib?).
    folded = text.lower()
    parse = parse_bandwidth if rate else parse_bytes
    try:
        value = parse(folded)
    except UnitError as exc:
        assert "ambiguous" in str(exc)
    else:
        bits = number * PREFIX[prefix] / 8
        assert value == (pytest.approx(bits, rel=1e-12, abs=1e-300) if rate else round(bits))


@SETTINGS
@given(text=st.text(alphabet="0123456789.eE+- \u0660_in", max_size=12))
def test_parse_decimal_accepts_exactly_what_the_scanner_reads(text: str) -> None:
    """Two ways of reading a plain number agree: the fast one and the unit scanner."""
    parts = split_quantity(text)
    scanned = float(parts[0]) if parts is not None and parts[1] == "" else None
    assert parse_decimal(text) == scanned
