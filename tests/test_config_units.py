"""Unit parsing at the config edge: every quantity becomes bytes, seconds, B/s or FLOP/s."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import ValidationError

from rdu_sim import human
from rdu_sim.config import ConfigError, HardwareConfig, units
from rdu_sim.config.hardware import LinkConfig, MemoryTierConfig
from rdu_sim.config.limits import MAX_TIER_BYTES
from rdu_sim.config.units import (
    UnitError,
    parse_bandwidth,
    parse_bytes,
    parse_flops,
    parse_seconds,
    parse_watts,
    split_quantity,
)
from rdu_sim.scenario import load_scenario, with_overrides

REPO = Path(__file__).resolve().parents[1]
LLAMA = REPO / "workloads" / "llama3.1-8b-1socket.yaml"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("64 GiB", 64 * 2**30),
        ("64GiB", 64 * 2**30),
        ("64 GB", 64 * 10**9),
        ("520 MiB", 520 * 2**20),
        ("512 KiB", 512 * 1024),
        ("1.5 TiB", 3 * 2**39),
        ("1 kB", 1000),
        ("12 bytes", 12),
        ("12 B", 12),
        ("  7  ", 7),
        (4096, 4096),
        ("1e3 MB", 10**9),
    ],
)
def test_bytes(text: object, expected: int) -> None:
    assert parse_bytes(text) == expected
    assert isinstance(parse_bytes(text), int)


def test_gib_and_gb_differ() -> None:
    assert parse_bytes("1 GiB") - parse_bytes("1 GB") == 2**30 - 10**9


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.8 TB/s", 1.8e12),
        ("200 GB/s", 2e11),
        ("204.8 GB/s", 204.8e9),
        ("1 GiB/s", 2**30),
        ("100 MB/s", 1e8),
        (5e9, 5e9),
    ],
)
def test_bandwidth(text: object, expected: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2 us", 2e-6),
        ("2 µs", 2e-6),
        ("500 ns", 5e-7),
        ("1.5 ms", 1.5e-3),
        ("3 s", 3.0),
        ("10 ps", 1e-11),
        ("1 min", 60.0),
        (0.25, 0.25),
    ],
)
def test_seconds(text: object, expected: float) -> None:
    assert parse_seconds(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("638 TFLOP/s", 6.38e14),
        ("613.4615385 GFLOP/s", 613.4615385e9),
        ("1 PFLOP/s", 1e15),
        ("2 TFLOPS", 2e12),
        (1e12, 1e12),
    ],
)
def test_flops(text: object, expected: float) -> None:
    assert parse_flops(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("parser", "text", "fragment"),
    [
        (parse_bytes, "64 GiBs", "unknown size unit 'GiBs'"),
        (parse_bytes, "64 furlongs", "unknown size unit"),
        (parse_bytes, "lots", "expected a size such as '64 GiB'"),
        (parse_bytes, "", "expected a size"),
        (parse_bytes, "1.8 TB/s", "unknown size unit 'TB/s'"),
        (parse_bandwidth, "1.8 TB", "expected a bandwidth such as '1.8 TB/s'"),
        (parse_bandwidth, "1.8 TX/s", "unknown bandwidth unit"),
        (parse_seconds, "2 parsecs", "unknown duration unit"),
        (parse_seconds, "2 GHz", "unknown duration unit 'GHz'"),
        (parse_seconds, "1.6 GHz", "unknown duration unit 'GHz'"),  # no frequency fields
        (parse_flops, "638 TB/s", "unknown compute rate unit"),
        (parse_bytes, "nan GiB", "expected a size"),
        (parse_bytes, "1e400 GiB", "finite"),
        (parse_bytes, "1e300 PiB", "out of range"),
        (parse_bytes, 10**400, "out of range"),
        (parse_seconds, float("inf"), "finite"),
        (parse_seconds, float("nan"), "finite"),
        (parse_bytes, [1, 2], "got list"),
        (parse_bytes, None, "got NoneType"),
    ],
)
def test_bad_quantities(parser: object, text: object, fragment: str) -> None:
    assert callable(parser)
    with pytest.raises(UnitError) as info:
        parser(text)
    assert fragment in str(info.value)


@pytest.mark.parametrize("parser", [parse_bytes, parse_seconds, parse_bandwidth, parse_flops])
@pytest.mark.parametrize("value", [True, False])
def test_bool_refused(parser: object, value: bool) -> None:
    """YAML's `yes`/`true` is not a quantity of 1 byte."""
    assert callable(parser)
    with pytest.raises(UnitError):
        parser(value)


