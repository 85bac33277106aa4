"""`rdu-sim kv-demo`: the quality proxy from the NumPy reference, as a table or JSON."""

from __future__ import annotations

import json

from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.config.workload import KVConfig


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


def test_kv_demo_a_window_longer_than_the_ring_is_runs_own_error() -> None:
    """The demo's ring (kv.recent) must hold its observation window: `run`'s rule and
    message (kv.policies.check_window_in_ring), at the field the --set changed, exit 2;
    with a workload whose policy never checks it (full), at the workload's field."""
    rule = (
        "kv.observation_window (16) must be <= kv.recent (8): the window sits inside the "
        "ring buffer (from --set kv.recent)"
    )
    for extra in ((), ("--budget", "64")):
        result = CliRunner().invoke(cli, ["kv-demo", "--set", "kv.recent=8", *extra])
        assert result.exit_code == 2, result.output
        assert _one_error_line(result.output) == f"error: kv.recent: {rule}"
    full = CliRunner().invoke(
        cli, ["kv-demo", "deepseek-r1-128k-full", "--set", "kv.recent=8", "--decode-steps", "1"]
    )
    assert full.exit_code == 2, full.output
    line = _one_error_line(full.output)
    assert line.startswith("error: ") and line.endswith(
        "deepseek-r1-128k-full.yaml: kv.recent: " + rule.replace("(16)", "(32)")
    )


def test_kv_demo_a_rule_across_kv_fields_names_its_field_as_run_does() -> None:
    kernel = CliRunner().invoke(cli, ["kv-demo", "--set", "kv.kernel_size=4"])
    assert kernel.exit_code == 2
    assert _one_error_line(kernel.output) == (
        "error: kv.kernel_size: must be odd (padding k//2), got 4 (from --set kv.kernel_size)"
    )
    both = ["kv-demo", "--set", "kv.budget=100", "--set", "kv.compression_ratio=4"]
    result = CliRunner().invoke(cli, both)
    assert result.exit_code == 2
    assert _one_error_line(result.output) == (
        "error: kv.compression_ratio: give kv.budget or kv.compression_ratio, not both "
        "(kv.budget is 100, kv.compression_ratio 4) (from --set kv.compression_ratio)"
    )
    sinks = CliRunner().invoke(cli, ["kv-demo", "--set", "kv.sinks=-1"])
    assert _one_error_line(sinks.output) == (
        "error: kv.sinks: must be at least 0, got -1 (from --set kv.sinks)"
    )


def test_kv_demo_a_prompt_with_no_room_for_a_needle_blames_the_prompt() -> None:
    args = ["kv-demo", "--prompt-tokens", "64", "--set", "kv.observation_window=60"]
    result = CliRunner().invoke(cli, [*args, "--needles", "1"])
    assert result.exit_code == 2
    line = _one_error_line(result.output)
    assert line == (
        "error: --prompt-tokens: a 64-token prompt leaves no token for a needle between its "
        "4 sinks and its 60-token observation window: it must be longer than 64 (or lower "
        "kv.sinks or kv.observation_window)"
    )


def test_kv_demo_a_compression_ratio_leaves_top_k_room() -> None:
    """A ratio makes the budget the prompt over it: the prompt is long enough for that
    budget to be twice sinks + ring, so SnapStream selects (its rows differ from
    StreamingLLM's); no warning."""
    args = [
        "kv-demo",
        "deepseek-r1-128k-snapstream",
        "--set",
        "kv.budget=null",
        "--set",
        "kv.compression_ratio=4",
        "--set",
        "kv.recent=512",
        "--decode-steps",
        "2",
        "--json",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    rows = {row["policy"]: row for row in json.loads(result.stdout)}
    assert rows["snapstream"]["budget"] == 2 * (4 + 512)  # prompt 4,128 / 4 (not 2,064 / 4)
    assert rows["snapstream"]["relative_error"] != rows["streamingllm"]["relative_error"]
    assert "warning" not in result.stderr


def test_kv_demo_warns_when_top_k_is_0_or_the_prompt_is_capped() -> None:
    import pytest

    from rdu_sim.kv.quality import DemoCompressionWarning, demo_prompt

    result = CliRunner().invoke(cli, ["kv-demo", "--budget", "20", "--prompt-tokens", "64"])
    assert result.exit_code == 0, result.output
    assert (
        "warning: kv-demo: at budget 20 SnapStream's top-K is 0 (budget = sinks + ring = 4 + "
        "16): it keeps what StreamingLLM keeps, so their rows are equal"
    ) in result.stderr
    lines = [line for line in result.stdout.splitlines() if line.split()[:2][1:] == ["20"]]
    assert lines[0].split()[2:] == lines[1].split()[2:]  # snapstream's row is streamingllm's
    with pytest.warns(DemoCompressionWarning, match=r"compresses it 2x, not the 4x"):
        assert demo_prompt(KVConfig(budget=32768), 65536) == 65536
    ratio = KVConfig(compression_ratio=4, recent=2048)
    assert demo_prompt(ratio, 65536) == 2 * (4 + 2048) * 4


def test_kv_demo_says_a_budget_holds_the_sequence_however_it_was_given() -> None:
    note = "the budget 72 holds the whole sequence: nothing is evicted"
    by_option = CliRunner().invoke(cli, ["kv-demo", "--prompt-tokens", "64", "--budget", "72"])
    assert note in by_option.stdout
    by_kv = CliRunner().invoke(cli, ["kv-demo", "--prompt-tokens", "64", "--set", "kv.budget=72"])
    assert note in by_kv.stdout
    default = CliRunner().invoke(cli, ["kv-demo", "--prompt-tokens", "64"])
    assert "holds the whole sequence" not in default.stdout  # the range's own last point
