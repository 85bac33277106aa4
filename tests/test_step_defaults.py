"""`rdu-sim step` default shapes: a default prefill times the typical prompt as run and
compare do; a compressing workload's longer prompt (``--tokens``) shows the SnapKV kernels."""

from __future__ import annotations

import json

from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.scenario import load_scenario
from rdu_sim.serving.step_shape import long_prompts
from rdu_sim.shapes import StepShape

SNAP = "workloads/deepseek-r1-128k-snapstream.yaml"
FULL = "workloads/deepseek-r1-128k-full.yaml"


def test_snapstream_prefill_step_reports_the_selection_kernels_on_their_own() -> None:
    long = long_prompts(load_scenario(SNAP))
    assert long is not None and long.median == 39717
    args = ["step", SNAP, "--phase", "prefill", "--tokens", str(long.median), "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    budget = load_scenario(SNAP).workload.kv.budget
    assert budget is not None and data["tokens"] > budget  # a prompt the policy compresses
    kernels = {k["name"]: k for k in data["kernels"]}
    for name in ("snapkv_score", "snapkv_topk", "snapkv_compact"):
        assert 0 < kernels[name]["time_s"] < data["step_s"]


def test_default_prefill_is_the_typical_prompt_at_its_bucket_whatever_the_policy() -> None:
    """One rule for the typical prompt's prefill: the step times what run's prefill_s and
    compare's prefill row time (the median prompt padded to its bucket), for SnapStream too
    (its typical prompt is under the budget), and says which prompt and why."""
    snap = api.default_step_shape(load_scenario(SNAP), "prefill")
    full = api.default_step_shape(load_scenario(FULL), "prefill")
    assert snap == full == StepShape("prefill", 1, 4096, 0, select=False)
    assert api.default_step_shape(load_scenario(SNAP), "prefill", tokens=1000).tokens == 1000
    llama = load_scenario("workloads/llama3.1-8b-1socket.yaml")
    assert api.default_step_shape(llama, "prefill") == StepShape("prefill", 1, 3072, 0, False)
    step_s = api.step(llama, phase="prefill").step_s
    assert round(step_s, 12) == api.run(llama, {"serving.requests": 4}).prefill_s  # 92.5 ms
    printed = CliRunner().invoke(cli, ["step", "llama3.1-8b-1socket", "--phase", "prefill"])
    assert printed.exit_code == 0, printed.output
    assert (
        "prompt: the workload's typical prompt (its median), 2,304 tokens, run at its bucket "
        "of 3,072; the prompt run's prefill_s and compare's prefill row time"
    ) in printed.stdout
    assert "3,072 new tokens" in printed.stdout
    printed = CliRunner().invoke(cli, ["step", SNAP, "--phase", "prefill"])
    assert (
        "the snapstream policy compresses only prompts past the 32,768-token budget: 0.5% of "
        "requests, median 39,717 tokens (--tokens 40960 times one at its bucket, with the "
        "SnapKV selection, as compare's long-prompt row)"
    ) in printed.stdout


def test_the_long_prompt_hint_reproduces_compares_long_prompt_row() -> None:
    """compare times the SnapStream workload's long prompt (median 39,717 tokens) at its
    40,960-token bucket; an explicit --tokens runs unpadded (39,717 takes 3.91 s, not 4.03 s),
    so the hint names the bucket, and the hinted step takes the row's time exactly."""
    data = json.loads(
        CliRunner().invoke(cli, ["compare", SNAP, "--hardware", "sn40l-16", "--json"]).stdout
    )
    (column,) = data["columns"]
    assert (column["long_prefill_tokens"], column["long_prefill_bucket"]) == (39717, 40960)
    args = ["step", SNAP, "--phase", "prefill", "--tokens", "40960", "--json"]
    hinted = json.loads(CliRunner().invoke(cli, args).stdout)["step_s"]
    assert round(hinted, 12) == column["long_prefill_s"] == 4.028201985507
    args[5] = "39717"
    assert json.loads(CliRunner().invoke(cli, args).stdout)["step_s"] < hinted


def test_a_chunked_default_prefill_says_it_times_the_first_chunk_only() -> None:
    """Llama 8B at chunks of 1,024 tokens: the default prefill step is the typical prompt's
    first chunk (31 ms), run's prefill_s sums its three (97 ms): the words say so."""
    chunked = {"serving.prefill_chunk_tokens": 1024}
    llama = load_scenario("workloads/llama3.1-8b-1socket.yaml", chunked)
    assert api.default_step_shape(llama, "prefill") == StepShape("prefill", 1, 1024, 0, False)
    step_s = api.step(llama, phase="prefill").step_s
    run = api.run(llama, {"serving.requests": 4})
    assert run.prefill_s > 3 * step_s * 0.9 and round(step_s, 12) != run.prefill_s
    args = ["step", "llama3.1-8b-1socket", "--phase", "prefill"]
    printed = CliRunner().invoke(cli, [*args, "--set", "serving.prefill_chunk_tokens=1024"])
    said = " ".join(printed.stdout.split())
    assert (
        "prompt: the workload's typical prompt (its median), 2,304 tokens, the first of its 3 "
        "chunks of 1,024 tokens; this step times that chunk only; run's prefill_s and "
        "compare's prefill row sum all 3"
    ) in said
    assert "the prompt run's prefill_s and compare's prefill row time" not in said


def test_the_kv_docs_commands_show_the_snapkv_kernels() -> None:
    """docs/kv.md names the commands that show the selection's kernels: a prompt past the
    budget (the default prefill, the typical 4,096-token prompt, runs none of them)."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "kv.md").read_text()
    section = doc.split("## The selection's cost at prefill (kernels)")[1]
    said = " ".join(section.split("The prefill itself does two")[0].split())
    commands = re.findall(r"`rdu-sim ((?:step|inspect graph) \S+ --phase prefill[^`]*)`", said)
    assert len(commands) == 2 and all("--tokens 40960" in c for c in commands), commands
    for command in commands:
        printed = CliRunner().invoke(cli, command.split())
        assert printed.exit_code == 0, printed.output
        assert "snapkv_score" in printed.stdout, command
    default = CliRunner().invoke(cli, ["inspect", "graph", SNAP, "--phase", "prefill"])
    assert "snapkv" not in default.stdout