def test_unit_error_is_a_value_error() -> None:
    """Pydantic turns ValueErrors raised by validators into field errors (not tracebacks)."""
    assert issubclass(UnitError, ValueError)


def _tier(**changes: object) -> dict[str, object]:
    tier: dict[str, object] = {
        "capacity": "64 GiB",
        "bandwidth": "1.8 TB/s",
        "latency": "500 ns",
        "efficiency": 0.9,
    }
    tier.update(changes)
    return tier


def test_tier_parses_to_internal_units() -> None:
    tier = MemoryTierConfig.model_validate(_tier())
    assert tier.capacity == 64 * 2**30
    assert tier.bandwidth == pytest.approx(1.8e12)
    assert tier.latency == pytest.approx(5e-7)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("capacity", "0 GiB"),
        ("capacity", "-1 GiB"),
        ("capacity", -5),
        ("capacity", 0),
        ("bandwidth", "-1 TB/s"),
        ("bandwidth", "0 TB/s"),
        ("latency", "-2 us"),
        ("efficiency", 0),
        ("efficiency", 1.5),
        ("capacity", True),
        ("bandwidth", "fast"),
    ],
)
def test_tier_rejects_nonpositive_and_nonsense(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as info:
        MemoryTierConfig.model_validate(_tier(**{field: value}))
    assert info.value.errors()[0]["loc"][0] == field


def test_link_latency_zero_is_allowed() -> None:
    assert LinkConfig.model_validate({"bandwidth": "50 GB/s", "latency": 0}).latency == 0.0


def test_dump_is_internal_units() -> None:
    """A validated config serializes to plain numbers (what worker processes receive)."""
    tier = MemoryTierConfig.model_validate(_tier())
    dumped = tier.model_dump()
    assert dumped["capacity"] == 64 * 2**30
    assert isinstance(dumped["capacity"], int)
    assert math.isclose(dumped["bandwidth"], 1.8e12)
    assert MemoryTierConfig.model_validate(dumped) == tier


def test_hardware_schema_accepts_unit_strings() -> None:
    """The JSON Schema describes the YAML as written ("64 GiB"), not the parsed int."""
    schema = HardwareConfig.model_json_schema()
    capacity = schema["$defs"]["MemoryTierConfig"]["properties"]["capacity"]
    assert any(b.get("type") == "string" for b in capacity["anyOf"])


def test_the_schema_says_what_a_bare_number_means() -> None:
    """`ttft: 500` would be 500 seconds (a forgotten ms, refused): an editor showing the
    schema says where a bare number stops being taken."""
    from rdu_sim.cli.schema_cmd import json_schema

    ttft = json_schema("cluster")["$defs"]["SLOConfig"]["properties"]["ttft"]
    (number,) = [b for b in ttft["anyOf"] if b.get("type") == "number"]
    assert number["description"] == (
        "a bare number is seconds, below 60 (more is a forgotten unit: write it, as in 500 ms); "
        "or give a unit"
    )
    capacity = HardwareConfig.model_json_schema()["$defs"]["MemoryTierConfig"]["properties"]
    (number,) = [b for b in capacity["capacity"]["anyOf"] if b.get("type") == "number"]
    assert number["description"].startswith("a bare number is bytes")


def test_what_people_read_parses_back() -> None:
    """rdu_sim.human writes what this module reads (the units of a YAML file)."""
    assert human.size(64 * 2**30) == "64 GiB"
    assert parse_bytes(human.size(520 * 2**20)) == 520 * 2**20
    assert parse_bandwidth(human.bandwidth(1.8e12)) == 1.8e12
    assert parse_seconds(human.duration(0.0123)) == pytest.approx(0.0123)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("400 Gb/s", 50e9),  # b is a bit: a link in bits is 8x slower than in bytes
        ("400 Gbit/s", 50e9),
        ("400 Gbps", 50e9),
        ("400 gbit/s", 50e9),  # "bit" says bits in any case
        ("100 Mb/s", 12.5e6),
        ("8 b/s", 1.0),
        ("1 Kib/s", 128.0),
        ("400 GB/s", 400e9),
        ("400 GBps", 400e9),
        ("2 EB/s", 2e18),
    ],
)
def test_bits_and_bytes_per_second(text: str, expected: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "expected"), [("8 Mb", 10**6), ("12 Gb", 15 * 10**8), ("1 Gibit", 2**27)]
)
def test_sizes_in_bits_are_eighths_of_bytes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    ("parser", "text", "readings"),
    [
        (parse_bandwidth, "400 gb/s", ("'GB/s' (gigabytes per second)", "'Gb/s' (gigabits")),
        (parse_bandwidth, "400 GB/S", ("'GB/s'", "'Gb/s'")),
        (parse_bandwidth, "1 mbps", ("'MBps'", "'Mbps'")),
        (parse_bytes, "64 gib", ("'GiB' (gibibytes)", "'Gib' (gibibits)")),
        (parse_bytes, "64 mb", ("'MB'", "'Mb'")),
    ],
)
def test_a_case_that_could_mean_bits_or_bytes_is_refused_naming_both(
    parser: object, text: str, readings: tuple[str, ...]
) -> None:
    assert callable(parser)
    with pytest.raises(UnitError, match="ambiguous") as info:
        parser(text)
    for reading in readings:
        assert reading in str(info.value)


