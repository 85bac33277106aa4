"""The plan's reasoning: each request's floors (what it sees served alone), the stop rule
that ends a configuration's search when its floors miss the SLO, and the binding half.

Floors are lower bounds that no replica count lowers: every served request of real runs
(chunked prefill, a prefix cache, disaggregation, packed prefills) is at or above them, and
a request really served alone sits exactly on its TTFT floor. The stop rule is checked
against brute force: a configuration it stops never meets the SLO at any replica count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from test_api_run import LLAMA, FakeBackend
from test_plan import brute_force, write_plan

from rdu_sim.api_cluster import run_cluster
from rdu_sim.cli.main import cli
from rdu_sim.config.cluster import SLOConfig
from rdu_sim.plan import load_plan, plan_summary, run_plan
from rdu_sim.plan.evaluate import measure
from rdu_sim.plan.floors import request_floors
from rdu_sim.plan.spec import PlanPoint
from rdu_sim.report.bound import LABELS, REMEDIES, RESOURCES
from rdu_sim.report.slo_why import binding, half_metrics, moves, stop_rule, value_at
from rdu_sim.serving.step_cache import StepCost

ROOT = Path(__file__).resolve().parents[1]
CLUSTERS = ROOT / "workloads" / "clusters"
EPS = 1e-9  # seconds: the floors and the run's times are sums of the same integer picoseconds


def test_value_at_is_the_tightest_target_the_goodput_rule_meets() -> None:
    values = np.arange(1.0, 21.0)
    assert value_at(values, 0.95) == 19.0  # 19 of 20 within 19 s: 95%
    assert value_at(values, 1.0) == 20.0
    # 0.7 x 10 is 7.000000000000001 in floats: the 7th value, as met / total >= 0.7 counts
    assert value_at(np.arange(1.0, 11.0), 0.7) == 7.0
    assert value_at(np.array([5.0, np.inf]), 0.5) == 5.0
    slo = SLOConfig(ttft=2.0, tpot=0.05, attainment=0.5)
    metrics = half_metrics(np.array([1.0, 3.0]), np.array([np.nan, 0.06]), slo)
    assert metrics == {
        "ttft_attainment": 0.5,
        "tpot_attainment": 0.5,  # one output token: no TPOT, within target
        "attainment": 0.5,
        "ttft_at_attainment_s": 1.0,
        "tpot_at_attainment_s": 0.0,
    }


def _alone(result: Any) -> tuple[np.ndarray, np.ndarray, Any]:
    columns = result.requests()
    floors = request_floors(result)
    served = columns["status"] == "served"
    assert served.any()
    return columns, floors, served


@pytest.mark.parametrize(
    ("cluster", "overrides"),
    [
        ("llama3.1-8b-chat.yaml", {"traffic.requests": 60}),
        ("llama3.1-8b-chat.yaml", {"traffic.requests": 60, "pools.serve.replicas": 1}),
        (  # chunked prefill: every chunk counts
            "llama3.1-8b-chat.yaml",
            {"traffic.requests": 40, "pools.serve.set": {"serving.prefill_chunk_tokens": 1024}},
        ),
        # disaggregated, a prefix cache on a trace with shared prefixes, KV transfers
        ("llama3.1-8b-disaggregated.yaml", {"traffic.requests": 80}),
        # a GPU stack: decode steps of the live sequences, mixed steps
        (
            "llama3.1-8b-chat.yaml",
            {"traffic.requests": 40, "pools.serve.set": {"hardware": "dgx-h100"}},
        ),
    ],
)
def test_no_request_beats_its_floors(cluster: str, overrides: dict[str, Any]) -> None:
    result = run_cluster(CLUSTERS / cluster, overrides)
    columns, floors, served = _alone(result)
    ttft, tpot = columns["ttft_s"][served], columns["tpot_s"][served]
    assert np.all(ttft >= floors.ttft_s[served] - EPS)
    has_tpot = ~np.isnan(tpot)
    assert np.all(tpot[has_tpot] >= floors.tpot_s[served][has_tpot] - EPS)
    assert np.all(floors.ttft_s[served] > 0) and np.all(np.isfinite(floors.ttft_s[served]))
    rejected = columns["status"] == "rejected"
    assert np.all(np.isinf(floors.ttft_s[rejected]))


def test_a_request_alone_sits_on_its_ttft_floor() -> None:
    """Arrivals half a minute apart on one replica: a request arriving after every earlier
    one finished is served alone, so its TTFT is its prefill alone, exactly."""
    result = run_cluster(
        CLUSTERS / "llama3.1-8b-chat.yaml",
        {"traffic.requests": 12, "traffic.time_scale": 200.0, "pools.serve.replicas": 1},
    )
    columns, floors, served = _alone(result)
    assert served.all()
    finished_before = np.maximum.accumulate(np.concatenate([[-1.0], columns["finish_s"][:-1]]))
    alone = columns["arrival_s"] > finished_before
    assert alone.sum() >= 8
    assert np.allclose(columns["ttft_s"][alone], floors.ttft_s[alone], rtol=0, atol=EPS)
    assert np.all(columns["ttft_s"][~alone] > floors.ttft_s[~alone])  # waited for a step


def fake_measure(point: PlanPoint) -> dict[str, Any]:
    """The plan's evaluation, floors included, on the analytic FakeBackend."""
    return measure(run_cluster(point.cluster, backend=FakeBackend()))


