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


def _one_error_line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("error: "), output
    return lines[0]


def test_kv_demo_defaults_work_at_the_shortest_prompt_help_allows() -> None:
    from rdu_sim.cli.kvdemo_cmd import command

    prompt = next(p for p in command.params if p.name == "prompt_tokens")
    shortest = prompt.type.min  # type: ignore[attr-defined]
    result = CliRunner().invoke(cli, ["kv-demo", "--prompt-tokens", str(shortest), "--json"])
    assert result.exit_code == 0, result.output
    budgets = {row["budget"] for row in json.loads(result.stdout)}
    assert min(budgets) == 20  # 1/16 of 64 raised to sinks 4 + ring 16
    assert max(budgets) == shortest + 8  # the one that keeps everything


def test_kv_demo_bad_budget_is_one_error_line_naming_budget() -> None:
    result = CliRunner().invoke(cli, ["kv-demo", "--budget", "3"])
    assert result.exit_code == 2
    line = _one_error_line(result.output)
    assert line.startswith("error: --budget:") and "sinks + ring" in line


def test_kv_demo_too_many_needles_blames_needles_not_budget() -> None:
    args = ["kv-demo", "--prompt-tokens", "64", "--budget", "32", "--needles", "50"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    line = _one_error_line(result.output)
    assert line.startswith("error: --needles:") and "at most 44" in line
    assert "--budget" not in line


def test_kv_demo_states_its_settings() -> None:
    result = CliRunner().invoke(cli, ["kv-demo", "--prompt-tokens", "256"])
    assert result.exit_code == 0, result.output
    head = result.stdout.split("policy ")[0]
    assert "4 sinks + top-K + a 16-token ring" in head
    assert "16-token observation window, not a workload's kv.recent of 2,048" in head
    assert "snapkv is left out:" in head
    assert "full: the reference" in head
