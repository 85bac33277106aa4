"""``rdu-sim check PLAN`` resolves every configuration as the plan's first run of it would
(its layout, its pools' memory plans: ``plan.evaluate.early_verdict``) and counts those
that cannot run, with the first one's reason, as ``plan`` marks them infeasible (rows of its
table, not errors: the check stays OK). The newcomer trial's check said OK to a search list
whose ``{tp: 1, dp_attention: 12, ep: 12}`` (12 does not divide 256 experts) and
``{tp: 16, pp: 200}`` (more stages than 61 layers) the plan then marked infeasible."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.plan import check_plan, load_plan, plan_summary, run_plan
from rdu_sim.plan.evaluate import early_verdict

ROOT = Path(__file__).resolve().parents[1]
CHAT = ROOT / "workloads" / "clusters" / "llama3.1-8b-chat.yaml"


def _spec(tmp_path: Path, search: dict[str, object]) -> Path:
    spec = tmp_path / "plan.yaml"
    spec.write_text(yaml.safe_dump({"name": "p", "cluster": str(CHAT), "search": search}))
    return spec


def test_check_counts_the_configurations_plan_marks_infeasible(tmp_path: Path) -> None:
    """Llama 8B (32 layers): 64 pipeline stages is a layout the model cannot take, 2,048
    slots a KV cache no socket holds; each in the words the plan's table gives it."""
    spec = _spec(
        tmp_path,
        {
            "parallelism": [{"tp": 1}, {"tp": 1, "pp": 64}],
            "batch_slots": [8, 2048],
            "max_replicas": 2,
        },
    )
    loaded = load_plan(spec)
    verdicts = {c.label(): early_verdict(loaded, c) for c in loaded.configurations()}
    assert verdicts["tp=1 slots=8 kv=full"] is None
    assert [label for label, why in verdicts.items() if why is not None] == [
        "tp=1 slots=2048 kv=full",
        "tp=1 pp=64 slots=8 kv=full",
        "tp=1 pp=64 slots=2048 kv=full",
    ]
    assert "the KV cache of 2,048 slots" in str(verdicts["tp=1 slots=2048 kv=full"])
    assert "parallelism.pp" in str(verdicts["tp=1 pp=64 slots=8 kv=full"])
    line = check_plan(spec)
    assert "4 configuration(s)" in line
    assert (
        "; 3 of them cannot run, which plan marks infeasible when it reaches them (first: " in line
    )
    checked = CliRunner().invoke(cli, ["check", str(spec)])
    assert checked.exit_code == 0 and checked.output.startswith("OK"), checked.output
    assert "3 of them cannot run" in checked.output


def test_check_of_a_plan_whose_configurations_all_run_says_so(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {"tp": [1, 2], "batch_slots": [8], "max_replicas": 2})
    assert check_plan(spec).endswith("; all can run")


def test_check_gives_each_configuration_the_reason_plan_records(tmp_path: Path) -> None:
    """Two configurations that cannot run, one refused at its layout (64 stages of 32
    layers), one by its pool's memory plan (2,048 slots): ``plan`` (its real evaluator, which
    simulates neither) records for each the reason ``check`` gives it, word for word."""
    spec = _spec(
        tmp_path,
        {"parallelism": [{"tp": 1, "pp": 64}, {"tp": 1}], "batch_slots": [2048], "max_replicas": 1},
    )
    loaded = load_plan(spec)
    early = {c.label(): early_verdict(loaded, c) for c in loaded.configurations()}
    rows = plan_summary(run_plan(spec, db=tmp_path / "p.sqlite"))["configurations"]
    recorded = {row["label"]: row["reason"] for row in rows}
    assert [row["status"] for row in rows] == ["infeasible", "infeasible"]
    assert (
        set(recorded) == set(early) == {"tp=1 pp=64 slots=2048 kv=full", "tp=1 slots=2048 kv=full"}
    )
    assert all(recorded[label] == early[label] for label in recorded), (recorded, early)
