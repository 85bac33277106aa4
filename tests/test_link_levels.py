"""Links per level: within a node, between the nodes of a rack, between racks. Each level's
bandwidth and latency is a hardware field; the collectives' symmetric shortcut stays exact
over three levels; the shipped H800 node and four SN40L racks read what they restate."""

from __future__ import annotations

import pytest

from rdu_sim import api
from rdu_sim.config.errors import ConfigError
from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.hw import Collective, Topology
from rdu_sim.hw.collective_choice import Wiring, estimate, link_classes
from rdu_sim.hw.collective_run import start_collective
from rdu_sim.hw.collectives import ALL_GATHER, ALL_REDUCE

LLAMA8 = "workloads/llama3.1-8b-8socket.yaml"
NODE, RACK, NET = (64e9, 1e-6), (50e9, 3e-6), (10e9, 5e-6)


def topology(env: CountingEnvironment, p: int, spn: int, spr: int, switched: bool) -> Topology:
    return Topology(env, p, spn, *NODE, *RACK, switched=switched, sockets_per_rack=spr,
                    rack_bandwidth=NET[0], rack_latency=NET[1])  # fmt: skip


def test_each_pair_takes_its_levels_link() -> None:
    topo = topology(CountingEnvironment(), 16, 2, 4, switched=True)
    assert [topo.link_class(0, j) for j in (1, 2, 3, 4, 15)] == [0, 1, 1, 2, 2]
    assert topo.params(0, 1) == NODE and topo.params(0, 3) == RACK and topo.params(0, 4) == NET
    # a switched socket has a port per level, each with its level's parameters
    assert topo.link(0, 4)[0] is topo.link(0, 12)[0] is not topo.link(0, 2)[0]


THREE_LEVEL_CASES = [
    (algorithm, kind, switched)
    for algorithm, kind in [
        ("ring", ALL_REDUCE),
        ("one_shot", ALL_GATHER),
        ("two_shot", ALL_REDUCE),
        ("tree", ALL_REDUCE),
    ]
    for switched in (True, False)
    if not (algorithm == "tree" and switched)  # a switched wiring does not run the tree
]


@pytest.mark.parametrize(("algorithm", "kind", "switched"), THREE_LEVEL_CASES)
def test_symmetric_shortcut_is_exact_over_three_levels(
    algorithm: str, kind: str, switched: bool
) -> None:
    times = []
    for symmetric in (False, True):
        env = CountingEnvironment()
        topo = topology(env, 16, 2, 4, switched)
        done = start_collective(topo, Collective(kind, 4e6, 3, symmetric), algorithm)
        env.run()
        assert done.triggered
        times.append(float(env.now))
    if algorithm != "tree":  # the tree's shortcut is exact for identical links only
        assert times[1] == pytest.approx(times[0], rel=1e-12)
    # the slowest level bounds it: no faster than the rack link alone carries its share
    assert times[0] >= 4e6 / 16 / NET[0]


def test_one_shot_estimate_over_racks_is_its_slowest_port() -> None:
    wiring = Wiring("switched", 2, NODE, RACK, 4, NET)
    assert link_classes(wiring, 16) == [(1, *NODE), (2, *RACK), (12, *NET)]
    est = estimate(ALL_GATHER, "one_shot", 16e6, 16, wiring)
    # 12 shards of 1 MB through the rack port at 10 GB/s, then its latency
    assert est.time_s == pytest.approx(12 * 1e6 / NET[0] + NET[1], rel=1e-12)
    env = CountingEnvironment()
    topo = topology(env, 16, 2, 4, switched=True)
    start_collective(topo, Collective(ALL_GATHER, 16e6, 1, True), "one_shot")
    env.run()
    assert float(env.now) == pytest.approx(est.time_s, rel=1e-12)


def test_a_rack_level_needs_both_fields_and_whole_racks() -> None:
    with pytest.raises(ConfigError, match="nodes_per_rack and inter_rack_link go together"):
        api.load(LLAMA8, {"hw.system.nodes_per_rack": 1})
    with pytest.raises(ConfigError, match=r"multiple of a rack's sockets"):
        api.load(
            LLAMA8,
            {
                "hw.system.sockets_per_node": 2,
                "hw.system.nodes_per_rack": 3,
                "hw.system.inter_rack_link": {"bandwidth": "10 GB/s", "latency": "5 us"},
            },
        )


def test_h800_restates_only_its_nvlink() -> None:
    h100 = api.load(LLAMA8, {"hardware": "dgx-h100"}).hardware
    h800 = api.load(LLAMA8, {"hardware": "hgx-h800"}).hardware
    assert h800.system.intra_node_link.bandwidth == 164e9  # 200 GB/s each way x 370/450
    assert h800.system.inter_node_link == h100.system.inter_node_link  # 50 GB/s a GPU
    assert h800.model_dump(exclude={"name", "description", "system"}) == h100.model_dump(
        exclude={"name", "description", "system"}
    )


def test_four_sn40l_racks_meet_over_the_rack_network() -> None:
    hardware = api.load(
        "workloads/deepseek-r1-128k-full.yaml", {"hardware": "sn40l-4racks"}
    ).hardware
    system = hardware.system
    assert (system.sockets, system.sockets_per_rack) == (64, 16)
    assert system.inter_rack_link is not None and system.inter_rack_link.bandwidth == 25e9