@pytest.mark.parametrize(
    ("parser", "text", "expected"),
    [
        (parse_flops, "2 tflops", 2e12),
        (parse_flops, "638 Tflop/s", 6.38e14),
        (parse_seconds, "3 MS", 3e-3),  # no megasecond: only one reading
        (parse_seconds, "2 μs", 2e-6),  # Greek mu as well as the micro sign
    ],
)
def test_other_case_is_accepted_when_every_reading_agrees(
    parser: object, text: str, expected: float
) -> None:
    assert callable(parser)
    assert parser(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("text", ["١٢ GB", "12 GB\u00b2", "²4 GiB", "1,5 GB", "1 2 GB", "1_000 B"])
def test_only_ascii_decimal_numbers(text: str) -> None:
    with pytest.raises(UnitError, match="expected a size"):
        parse_bytes(text)


@pytest.mark.parametrize(
    "text",
    [
        "1" + " " * 200_000 + "x",
        " " * 200_000 + "1x",
        "1" * 200_000 + "e" * 200_000,
        "1." + "0" * 300_000 + " G" + "B" * 100_000,
    ],
)
def test_hostile_strings_are_refused_fast(text: str) -> None:
    """The scanner is linear: long hostile strings cost microseconds, never seconds."""
    start = time.perf_counter()
    with pytest.raises(UnitError, match="at most 64"):
        parse_bytes(text)
    split_quantity(text)  # the scanner itself, without the length cap
    assert time.perf_counter() - start < 0.5


def test_the_issue_link_override_is_50_gb_per_s() -> None:
    workload = Path(__file__).resolve().parents[1] / "workloads" / "llama3.1-8b-1socket.yaml"
    scenario = load_scenario(workload, ["hw.system.intra_node_link.bandwidth=400 Gb/s"])
    assert scenario.hardware.system.intra_node_link.bandwidth == 50e9


@pytest.mark.parametrize(
    "table, parse",
    [
        (units._BYTE_UNITS, parse_bytes),
        (units._BANDWIDTH_UNITS, parse_bandwidth),
        (units._TIME_UNITS, parse_seconds),
        (units._FLOPS_UNITS, parse_flops),
        (units._POWER_UNITS, parse_watts),
    ],
)
def test_the_schema_pattern_agrees_with_the_parser(table: Any, parse: Any) -> None:
    """Every spelling the parser knows matches the JSON Schema's pattern, in every form a file
    may write it; what the pattern refuses the parser refuses too."""
    pattern = re.compile(units.quantity_pattern(table))
    for unit in table.units:
        shouted = unit.upper() if unit.isascii() else unit
        for text in (f"1.5 {unit}", f"2{unit}", f" .5\t{unit} ", f"1e3 {shouted}"):
            assert pattern.fullmatch(text), text
            if text != f"1e3 {shouted}":
                parse(text)  # an upper-cased spelling may be ambiguous: only the pattern
    for text in ("1.8 TX/s", "fast", "1.8 TB/s/s", "1 . 2 GB", "", "1,000 B"):
        assert not pattern.fullmatch(text), text
        with pytest.raises(UnitError):
            parse(text)


def test_every_unit_field_of_the_schemas_has_a_pattern() -> None:
    from rdu_sim.cli.schema_cmd import SCHEMAS, json_schema

    found = 0
    for kind in SCHEMAS:
        text = json.dumps(json_schema(kind))
        found += text.count('"pattern": "^\\\\s*[+-]?')
        for node in _walk(json_schema(kind)):
            branches = node.get("anyOf", [])
            unit_field = len(branches) == 2 and {"type": "number"} in branches
            if unit_field and any(b.get("type") == "string" for b in branches):
                assert all("pattern" in b for b in branches if b.get("type") == "string"), node
    assert found >= 10  # the hardware file's capacities, bandwidths, latencies and clocks


def _walk(node: Any) -> Any:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


# --- a latency or an overhead written without its unit; range errors in the field's unit ---

SHORT_TIMES = [
    "hw.socket.hbm.latency",
    "hw.socket.kernel.sync",
    "hw.socket.kernel.program_load",
    "hw.socket.kernel.layer_loop",
    "hw.system.intra_node_link.latency",
    "stack.host.serial_per_step",
    "stack.host.overlapped_per_slot",
]


@pytest.mark.parametrize("path", SHORT_TIMES)
@pytest.mark.parametrize("bare", ["10", "0.5", "500"])
def test_a_bare_latency_or_overhead_of_a_tenth_of_a_second_or_more_is_a_forgotten_unit(
    path: str, bare: str
) -> None:
    """`sync: 10` meant 10 us: read as 10 s it ran a 30 s step, exit 0. Refused naming how
    it reads and the units to write, from a file's --set as from the file."""
    with pytest.raises(ConfigError) as info:
        load_scenario(LLAMA, [f"{path}={bare}"])
    message = str(info.value)
    assert f"{bare} without a unit reads as {bare} s" in message
    assert f"write the unit, as in '{bare} ns', '{bare} us' or '{bare} ms'" in message


def test_sync_10_in_a_hardware_file_is_refused(tmp_path: Path) -> None:
    text = (REPO / "hw_configs" / "sn40l.yaml").read_text()
    assert "    sync: 10 us" in text
    hw = tmp_path / "hw.yaml"
    hw.write_text(text.replace("    sync: 10 us", "    sync: 10"))
    with pytest.raises(ConfigError, match=r"socket\.kernel\.sync: 10 without a unit reads as 10 s"):
        load_scenario(LLAMA, [f"hardware={hw}"])


@pytest.mark.parametrize("value", ["0", "0.0", "1e-5", "0.099", "10 us", "0.5 s", "0.002"])
def test_a_bare_time_in_seconds_and_any_time_with_its_unit_are_read(value: str) -> None:
    """A bare number is seconds, as everywhere: 1e-5 is 10 us; with a unit, any size the
    field's bounds allow."""
    scenario = load_scenario(LLAMA, [f"hw.socket.kernel.sync={value}"])
    assert scenario.hardware.socket.kernel.sync == parse_seconds(value)


def test_a_workload_duration_may_be_bare() -> None:
    """A trace's window and a load refresh are durations of any size: `end: 3600` is an hour
    (an SLO's targets have ceilings: tests/test_slo_units.py)."""
    from rdu_sim.config.cluster import RouterConfig

    assert RouterConfig.model_validate({"load_refresh": 600}).load_refresh == 600.0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("hw.socket.hbm.latency=1 h", "socket.hbm.latency: must be at most 1 s, got 1 h"),
        ("hw.socket.hbm.latency=-1 ns", "socket.hbm.latency: must be at least 0 s, got -1 ns"),
        (
            "hw.socket.hbm.bandwidth=-1.8 TB/s",
            "socket.hbm.bandwidth: must be at least 1 B/s, got -1.8 TB/s",
        ),
        (
            "hw.socket.hbm.bandwidth=1e30 TB/s",
            "socket.hbm.bandwidth: must be at most 1,000 PB/s, got 1e30 TB/s",
        ),
        ("hw.socket.hbm.bandwidth=1e40", "must be at most 1,000 PB/s, got 1e+40 B/s"),
        ("hw.socket.kernel.sync=2 h", "socket.kernel.sync: must be at most 1 h, got 2 h"),
        ("hw.socket.hbm.capacity=-1", "socket.hbm.capacity: must be more than 0 B, got -1 B"),
        ("hw.socket.pcu.peak_flops=1e30", "must be at most 10 PFLOP/s, got 1e+30 FLOP/s"),
    ],
)
def test_a_quantity_out_of_range_is_told_in_its_unit(override: str, message: str) -> None:
    """Bound and value as people write them; it read `Input should be less than or equal to
    1 (got 3600.0)`, `(got -1800000000000.0)`, `(got 1e+42)`."""
    with pytest.raises(ConfigError) as info:
        load_scenario(LLAMA, [override])
    assert message in str(info.value)
    assert "Input should be" not in str(info.value)