def test_the_stop_rule_ends_a_search_that_no_replica_count_can_meet(tmp_path: Path) -> None:
    """TTFT of 50 ms: FakeBackend's prefill of a 2,500-token prompt alone takes 60 ms, so
    more than 10% of the requests miss it whatever the replica count (brute force agrees).
    The search stops after one run per configuration, naming TTFT as the binding half."""
    spec = write_plan(
        tmp_path,
        {"batch_slots": [4, 8], "max_replicas": 8},
        slo={"ttft": "50 ms", "tpot": "1 s", "attainment": 0.9},
    )
    for runs in brute_force(spec).values():  # not met at any replica count up to the limit
        assert not any(metrics.get("slo_met") for metrics in runs.values())
    result = run_plan(spec, db=tmp_path / "p.sqlite", evaluate=fake_measure)
    summary = plan_summary(result)
    assert summary["cheapest"] is None and result.evaluations == 2
    for row in summary["configurations"]:
        assert row["status"] == "not met" and row["evaluations"] == 1
        (verdict,) = row["binding"]
        assert verdict["half"] == "ttft" and verdict["alone"] is True
        assert verdict["share"] < 0.9 and verdict["value_s"] > 0.05
        assert row["why"].startswith("TTFT binds: p90 alone")
        assert "no number of replicas meets it" in verdict["sentence"]
        assert "more tp" in verdict["moves"][0]


def test_the_stop_rule_names_tpot_when_one_decode_step_is_too_slow(tmp_path: Path) -> None:
    """TPOT of 10 ms: FakeBackend's decode step is 10 ms plus a little per cached token, so
    no request meets it alone; TTFT would."""
    spec = write_plan(
        tmp_path,
        {"batch_slots": [4], "max_replicas": 8},
        slo={"ttft": "10 s", "tpot": "10 ms", "attainment": 0.9},
    )
    summary = plan_summary(run_plan(spec, db=tmp_path / "p.sqlite", evaluate=fake_measure))
    (row,) = summary["configurations"]
    assert row["status"] == "not met" and row["evaluations"] == 1
    assert [v["half"] for v in row["binding"]] == ["tpot"]
    assert row["binding"][0]["moves"][0].startswith("fewer batch slots or more tp")


