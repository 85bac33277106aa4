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
        "requests, median 39,717 tokens (--tokens 39717 times one"
    ) in printed.stdout