def test_a_bare_time_past_its_bound_says_it_is_seconds() -> None:
    """A duration written bare past its field's bound: in words, and the units meant."""
    from rdu_sim.config.cluster import RouterConfig
    from rdu_sim.config.loader import validate

    with pytest.raises(ConfigError) as info:
        validate(RouterConfig, {"load_refresh": 1e8}, "router.yaml", {})
    assert str(info.value) == (
        "router.yaml: load_refresh: must be at most 1 h, got 1,157 days (a bare number is "
        "seconds: write the unit, as in '1e+08 us' or '1e+08 ms')"
    )


UNIT_TABLES = [
    (units._BYTE_UNITS, parse_bytes, "B"),
    (units._BANDWIDTH_UNITS, parse_bandwidth, "B/s"),
    (units._FLOPS_UNITS, parse_flops, "FLOP/s"),
    (units._TIME_UNITS, parse_seconds, ""),
    (units._POWER_UNITS, parse_watts, ""),
]


@pytest.mark.parametrize(("table", "parse", "base"), UNIT_TABLES)
def test_an_unknown_unit_is_told_every_unit_the_field_takes(
    table: Any, parse: Any, base: str
) -> None:
    """One list: the unknown-unit message names every prefix the parser and the schema take
    (it named sizes up to TiB while ``256 PiB`` was read and the pattern took ``EiB``); each
    unit it names is read by the parser and matched by the schema's pattern, whose string
    branch repeats the list."""
    with pytest.raises(UnitError) as info:
        parse("1 furlong")
    message = str(info.value)
    assert message.endswith(f"(known: {table.known})")
    named = set(re.findall(r"[A-Za-zµμ/]+", table.known)) & set(table.units)
    pattern = re.compile(units.quantity_pattern(table))
    for unit in named:
        parse(f"1 {unit}")
        assert pattern.fullmatch(f"1 {unit}")
    if base:  # every prefix of the tables the spellings are built from
        prefixes = [p for p, _, _ in units._PREFIXES if p != "K"]
        if base == "FLOP/s":
            prefixes = [p for p, _, _ in [("", 1.0, ""), *units._DECIMAL] if p != "K"]
        assert {f"{p}{base}" for p in prefixes} <= named, table.known
    else:
        assert named == set(table.units)
    text = units._quantity(table, "x")
    (described,) = [t for t in get_args(text) if get_args(t) and get_args(t)[0] is not float]
    assert described.__metadata__[-1].description == f"with a unit: {table.known}"


