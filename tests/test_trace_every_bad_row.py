"""A trace's reader names every bad row in one error, one issue a row (at most
``MAX_ROW_ISSUES``, the rest counted), as the YAML loader names every bad field; rows out of
time order are accepted and said, as a cluster counts them."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.config.errors import MAX_ROW_ISSUES, ConfigError
from rdu_sim.serving.traces import read_trace
from rdu_sim.serving.traces.reader import EVERY_ROW

ROOT = Path(__file__).resolve().parents[1]
HEADER = "arrival_s,prompt_tokens,output_tokens\n"


def _messages(path: Path, rows: int = EVERY_ROW, format: str = "auto") -> list[str]:
    with pytest.raises(ConfigError) as caught:
        read_trace(path, max_rows=rows, format=format)
    return [str(issue) for issue in caught.value.issues]


def test_check_names_every_bad_row_of_a_csv_trace(tmp_path: Path) -> None:
    trace = tmp_path / "tr.csv"
    trace.write_text(HEADER + "0.0,10,5\n0.5,-3,20\n1.0,abc,5\n1.5,4\n2.0,10,5\n")
    result = CliRunner().invoke(cli, ["check", str(trace)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: {trace}:3: prompt_tokens: expected a whole number of tokens, got '-3'",
        f"error: {trace}:4: prompt_tokens: expected a whole number of tokens, got 'abc'",
        f"error: {trace}:5: row has 2 fields, the header has 3",
        "error: 1 of 1 file(s) failed the check",
    ]


def test_bad_rows_past_the_cap_are_counted(tmp_path: Path) -> None:
    trace = tmp_path / "many.csv"
    trace.write_text(HEADER + "".join(f"{i},x,5\n" for i in range(MAX_ROW_ISSUES + 30)))
    said = _messages(trace)
    assert len(said) == MAX_ROW_ISSUES + 1
    assert said[0].startswith(f"{trace}:2: prompt_tokens:")
    assert said[-1] == f"{trace}: and 30 more bad row(s) not shown"


def test_every_bad_row_of_the_json_formats(tmp_path: Path) -> None:
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(
        '{"prompt_tokens": 5, "output_tokens": 3}\n{"prompt_tokens": 5\n'
        '{"prompt_tokens": -1, "output_tokens": 3}\n[1]\n'
    )
    assert [m.split(": ", 1)[0] for m in _messages(jsonl)] == [
        f"{jsonl}:{line}" for line in (2, 3, 4)
    ]
    mooncake = tmp_path / "m.jsonl"
    mooncake.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 3}\n'
        '{"timestamp": -1, "input_length": 5, "output_length": 3}\n'
        '{"input_length": 5, "output_length": 3}\n'
        '{"timestamp": 5, "input_length": "x", "output_length": 3}\n'
    )
    assert _messages(mooncake) == [
        f"{mooncake}:2: timestamp: must be a time >= 0 ms, got -1",
        f"{mooncake}:3: timestamp: missing field",
        f"{mooncake}:4: input_length: expected a whole number of tokens, got 'x'",
    ]


def test_a_run_reads_only_its_rows(tmp_path: Path) -> None:
    """A run of 2 requests is refused for its own bad row, not for one below its rows; one
    whose rows are good is not refused for a bad row below them (``rdu-sim check`` finds it)."""
    trace = tmp_path / "tr.csv"
    trace.write_text(HEADER + "0.0,10,5\n0.5,-3,20\n1.0,abc,5\n")
    assert [m.split(": ")[0] for m in _messages(trace, rows=2)] == [f"{trace}:3"]
    assert len(read_trace(trace, max_rows=1)) == 1


def test_a_problem_of_the_file_follows_the_bad_rows_above_it(tmp_path: Path) -> None:
    trace = tmp_path / "cut.csv"
    trace.write_bytes((HEADER + "0.0,x,5\n0.5,10,5\n1.0,10,").encode())
    said = _messages(trace)
    assert said[0].startswith(f"{trace}:2: prompt_tokens:")
    assert said[1].startswith(f"{trace}:4: the last line has no line end")
    assert len(said) == 2


def test_check_of_a_workload_says_its_trace_rows_out_of_time_order(tmp_path: Path) -> None:
    """Arrivals 0.0, 1.0, 0.2: accepted and replayed by arrival (a cluster counts them,
    ``out_of_order_rows``); check says so of a trace file and of a workload replaying one."""
    (tmp_path / "ooo.csv").write_text(HEADER + "0.0,10,5\n1.0,10,20\n0.2,10,5\n")
    text = (ROOT / "workloads" / "llama3.1-8b-1socket.yaml").read_text()
    text = text.replace("../hw_configs/", str(ROOT / "hw_configs") + "/")
    workload = tmp_path / "w.yaml"
    workload.write_text(text.replace("requests: 200", "requests: 3\n  trace: ooo.csv"))
    result = CliRunner().invoke(cli, ["check", str(workload), str(tmp_path / "ooo.csv")])
    assert result.exit_code == 0, result.output
    late = "1 out of time order (arriving before a row above them; a run replays them by arrival)"
    assert f"    trace ooo.csv: of the rows its run uses, {late}\n" in result.stdout
    assert f"request trace: 3 rows with arrival_s, {late}\n" in result.stdout


def test_a_run_replaying_a_trace_says_its_rows_out_of_time_order(tmp_path: Path) -> None:
    """A lone run replayed 0.0, 1.0, 0.2 by arrival and said nothing (a cluster counted
    them); its report has the row and its JSON ``out_of_order_rows``, 0 when sorted."""
    from rdu_sim import api

    (tmp_path / "ooo.csv").write_text(HEADER + "0.0,10,5\n1.0,10,20\n0.2,10,5\n1.5,10,5\n")
    (tmp_path / "sorted.csv").write_text(HEADER + "0.0,10,5\n0.2,10,5\n1.0,10,20\n")
    workload = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
    given = {"serving.requests": 3, "serving.arrival.process": "poisson"}
    replayed = api.run(workload, {**given, "serving.trace": str(tmp_path / "ooo.csv")})
    assert replayed.to_dict()["out_of_order_rows"] == 1  # of the 3 rows the run uses
    ordered = api.run(workload, {**given, "serving.trace": str(tmp_path / "sorted.csv")})
    assert ordered.to_dict()["out_of_order_rows"] == 0
    result = CliRunner().invoke(
        cli,
        ["run", str(workload), "--set", f"serving.trace={tmp_path / 'ooo.csv'}"]
        + [f"--set={k}={v}" for k, v in given.items()],
    )
    assert result.exit_code == 0, result.output
    assert "trace rows out of time order" in result.stdout
    assert "1 (arrive before a row above them; the run replays them by arrival)" in result.stdout
