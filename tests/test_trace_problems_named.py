"""What a trace's problems are called, where a user would look for them.

- a Mooncake trace's ``hash_ids`` name blocks of one size: a prefix cache of another
  ``block_tokens`` is refused (it used to report hits no earlier prompt could give);
- a trace path that is a directory, a FIFO, /dev/null or empty says so, and that --set
  named it; a trace file checked on its own has no workload field in its error;
- a first row with a misspelt field, or a file read in a format it is not in, names the
  cause (each format's fields, or where the format was named);
- a trace longer than the serving clock is refused at its row, in its own column's name;
- rows out of time order are counted, and each request keeps its line in the trace.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_cluster import ROOT, fake, write_cluster

from rdu_sim.cli.main import cli
from rdu_sim.config.errors import ConfigError
from rdu_sim.serving.traces import read_trace
from rdu_sim.serving.traces.published import Blocks, read_table
from rdu_sim.serving.traces.synthetic import SyntheticTrace, write_synthetic


def _mooncake(folder: Path, rows: list[dict[str, Any]], name: str = "m.jsonl") -> Path:
    path = folder / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _row(ms: int, prompt: int, block: int = 512, start: int = 0) -> dict[str, Any]:
    """A Mooncake row with ceil(prompt / block) hash ids, as the published traces have."""
    count = math.ceil(prompt / block)
    return {
        "timestamp": ms,
        "input_length": prompt,
        "output_length": 20,
        "hash_ids": list(range(start, start + count)),
    }


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def _errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error: ")]


# --- hash_ids against prefix_cache.block_tokens ----------------------------------------------


def test_the_published_block_rule_holds_at_its_block_size_and_fails_at_another(
    tmp_path: Path,
) -> None:
    """ceil(input_length / block) ids: the last partial block is named too (3,253 tokens
    are 7 blocks of 512); at 1024-token blocks the same rows contradict the size."""
    rows = [_row(0, 400), _row(10, 512, start=5), _row(20, 3253, start=9)]
    path = _mooncake(tmp_path, rows)
    table = read_table(path, "mooncake", blocks=Blocks(512, "prefix_cache.block_tokens"))
    assert table.hash_offsets is not None and table.hash_offsets.tolist() == [0, 1, 2, 9]
    with pytest.raises(ConfigError) as caught:
        read_table(path, "mooncake", blocks=Blocks(1024, "prefix_cache.block_tokens of c.yaml"))
    (issue,) = caught.value.issues
    assert (issue.file, issue.line, issue.field) == (str(path), 3, "hash_ids")
    assert issue.message.startswith(
        "7 block hashes for input_length 3,253, expected ceil(3,253 / 1,024) = 4 at "
        "1,024-token blocks (prefix_cache.block_tokens of c.yaml)"
    )


@pytest.mark.parametrize("count", [6, 8, 0])
def test_one_id_more_or_fewer_is_refused(tmp_path: Path, count: int) -> None:
    """No slack: every row of the published traces has exactly ceil(n / 512) ids."""
    row = {**_row(0, 3253), "hash_ids": list(range(count))}
    path = _mooncake(tmp_path, [_row(0, 100, start=99), row])
    with pytest.raises(ConfigError, match=f":2: hash_ids: {count:,} block hash"):
        raise_first(lambda: read_table(path, "auto", blocks=Blocks(512, "x")))


def test_a_row_repeating_a_block_hash_is_refused(tmp_path: Path) -> None:
    """Block i's hash names the prompt's first i + 1 blocks, so one row's hashes all differ; a
    repeat would be pinned twice and its pages counted off the request's reservation twice."""
    row = {**_row(0, 2048), "hash_ids": [7, 7, 7, 7]}
    path = _mooncake(tmp_path, [_row(0, 100, start=99), row])
    with pytest.raises(ConfigError, match=r":2: hash_ids: block hash 7 appears twice"):
        raise_first(lambda: read_table(path, "auto", blocks=Blocks(512, "x")))


