"""The hierarchical all-reduce over whole nodes (`hw.hierarchical`): equal to simulating
every node and rail, its bytes on the network a 1/local share of the vector, its estimate the
sum of its phases, and the chooser taking it for a large vector across nodes."""

from __future__ import annotations

import pytest

from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.engine.collective_port import start_collective
from rdu_sim.hw import Collective, Topology
from rdu_sim.hw.collective_choice import Wiring, candidates, choose, estimate
from rdu_sim.hw.collectives import ALL_GATHER, ALL_REDUCE

NVLINK, NETWORK = (370e9, 0.5e-6), (50e9, 2.7e-6)


def simulate(
    p: int, local: int, nbytes: float, chunks: int, symmetric: bool
) -> tuple[float, Topology]:
    env = CountingEnvironment()
    topo = Topology(env, p, local, *NVLINK, *NETWORK, switched=True)
    call = Collective(ALL_REDUCE, nbytes, chunks, symmetric, tuple(range(p)))
    done = start_collective(topo, call, "hierarchical")
    env.run()
    assert done.triggered
    return float(env.now), topo


@pytest.mark.parametrize(("p", "local"), [(16, 8), (32, 8), (12, 4), (8, 2)])
@pytest.mark.parametrize("chunks", [1, 4])
def test_symmetric_shortcut_equals_every_node_and_rail(p: int, local: int, chunks: int) -> None:
    full, topo = simulate(p, local, 8e6, chunks, symmetric=False)
    sym, _ = simulate(p, local, 8e6, chunks, symmetric=True)
    assert sym == pytest.approx(full, rel=1e-12)
    # every socket's network port carries 2 (n - 1) / n of its 1/local shard: the vector
    # crosses the network once per node in each direction, split over the node's rails
    nodes = p // local
    for (_, kind), port in topo.ports.items():
        if kind == 1:
            assert port.bytes[0].total == pytest.approx(2 * (nodes - 1) / nodes * 8e6 / local)


def test_estimate_is_its_phases_and_bounds_one_piece() -> None:
    wiring = Wiring("switched", 8, NVLINK, NETWORK)
    est = estimate(ALL_REDUCE, "hierarchical", 64e6, 16, wiring)
    inside = estimate("reduce_scatter", "one_shot", 64e6, 8, wiring)
    gather = estimate(ALL_GATHER, "one_shot", 64e6, 8, wiring)
    rail = estimate(ALL_REDUCE, "two_shot", 8e6, 2, Wiring("switched", 1, NETWORK, NETWORK))
    assert est.time_s == pytest.approx(inside.time_s + rail.time_s + gather.time_s, rel=1e-12)
    assert est.hops == 4
    one_piece, _ = simulate(16, 8, 64e6, 1, symmetric=True)
    assert one_piece == pytest.approx(est.time_s, rel=1e-9)  # one piece: phases in sequence


def test_chooser_takes_it_across_nodes_and_never_inside_one() -> None:
    wiring = Wiring("switched", 8, NVLINK, NETWORK)
    assert "hierarchical" in candidates(ALL_REDUCE, wiring, 16)
    assert "hierarchical" not in candidates(ALL_REDUCE, wiring, 8)  # one node
    assert "hierarchical" not in candidates(ALL_REDUCE, wiring, 12)  # not whole nodes
    assert "hierarchical" not in candidates(ALL_GATHER, wiring, 16)  # all-reduce only
    big = choose(ALL_REDUCE, 235e6, 16, wiring, pieces=4)
    assert big.algorithm == "hierarchical"
    ring = next(e for e in big.candidates if e.algorithm == "ring")
    assert big.chosen.time_s < ring.time_s / 4  # the ring's node crossing carries it all
