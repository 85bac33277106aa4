"""Request traces read as streams: bounded memory, strict text and digits, stated limits,
every problem a ConfigError naming the trace file, the line and the column.

Differential: rows written as CSV and as JSONL read back to the same arrays as the rows
themselves (hypothesis generates them). Hostile files: each class of the issue.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rdu_sim.config.errors import ConfigError
from rdu_sim.serving.clock import MAX_ARRIVAL_S
from rdu_sim.serving.traces import formats, lines, read_trace, register_format
from rdu_sim.serving.traces.lines import MAX_LINE_BYTES

HEADER = "arrival_s,prompt_tokens,output_tokens\n"


def _error(path: Path, max_rows: int = 1_000_000) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        read_trace(path, max_rows=max_rows)
    return info.value


def _write(tmp_path: Path, name: str, payload: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(payload, str):
        path.write_text(payload, encoding="utf-8")
    else:
        path.write_bytes(payload)
    return path


rows_strategy = st.lists(
    st.tuples(
        st.floats(0, 1e6, allow_nan=False),
        st.integers(1, 100_000_000),
        st.integers(1, 100_000_000),
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    rows=rows_strategy,
    extra=st.text(
        st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=20
    ),
)
def test_csv_and_jsonl_read_back_exactly(
    tmp_path: Path, rows: list[tuple[float, int, int]], extra: str
) -> None:
    """Any rows, an extra column of any text but NUL (commas, quotes, newlines): the same
    arrays. (A NUL byte makes a file binary: refused, see test_not_utf8_...; a lone
    surrogate cannot be written to a UTF-8 file at all.)"""
    text = io.StringIO()
    writer = csv.writer(text)  # lines end in \r\n, so a lone \r in a field is quoted
    writer.writerow(["output_tokens", "note", "arrival_s", "prompt_tokens"])
    for arrival, prompt, output in rows:
        writer.writerow([output, extra, repr(arrival), prompt])
    csv_path = _write(tmp_path, "t.csv", text.getvalue())
    jsonl_path = _write(
        tmp_path,
        "t.jsonl",
        "".join(
            json.dumps({"arrival_s": a, "prompt_tokens": p, "output_tokens": o, "note": extra})
            + "\n"
            for a, p, o in rows
        ),
    )
    expected = np.asarray(rows, dtype=object)
    for path in (csv_path, jsonl_path):
        trace = read_trace(path)
        assert trace.arrival_s is not None
        np.testing.assert_array_equal(trace.arrival_s, expected[:, 0].astype(float))
        np.testing.assert_array_equal(trace.prompt_tokens, expected[:, 1].astype(np.int64))
        np.testing.assert_array_equal(trace.output_tokens, expected[:, 2].astype(np.int64))
        assert len(read_trace(path, max_rows=2)) == min(2, len(rows))


@pytest.mark.parametrize(
    ("name", "payload", "line", "column", "words"),
    [
        # digits that are not ASCII: Python's int() and float() accept them
        ("a.csv", HEADER + "1,١٢,5\n", 2, "prompt_tokens", "whole number"),
        ("b.csv", HEADER + "١,12,5\n", 2, "arrival_s", "ASCII decimal"),
        ("c.jsonl", '{"prompt_tokens": "١٢", "output_tokens": 5}\n', 1, "prompt_tokens", "whole"),
        ("d.csv", HEADER + "1,12,5²\n", 2, "output_tokens", "whole number"),
        # an embedded newline inside a quoted field is one field, checked whole
        ("e.csv", HEADER + '1,"1\n2",5\n3,4,5\n', 3, "prompt_tokens", "whole number"),
        # values past the clock or the token bound
        ("f.csv", HEADER + "1e8,1,1\n", 2, "arrival_s", "serving clock"),
        ("g.csv", HEADER + "0,100000001,1\n", 2, "prompt_tokens", "1..100000000"),
        ("h.jsonl", '{"prompt_tokens": 1, "output_tokens": 1, "arrival_s": NaN}\n', 1, "", "NaN"),
        ("i.jsonl", '{"prompt_tokens": ' + "9" * 5000 + ', "output_tokens": 1}\n', 1, "", "5000"),
        ("j.jsonl", '{"prompt_tokens": true, "output_tokens": 1}\n', 1, "prompt_tokens", "true"),
        ("k.csv", "prompt_tokens,prompt_tokens,output_tokens\n1,2,3\n", 1, "", "more than once"),
        ("l.csv", HEADER + '1,"2,3\n', 2, "", "not valid CSV"),
        (
            "m.csv",
            "prompt_tokens,output_tokens,arrival_s\n1,2,\n3,4,5\n",
            3,
            "arrival_s",
            "earlier",
        ),
    ],
)
def test_bad_values_name_the_file_line_and_column(
    tmp_path: Path, name: str, payload: str, line: int, column: str, words: str
) -> None:
    path = _write(tmp_path, name, payload)
    issue = _error(path).issues[0]
    assert (issue.file, issue.line, issue.field) == (str(path), line, column)
    assert words in issue.message


def test_not_utf8_names_the_byte_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.csv", HEADER.encode() + b"1,2,3\n4,\xff5,6\n")
    issue = _error(path).issues[0]
    assert issue.line == 3
    assert f"byte {len(HEADER) + 8}" in issue.message and "0xff" in issue.message
    utf16 = _write(tmp_path, "u.jsonl", '{"prompt_tokens": 1}'.encode("utf-16"))
    assert "u.jsonl:1: not valid UTF-8 at byte 0 (0xff)" in str(_error(utf16))
    nul = _write(tmp_path, "n.csv", HEADER.encode() + b"1,2\x00,3\n")
    assert "NUL byte at byte" in str(_error(nul))


def test_a_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.csv", ("\ufeff" + HEADER + "1,2,3\n").encode())
    assert list(read_trace(path).prompt_tokens) == [2]


def test_a_field_over_the_csv_limit_is_a_clear_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.csv", HEADER + '1,2,3\n1,2,"' + "x" * 200_000 + '"\n')
    issue = _error(path).issues[0]
    assert issue.line == 3 and "at most 131,072 characters" in issue.message


def test_a_line_over_the_limit_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.jsonl", "x" * (3 * MAX_LINE_BYTES))
    tracemalloc.start()
    message = str(_error(path))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "longer than 1,048,576 bytes" in message
    assert peak < 4 * MAX_LINE_BYTES


def test_deep_jsonl_is_refused_before_parsing(tmp_path: Path) -> None:
    for text in ("[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000):
        path = _write(tmp_path, "t.jsonl", text + "\n")
        start = time.process_time()
        assert "nested more than 32 levels" in str(_error(path))
        assert time.process_time() - start < 0.5
    # brackets inside strings and escaped quotes do not count
    inside = '{"prompt_tokens": 3, "output_tokens": 4, "x": "' + '[\\"' * 10_000 + '"}\n'
    path = _write(tmp_path, "s.jsonl", inside)
    start = time.process_time()
    assert list(read_trace(path).prompt_tokens) == [3]
    assert time.process_time() - start < 0.5


def test_a_large_trace_streams_in_bounded_memory(tmp_path: Path) -> None:
    """50 MB of rows: reading the first 1000 costs milliseconds and no file-sized memory."""
    path = tmp_path / "big.csv"
    block = "".join(f"{i},{i % 900 + 1},{i % 70 + 1}\n" for i in range(10_000)).encode()
    with path.open("wb") as stream:
        stream.write(HEADER.encode())
        for _ in range(50 * 2**20 // len(block)):
            stream.write(block)
    tracemalloc.start()
    start = time.perf_counter()
    trace = read_trace(path, max_rows=1000)
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(trace) == 1000 and list(trace.prompt_tokens[:3]) == [1, 2, 3]
    assert elapsed < 1.0
    assert peak < 2 * 2**20


def test_blank_lines_cannot_stall_the_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lines, "MAX_TRACE_LINES", 1000)
    path = _write(tmp_path, "t.csv", HEADER + "\n" * 5000 + "1,2,3\n")
    assert "more than 1,000 lines" in str(_error(path))


def test_the_trace_path_itself(tmp_path: Path) -> None:
    """Missing, a folder, a FIFO, too long, a NUL: refused naming the workload's field."""
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    (tmp_path / "dir.csv").mkdir()
    cases = {
        tmp_path / "nope.csv": "not found",
        tmp_path / "dir.csv": "is a directory",
        fifo: "not a regular file",
        tmp_path / ("x" * 5000 + ".csv"): "cannot open",
        Path(str(tmp_path) + "/a\0b.csv"): "not found",
        _write(tmp_path, "t.txt", "x"): "unknown format '.txt'; use .csv, .jsonl, .ndjson",
    }
    for path, words in cases.items():
        start = time.perf_counter()
        with pytest.raises(ConfigError) as info:
            read_trace(path, "w.yaml")
        assert time.perf_counter() - start < 1.0
        issue = info.value.issues[0]
        assert (issue.file, issue.field) == ("w.yaml", "serving.trace")
        assert words in issue.message
        assert len(str(info.value)) < 700


def test_an_arrival_column_must_be_all_or_nothing(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "t.jsonl",
        '{"prompt_tokens": 1, "output_tokens": 2, "arrival_s": 0}\n'
        '{"prompt_tokens": 1, "output_tokens": 2}\n',
    )
    issue = _error(path).issues[0]
    assert (issue.line, issue.field) == (2, "arrival_s")
    assert "other rows have one" in issue.message
    ok = _write(tmp_path, "ok.csv", HEADER + f"{MAX_ARRIVAL_S},1,1\n")
    assert read_trace(ok).arrival_s is not None


def test_the_format_registry_refuses_duplicates() -> None:
    names = [f.name for f in formats()]
    assert names[:2] == ["csv", "jsonl"]  # then the published formats (no suffix: by name)
    with pytest.raises(ValueError, match="already registered"):
        register_format("csv", (".tsv",), "x")(lambda lines: iter(()))
    with pytest.raises(ValueError, match=r"\.jsonl already registered"):
        register_format("other", (".jsonl",), "x")(lambda lines: iter(()))
    assert [f.name for f in formats()] == names
