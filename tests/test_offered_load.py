"""A cluster run and a plan say the rate the traffic offered beside the goodput they served
(``report.cluster._offered``, the JSON's ``offered``, a plan's ``offered_requests_per_s``)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.plan import plan_summary, run_plan
from rdu_sim.report.cluster import _offered
from rdu_sim.report.cluster_summary import OfferedLoad
from tests.test_plan import fake_evaluate, write_plan

ROOT = Path(__file__).resolve().parents[1]
CHAT = ROOT / "workloads" / "traces" / "chat-400.csv"


def test_the_rate_is_the_inverse_of_the_mean_gap_between_arrivals() -> None:
    """Arrivals at 0, 1 and 3 s: two gaps over 3 s, 2/3 request a second; 60 tokens asked
    by three requests, 20 each, so 40/3 tokens a second."""
    offered = _offered(np.array([0.0, 1.0, 3.0]), 60)
    assert offered == OfferedLoad(
        window_s=3.0, requests_per_s=0.666666666667, output_tokens_per_s=13.3333333333
    )


@pytest.mark.parametrize("arrivals", [[2.5, 2.5, 2.5], [4.0]])
def test_requests_arriving_at_once_have_no_rate(arrivals: list[float]) -> None:
    assert _offered(np.array(arrivals), 300) == OfferedLoad(0.0, None, None)


def _trace_rates() -> tuple[float, float]:
    """The chat trace's rates computed from its CSV directly: every row, the one request too
    long for the 8k context among them."""
    with CHAT.open() as handle:
        rows = list(csv.DictReader(handle))
    arrival = [float(row["arrival_s"]) for row in rows]
    output = sum(int(row["output_tokens"]) for row in rows)
    rate = (len(rows) - 1) / (max(arrival) - min(arrival))
    return rate, rate * output / len(rows)


@pytest.mark.parametrize("over_context", ["reject", "truncate"])
def test_a_trace_cluster_offers_what_its_file_asks_however_its_context_cuts(
    over_context: str,
) -> None:
    """llama3.1-8b-chat: one request is over the context, rejected or cut; the offered rate
    counts it as the trace asked it either way, and the text report says the same rates."""
    args = ["run", "llama3.1-8b-chat", "--set", f"traffic.over_context={over_context}"]
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).stdout)
    cut = data["requests_rejected"] + data["requests_truncated"]
    assert cut == 1
    requests_per_s, tokens_per_s = _trace_rates()
    offered = data["offered"]
    assert offered["requests_per_s"] == pytest.approx(requests_per_s, rel=1e-11)
    assert offered["output_tokens_per_s"] == pytest.approx(tokens_per_s, rel=1e-11)
    assert data["goodput"]["requests_per_s"] < offered["requests_per_s"]  # over the makespan
    said = " ".join(CliRunner().invoke(cli, args).stdout.split())
    assert "│ offered │ 6.15 req/s, 1,665 tok/s asked, over 1.08 min of arrivals │" in said


def test_a_plan_states_the_rate_its_configurations_share(tmp_path: Path) -> None:
    """Every configuration's run shares the traffic: the plan's JSON holds its rate once, the
    cluster JSON's ``offered.requests_per_s``, and its first text line says it."""
    spec = write_plan(tmp_path, {"batch_slots": [4, 16], "max_replicas": 2}, requests=40)
    summary = plan_summary(run_plan(spec, db=tmp_path / "p.sqlite", evaluate=fake_evaluate))
    cluster = tmp_path / "cluster.yaml"
    run = CliRunner().invoke(cli, ["run", str(cluster), "--json"])
    assert run.exit_code == 0, run.output
    rate = json.loads(run.stdout)["offered"]["requests_per_s"]
    assert summary["offered_requests_per_s"] == rate
    assert 8.0 < rate < 16.0  # Poisson arrivals at 12 a second, 40 of them


def test_a_plan_before_any_run_states_no_rate() -> None:
    from rdu_sim.cli.plan_cmd import _offered_words

    assert _offered_words({"offered_requests_per_s": None}) == ""
    assert _offered_words({"offered_requests_per_s": 6.15}) == ", traffic offered at 6.15 req/s"
