"""`rdu-sim kv-demo`: the quality proxy from the NumPy reference, as a table or JSON."""

from __future__ import annotations

import json

from click.testing import CliRunner

from rdu_sim.cli.main import cli


def test_kv_demo_json_rows_rank_snapstream_above_streamingllm() -> None:
    result = CliRunner().invoke(cli, ["kv-demo", "--json", "--budget", "256", "--seed", "1"])
    assert result.exit_code == 0, result.output
    rows = {row["policy"]: row for row in json.loads(result.stdout)}
    assert set(rows) == {"snapstream", "streamingllm", "full"}
    assert rows["full"]["relative_error"] == 0.0
    assert rows["snapstream"]["needle_recall"] >= rows["streamingllm"]["needle_recall"]
    assert rows["snapstream"]["relative_error"] < rows["streamingllm"]["relative_error"]


def test_kv_demo_table_names_every_policy() -> None:
    result = CliRunner().invoke(cli, ["kv-demo", "--prompt-tokens", "512"])
    assert result.exit_code == 0, result.output
    for policy in ("snapstream", "streamingllm", "full"):
        assert policy in result.stdout


def test_kv_demo_bad_budget_exits_2_with_the_reason() -> None:
    result = CliRunner().invoke(cli, ["kv-demo", "--budget", "3"])
    assert result.exit_code == 2
    assert "sinks + ring" in result.output
    assert "Traceback" not in result.output
