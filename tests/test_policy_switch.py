"""Switching a workload's KV policy with ``--set kv.policy=...``: a policy that derives a
field from the budget (StreamingLLM's ring) takes the budget over the value the file set
for the other policy; a real conflict is refused with the exact ``--set`` that works."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.config.errors import ConfigError
from rdu_sim.kv.policies import StreamingLLMPolicy
from rdu_sim.scenario import load_scenario, with_overrides

ROOT = Path(__file__).resolve().parents[1]
SNAP = ROOT / "workloads" / "deepseek-r1-128k-snapstream.yaml"  # budget 32768, recent 2048


def test_switching_snapstream_to_streamingllm_keeps_the_budget() -> None:
    snap = load_scenario(SNAP)
    switched = load_scenario(SNAP, ["kv.policy=streamingllm"])
    policy = switched.kv_policy
    assert isinstance(policy, StreamingLLMPolicy)
    assert (policy.sinks, policy.recent) == (4, 32768 - 4)
    assert policy.slot_tokens() == snap.kv_policy.slot_tokens() == 32768  # the same memory
    assert (
        switched.workload.kv.budget == 32768
        and "recent" not in switched.workload.kv.model_fields_set
    )
    # the same on a scenario already loaded (sweeps and studies override in place)
    again = with_overrides(snap, {"kv.policy": "streamingllm"}).kv_policy
    assert again.slot_tokens() == 32768 and again.recent == 32764  # type: ignore[attr-defined]


def test_a_file_that_means_streamingllm_keeps_its_own_rule(tmp_path: Path) -> None:
    """No switch: the file itself names streamingllm with a ring that misses its budget."""
    text = SNAP.read_text().replace("policy: snapstream", "policy: streamingllm")
    path = tmp_path / "w.yaml"
    path.write_text(text.replace("../hw_configs/", f"{ROOT}/hw_configs/"))
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    [issue] = info.value.issues
    assert issue.field == "kv.recent"
    assert "--set kv.recent=32764 keeps the budget" in issue.message
    assert "--set kv.budget=2052 keeps the ring" in issue.message


def test_an_explicit_ring_conflict_offers_the_sets_that_work() -> None:
    args = ["kv.policy=streamingllm", "kv.recent=1024"]
    result = CliRunner().invoke(cli, ["inspect", "graph", str(SNAP), *_sets(args)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert (
        "kv.sinks (4) + kv.recent (1024) != kv.budget 32768; give one of them: "
        "--set kv.recent=32764 keeps the budget, --set kv.budget=1028 keeps the ring"
    ) in " ".join(result.output.split())
    # each offered fix loads, with the slot it says
    keeps_budget = load_scenario(SNAP, ["kv.policy=streamingllm", "kv.recent=32764"])
    assert keeps_budget.kv_policy.slot_tokens() == 32768
    keeps_ring = load_scenario(SNAP, [*args, "kv.budget=1028"])
    assert keeps_ring.kv_policy.slot_tokens() == 1028


def _sets(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]
