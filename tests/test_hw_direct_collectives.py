"""Direct collectives (one-shot, two-shot) and the switched wiring: symmetric shortcut == full
simulation, the chooser's estimates == the simulation on idle links, bytes through a port."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import simpy

from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.hw import Collective, Topology, ring
from rdu_sim.hw.collective_choice import Wiring, candidates, choose, estimate
from rdu_sim.hw.collective_run import start_collective
from rdu_sim.hw.collectives import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from rdu_sim.hw.direct_collectives import send_order, two_shot

BW, LAT = 64e9, 1e-6
INTER = (50e9, 3e-6)
KINDS = (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER)

Start = Callable[[Topology, bool], simpy.Event]


def run(
    start: Start, p: int, spn: int, switched: bool, symmetric: bool, fast: bool = True
) -> tuple[float, Topology]:
    env = CountingEnvironment()
    topo = Topology(env, p, spn, BW, LAT, *INTER, switched=switched)
    topo.fast_chains = fast
    done = start(topo, symmetric)
    env.run()
    assert done.triggered
    return float(env.now), topo


def started(kind: str, algorithm: str, n: float, pieces: int) -> Start:
    """Start a ``kind`` of ``n`` bytes in ``pieces`` with ``algorithm``, as the engine does."""
    return lambda t, s: start_collective(t, Collective(kind, n, pieces, s), algorithm)


CASES = [(kind, "one_shot") for kind in KINDS] + [(ALL_REDUCE, "two_shot")]


@pytest.mark.parametrize(("kind", "algorithm"), CASES)
@pytest.mark.parametrize(("p", "spn"), [(2, 8), (4, 8), (16, 16), (16, 8), (12, 4)])
@pytest.mark.parametrize("switched", [True, False])
@pytest.mark.parametrize("pieces", [1, 3])
def test_symmetric_shortcut_equals_full_simulation(
    kind: str, algorithm: str, p: int, spn: int, switched: bool, pieces: int
) -> None:
    start = started(kind, algorithm, 3e6, pieces)
    full, _ = run(start, p, spn, switched, symmetric=False)
    sym, topo = run(start, p, spn, switched, symmetric=True)
    slow, _ = run(start, p, spn, switched, symmetric=True, fast=False)
    assert sym == pytest.approx(full, rel=1e-12) and slow == pytest.approx(full, rel=1e-12)
    if switched:  # only socket 0's ports were simulated
        assert {socket for socket, _ in topo.ports} == {0} and not topo.links


@pytest.mark.parametrize(("kind", "algorithm"), CASES)
@pytest.mark.parametrize("p", [2, 4, 8, 16])
@pytest.mark.parametrize("wiring", ["switched", "fully_connected"])
@pytest.mark.parametrize("n", [2e3, 6e4, 3e7])
@pytest.mark.parametrize("pieces", [1, 4])
def test_estimate_is_the_idle_link_time_within_one_node(
    kind: str, algorithm: str, p: int, wiring: str, n: float, pieces: int
) -> None:
    w = Wiring(wiring, 16, (BW, LAT), INTER)  # type: ignore[arg-type]
    t, topo = run(started(kind, algorithm, n, pieces), p, 16, wiring == "switched", True)
    est = estimate(kind, algorithm, n, p, w, pieces)
    assert est.time_s == pytest.approx(t, rel=1e-9)
    assert est.hops == (2 if algorithm == "two_shot" else 1)
    # the terms add up: the busiest port's bytes at its bandwidth, and the rest; in pieces
    # the hops' latencies partly overlap (a two-shot's second phase behind its first piece)
    assert est.bandwidth_s == pytest.approx(est.bytes_per_link / BW, rel=1e-12)
    assert est.latency_s + est.bandwidth_s == est.time_s
    if pieces == 1:
        assert est.latency_s == pytest.approx(est.hops * LAT, rel=1e-6)
    else:
        assert LAT * (1 - 1e-6) <= est.latency_s <= est.hops * LAT * (1 + 1e-6) + est.time_s / 2
    # bytes: what socket 0 put on its busiest port (or link direction)
    sent = max(link.bytes[d].total for link, d, sender in topo.directions() if sender == 0)
    assert est.bytes_per_link == pytest.approx(sent, rel=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("algorithm", ["ring", "bidirectional_ring"])
@pytest.mark.parametrize("wiring", ["switched", "ring"])
@pytest.mark.parametrize("pieces", [1, 4])
def test_ring_estimates_match_the_simulated_ring(
    kind: str, algorithm: str, wiring: str, pieces: int
) -> None:
    # both ways round through one switched port: two half rings interleave on it
    p, n = 8, 1e6
    w = Wiring(wiring, 16, (BW, LAT), INTER)  # type: ignore[arg-type]
    t, _ = run(started(kind, algorithm, n, pieces), p, 16, wiring == "switched", True)
    assert estimate(kind, algorithm, n, p, w, pieces).time_s == pytest.approx(t, rel=1e-9)


def test_two_shot_moves_the_rings_bytes_in_two_hops_and_one_shot_wins_small_messages() -> None:
    w = Wiring("switched", 16, (BW, LAT), INTER)
    n, p = 1e6, 16
    ring_est = estimate(ALL_REDUCE, "ring", n, p, w)
    two = estimate(ALL_REDUCE, "two_shot", n, p, w)
    one = estimate(ALL_REDUCE, "one_shot", n, p, w)
    assert two.bytes_per_link == pytest.approx(ring_est.bytes_per_link) == 2 * 15 / 16 * n
    assert (two.hops, ring_est.hops, one.hops) == (2, 30, 1)
    assert one.bytes_per_link == 15 * n
    # one-shot saves a hop and pays (p - 1) n through the port: it wins below
    # n = lat * bw * p / ((p - 1)(p - 2)) ~ 4.9 kB on these links, two-shot above
    assert choose(ALL_REDUCE, 4e3, p, w).algorithm == "one_shot"
    assert choose(ALL_REDUCE, 6e3, p, w).algorithm == "two_shot"
    assert choose(ALL_REDUCE, 1e6, p, w).algorithm == "two_shot"


def test_send_order_never_sends_two_messages_to_one_socket_at_once() -> None:
    for p, spn in [(16, 16), (16, 8), (12, 4), (8, 2), (3, 8)]:
        orders = [send_order(r, p, spn) for r in range(p)]
        for r, order in enumerate(orders):
            assert sorted(order) == [j for j in range(p) if j != r]
        for m in range(p - 1):
            assert sorted(order[m] for order in orders) == list(range(p))
    with pytest.raises(ValueError, match="whole nodes"):
        send_order(0, 12, 8)


def test_an_algorithm_runs_only_what_it_can() -> None:
    topo = Topology(CountingEnvironment(), 4, 4, BW, LAT, switched=True)
    with pytest.raises(ValueError, match="'butterfly'; valid: ring, bidirectional_ring, one_shot"):
        start_collective(topo, Collective(ALL_REDUCE, 1e6), "butterfly")
    with pytest.raises(ValueError, match="two-shot runs all-reduce only, not 'all_gather'"):
        two_shot(topo, Collective(ALL_GATHER, 1e6))


def test_candidates_follow_the_wiring() -> None:
    ring_w = Wiring("ring", 16, (BW, LAT), INTER)
    switched = Wiring("switched", 16, (BW, LAT), INTER)
    mesh = Wiring("fully_connected", 16, (BW, LAT), INTER)
    assert candidates(ALL_REDUCE, ring_w, 16) == ("ring", "bidirectional_ring")
    assert candidates(ALL_REDUCE, switched, 16) == (
        "ring",
        "bidirectional_ring",
        "one_shot",
        "two_shot",
    )
    assert "tree" in candidates(ALL_REDUCE, mesh, 16)
    assert candidates(ALL_GATHER, mesh, 16) == ("ring", "bidirectional_ring", "one_shot")
    assert "one_shot" in candidates(ALL_REDUCE, ring_w, 2)  # a pair is one link
    # on a ring both ways is always at least as good
    assert choose(ALL_REDUCE, 1e6, 16, ring_w).algorithm == "bidirectional_ring"


def test_forced_policies_and_their_errors() -> None:
    switched = Wiring("switched", 16, (BW, LAT), INTER)
    plan = choose(ALL_REDUCE, 1e3, 16, switched, "ring")
    assert plan.algorithm == "ring" and plan.policy == "ring"
    assert {e.algorithm for e in plan.candidates} == set(candidates(ALL_REDUCE, switched, 16))
    # two-shot's halves for all-gather / reduce-scatter; the tree runs all-reduce only
    assert choose(ALL_GATHER, 1e3, 16, switched, "two_shot").algorithm == "one_shot"
    mesh = Wiring("fully_connected", 16, (BW, LAT), INTER)
    assert choose(REDUCE_SCATTER, 1e3, 16, mesh, "tree").algorithm == "ring"
    with pytest.raises(ValueError, match=r"'tree' cannot run .* allows: ring, bidirectional_ring"):
        choose(ALL_REDUCE, 1e3, 16, switched, "tree")
    with pytest.raises(ValueError, match="valid: auto, ring"):
        choose(ALL_REDUCE, 1e3, 16, switched, "butterfly")


def test_switched_ports_are_shared_by_everything_a_socket_sends() -> None:
    env = CountingEnvironment()
    topo = Topology(env, 4, 4, BW, LAT, switched=True)
    a = topo.send(0, 1, 64e3)
    b = topo.send(0, 2, 64e3)  # same port: queues behind the first
    c = topo.send(1, 2, 64e3)  # another socket's port: in parallel
    env.run()
    assert a.value == pytest.approx(1e-6 + 1e-6)
    assert b.value == pytest.approx(2e-6 + 1e-6)
    assert c.value == pytest.approx(a.value)
    port, direction = topo.link(0, 3)
    assert direction == 0 and port is topo.ports[(0, False)]
    ar = ring(topo, Collective(ALL_REDUCE, 0.0))
    assert ar.triggered


def test_equal_estimates_go_to_fewer_hops() -> None:
    # a large all-gather: ring and one-shot both move (p-1)/p n through the port in the same
    # time (their closed forms differ in the last bit); one-shot pays 1 hop, the ring 15
    switched = Wiring("switched", 16, (BW, LAT), INTER)
    plan = choose(ALL_GATHER, 1.0342400e7, 16, switched, pieces=4)
    times = {e.algorithm: e.time_s for e in plan.candidates}
    assert times["ring"] == pytest.approx(times["one_shot"], rel=1e-12)
    assert plan.algorithm == "one_shot"
