"""A cluster run says why its throughput is what it is, by the single run's rule
(``report.summary.throughput_bound``) and words (``report.console.offered_load_words``)."""

from __future__ import annotations

import json

import numpy as np
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


def test_a_full_decode_pool_behind_an_idle_prefill_pool_is_no_offered_load() -> None:
    """llama3.1-8b-disaggregated on one decode replica: prefill 69.4% and decode 85.2%
    occupied (77.3% together), and 8.57 s of the median 8.65 s TTFT queueing: the machine
    set its throughput, however idle the slots averaged over both pools."""
    args = ["run", "workloads/clusters/llama3.1-8b-disaggregated.yaml"]
    args += ["--set", "pools.decode.replicas=1"]
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).stdout)
    pools = {name: pool["occupancy"] for name, pool in data["pools"].items()}
    assert pools == {"prefill": 0.693910612797, "decode": 0.852085189815}
    assert data["occupancy"] == 0.772997901306
    assert data["throughput_bound"] == "machine"
    said = " ".join(CliRunner().invoke(cli, args).stdout.split())
    assert "set by the offered load" not in said


def test_the_verdict_reads_the_busiest_pool_and_the_queue_against_the_ttft() -> None:
    """``cluster_bound``: a pool full enough binds whatever the others; queueing the most
    of the TTFT binds whatever the occupancy; else the offered load."""
    from rdu_sim.report.cluster import cluster_bound
    from rdu_sim.report.percentiles import Percentiles

    def latency(queue: float, ttft: float) -> dict[str, Percentiles]:
        return {
            "queue_delay_s": Percentiles.of(np.array([queue])),
            "ttft_s": Percentiles.of(np.array([ttft])),
            "e2e_s": Percentiles.of(np.array([ttft + 100.0])),
        }

    idle = latency(1.0, 3.0)
    assert cluster_bound({"prefill": 0.1, "decode": OCCUPANCY_FULL}, idle) == "machine"
    assert cluster_bound({"prefill": 0.1, "decode": 0.89}, idle) == "offered_load"
    # 2.0 s of a 3.0 s TTFT waited: most of it (though not most of the 103 s end to end)
    assert cluster_bound({"prefill": 0.1, "decode": 0.1}, latency(2.0, 3.0)) == "machine"
    assert cluster_bound({"prefill": 0.1, "decode": 0.1}, latency(1.5, 3.0)) == "offered_load"


def test_a_disaggregated_cluster_its_trace_leaves_idle_names_its_busiest_pool() -> None:
    """The shipped disaggregated cluster: decode 54.4% occupied, prefill 3.2%: the sentence
    names the busiest pool's occupancy, the one its verdict reads."""
    args = ["run", "workloads/clusters/llama3.1-8b-disaggregated.yaml"]
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).stdout)
    assert data["throughput_bound"] == "offered_load"
    assert data["pools"]["decode"]["occupancy"] == 0.544079436749
    said = " ".join(CliRunner().invoke(cli, args).stdout.split())
    assert (
        "not by the machine: even the busiest pool's (decode) batch slots were occupied 54.4% "
        "of the time (each replica's in the table above)."
    ) in said
