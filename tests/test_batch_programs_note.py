"""A cluster's pool or a plan's row of batch slots the serving stack has no program of
(SambaStack's ``batch_programs: powers_of_two``) says it runs them as if one were compiled,
as a lone run does: a plan answered 24 slots, which SambaStack cannot deploy, saying nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from test_api_run import FakeBackend
from test_plan import fake_evaluate, write_plan

from rdu_sim.api_cluster import run_cluster
from rdu_sim.cli import plan_cmd
from rdu_sim.plan import check_plan, plan_summary, run_plan
from rdu_sim.report.cluster_console import render_cluster

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
NOTE = "the stack has no 24-slot program, so it runs 24 as if one were compiled for it"


def cluster_file(folder: Path, pools: dict[str, Any]) -> Path:
    data = {
        "name": "t",
        "pools": pools,
        "traffic": {
            "rate": 4.0,
            "requests": 20,
            "prompt_tokens": 300,
            "output_tokens": 20,
            "seed": 1,
        },
        "slo": {"ttft": "1 s", "tpot": "50 ms"},
    }
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def text(renderable: Any) -> str:
    console = Console(width=400, record=True, highlight=False)
    console.print(renderable)
    return console.export_text()


def test_a_cluster_pool_of_slots_the_stack_has_no_program_of_says_so(tmp_path: Path) -> None:
    """The pool of 24 slots carries the note (JSON and text); the pool of 16 does not."""
    pools = {
        name: {"workload": str(LLAMA), "replicas": 1, "set": {"serving.batch_slots": slots}}
        for name, slots in (("odd", 24), ("even", 16))
    }
    result = run_cluster(cluster_file(tmp_path, pools), backend=FakeBackend())
    summary = result.summary()
    assert summary.pools["odd"].batch_note == NOTE
    assert summary.pools["even"].batch_note is None
    data = json.loads(result.to_json())
    assert data["pools"]["odd"]["batch_note"] == NOTE
    assert "batch_note" not in data["pools"]["even"]
    shown = text(render_cluster(summary))
    assert f"slots of pool odd: {NOTE}" in shown and "slots of pool even" not in shown


def test_a_plan_row_of_slots_the_stack_has_no_program_of_says_so(
    tmp_path: Path, capsys: Any
) -> None:
    """Its row (JSON), the text under the table and under the answer, and ``check``."""
    spec = write_plan(tmp_path, {"tp": [1], "batch_slots": [16, 24]}, requests=40)
    assert f"slots=24: {NOTE}" in check_plan(spec)
    result = run_plan(spec, db=tmp_path / "p.sqlite", evaluate=fake_evaluate)
    rows = {row["batch_slots"]: row for row in plan_summary(result)["configurations"]}
    assert rows[24]["batch_note"] == NOTE and rows[16]["batch_note"] is None
    plan_cmd._print(result, as_json=False)
    assert f"slots 24: {NOTE}" in capsys.readouterr().out
    best = {**rows[24], "margin": None, "run_command": None}
    assert f"  batch_slots=24: {NOTE}" in plan_cmd._answer_lines(best, "socket")


def test_a_tie_goes_to_slots_the_stack_has_a_program_of(tmp_path: Path) -> None:
    """16 and 24 slots both meet the SLO on one socket, 24 with the lower p99 TTFT: the
    answer is 16, which SambaStack can deploy, and 24's row follows it with its note."""
    slo = {"ttft": "5 s", "tpot": "100 ms", "attainment": 0.5}
    spec = write_plan(tmp_path, {"tp": [1], "batch_slots": [16, 24]}, requests=40, slo=slo)
    result = run_plan(spec, db=tmp_path / "p.sqlite", evaluate=fake_evaluate)
    first, second = plan_summary(result)["configurations"]
    assert (first["batch_slots"], second["batch_slots"]) == (16, 24)
    assert first["sockets"] == second["sockets"] == 1
    assert first["ttft_p99_s"] > second["ttft_p99_s"]  # what decided it before programs
    assert first["batch_note"] is None and second["batch_note"] == NOTE
    cheapest = result.cheapest()
    assert cheapest is not None and cheapest.configuration.batch_slots == 16