def raise_first(read: Any) -> None:
    """Call ``read`` and re-raise its ConfigError as its one line (what the CLI prints)."""
    try:
        read()
    except ConfigError as exc:
        raise ConfigError(exc.issues) from None


def test_a_row_without_hash_ids_is_not_checked(tmp_path: Path) -> None:
    """A row may lack hash_ids (no cacheable blocks): nothing to contradict."""
    row = _row(10, 3000)
    del row["hash_ids"]
    path = _mooncake(tmp_path, [_row(0, 600), row])
    table = read_table(path, "auto", blocks=Blocks(512, "x"))
    assert table.hash_offsets is not None and table.hash_offsets.tolist() == [0, 2, 2]


def _synthetic_cluster(folder: Path, block_tokens: int = 512, **fields: Any) -> Path:
    spec = SyntheticTrace(requests=30, rate=4.0, prompt_median=1500, conversations=4, seed=3)
    write_synthetic(folder / "m.jsonl", "mooncake", spec)
    return write_cluster(
        folder,
        traffic={"trace": "m.jsonl", "format": "mooncake"},
        prefix_cache={"block_tokens": block_tokens},
        **fields,
    )


def test_run_and_check_refuse_a_block_size_the_trace_contradicts(tmp_path: Path) -> None:
    """The trial's silent wrong answer: 1024-token blocks over 512-token hash ids reported
    70.8% of prompt tokens skipped (45.2% at 512). Now one error line, before any run."""
    path = _synthetic_cluster(tmp_path)
    assert fake(path).to_dict()["prefix_cache"]["hit_rate"] > 0  # at 512: fine
    code, out = _cli("run", str(path), "--set", "prefix_cache.block_tokens=1024")
    (line,) = _errors(out)
    assert code == 2 and f"{tmp_path / 'm.jsonl'}:" in line and ": hash_ids: " in line
    assert "at 1,024-token blocks (prefix_cache.block_tokens, from --set " in line
    assert "read as" not in line  # not a format problem
    other = _synthetic_cluster(tmp_path, block_tokens=256)
    code, out = _cli("check", str(other))
    (line,) = _errors(out)[:1]
    assert code == 2 and f"(prefix_cache.block_tokens of {other})" in line


# --- the trace path itself -------------------------------------------------------------------


def _special(tmp_path: Path, kind: str) -> tuple[str, str]:
    if kind == "dir":
        (tmp_path / "d.jsonl").mkdir()
        return "d.jsonl", "is a directory, expected a file"
    if kind == "fifo":
        os.mkfifo(tmp_path / "f.jsonl")
        return "f.jsonl", "not a regular file"
    if kind == "null":
        return os.devnull, "not a regular file"
    (tmp_path / "e.jsonl").write_text("")
    return "e.jsonl", "is empty"


@pytest.mark.parametrize("kind", ["dir", "fifo", "null", "empty"])
def test_a_trace_that_is_no_file_says_what_it_is_and_that_set_named_it(
    tmp_path: Path, kind: str
) -> None:
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    trace, problem = _special(tmp_path, kind)
    path = _synthetic_cluster(tmp_path)
    code, out = _cli("run", str(path), "--set", f"traffic.trace={trace}")
    (line,) = _errors(out)
    assert code == 2 and line.startswith(f"error: {path}: traffic.trace: trace file ")
    assert problem in line and line.endswith("(from --set traffic.trace)")
    assert "not found" not in line
    if kind != "null":
        code, out = _cli("check", str(tmp_path / trace))
        first = _errors(out)[0]
        assert first == f"error: {tmp_path / trace}: {problem}" + (
            " (a trace has a row per request)" if kind == "empty" else ""
        )  # no serving.trace: the file is no workload's


# --- format choice ---------------------------------------------------------------------------