def test_stop_rule_and_binding_read_only_the_metrics() -> None:
    slo = SLOConfig(ttft=1.0, tpot=0.05, attainment=0.9)
    both_pass_alone = {
        "floor_attainment": 0.85,  # each half alone meets 0.9, together they do not
        "floor_ttft_attainment": 0.93,
        "floor_tpot_attainment": 0.92,
        "floor_ttft_at_attainment_s": 0.9,
        "floor_tpot_at_attainment_s": 0.04,
    }
    assert [v.half for v in stop_rule(both_pass_alone, slo)] == ["ttft", "tpot"]
    assert stop_rule({}, slo) == []  # an evaluation without floors never stops a search
    run = {
        **both_pass_alone,
        "floor_attainment": 0.95,
        "ttft_attainment": 0.97,
        "tpot_attainment": 0.95,
        "ttft_at_attainment_s": 0.5,  # half its target
        "tpot_at_attainment_s": 0.045,  # 90% of its target: the nearer one binds
    }
    (verdict,) = binding(run, slo)
    assert verdict.half == "tpot" and not verdict.alone
    assert verdict.short() == "TPOT binds: p90 45 ms <= 50 ms"
    run["ttft_attainment"] = 0.5
    (verdict,) = binding(run, slo)
    assert verdict.half == "ttft" and "chunked prefill" in verdict.moves[1]
    # attention ranks in lockstep whose decoding waits on other ranks' prefills: a TPOT
    # above its floors is moved by disaggregation first, and the verdict says how much
    run["ttft_attainment"] = 0.97
    # one decode step alone (40 ms) is over half of the run's TPOT (45 ms): a shorter step
    # first, with both numbers
    (stepped,) = binding(run, slo)
    assert stepped.moves[0] == (
        "fewer batch slots or more tp (one decode step is over half of the TPOT: one decode "
        "step takes 40 ms, of the run's p90 45 ms)"
    )
    run["floor_tpot_at_attainment_s"] = 0.02  # under half: the run mostly waits
    (plain,) = binding(run, slo)
    assert not any("fewer batch slots" in move for move in plain.moves)
    # chunked prefill only where prefill steps carry the decode rows (stack.mixed_batching);
    # a run stored without that says the condition
    assert plain.moves[0].startswith("chunked prefill") and "if the stack mixes" in plain.moves[0]
    (mixed,) = binding({**run, "mixed_batching": True}, slo)
    assert mixed.moves[0].startswith("chunked prefill") and "if the" not in mixed.moves[0]
    (alone,) = binding({**run, "mixed_batching": False}, slo)
    assert not any("chunked" in move for move in alone.moves)
    assert alone.moves[0].startswith("disaggregation")
    (held,) = binding({**run, "lockstep_prefill_held_share": 0.38}, slo)
    assert held.half == "tpot" and held.moves[0].startswith("disaggregation")
    assert "38.0% of the attention ranks' decoding time waits" in held.moves[0]
    # a hold far smaller than the TPOT above its floor (45 ms over 20: 56%) is not the cause
    (slight,) = binding({**run, "lockstep_prefill_held_share": 0.002}, slo)
    assert slight.moves == plain.moves
    # prefill and decode already apart: more of the side that waits, not disaggregation
    (apart,) = binding({**run, "disaggregated": True, "lockstep_prefill_held_share": 0.0}, slo)
    assert apart.moves[0].startswith("more decode replicas (a larger D")
    assert not any(move.startswith("disaggregation") for move in apart.moves)


def test_a_data_parallel_plan_run_keeps_its_lockstep_hold(tmp_path: Path) -> None:
    """The plan's measure of a replica of two attention ranks keeps the share of their
    decoding time held by another rank's prefill; a replica without ranks keeps none."""
    search = {"parallelism": [{"tp": 2}, {"tp": 1, "dp_attention": 2}], "batch_slots": [8]}
    spec = write_plan(tmp_path, search, slo={"ttft": "1 s", "tpot": "40 ms", "attainment": 0.9})
    loaded = load_plan(spec)
    tensor, ranks = loaded.configurations()
    held = measure(run_cluster(loaded.build(ranks, 1).cluster, backend=FakeBackend()))
    assert 0 < held["lockstep_prefill_held_share"] < 1
    plain = measure(run_cluster(loaded.build(tensor, 1).cluster, backend=FakeBackend()))
    assert "lockstep_prefill_held_share" not in plain


class BatchBoundBackend(FakeBackend):
    """FakeBackend with a decode step that grows with its batch (2 ms + 0.8 ms a slot), as
    an HBM-bound step of a static graph does: fewer slots make a shorter step."""

    def step_cost(self, scenario: Any, shape: Any) -> StepCost:
        if shape.phase == "prefill":
            return super().step_cost(scenario, shape)
        return StepCost(0.002 + shape.batch * 0.0008, 0.8, 0.2)


