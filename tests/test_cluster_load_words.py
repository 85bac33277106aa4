"""A cluster run says why its throughput is what it is, by the single run's rule
(``report.summary.throughput_bound``) and words (``report.console.offered_load_words``)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from rdu_sim import human
from rdu_sim.cli.main import cli
from rdu_sim.report.summary import OCCUPANCY_FULL


def test_a_cluster_its_trace_leaves_idle_says_the_offered_load_set_its_throughput() -> None:
    """llama3.1-8b-chat: four replicas 38-41% occupied by the trace's arrivals."""
    data = json.loads(CliRunner().invoke(cli, ["run", "llama3.1-8b-chat", "--json"]).stdout)
    assert data["throughput_bound"] == "offered_load"
    occupancies = [r["occupancy"] for r in data["per_replica"]]
    assert min(occupancies) < data["occupancy"] < max(occupancies) < OCCUPANCY_FULL
    printed = CliRunner().invoke(cli, ["run", "llama3.1-8b-chat"])
    assert printed.exit_code == 0, printed.output
    said = " ".join(printed.stdout.split())
    assert (
        "The throughput above is set by the offered load (the trace's arrivals), not by the "
        f"machine: the replicas' batch slots were occupied {human.percent(data['occupancy'])} "
        "of the time (each replica's in the table above). To measure what the machine can do, "
        "offer more: replay the trace faster (traffic.time_scale < 1), or serve it on fewer "
        "replicas."
    ) in said