def test_sizes_and_rates_up_to_exa_are_read_and_named() -> None:
    assert parse_bytes("256 PiB") == 256 * 2**50 and parse_bytes("1 EiB") == 2**60
    assert parse_bytes("2 PB") == 2e15 and parse_bandwidth("1 PiB/s") == 2.0**50
    assert parse_flops("1 EFLOP/s") == 1e18
    with pytest.raises(UnitError) as info:
        parse_bytes("64 GiBs")
    assert str(info.value) == (
        "unknown size unit 'GiBs' in '64 GiBs' (known: B, kB, MB, GB, TB, PB, EB, KiB, MiB, "
        "GiB, TiB, PiB, EiB, bytes; bits: b or bit after the same prefixes (Gb, Gibit), bits)"
    )


@pytest.mark.parametrize(
    ("written", "watts"), [(530, 530.0), ("800 W", 800.0), ("1.5 kW", 1500.0), ("0.8kW", 800.0)]
)
def test_power_takes_watts_with_or_without_the_unit(written: object, watts: float) -> None:
    """``socket_w: 800 W`` was refused ("Input should be a valid number"): power is a
    quantity like any other, and a bare number stays watts."""
    scenario = load_scenario(LLAMA, {"hw.power.socket_w": written, "hw.power.host_w": written})
    power = scenario.hardware.power
    assert power is not None and power.socket_w == watts == power.host_w


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("800 J", "power.socket_w: unknown power unit 'J' in '800 J' (known: W, kW, MW)"),
        ("-800 W", "power.socket_w: must be more than 0 W, got -800 W"),
        ("1 MW", "power.socket_w: must be at most 100 kW, got 1 MW"),
        (-5, "power.socket_w: must be more than 0 W, got -5 W"),
    ],
)
def test_a_bad_power_names_the_field_in_watts(written: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_scenario(LLAMA, {"hw.power.socket_w": written})
    assert message in str(info.value)


@pytest.mark.parametrize("path", ["hw.socket.hbm.capacity", "hw.socket.ddr.capacity"])
@pytest.mark.parametrize(
    ("bare", "reads", "example"),
    [
        ("64", "64 B", "64 GiB"),
        ("1536", "1.5 KiB", "1536 GiB"),
        ("65536", "64 KiB", "65536 GiB"),  # 64 TiB: a tier's most
        ("65537", "64 KiB", "65537 MiB"),  # in GiB past it
        ("524288", "512 KiB", "524288 MiB"),
    ],
)
def test_a_bare_memory_capacity_below_a_mebibyte_is_a_forgotten_unit(
    path: str, bare: str, reads: str, example: str
) -> None:
    """`capacity: 64` meant 64 GiB: read as 64 bytes it made a capacity error about the
    weights. Refused naming how it reads and the unit to write, as a bare rate is: the
    largest unit that keeps it within a tier's most (``524288 GiB`` is 512 PiB)."""
    with pytest.raises(ConfigError) as info:
        load_scenario(LLAMA, [f"{path}={bare}"])
    message = str(info.value)
    assert f"{bare} without a unit reads as {reads}" in message
    written = f"one below 1 MiB is taken for a forgotten unit); write the unit, as in '{example}'"
    assert written in message
    assert parse_bytes(example) <= MAX_TIER_BYTES  # the example is a capacity a tier may hold
    load_scenario(LLAMA, [f"{path}={example}"])


@pytest.mark.parametrize(
    ("given", "path", "dumped"),
    [
        ("hw.socket.hbm.capacity=512 KiB", ("socket", "hbm", "capacity"), "524288 B"),
        ("hw.socket.ddr.capacity=1000 B", ("socket", "ddr", "capacity"), "1000 B"),
        ("hw.socket.ddr.bandwidth=0.5 GB/s", ("socket", "ddr", "bandwidth"), "500000000.0 B/s"),
        ("hw.socket.pcu.vector_flops=100 MFLOP/s", ("socket", "pcu", "vector_flops"),
         "100000000.0 FLOP/s"),
        ("hw.socket.ddr.latency=500 ms", ("socket", "ddr", "latency"), "0.5 s"),
        ("stack.host.serial_per_step=0.25 s", ("host", "serial_per_step"), "0.25 s"),
    ],
)  # fmt: skip
def test_a_value_given_with_its_unit_below_the_bare_floor_survives_its_own_dump(
    given: str, path: tuple[str, ...], dumped: str
) -> None:
    """A 512 KiB tier, a 0.5 GB/s link or a 500 ms latency is accepted with its unit; bare, it
    would read as a forgotten unit. Its dump keeps the unit (bytes, B/s, FLOP/s, seconds), so
    that ``with_overrides``, which rebuilds the scenario from its dump, takes what it took
    before (it refused ``524288 without a unit``), and a recorded config reads back."""
    scenario = load_scenario(LLAMA, [given])
    root = "stack" if given.startswith("stack.") else "hardware"
    model = getattr(scenario, root)
    data: Any = model.model_dump(mode="json")
    for key in path:
        model, data = getattr(model, key), data[key]
    assert data == dumped
    assert type(model).__name__ in ("int", "float")  # the value itself stays in internal units
    again = with_overrides(scenario, ["serving.batch_slots=2"])
    assert again.workload.serving.batch_slots == 2
    assert getattr(again, root) == getattr(scenario, root)
    bare = given.split("=")[0] + "=" + dumped.split()[0]
    with pytest.raises(ConfigError, match="without a unit reads as"):
        load_scenario(LLAMA, [bare])  # the user's bare number is still refused


def test_a_value_above_the_bare_floor_dumps_bare() -> None:
    """Only what would be refused bare is written with a unit: the shipped values dump as
    the numbers they are (outputs and sweep keys unchanged)."""
    hardware = load_scenario(LLAMA).hardware.model_dump(mode="json")
    assert hardware["socket"]["hbm"]["capacity"] == 64 * 2**30
    assert isinstance(hardware["socket"]["hbm"]["bandwidth"], float)
    assert isinstance(hardware["socket"]["hbm"]["latency"], float)


@pytest.mark.parametrize("value", [str(64 * 2**30), "1048576", "512 KiB", "64 GiB"])
def test_a_bare_capacity_of_a_mebibyte_or_more_and_any_with_its_unit_are_read(
    value: str,
) -> None:
    scenario = load_scenario(LLAMA, [f"hw.socket.hbm.capacity={value}"])
    assert scenario.hardware.socket.hbm.capacity == parse_bytes(value)


def test_a_parsed_quantity_has_the_json_schema_of_its_before_validator() -> None:
    # config.units.Parsed makes the input type's schema only for a JSON Schema: the same
    # schema BeforeValidator gives, the constraints a field adds (gt, le) kept, and none in
    # the validator a model builds.
    from typing import Annotated

    from pydantic import BaseModel, BeforeValidator, Field

    from rdu_sim.config import units

    given = units._quantity(units._TIME_UNITS, "seconds")
    plain = Annotated[float, BeforeValidator(units.parse_seconds, json_schema_input_type=given)]

    class Lazy(BaseModel):
        a: Annotated[units.Seconds, Field(gt=0, le=5)]
        b: units.Seconds | None = None

    class Eager(BaseModel):
        a: Annotated[plain, Field(gt=0, le=5)]
        b: plain | None = None

    assert Lazy.model_json_schema() == {**Eager.model_json_schema(), "title": "Lazy"}
    assert "json_schema_input_schema" not in repr(Lazy.__pydantic_core_schema__)
    assert "json_schema_input_schema" in repr(Eager.__pydantic_core_schema__)
    assert Lazy(a="2 ms").a == Eager(a="2 ms").a == 0.002
