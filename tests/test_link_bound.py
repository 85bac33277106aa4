"""A step the links bind names the link class that binds it (``report.bound.StepBound.link``),
from the busy time the engine keeps per link class (``engine.links.link_totals``): the
network between racks or nodes when it is the slow one, not "the socket-to-socket links"."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.engine.links import LINK_FIELDS, link_busy_fields, link_totals
from rdu_sim.hw import Topology
from rdu_sim.report.bound import (
    LINK_WORDS,
    REMEDIES,
    RESOURCES,
    busiest_link,
    remedy_words,
    resource_words,
)
from rdu_sim.report.slo_why import moves

RACKS = "workloads/ep/deepseek-r1-sn40l-4racks-ep64.yaml"
SLOW_RACKS = {"hw.system.inter_rack_link.bandwidth": "5 GB/s"}
NODE, RACK, NET = (64e9, 1e-6), (50e9, 3e-6), (10e9, 5e-6)


def test_link_totals_keep_each_class_busiest_direction() -> None:
    """One send on each class from socket 0 (switched: a port per class): each class's
    busy time is its own send's serialisation, and the busiest of all is the largest."""
    env = CountingEnvironment()
    topo = Topology(env, 16, 2, *NODE, *RACK, switched=True, sockets_per_rack=4,
                    rack_bandwidth=NET[0], rack_latency=NET[1])  # fmt: skip
    for dst, nbytes in ((1, 6.4e6), (2, 1e6), (4, 2e6)):  # in-node, in-rack, across racks
        topo.send(0, dst, nbytes)
    env.run()
    sent, busiest, flight = link_totals(topo)
    assert sent == pytest.approx(9.4e6)
    assert busiest == pytest.approx((6.4e6 / NODE[0], 1e6 / RACK[0], 2e6 / NET[0]), rel=1e-12)
    # under way: each send's serialisation and then its class's latency
    lone = (6.4e6 / NODE[0] + NODE[1], 1e6 / RACK[0] + RACK[1], 2e6 / NET[0] + NET[1])
    assert flight == pytest.approx(lone, rel=1e-12)
    fields = link_busy_fields(busiest, flight)
    assert fields["link_busy_s"] == max(busiest) == fields["inter_rack_link_busy_s"]
    assert [fields[f"{f}_busy_s"] for f in LINK_FIELDS] == list(busiest)
    assert fields["link_flight_s"] == max(flight)
    assert [fields[f"{f}_flight_s"] for f in LINK_FIELDS] == list(flight)


def test_the_busiest_class_ties_to_the_first_and_none_is_empty() -> None:
    assert busiest_link({}) == "" == busiest_link({"inter_node_link": 0.0})
    assert busiest_link({"inter_rack_link": 2.0, "intra_node_link": 2.0}) == "intra_node_link"
    assert busiest_link({"inter_rack_link": 3.0, "intra_node_link": 2.0}) == "inter_rack_link"


def test_words_and_remedies_name_the_link_and_its_field() -> None:
    assert LINK_WORDS.keys() == set(LINK_FIELDS)
    for name in LINK_FIELDS:
        assert name in resource_words("link", name)
        assert remedy_words("link", name) == f"a faster hw.system.{name}"
    # without a class, and for every other resource, the words are the resource's own
    assert resource_words("link") == RESOURCES["link"]
    assert remedy_words("hbm", "inter_rack_link") == REMEDIES["hbm"]
    assert resource_words("hbm", "inter_rack_link") == RESOURCES["hbm"]


def test_a_plan_s_moves_point_at_the_binding_link() -> None:
    metrics = {"ttft_step_bound": "link", "ttft_step_link": "inter_node_link", "ttft_step_s": 1}
    first = moves(metrics, "ttft", alone=True)[0]
    assert first.startswith("a faster prefill (a faster hw.system.inter_node_link)")


def test_a_slow_rack_network_binds_by_its_name() -> None:
    """DeepSeek-R1 over 4 SN40L racks (ep=64) with a 5 GB/s rack network: the links bind, and
    the class is the rack network's; the step's link time lies between its largest class's
    and all of them together (each kernel's busiest direction is one class's)."""
    report = api.step_report(RACKS, SLOW_RACKS, batch=64)
    classes = report.timing.link_busy_s
    assert set(classes) <= set(LINK_FIELDS) and "inter_rack_link" in classes
    assert max(classes.values()) <= report.timing.busy_s["link"] <= sum(classes.values())
    bound = report.to_dict()["bound"]
    assert (bound["resource"], bound["link"]) == ("link", "inter_rack_link")
    args = ["step", RACKS, "--batch", "64", "--set", "hw.system.inter_rack_link.bandwidth=5 GB/s"]
    step = CliRunner().invoke(cli, args)
    assert step.exit_code == 0, step.output
    assert "bound by inter_rack_link, the links between racks (" in step.stdout
    assert "socket-to-socket" not in step.stdout


def test_h100_infiniband_binds_by_its_name_in_text_and_json() -> None:
    args = ["step", "deepseek-v3-h100-tp16-prefill", "--phase", "prefill", "--batch", "1",
            "--tokens", "4096", "--set", "hw.system.inter_node_link.bandwidth=5 GB/s"]  # fmt: skip
    step = CliRunner().invoke(cli, args)
    assert step.exit_code == 0, step.output
    assert "bound by inter_node_link, the links between nodes (" in step.stdout
    bound = json.loads(CliRunner().invoke(cli, [*args, "--json"]).stdout)["bound"]
    assert (bound["resource"], bound["link"]) == ("link", "inter_node_link")


def test_a_one_node_step_names_its_in_node_links_and_one_socket_none() -> None:
    tp8 = api.step_report("workloads/llama3.1-8b-8socket.yaml").to_dict()["bound"]
    assert tp8["link"] == "intra_node_link" and tp8["link_s"] > 0
    alone = api.step_report("workloads/llama3.1-8b-1socket.yaml").to_dict()["bound"]
    assert (alone["link"], alone["link_s"]) == (None, 0.0)
