"""`rdu-sim plan`: the pruned search against brute force, resume, and the command.

The brute-force reference evaluates every configuration at every replica count up to the
limit and picks the fewest sockets meeting the SLO by the same tie rule; the search must
find the same configuration, sockets and, for every configuration it did not prune, the same
fewest replica count, with fewer evaluations.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from rich.console import Console
from test_api_run import FakeBackend

from rdu_sim import human
from rdu_sim.api_cluster import run_cluster
from rdu_sim.cli.main import cli
from rdu_sim.cli.plan_cmd import MISSING_NOTE, _table
from rdu_sim.config.errors import ConfigError
from rdu_sim.plan import load_plan, plan_summary, run_plan
from rdu_sim.plan.evaluate import evaluate, measure
from rdu_sim.plan.spec import PlanPoint

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
CALLS: list[str] = []


def fake_evaluate(point: PlanPoint) -> Mapping[str, Any]:
    """The plan's evaluation (floors too: the stop rule acts) on the analytic FakeBackend
    (fast, deterministic)."""
    CALLS.append(point.key)
    from rdu_sim.compiler import CapacityError

    try:
        return measure(run_cluster(point.cluster, backend=FakeBackend()))
    except (ConfigError, CapacityError) as exc:
        return {"feasible": False, "reason": str(exc)}


def write_plan(
    folder: Path,
    search: dict[str, Any],
    requests: int = 80,
    rate: float = 12.0,
    slo: dict[str, Any] | None = None,
) -> Path:
    cluster = {
        "name": "tiny",
        "pools": {"serve": {"workload": str(LLAMA), "replicas": 1}},
        "traffic": {
            "rate": rate,
            "requests": requests,
            "prompt_tokens": {"dist": "uniform", "low": 200, "high": 2500},
            "output_tokens": {"dist": "uniform", "low": 20, "high": 200},
            "seed": 1,
        },
        "slo": slo or {"ttft": "150 ms", "tpot": "15 ms", "attainment": 0.9},
    }
    (folder / "cluster.yaml").write_text(yaml.safe_dump(cluster, sort_keys=False))
    spec = folder / "plan.yaml"
    spec.write_text(yaml.safe_dump({"cluster": "cluster.yaml", "search": search}))
    return spec


def brute_force(spec: Path) -> dict[tuple[Any, ...], dict[int, Mapping[str, Any]]]:
    """Every configuration at every unit count up to the limit."""
    loaded = load_plan(spec)
    table: dict[tuple[Any, ...], dict[int, Mapping[str, Any]]] = {}
    for configuration in loaded.configurations():
        units = loaded.spec.search.max_replicas // configuration.unit
        row = table.setdefault(tuple(configuration.describe().values()), {})
        for n in range(1, units + 1):
            try:
                row[n] = fake_evaluate(loaded.build(configuration, n))
            except ConfigError as exc:
                row[n] = {"feasible": False, "reason": str(exc)}
    return table


SEARCH = {
    "tp": [1, 2, 3],  # 3 does not divide Llama's 32 heads: infeasible
    "batch_slots": [4, 8, 64],
    "disaggregation": ["none", "1:1"],
    "max_replicas": 8,
}


def test_search_matches_brute_force(tmp_path: Path) -> None:
    spec = write_plan(tmp_path, SEARCH)
    reference = brute_force(spec)
    # Monotone in replicas on this case (the search's assumption): once met, met after.
    for runs in reference.values():
        met = [n for n, m in sorted(runs.items()) if m.get("slo_met")]
        assert met == list(range(met[0], max(runs) + 1)) if met else True
    loaded = load_plan(spec)
    minimum: dict[tuple[Any, ...], tuple[int, int, Mapping[str, Any]]] = {}
    for configuration in loaded.configurations():
        key = tuple(configuration.describe().values())
        met = [n for n, m in sorted(reference[key].items()) if m.get("slo_met")]
        if met:
            sockets = met[0] * configuration.unit * configuration.tp
            minimum[key] = (sockets, met[0], reference[key][met[0]])
    assert minimum, "the tiny case must have an answer"
    best = min(
        minimum.items(),
        key=lambda kv: (kv[1][0], -kv[1][2]["goodput_fraction"], kv[1][2]["ttft_p99_s"]),
    )
    CALLS.clear()
    result = run_plan(spec, db=tmp_path / "p.sqlite", evaluate=fake_evaluate)
    summary = plan_summary(result)
    cheapest = summary["cheapest"]
    assert cheapest is not None
    assert (
        tuple(cheapest[k] for k in ("tp", "batch_slots", "kv_policy", "disaggregation")) == best[0]
    )
    assert cheapest["sockets"] == best[1][0] and cheapest["units"] == best[1][1]
    searches = {s.configuration.label(): s for s in result.searches}
    never_met = 0
    for row in summary["configurations"]:
        key = (row["tp"], row["batch_slots"], row["kv_policy"], row["disaggregation"])
        if row["status"] == "met":
            assert key in minimum and row["units"] == minimum[key][1]
            assert row["sockets"] >= cheapest["sockets"]
        elif row["status"] == "pruned":  # it could only have met the SLO on more sockets
            assert key not in minimum or minimum[key][0] >= cheapest["sockets"]
            # its numbers: the fewest it met with, else the most it tried (the run its
            # binding half speaks of), never left blank beside that binding
            search = searches[row["label"]]
            units = search.passing if search.passing is not None else max(search.results)
            assert row["units"] == units and row["binding"]
            assert row["goodput_fraction"] == reference[key][units]["goodput_fraction"]
            never_met += search.passing is None
        elif row["status"] == "not met":
            assert key not in minimum
        else:
            assert row["status"] == "infeasible" and row["tp"] == 3
            assert "tp=3 does not divide the" in row["reason"]  # the model named since issue 21
            assert "model's 32 attention heads; use a divisor of 32" in row["reason"]
            # the field the user wrote, in the plan: not the pool's set the plan put it in
            assert row["reason"].endswith("(from the plan's search.tp)")
    assert never_met  # (the case has a pruned row that never met)
    # the table shows each pruned row's run, as its footnote says
    console = Console(width=300, record=True)
    console.print(_table(summary))
    text = console.export_text()
    pruned = [line.split() for line in text.splitlines() if " pruned " in line]
    rows = [row for row in summary["configurations"] if row["status"] == "pruned"]
    assert [cells[cells.index("pruned") + 1 : cells.index("pruned") + 4] for cells in pruned] == [
        [str(row["replicas"]), str(row["sockets"]), human.percent(row["goodput_fraction"])]
        for row in rows
    ]
    assert "a pruned one the fewest it met with, else the most it tried" in MISSING_NOTE
    brute = sum(len(runs) for runs in reference.values())
    assert len(set(CALLS)) < brute / 2  # the pruning pays
    # Every miss here is conclusive (plan.margin): as many runs as doubling and bisection
    # made before inconclusive misses left counts open.
    assert result.evaluations == len(CALLS) == 15


def test_a_rerun_resumes_from_the_database(tmp_path: Path) -> None:
    spec = write_plan(tmp_path, {"batch_slots": [4, 8], "max_replicas": 6})
    db = tmp_path / "p.sqlite"
    CALLS.clear()
    first = plan_summary(run_plan(spec, db=db, evaluate=fake_evaluate))
    ran = len(CALLS)
    assert ran > 0
    CALLS.clear()
    again = plan_summary(run_plan(spec, db=db, evaluate=fake_evaluate))
    assert CALLS == [] and again == first
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM results").fetchone()[0] == ran
    # --rerun: every evaluation again (after a change to the simulator), rows replaced
    CALLS.clear()
    fresh = plan_summary(run_plan(spec, db=db, evaluate=fake_evaluate, rerun=True))
    assert len(CALLS) == ran and fresh == first
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM results").fetchone()[0] == ran

    def evaluate_here(spec: Any, **options: Any) -> Any:  # the command's own options
        return run_plan(spec, **{**options, "evaluate": fake_evaluate})

    CALLS.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("rdu_sim.plan.run_plan", evaluate_here)
        text = CliRunner().invoke(cli, ["plan", str(spec), "--db", str(db), "--rerun", "--json"])
    assert text.exit_code == 0, text.output
    assert len(CALLS) == ran and json.loads(text.stdout)["cheapest"] == first["cheapest"]


def test_bad_plan_specs(tmp_path: Path) -> None:
    spec = write_plan(tmp_path, {"disaggregation": ["2-1"]})
    with pytest.raises(ConfigError, match="'P:D' such as '1:3'"):
        load_plan(spec)
    spec = write_plan(tmp_path, {"tp": [1, 1]})
    with pytest.raises(ConfigError, match=r"search\.tp: repeats a value"):
        load_plan(spec)
    spec.write_text("cluster: cluster.yaml\nsearch: {tp: [1]}\nserch: 1\n")
    with pytest.raises(ConfigError, match="unknown field 'serch'"):
        load_plan(spec)


def test_plan_command_on_the_real_engine(tmp_path: Path) -> None:
    """`rdu-sim plan SPEC` prints the cheapest configuration meeting the SLO and the frontier."""
    spec = write_plan(
        tmp_path,
        {"batch_slots": [4, 16], "max_replicas": 4},
        requests=40,
        rate=4.0,
        slo={"ttft": "1 s", "tpot": "40 ms", "attainment": 0.9},
    )
    runner = CliRunner()
    result = runner.invoke(cli, ["plan", str(spec), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # the search's progress goes to stderr
    cheapest = data["cheapest"]
    assert cheapest is not None and cheapest["status"] == "met"
    assert len(data["configurations"]) == 2
    # The answer is a real run's: rerun that cluster directly and compare.
    point = load_plan(spec).build(
        load_plan(spec).configurations()[0 if cheapest["batch_slots"] == 4 else 1],
        cheapest["units"],
    )
    assert evaluate(point)["goodput_fraction"] == cheapest["goodput_fraction"]
    text = runner.invoke(cli, ["plan", str(spec)])
    assert text.exit_code == 0 and "cheapest:" in text.output and "frontier" in text.output
    # the table shows the percentile the SLO counts; the text says every row's sentence the
    # JSON does (why it binds and what would move it, or that nothing binds)
    assert "TTFT p90" in text.output and "TPOT p90" in text.output
    flat = " ".join(text.output.split())
    for row in data["configurations"]:
        said = [verdict["sentence"] for verdict in row["binding"]] or [row["room"]]
        assert all(sentence and " ".join(sentence.split()) in flat for sentence in said)
        if row["status"] == "met":  # a met row binds, or has room on both halves
            assert (row["room"] is None) == bool(row["binding"])


def test_plan_searches_parallelism_and_counts_each_replicas_devices(tmp_path: Path) -> None:
    """A parallelism axis: each choice's replica spans tp x dp_attention x pp sockets; a
    replica of attention ranks serves on a server per rank."""
    search = {
        "parallelism": [{"tp": 2}, {"tp": 1, "dp_attention": 2}, {"tp": 1, "pp": 2}],
        "batch_slots": [8],
        "max_replicas": 6,
    }
    spec = write_plan(tmp_path, search, slo={"ttft": "1 s", "tpot": "40 ms", "attainment": 0.9})
    loaded = load_plan(spec)
    configurations = loaded.configurations()
    assert [c.devices for c in configurations] == [2, 2, 2]
    split = "the plan's search.parallelism"
    assert loaded.origins(configurations[1]) == {  # kv_policy is the template's: no origin
        "parallelism.tp": split,
        "parallelism.dp_attention": split,
        "hw.system.sockets": split,
        "serving.batch_slots": "the plan's search.batch_slots",
    }
    # tp-only choices of search.parallelism are still search.parallelism's
    (tmp_path / "tp").mkdir()
    only_tp = load_plan(write_plan(tmp_path / "tp", {"parallelism": [{"tp": 2}, {"tp": 3}]}))
    (tp3,) = [c for c in only_tp.configurations() if c.tp == 3]
    with pytest.raises(ConfigError, match=r"\(from the plan's search\.parallelism\)"):
        only_tp.build(tp3, 1)
    ranks = loaded.build(configurations[1], 3).cluster
    assert ranks.sockets == 6 and ranks.pools[0].ranks == 2
    summary = plan_summary(run_plan(spec, db=tmp_path / "p.sqlite", evaluate=fake_evaluate))
    rows = {row.get("parallelism", f"tp={row['tp']}"): row for row in summary["configurations"]}
    assert set(rows) == {"tp=2", "tp=1 dp_attention=2", "tp=1 pp=2"}
    for row in rows.values():
        if row["sockets"] is not None:
            assert row["sockets"] == 2 * row["replicas"]
    with pytest.raises(ConfigError, match=r"give search\.tp or search\.parallelism"):
        load_plan(write_plan(tmp_path, {"tp": [2], "parallelism": [{"tp": 2}]}))
    with pytest.raises(ConfigError, match=r"search\.parallelism: repeats a value"):
        load_plan(write_plan(tmp_path, {"parallelism": [{"tp": 2}, {"tp": 2}]}))


def test_a_gpu_plan_counts_gpus_and_says_why_a_search_stopped(tmp_path: Path) -> None:
    """An H100 plan said 'sockets' in its cheapest line, table and reasons; a search stopped
    at search.max_replicas said only 'not met with 1 units'."""
    spec = write_plan(
        tmp_path,
        {"tp": [1], "batch_slots": [4], "max_replicas": 1},
        requests=24,
        rate=40.0,
        slo={"ttft": "1 s", "tpot": "40 ms", "attainment": 0.9},
    )
    cluster = yaml.safe_load((tmp_path / "cluster.yaml").read_text())
    cluster["pools"]["serve"]["set"] = {"hardware": "dgx-h100"}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    runner = CliRunner()
    data = json.loads(runner.invoke(cli, ["plan", str(spec), "--json", "--no-progress"]).stdout)
    assert data["device"] == "GPU"
    (row,) = data["configurations"]
    assert row["status"] == "not met" and row["replicas"] == 1
    assert row["reason"] == "search.max_replicas reached (1 replica)"
    text = runner.invoke(cli, ["plan", str(spec), "--no-progress"]).output
    assert "GPUs/goodput frontier" in text and " GPUs " in text
    said = [line for line in text.lower().splitlines() if "reproduce: rdu-sim run" not in line]
    assert "socket" not in "\n".join(said).replace("socket-to-socket", "")  # but the field
    # hw.system.sockets of the command reproducing the answer
    spec.write_text(yaml.safe_dump({"cluster": "cluster.yaml", "search": {"tp": [1]}}))
    met = runner.invoke(cli, ["plan", str(spec), "--no-progress"]).output
    assert "cheapest: 1 GPU = 1 replica x tp=1" in met  # not '1 sockets = 1 replicas'
    progress = runner.invoke(cli, ["plan", str(spec), "--no-progress"]).stderr
    assert "met with 1 unit(s), 1 GPU" in progress  # not '1 sockets'


def test_a_database_the_plan_cannot_write_is_said_before_its_first_round(tmp_path: Path) -> None:
    """A plan in a folder it cannot write printed its "round 1:" line, then the database's
    error: the database is opened before the first round."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    db = blocker / "plan.sqlite"
    result = CliRunner().invoke(cli, ["plan", "llama3.1-8b-chat", "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert "round 1" not in result.output
    assert result.stderr.splitlines()[-1].startswith(f"error: {db}: cannot write: ")
