"""A kv field the chosen policy does not read: the one list of what each policy reads
(``KVPolicy.reads``), and a warning for an override of any other (docs/kv.md, "Fields a
policy reads")."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rdu_sim import api, studies
from rdu_sim.cli.main import cli
from rdu_sim.config.workload import KVConfig
from rdu_sim.kv.policies import UnreadKVFieldWarning, make_policy, policy_names, policy_reads
from rdu_sim.validate.suite import FULL_WORKLOAD, SNAPSTREAM_WORKLOAD, read_by

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"

OTHER_VALUES: dict[str, Any] = {
    "budget": 3000,
    "compression_ratio": 3.0,
    "sinks": 8,
    "recent": 512,
    "observation_window": 16,
    "kernel_size": 5,
    "pooling": "avg",
    "context_buckets": [2048, 8192],
    "min_bucket": 2048,
}
"""A valid value other than the default for every kv field but the policy."""


def test_every_kv_field_is_listed_above() -> None:
    assert set(OTHER_VALUES) == set(KVConfig.model_fields) - {"policy"}


@pytest.mark.parametrize("policy", policy_names())
def test_a_field_a_policy_does_not_read_changes_nothing(policy: str) -> None:
    """The list is complete: any field not in it leaves the resolved policy as it was (and
    each field in it is one a KVConfig has)."""
    reads = policy_reads(policy)
    assert reads is not None and set(reads) <= set(OTHER_VALUES)
    plain = make_policy(KVConfig(policy=policy), 8192).describe()
    for name, value in OTHER_VALUES.items():
        if name not in reads:
            kv = KVConfig(policy=policy, **{name: value})
            assert make_policy(kv, 8192).describe() == plain, name


def test_the_trial_budget_under_full_attention_warns_naming_what_full_reads() -> None:
    with pytest.warns(UnreadKVFieldWarning) as caught:
        api.load(LLAMA, ["kv.budget=1000"])
    (message,) = [str(w.message) for w in caught]
    assert message.endswith(
        "kv.budget: 1000 is not read by kv.policy full (it reads kv.context_buckets, "
        "kv.min_bucket), so it changes nothing (from overrides: kv.budget)"
    )


def test_fields_the_policy_reads_and_nulls_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreadKVFieldWarning)
        api.load(LLAMA, ["kv.context_buckets=pow2", "kv.budget=null"])
        api.load(LLAMA, ["kv.policy=snapstream", "kv.budget=4096", "kv.recent=1024"])
        # a policy switched from the file's: the file's own kv section is not checked
        api.load(ROOT / "workloads" / "deepseek-r1-128k-snapstream.yaml", ["kv.policy=full"])


def test_the_cli_prints_one_warning_line() -> None:
    args = ["run", str(LLAMA), "--set", "kv.budget=1000", "--set", "serving.requests=1"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "kv.budget" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: ")


def test_a_study_gives_snapkv_no_ring() -> None:
    """studies.point_settings set kv.recent for every compressing policy; SnapKV keeps none,
    and StreamingLLM's is what its budget leaves (the ring set beside a budget was refused)."""
    scenario = api.load(LLAMA)
    snapkv = studies.point_settings(scenario, "snapkv", 8192, snapstream_budget=2048)
    assert "kv.recent" not in snapkv and snapkv["kv.budget"] == 2048
    snap = studies.point_settings(scenario, "snapstream", 8192, snapstream_budget=2048)
    assert snap["kv.recent"] == 128
    assert "kv.recent" not in studies.point_settings(
        scenario, "streamingllm", 8192, snapstream_budget=2048
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreadKVFieldWarning)
        studies.plan_over_contexts(
            LLAMA, [8192], policies=["full", "snapkv", "streamingllm"], snapstream_budget=2048
        )


def test_the_validation_suite_sets_each_deployment_only_what_its_policy_reads() -> None:
    """The sensitivity variants apply one list to both deployments: SnapStream's budget is
    left out of full attention's runs, full attention's buckets out of SnapStream's."""
    given = ["kv.budget=16384", "kv.context_buckets=pow2", "hw.socket.kernel.sync=5 us"]
    assert read_by(FULL_WORKLOAD, given) == given[1:]
    assert read_by(SNAPSTREAM_WORKLOAD, given) == [given[0], given[2]]