def test_a_misspelt_first_field_names_each_formats_fields(tmp_path: Path) -> None:
    """input_len: not Mooncake by its first line, and not the project's jsonl either."""
    row = _row(0, 600)
    row["input_len"] = row.pop("input_length")
    path = _mooncake(tmp_path, [row, _row(5, 600)])
    with pytest.raises(ConfigError) as caught:
        read_trace(path)
    (issue,) = caught.value.issues
    assert (issue.file, issue.line, issue.field) == (str(path), 1, "")
    assert "fields (timestamp, output_length, hash_ids, input_len)" in issue.message
    assert "mooncake needs timestamp, input_length, output_length (it lacks input_length)" in (
        issue.message
    )
    assert "jsonl needs prompt_tokens, output_tokens" in issue.message
    # a cluster with a prefix cache: the same error, not "the jsonl format lacks block hashes"
    cluster = write_cluster(
        tmp_path, traffic={"trace": "m.jsonl"}, prefix_cache={"block_tokens": 512}
    )
    code, out = _cli("check", str(cluster))
    assert code == 2 and "mooncake needs" in out and "lacks block hashes" not in out


def test_a_forced_format_is_named_with_where_it_was_set(tmp_path: Path) -> None:
    """A CSV read as Mooncake because the cluster file says so: the JSON error says that."""
    path = _synthetic_cluster(tmp_path)
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n")
    code, out = _cli("run", str(path), "--set", "traffic.trace=t.csv")
    (line,) = _errors(out)
    assert code == 2 and "t.csv:1: not valid JSON" in line
    assert f"(read as mooncake: traffic.format of {path}; its first line looks like a csv " in (
        line
    )
    code, out = _cli(
        "run", str(path), "--set", "traffic.trace=t.csv", "--set", "traffic.format=mooncake"
    )
    assert "read as mooncake: traffic.format, from --set traffic.format;" in out


# --- the clock's span ------------------------------------------------------------------------


def test_a_trace_too_long_is_refused_at_its_row_in_its_own_column(tmp_path: Path) -> None:
    rows = [_row(0, 100), _row(5_000_000_000, 100), _row(10, 100)]
    path = _mooncake(tmp_path, rows)
    code, out = _cli("check", str(path))
    (line,) = _errors(out)[:1]
    assert code == 2 and line.startswith(f"error: {path}:2: timestamp: this row arrives 5e+06 s")


# --- rows out of time order ------------------------------------------------------------------


def test_rows_out_of_order_are_counted_and_each_request_keeps_its_line(tmp_path: Path) -> None:
    """Requests are numbered by arrival; requests.csv's trace_line joins them to the trace,
    and the JSON and the report say how many rows came out of order."""
    rows = [_row(0, 600), _row(300, 700, start=10), _row(100, 800, start=20), _row(400, 90)]
    rows[3]["input_length"] = 0  # a failed request: skipped, so later lines shift too
    rows.append(_row(500, 900, start=30))
    _mooncake(tmp_path, rows)
    path = write_cluster(tmp_path, traffic={"trace": "m.jsonl"})
    result = fake(path)
    assert result.requests()["trace_line"].tolist() == [1, 3, 2, 5]
    assert result.requests()["prompt_tokens"].tolist() == [600, 800, 700, 900]
    assert result.to_dict()["traffic"]["out_of_order_rows"] == 1
    code, out = _cli("run", str(path), "--out", str(tmp_path / "o"))
    assert code == 0 and "trace rows out of time order" in out
    with (tmp_path / "o" / "requests.csv").open() as stream:
        lines = [row["trace_line"] for row in csv.DictReader(stream)]
    assert lines == ["1", "3", "2", "5"]


def test_a_sorted_traces_json_has_no_out_of_order_key(tmp_path: Path) -> None:
    _mooncake(tmp_path, [_row(0, 600), _row(100, 700)])
    result = fake(write_cluster(tmp_path, traffic={"trace": "m.jsonl"}))
    assert "out_of_order_rows" not in result.to_dict()["traffic"]
    assert result.requests()["trace_line"].tolist() == [1, 2]


# --- a file that is not text -----------------------------------------------------------------


