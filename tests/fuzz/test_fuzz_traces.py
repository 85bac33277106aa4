"""Fuzz: request traces. A valid trace mutated at random (bytes flipped, lines cut or
repeated, hostile fields spliced in) reads back as rows or one ConfigError naming the
trace file and a line in it, in bounded time; never another exception."""

from __future__ import annotations

import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rdu_sim.config.errors import MAX_ROW_ISSUES, ConfigError
from rdu_sim.serving.traces import read_trace

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
CSV = "arrival_s,prompt_tokens,output_tokens,note\n" + "".join(
    f'{i * 0.25},{100 + i},{10 + i},"row {i}, ok"\n' for i in range(20)
)
JSONL = "".join(
    f'{{"arrival_s": {i * 0.25}, "prompt_tokens": {100 + i}, "output_tokens": {10 + i}}}\n'
    for i in range(20)
)
SPLICES = [
    "١٢", "1e999", "nan", "-0", "+7", "12.0", "1_000", "0x10", '"', '""', "\n", "\r", "\r\n",
    "\x00", "\ufeff", ",", "{", "[" * 40, "9" * 50, " ", "\t", "é", "\u2028", '\\"', "true",
]  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    suffix, text = draw(st.sampled_from([(".csv", CSV), (".jsonl", JSONL)]))
    data = bytearray(text.encode())
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.integers(0, 4))
        if kind == 0:  # a hostile fragment
            data[at:at] = draw(st.sampled_from(SPLICES)).encode()
        elif kind == 1:  # random bytes
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == 2:  # cut a span
            data[at : at + draw(st.integers(1, 40))] = b""
        elif kind == 3:  # repeat a span
            span = bytes(data[at : at + draw(st.integers(1, 30))])
            data[at:at] = span * draw(st.integers(1, 3000))
        else:  # a long field
            data[at:at] = b"x" * draw(st.integers(1, 300_000))
    return suffix, bytes(data)


@SETTINGS
@given(case=mutated(), max_rows=st.sampled_from([1, 5, 1_000_000]))
def test_mutated_traces_are_rows_or_one_error_at_a_line(
    tmp_path: Path, case: tuple[str, bytes], max_rows: int
) -> None:
    suffix, payload = case
    path = tmp_path / f"t{suffix}"
    path.write_bytes(payload)
    start = time.process_time()
    try:
        trace = read_trace(path, max_rows=max_rows)
    except ConfigError as exc:
        issue = exc.issues[0]
        assert issue.file == str(path)
        assert issue.line is not None and 1 <= issue.line <= payload.count(b"\n") + 1
        assert len(exc.issues) <= MAX_ROW_ISSUES + 1  # every bad row, to a cap, then a count
        assert all(len(str(one)) < 1000 for one in exc.issues)
    else:
        assert 1 <= len(trace) <= max_rows
        assert trace.prompt_tokens.min() >= 1 and trace.output_tokens.min() >= 1
        if trace.arrival_s is not None:
            assert trace.arrival_s.min() >= 0
    assert time.process_time() - start < 2.0
