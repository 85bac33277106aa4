"""`rdu-sim step` default shapes: a compressing workload's prefill shows the SnapKV kernels."""

from __future__ import annotations

import json

from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.scenario import load_scenario

SNAP = "workloads/deepseek-r1-128k-snapstream.yaml"
FULL = "workloads/deepseek-r1-128k-full.yaml"


def test_snapstream_prefill_step_reports_the_selection_kernels_on_their_own() -> None:
    result = CliRunner().invoke(cli, ["step", SNAP, "--phase", "prefill", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    budget = load_scenario(SNAP).workload.kv.budget
    assert budget is not None and data["tokens"] > budget  # a prompt the policy compresses
    kernels = {k["name"]: k for k in data["kernels"]}
    for name in ("snapkv_score", "snapkv_topk", "snapkv_compact"):
        assert 0 < kernels[name]["time_s"] < data["step_s"]


def test_default_prefill_prompt_is_the_typical_compressed_one_only_when_compressing() -> None:
    snap = api.default_step_shape(load_scenario(SNAP), "prefill")
    full = api.default_step_shape(load_scenario(FULL), "prefill")
    assert snap.tokens > 32768  # median of the lognormal prompts above the budget
    assert full.tokens == 4096  # the median prompt: full attention never compresses
    assert api.default_step_shape(load_scenario(SNAP), "prefill", tokens=1000).tokens == 1000