def test_a_file_that_is_not_text_is_one_message_whatever_the_path(tmp_path: Path) -> None:
    """A gzip file (its magic bytes 1f 8b) is named compressed, anything else by its first
    byte that is not UTF-8: the same words from check and run, whether its suffix, the
    cluster's format or ``auto`` chose the reader (before: three messages, and ``auto``
    echoed the compressed bytes as replacement characters)."""
    text = "".join(json.dumps(_row(ms, 600, start=ms)) + "\n" for ms in range(3))
    for name in ("z.jsonl", "z.jsonl.gz", "z.txt"):
        (tmp_path / name).write_bytes(gzip.compress(text.encode()))
    latin = tmp_path / "l.jsonl"
    latin.write_bytes(text.encode() + '{"type": "caf\xe9"}\n'.encode("latin-1"))
    bad_byte = len(text.encode()) + len('{"type": "caf')
    cases = [
        ("z.jsonl", "auto", 1, "gzip-compressed (decompress it first)"),
        ("z.jsonl", "mooncake", 1, "gzip-compressed (decompress it first)"),
        ("z.jsonl.gz", "auto", 1, "gzip-compressed (decompress it first)"),
        ("z.txt", "auto", 1, "gzip-compressed (decompress it first)"),
        ("l.jsonl", "auto", 4, f"not valid UTF-8 at byte {bad_byte} (0xe9)"),
        ("l.jsonl", "mooncake", 4, f"not valid UTF-8 at byte {bad_byte} (0xe9)"),
    ]
    for name, fmt, line, problem in cases:
        cluster = write_cluster(tmp_path, traffic={"trace": name, "format": fmt})
        for command in ("run", "check"):
            code, out = _cli(command, str(cluster))
            first = _errors(out)[0]
            assert code == 2 and first.endswith(f"{tmp_path / name}:{line}: {problem}"), first
    for name, problem in [
        ("z.jsonl", "gzip-compressed (decompress it first)"),
        ("z.jsonl.gz", "gzip-compressed (decompress it first)"),  # read as a YAML file
        ("l.jsonl", f"not valid UTF-8 at byte {bad_byte} (0xe9)"),
    ]:
        code, out = _cli("check", str(tmp_path / name))
        assert code == 2 and _errors(out)[0].endswith(f": {problem}"), out
    with pytest.raises(ConfigError, match=r"^.*z\.txt:1: gzip-compressed \(decompress it"):
        read_trace(tmp_path / "z.txt")


# --- a line that is not JSON -----------------------------------------------------------------


@pytest.mark.parametrize("end", ["\n", "\r\n"])
def test_a_bad_json_line_names_its_column_and_a_cut_line_reads_as_cut(
    tmp_path: Path, end: str
) -> None:
    """The column counts in the line, its line end left out (before: a line ending early
    was "Expecting ',' delimiter (column 1)", the column of the next line); a line ending
    inside a string or before its object closes reads as cut off."""
    good = json.dumps(_row(0, 600))
    cut = good.index('"output_length"') + 3  # inside the key's string
    missing_comma = good.replace(', "input_length"', ' "input_length"')
    comma = missing_comma.index(' "input_length') + 2  # where the comma should be, 1-based
    cases = {
        good[:-1]: f"the line ends at column {len(good) - 1} before the object closes (cut off?)",
        good[:cut]: f"unterminated string from column {cut - 2} (the line ends inside it: cut "
        "off?)",
        missing_comma: f"Expecting ',' delimiter (column {comma})",
    }
    for bad, problem in cases.items():
        for name in ("m.jsonl", "p.jsonl"):
            rows = good if name == "m.jsonl" else '{"prompt_tokens": 5, "output_tokens": 2}'
            path = tmp_path / name
            path.write_bytes((rows + end + bad + end).encode())
            code, out = _cli("check", str(path))
            assert code == 2 and _errors(out)[0] == f"error: {path}:2: not valid JSON: {problem}"


