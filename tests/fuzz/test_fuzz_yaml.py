"""Fuzz: config files and `--set` values. Any bytes are data or one ConfigError, fast; alias
graphs are refused exactly when their expanded size passes the limit; integer literals
in every YAML base are their value or refused by length; a repeated key names both lines.
"Fast" is this process's CPU time (as in every fuzz module): a wall-clock bound failed when
the suite shared two cores with other work."""

from __future__ import annotations

import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rdu_sim.config.errors import ConfigError
from rdu_sim.config.loader import MAX_NODES, read_yaml
from rdu_sim.config.yaml_io import load_yaml
from rdu_sim.input_errors import InputError
from rdu_sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
FRAGMENTS = [
    "a: 1\n", "  - x\n", "[", "]", "{", "}", "&a ", "*a ", "!!python/object:os.system ",
    "<<: *a\n", "'", '"', "\t", "? ", ": ", "- ", "0x" + "f" * 50, "1e999", ".nan", "~",
    "\x00", "\ufeff", "---\n", "...\n", "%YAML 1.1\n", "key: value\n", "key: value\n",
]  # fmt: skip


def _read(tmp_path: Path, payload: bytes) -> object:
    path = tmp_path / "f.yaml"
    path.write_bytes(payload)
    start = time.process_time()
    try:
        return read_yaml(path)
    except ConfigError as exc:
        assert all(len(str(issue)) < 2500 for issue in exc.issues)
        return exc
    finally:
        assert time.process_time() - start < 1.0


@SETTINGS
@given(
    parts=st.lists(st.sampled_from(FRAGMENTS), max_size=60),
    junk=st.binary(max_size=64),
    repeat=st.integers(1, 2000),
)
def test_any_bytes_are_data_or_one_config_error(
    tmp_path: Path, parts: list[str], junk: bytes, repeat: int
) -> None:
    text = "".join(parts)
    _read(tmp_path, text.encode("utf-8", "surrogatepass") + junk)
    _read(tmp_path, (text[:40] * repeat).encode("utf-8", "surrogatepass"))


def _expanded(fan_out: int, depth: int) -> int:
    """Values of a chain of `depth` anchors, each a list of `fan_out` aliases to the last,
    once expanded (the document's root mapping and its keys included)."""
    sizes = [1 + fan_out]  # a0: a list of fan_out scalars
    for _ in range(depth):
        sizes.append(1 + fan_out * sizes[-1])
    return 1 + sum(1 + s for s in sizes)


@SETTINGS
@given(fan_out=st.integers(1, 12), depth=st.integers(0, 9))
def test_alias_graphs_are_refused_exactly_past_the_limit(fan_out: int, depth: int) -> None:
    lines = [f"a0: &a0 [{', '.join(['x'] * fan_out)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fan_out)}]" for i in range(1, depth + 1)]
    start = time.process_time()
    try:
        load_yaml("\n".join(lines) + "\n")
        refused = False
    except ValueError as exc:
        assert "aliases are expanded" in str(exc)
        refused = True
    assert time.process_time() - start < 0.5
    assert refused == (_expanded(fan_out, depth) > MAX_NODES)


# numbers are ASCII decimal: YAML 1.1's hex, binary, octal and base-60 forms stay text
LITERALS = st.one_of(
    st.integers(0, 10**60).map(lambda n: (str(n), n)),
    st.integers(0, 2**240).map(lambda n: (hex(n), hex(n))),
    st.integers(0, 2**200).map(lambda n: (bin(n), bin(n))),
    st.integers(1, 2**60).map(lambda n: (f"0{n:o}", f"0{n:o}")),
    st.lists(st.integers(0, 59), min_size=2, max_size=30).map(
        lambda parts: (":".join(str(p) for p in [max(parts[0], 1), *parts[1:]]),) * 2
    ),
)


@SETTINGS
@given(literal=LITERALS, negative=st.booleans())
def test_integer_literals_are_their_value_or_refused_by_length(
    literal: tuple[str, int | str], negative: bool
) -> None:
    text, value = literal
    if negative:
        text, value = "-" + text, -value if isinstance(value, int) else "-" + value
    try:
        data, _ = load_yaml(f"v: {text}\n")
    except ValueError as exc:
        assert "config integers have at most 40" in str(exc)
        assert len(text.lstrip("-").replace("_", "")) > 40
    else:
        assert data == {"v": value}


@SETTINGS
@given(
    keys=st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), min_size=2, max_size=12),
    first=st.integers(0, 11),
    second=st.integers(0, 11),
)
def test_a_repeated_key_is_refused_naming_both_lines(
    keys: list[str], first: int, second: int
) -> None:
    unique = list(dict.fromkeys(keys))
    i = first % len(unique)
    j = i + 1 + second % (len(unique) - i)  # the repeat goes after the original
    lines = [f"{k}: {n}" for n, k in enumerate(unique)]
    lines.insert(j, f"{unique[i]}: again")
    try:
        load_yaml("top:\n" + "".join(f"  {line}\n" for line in lines))
    except ValueError as exc:
        assert f"duplicate key {unique[i]!r} (lines {i + 2} and {j + 2})" in str(exc)
    else:
        raise AssertionError("a repeated key was accepted")


PATHS = st.sampled_from(
    [
        "serving.requests", "serving.batch_slots", "serving.arrival.rate", "kv.budget",
        "hw.socket.hbm.bandwidth", "hw.socket.pcu.count", "hw.system.sockets", "model.layers",
        "hw.socket.kernel.sync", "serving.prompt_tokens", "engine.max_events", "a.b.c",
    ]
)  # fmt: skip
VALUES = st.one_of(
    st.text(max_size=30),
    st.sampled_from(FRAGMENTS).map(lambda f: f * 500),
    st.integers(-(10**50), 10**50).map(str),
    st.floats().map(repr),
    st.sampled_from(["5e-324 TB/s", "1e308 GiB", "400 gb/s", "0x" + "f" * 100, "[[[[[]]]]]"]),
)


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(path=PATHS, value=VALUES)
def test_any_override_is_a_scenario_or_an_input_error(path: str, value: str) -> None:
    start = time.process_time()
    try:
        load_scenario(LLAMA, [f"{path}={value}"])
    except InputError as exc:
        assert path.removeprefix("hw.").split(".")[0] in str(exc) or "--set" in str(exc)
    assert time.process_time() - start < 1.0