def test_the_tpot_levers_the_plan_names_move_it_when_tried(tmp_path: Path) -> None:
    """The 8B plan's cheapest row said "chunked prefill" for a TPOT whose floor was its
    decode step, on a stack that prefills alone: chunking made it worse. Here the levers
    the verdict names are each tried, as a user would: fewer batch slots and more replicas
    lower the run's TPOT at the quantile; chunked prefill, left out of a stack that does not
    mix, raises it; on a stack that mixes, it is named and lowers it."""
    cluster = {
        "name": "levers",
        "pools": {"serve": {"workload": str(LLAMA), "replicas": 2, "set": {}}},
        "traffic": {
            "rate": 12.0,
            "requests": 80,
            "prompt_tokens": {"dist": "uniform", "low": 200, "high": 2500},
            "output_tokens": {"dist": "uniform", "low": 20, "high": 200},
            "seed": 1,
        },
        "slo": {"ttft": "2 s", "tpot": "20 ms", "attainment": 0.9},
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(cluster, sort_keys=False))
    slots = {"pools.serve.set.serving.batch_slots": 16}
    backend = BatchBoundBackend()

    def tried(**overrides: Any) -> tuple[dict[str, Any], list[str]]:
        metrics = measure(run_cluster(path, {**slots, **overrides}, backend=backend))
        (verdict,) = binding(metrics, SLOConfig(ttft=2.0, tpot=0.02, attainment=0.9))
        assert verdict.half == "tpot"
        return metrics, list(verdict.moves)

    base, said = tried()
    tpot, floor = base["tpot_at_attainment_s"], base["floor_tpot_at_attainment_s"]
    assert base["mixed_batching"] is False and floor > tpot / 2  # the step is most of it
    assert said[0].startswith("fewer batch slots or more tp (one decode step is over half")
    assert "takes 14.8 ms, of the run's p90 20.8 ms" in said[0]
    assert not any("chunked prefill" in move for move in said)
    assert any(move.startswith("more replicas") for move in said)
    fewer, _ = tried(**{"pools.serve.set.serving.batch_slots": 8})
    assert fewer["tpot_at_attainment_s"] < 0.6 * tpot
    more, _ = tried(**{"pools.serve.replicas": 3})
    assert more["tpot_at_attainment_s"] < tpot
    chunked, _ = tried(**{"pools.serve.set.serving.prefill_chunk_tokens": 512})
    assert chunked["tpot_at_attainment_s"] > tpot  # one wait cut into several, no shorter
    mix = {"pools.serve.set.stack.mixed_batching": True}
    mixing, said = tried(**mix)
    assert any(move.startswith("chunked prefill") for move in said)
    mixed_chunks, _ = tried(**mix, **{"pools.serve.set.serving.prefill_chunk_tokens": 512})
    assert mixed_chunks["tpot_at_attainment_s"] < mixing["tpot_at_attainment_s"]


def test_the_shipped_70b_plan_names_the_binding_half(tmp_path: Path) -> None:
    """`rdu-sim plan llama3.1-70b-chat`: a long prompt's prefill alone exceeds the 500 ms
    TTFT at tp=8 and at tp=16 (its all-reduces bind the sockets' P2P ports, and over two
    nodes the network traffic leaves through the same port), so every search stops after one
    run naming TTFT, and not more tp for a link-bound prefill. Without the stop rule (the
    floors removed) the same answer costs more runs."""
    runner = CliRunner()
    result = runner.invoke(
        cli, ["plan", "llama3.1-70b-chat", "--db", str(tmp_path / "p.sqlite"), "--json"]
    )
    assert result.exit_code == 1, result.output  # no configuration met the SLO
    data = json.loads(result.stdout)
    assert data["cheapest"] is None and data["slo_met"] is False
    alone = {}
    for row in data["configurations"]:
        assert row["status"] == "not met" and row["evaluations"] == 1
        (verdict,) = row["binding"]
        assert verdict["half"] == "ttft" and verdict["alone"]
        assert verdict["moves"][0].startswith(
            "a faster prefill (a faster hw.system.intra_node_link)"
        )
        assert not any("more tp" in move for move in verdict["moves"])
        alone[row["tp"]] = verdict["value_s"]
    assert 0.5 < alone[8] < alone[16]  # two nodes' prefill is no faster than one node's
    assert "round 1: 4 cluster run(s)" in result.stderr  # progress, on stderr
    assert "tp=8 slots=16 kv=full: not met: TTFT binds" in result.stderr

    def without_floors(point: PlanPoint) -> dict[str, Any]:
        from rdu_sim.plan.evaluate import evaluate

        return {k: v for k, v in evaluate(point).items() if not k.startswith("floor_")}

    before = run_plan("llama3.1-70b-chat", db=tmp_path / "old.sqlite", evaluate=without_floors)
    assert before.evaluations > data["evaluations"]
    assert plan_summary(before)["cheapest"] is None
    text = runner.invoke(cli, ["plan", "llama3.1-70b-chat", "--db", str(tmp_path / "p.sqlite")])
    assert "TTFT binds: 14.3% of requests miss 500 ms even served alone" in text.stdout
    assert load_plan("llama3.1-70b-chat").slo.ttft == 0.5