# --- who named the trace ---------------------------------------------------------------------


def test_a_workload_trace_set_on_the_command_line_is_blamed_on_the_set(tmp_path: Path) -> None:
    """The one attribution rule (``config.overrides.setting_origin``, as a cluster's
    traffic.trace has): a trace --set named is not the workload file's, and neither is a
    format --set named (before: both were blamed on the shipped workload file)."""
    rows = [_row(0, 600), _row(-5, 600)]
    _mooncake(tmp_path, rows)
    (tmp_path / "d.jsonl").mkdir()
    workload = "llama3.1-8b-1socket"
    code, out = _cli("run", workload, "--set", f"serving.trace={tmp_path / 'd.jsonl'}")
    (line,) = _errors(out)
    assert code == 2 and line.endswith(
        ": is a directory, expected a file (from --set serving.trace)"
    )
    assert ".yaml: serving.trace: trace " in line  # no line: the file's holds no trace
    code, out = _cli("run", workload, "--set", f"serving.trace={tmp_path / 'm.jsonl'}")
    (line,) = _errors(out)
    assert code == 2 and line.startswith(f"error: {tmp_path / 'm.jsonl'}:2: timestamp: ")
    assert line.endswith("(the serving.trace, from --set serving.trace)")
    code, out = _cli(
        "run",
        workload,
        "--set",
        f"serving.trace={tmp_path / 'm.jsonl'}",
        "--set",
        "serving.trace_format=jsonl",
    )
    (line,) = _errors(out)
    assert "(read as jsonl: serving.trace_format, from --set serving.trace_format; " in line
    # a workload file naming them itself: the file is blamed, with its name
    mine = tmp_path / "w.yaml"
    text = (ROOT / "workloads" / f"{workload}.yaml").read_text()
    text = text.replace("../hw_configs/", f"{ROOT / 'hw_configs'}/")
    mine.write_text(text.replace("  seed: 0\n", "  seed: 0\n  trace: m.jsonl\n"))
    code, out = _cli("run", str(mine))
    (line,) = _errors(out)
    assert code == 2 and line.endswith(f"(the serving.trace of {mine})")


# --- numbers written as strings --------------------------------------------------------------


def test_a_mooncake_timestamp_as_a_string_reads_as_its_tokens_do(tmp_path: Path) -> None:
    """One rule for a number written as a string in every numeric field (``traces.values``):
    ``"1000"`` is 1,000 ms as ``"600"`` is 600 tokens (before: refused as "expected
    milliseconds >= 0, got '1000'", which is >= 0); a message says the real problem."""
    rows = [_row(0, 600), _row(1000, 600, start=2), _row(2500, 600, start=4)]
    numbers = read_table(_mooncake(tmp_path, rows, "n.jsonl"), "mooncake")
    rows[1]["timestamp"], rows[2]["input_length"] = "1000", "600"
    rows[2]["timestamp"] = "2.5e3"
    strings = read_table(_mooncake(tmp_path, rows, "s.jsonl"), "mooncake")
    assert strings.arrival_s.tolist() == numbers.arrival_s.tolist() == [0.0, 1.0, 2.5]
    assert strings.prompt_tokens.tolist() == [600, 600, 600]
    for value, problem in [
        ("soon", "expected milliseconds (an ASCII decimal number), got 'soon'"),
        (True, "expected milliseconds (an ASCII decimal number), got true"),  # as written
        (-1000, "must be a time >= 0 ms, got -1000"),
        ("-1000", "must be a time >= 0 ms, got '-1000'"),
    ]:
        rows[1]["timestamp"] = value
        path = _mooncake(tmp_path, rows, "b.jsonl")
        code, out = _cli("check", str(path))
        assert code == 2 and _errors(out)[0] == f"error: {path}:2: timestamp: {problem}"
    # beyond a float's range JSON reads as inf: it said "must be a time >= 0 ms, got inf"
    path = tmp_path / "inf.jsonl"
    path.write_text('{"timestamp": 1e400, "input_length": 600, "output_length": 5}\n')
    code, out = _cli("check", str(path))
    assert code == 2 and _errors(out)[0] == (
        f"error: {path}:1: timestamp: must be a finite time >= 0 ms, got inf"
    )


