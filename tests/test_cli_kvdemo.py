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


def _demo_rows(*args: str) -> dict[str, dict[str, float]]:
    result = CliRunner().invoke(cli, ["kv-demo", "--json", *args])
    assert result.exit_code == 0, result.output
    return {row["policy"]: row for row in json.loads(result.stdout)}


def test_kv_demo_answers_the_kv_parameters_the_simulators_cost_cannot_see() -> None:
    """Pooling and sinks at a fixed budget cost the same (the simulator's answers do not
    move) and keep different tokens: the demo's error moves with them. Max and avg pooling
    pick different neighbours of the needles (the needles themselves, single strong
    tokens, both keep); the sinks split StreamingLLM's fixed budget differently."""
    at = ("--budget", "128")
    base = _demo_rows(*at)
    avg = _demo_rows(*at, "--set", "kv.pooling=avg")
    assert round(base["snapstream"]["relative_error"], 6) == 0.309285
    assert round(avg["snapstream"]["relative_error"], 6) == 0.305142
    assert avg["snapstream"]["needle_recall"] == base["snapstream"]["needle_recall"] == 1.0
    assert avg["streamingllm"] == base["streamingllm"]  # it pools nothing
    sinks = _demo_rows(*at, "--set", "kv.sinks=8")
    assert round(sinks["streamingllm"]["relative_error"], 6) == 1.306162
    assert round(base["streamingllm"]["relative_error"], 6) == 1.232797
    assert sinks["snapstream"]["relative_error"] != base["snapstream"]["relative_error"]
    for field in ("kernel_size=5", "observation_window=32", "recent=64"):
        other = _demo_rows(*at, "--set", f"kv.{field}")
        assert other["snapstream"]["relative_error"] != base["snapstream"]["relative_error"]


def test_kv_demo_takes_a_workloads_kv_and_its_budget() -> None:
    """A WORKLOAD's kv section (with --set on top) sets the demo, whatever its policy reads
    (no warning that a field changes nothing: the demo reads it): its ring of kv.recent and
    its budget, at a prompt four times the budget; a budget the demo cannot lay out blames
    kv.budget; a non-kv --set needs a workload."""
    workload = "workloads/llama3.1-8b-1socket.yaml"
    settings = ["--set", "kv.recent=64", "--set", "kv.budget=300", "--set", "kv.sinks=2"]
    result = CliRunner().invoke(cli, ["kv-demo", workload, *settings, "--decode-steps", "2"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "prompt 1,200 tokens with 8 needles, 2 decode steps, seed 0"
    assert lines[1] == (
        "snapstream: 2 sinks + top-K + a 64-token ring (kv.recent); 32-query observation "
        "window, max pooling, kernel 7; top-K = budget - 66"
    )
    assert [line.split()[:2] for line in lines[8:11]] == [
        ["snapstream", "300"],
        ["streamingllm", "300"],
        ["full", "300"],
    ]
    assert "synthetic" in result.stdout and "good by construction" in result.stdout
    assert "warning" not in result.stderr
    small = CliRunner().invoke(cli, ["kv-demo", workload, "--set", "kv.budget=10"])
    assert small.exit_code == 2
    assert _one_error_line(small.output).startswith("error: kv.budget: budget 10 is below")
    alone = CliRunner().invoke(cli, ["kv-demo", "--set", "serving.seed=1"])
    assert _one_error_line(alone.output) == (
        "error: --set serving.seed: without a WORKLOAD the demo takes kv.* settings only"
    )