@pytest.mark.parametrize("bound", sorted(RESOURCES))
def test_what_would_move_a_floor_reads_right_for_every_binding_resource(bound: str) -> None:
    """'a faster prefill (more the socket-to-socket links)' and 'more the serving stack's host
    time' read wrong: each resource has its own remedy, the same keys as its noun."""
    assert REMEDIES.keys() == RESOURCES.keys() == LABELS.keys()
    metrics = {"ttft_step_s": 0.5, "ttft_step_bound": bound, "ttft_step_tokens": 2048}
    said = moves(metrics, "ttft", alone=True)
    faster = next(move for move in said if move.startswith("a faster prefill"))
    assert faster.startswith(f"a faster prefill ({REMEDIES[bound]})")
    assert "more the" not in faster and "more kernel" not in faster
    assert f"bound by {RESOURCES[bound]})" in said[0]
    # more tp shortens any step but one the links bind (its all-reduces' bytes a socket)
    assert said[0].startswith("more tp") == (bound != "link")
    tpot = {"tpot_step_s": 0.1, "tpot_step_bound": bound}
    assert ("more tp" in moves(tpot, "tpot", alone=True)[0]) == (bound != "link")
    assert moves({}, "ttft", alone=True)[1] == "a faster prefill (a faster step)"


def test_a_padded_prefill_floor_names_the_bucket_it_times() -> None:
    """'a prefill of 4,224 tokens alone takes 703 ms' timed the 5,120-token bucket: say so."""
    metrics = {"ttft_step_s": 0.703, "ttft_step_bound": "link", "ttft_step_tokens": 4224}
    padded = moves({**metrics, "ttft_step_bucket": 5120}, "ttft", alone=True)[0]
    assert "(a prefill of 4,224 tokens (run at its 5,120-token bucket) alone takes 703 ms, " in (
        padded
    )
    exact = moves({**metrics, "ttft_step_bucket": 4224}, "ttft", alone=True)[0]
    assert "(a prefill of 4,224 tokens alone takes 703 ms, " in exact


def test_the_floor_steps_words_say_bound_by_only_at_the_share_that_binds(tmp_path: Path) -> None:
    """The plan's step words follow ``report.bound.bound_label``: a step whose largest
    resource takes under half of it reads 'largest part', not 'bound by'."""
    spec = write_plan(tmp_path, {"parallelism": [{"tp": 1}], "batch_slots": [8]})
    loaded = load_plan(spec)
    (point,) = loaded.configurations()
    metrics = measure(run_cluster(loaded.build(point, 1).cluster))  # the engine: its timing
    for half in ("ttft", "tpot"):
        label = metrics[f"{half}_step_label"]
        assert label in ("bound by", "largest part")
        resource = RESOURCES[metrics[f"{half}_step_bound"]]
        assert f", {label} {resource})" in moves(metrics, half, alone=True)[0]
    part = {"tpot_step_s": 0.1, "tpot_step_bound": "hbm", "tpot_step_label": "largest part"}
    said = moves(part, "tpot", alone=True)[0]
    assert f"largest part {RESOURCES['hbm']})" in said and "bound by" not in said


@pytest.mark.parametrize("attainment", [0.5, 0.9, 0.99])
def test_the_plans_constraint_and_the_runs_report_are_one_rule(
    tmp_path: Path, attainment: float
) -> None:
    """What a plan point passes on is the run's own verdict: the share meeting both halves
    (``half_metrics``, rejected requests missing both) is the run's goodput fraction, its
    pass is the run's ``slo_met``, the value at the attainment quantile is the run's
    ``slo_binding`` value (``value_at``, for both), and the TTFT p99 the plan shows is the
    run's (its served requests' percentile: a report, not the constraint)."""
    from test_cluster import fake, write_cluster

    traffic = {
        "rate": 20.0,
        "requests": 200,
        "prompt_tokens": {"dist": "uniform", "low": 200, "high": 8150},
        "output_tokens": {"dist": "uniform", "low": 1, "high": 300},
        "seed": 5,
    }
    slo = {"ttft": "2 s", "tpot": "50 ms", "attainment": attainment}
    result = fake(write_cluster(tmp_path, slo=slo, traffic=traffic))
    data, metrics = result.to_dict(), measure(result)
    assert data["requests_rejected"] > 0
    assert metrics["goodput_fraction"] == data["goodput"]["fraction"]
    assert metrics["attainment"] == pytest.approx(data["goodput"]["fraction"], abs=1e-12)
    assert metrics["slo_met"] is data["slo_met"] is (metrics["attainment"] >= attainment)
    values = {v["half"]: v["value_s"] for v in data["slo_binding"]}
    for half, value in values.items():  # None: the quantile's request was never served
        plan = metrics[f"{half}_at_attainment_s"]
        assert value == plan if value is None else value == pytest.approx(plan, rel=1e-11)
    assert metrics["ttft_p99_s"] == data["ttft_s"]["p99"]