def test_check_says_how_many_rows_are_out_of_time_order(tmp_path: Path) -> None:
    """``rdu-sim check`` counts them as ``run`` does (``traces.table.out_of_order``), where
    it said OK alone before; a sorted trace's line has no such words."""
    path = _mooncake(tmp_path, [_row(0, 600), _row(300, 700), _row(100, 800), _row(200, 90)])
    code, out = _cli("check", str(path))
    assert code == 0 and out.strip() == (
        f"OK  {path}: mooncake trace: 4 requests, 2 out of time order (arriving before a row "
        "above them; a run replays them by arrival)"
    )
    assert (
        fake(write_cluster(tmp_path, traffic={"trace": "m.jsonl"})).to_dict()["traffic"][
            "out_of_order_rows"
        ]
        == 2
    )
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n")
    code, out = _cli("check", str(csv_path))
    assert code == 0 and out.strip() == f"OK  {csv_path}: request trace: 2 rows with arrival_s"


# --- a file cut short, a damaged row a run does not read ---------------------------------------


def _workload_with_trace(folder: Path, trace: Path) -> Path:
    """llama3.1-8b-1socket (serving.requests: 200) serving the first rows of ``trace``."""
    mine = folder / "w.yaml"
    text = (ROOT / "workloads" / "llama3.1-8b-1socket.yaml").read_text()
    text = text.replace("../hw_configs/", f"{ROOT / 'hw_configs'}/")
    mine.write_text(text.replace("  seed: 0\n", f"  seed: 0\n  trace: {trace}\n"))
    assert f"trace: {trace}" in mine.read_text()
    return mine


def test_a_trace_cut_inside_its_last_value_is_refused_as_truncated(tmp_path: Path) -> None:
    """A copy of chat-400.csv cut inside its last field (``...,527,66`` read as 66 became
    ``...,527,6``, no line end): refused at its last line by check and by a run reading
    that row (before: OK, and a run served 6 output tokens); the whole file is OK."""
    whole = (ROOT / "workloads" / "traces" / "chat-400.csv").read_bytes()
    assert whole.endswith(b"\n") and whole.count(b"\n") == 401
    cut = tmp_path / "cut.csv"
    cut.write_bytes(whole[:-2])  # the last value loses its last digit and the line end
    code, out = _cli("check", str(cut))
    assert code == 2
    assert _errors(out)[0].startswith(f"error: {cut}:401: the last line has no line end")
    assert "truncated" in _errors(out)[0]
    code, out = _cli(
        "run",
        "llama3.1-8b-1socket",
        "--set",
        f"serving.trace={cut}",
        "--set",
        "serving.requests=400",
    )
    assert code == 2 and f"{cut}:401: the last line has no line end" in out
    (tmp_path / "whole.csv").write_bytes(whole)
    assert _cli("check", str(tmp_path / "whole.csv"))[0] == 0


def test_check_reads_every_row_of_a_workloads_trace(tmp_path: Path) -> None:
    """A run reads its serving.requests first rows (time and memory follow its requests),
    so a damaged row below them is read by no run: `rdu-sim check` of the workload reads
    every row and refuses it at its line (before: OK)."""
    rows = (ROOT / "workloads" / "traces" / "chat-400.csv").read_text().splitlines(True)
    rows[300] = "15.0,abc,5\n"
    trace = tmp_path / "damaged.csv"
    trace.write_text("".join(rows))
    workload = _workload_with_trace(tmp_path, trace)
    assert "  requests: 200\n" in workload.read_text()  # the damaged row, line 301, unread
    code, out = _cli("check", str(workload))
    assert code == 2
    assert f"{trace}:301: prompt_tokens: expected a whole number of tokens, got 'abc'" in out
