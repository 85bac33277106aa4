"""Collectives built from link transfers: closed forms, symmetric shortcut == full."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import simpy

from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.hw import Collective, Topology, ring, ring_time, tree_all_reduce, tree_time
from rdu_sim.hw.collectives import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from rdu_sim.hw.link_chains import hop_of

BW, LAT = 50e9, 2e-6
N = 8e6


def run(
    start: Callable[[Topology], simpy.Event],
    p: int,
    spn: int = 8,
    inter: tuple[float, float] | None = None,
) -> tuple[float, Topology]:
    env = CountingEnvironment()
    topo = Topology(env, p, spn, BW, LAT, *(inter or (None, None)))
    done = start(topo)
    env.run()
    assert done.triggered
    return env.now, topo


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_ring_all_reduce_unchunked_matches_textbook(p: int) -> None:
    t, topo = run(lambda tp: ring(tp, Collective(ALL_REDUCE, N)), p)
    expected = 2 * (p - 1) / p * N / BW + 2 * (p - 1) * LAT
    assert t == pytest.approx(expected, rel=1e-9)
    # every socket sends 2(p-1) segments of N/p on its outgoing ring link
    assert sum(link.total_bytes for link in topo.links.values()) == pytest.approx(
        p * 2 * (p - 1) * N / p
    )


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("chunks", [2, 8, 64])
@pytest.mark.parametrize("lat", [2e-6, 50e-6])
def test_chunked_ring_matches_pipelined_formula(p: int, chunks: int, lat: float) -> None:
    env = CountingEnvironment()
    topo = Topology(env, p, 8, BW, lat)
    ring(topo, Collective(ALL_REDUCE, N, chunks))
    env.run()
    steps, d = 2 * (p - 1), N / (p * chunks * BW)
    expected = max(steps * chunks * d + lat, steps * (d + lat) + (chunks - 1) * d)
    assert env.now == pytest.approx(expected, rel=1e-9)
    assert env.now == pytest.approx(ring_time(p, N, BW, lat, chunks), rel=1e-12)


def test_chunking_hides_latency_behind_bandwidth() -> None:
    one, _ = run(lambda tp: ring(tp, Collective(ALL_REDUCE, N, 1)), 8)
    many, _ = run(lambda tp: ring(tp, Collective(ALL_REDUCE, N, 32)), 8)
    assert many < one


@pytest.mark.parametrize("kind", [ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER])
@pytest.mark.parametrize("p", [2, 5, 8])
@pytest.mark.parametrize("chunks", [1, 4])
def test_symmetric_shortcut_equals_full_simulation(kind: str, p: int, chunks: int) -> None:
    full, topo_full = run(lambda tp: ring(tp, Collective(kind, N, chunks)), p)
    sym, topo_sym = run(lambda tp: ring(tp, Collective(kind, N, chunks, symmetric=True)), p)
    assert sym == pytest.approx(full, rel=1e-12)
    assert full == pytest.approx(ring_time(p, N, BW, LAT, chunks, kind), rel=1e-12)
    assert len(topo_sym.links) == 1  # only one link was simulated
    full_bytes = sum(link.total_bytes for link in topo_full.links.values())
    assert p * topo_sym.links[(0, 1)].total_bytes == pytest.approx(full_bytes)


def test_gather_and_scatter_take_half_an_all_reduce_without_latency() -> None:
    def time(kind: str) -> float:
        return run(lambda tp: ring(tp, Collective(kind, N)), 4)[0]

    ar, ag, rs = time(ALL_REDUCE), time(ALL_GATHER), time(REDUCE_SCATTER)
    assert ag == rs == pytest.approx(ar / 2)


def test_inter_node_hops_slow_the_ring() -> None:
    inter = (10e9, 10e-6)
    call = Collective(ALL_REDUCE, N, chunks=4)
    intra_only, _ = run(lambda tp: ring(tp, call), 16, spn=16)
    full, topo = run(lambda tp: ring(tp, call), 16, spn=8, inter=inter)
    assert full > intra_only
    assert topo.links[(7, 8)].bandwidth == 10e9 and topo.links[(0, 1)].bandwidth == BW
    assert not topo.same_node(7, 8) and topo.same_node(8, 15)


@pytest.mark.parametrize("kind", [ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER])
@pytest.mark.parametrize("chunks", [1, 4])
@pytest.mark.parametrize(("p", "spn"), [(16, 8), (16, 4), (12, 4), (8, 2)])
@pytest.mark.parametrize("inter", [(50e9 * 50 / 64, 3 * LAT), (10e9, 10e-6), (BW, 5e-6)])
def test_symmetric_shortcut_is_exact_for_rings_over_several_nodes(
    kind: str, chunks: int, p: int, spn: int, inter: tuple[float, float]
) -> None:
    # Intra-node hops at BW/LAT, the hop between nodes slower: the shortcut simulates one
    # node's sockets (the ring's rotational period) and must give the full ring's time.
    full, topo_full = run(lambda tp: ring(tp, Collective(kind, N, chunks)), p, spn, inter)
    sym, topo_sym = run(lambda tp: ring(tp, Collective(kind, N, chunks, True)), p, spn, inter)
    assert sym == pytest.approx(full, rel=1e-12)
    assert len(topo_sym.links) == spn  # one node's outgoing ring links, not p
    assert topo_sym.links[(0, 1)].bytes[0].total == pytest.approx(
        topo_full.links[(0, 1)].bytes[0].total
    )


@pytest.mark.parametrize("chunks", [1, 4])
def test_symmetric_shortcut_is_exact_for_overlapping_collectives(chunks: int) -> None:
    # Chunks of a stage's collective and the next stage's collective share the links while
    # in flight: the reduced ring must order them on each link as the full ring does.
    inter = (50e9, 3e-6)

    def start(topo: Topology, symmetric: bool) -> simpy.Event:
        env = topo.env
        events: list[simpy.Event] = []

        def later(delay: float, kind: str, nbytes: float) -> simpy.Event:
            gate = env.timeout(delay)
            done = env.event()
            gate.callbacks.append(
                lambda _e: ring(topo, Collective(kind, nbytes, chunks, symmetric)).callbacks.append(
                    lambda _d: done.succeed()
                )
            )
            return done

        events.append(ring(topo, Collective(REDUCE_SCATTER, N, chunks, symmetric)))
        events.append(later(3e-6, ALL_REDUCE, N / 4))
        events.append(later(17e-6, ALL_GATHER, N / 2))
        return simpy.AllOf(env, events)

    full, _ = run(lambda tp: start(tp, False), 16, 8, inter)
    sym, _ = run(lambda tp: start(tp, True), 16, 8, inter)
    assert sym == pytest.approx(full, rel=1e-12)


@pytest.mark.parametrize("p", [2, 3, 4, 7, 8, 13])
@pytest.mark.parametrize("chunks", [1, 4])
def test_tree_all_reduce_matches_formula_and_shortcut(p: int, chunks: int) -> None:
    full, _ = run(lambda tp: tree_all_reduce(tp, Collective(ALL_REDUCE, N, chunks)), p)
    sym, _ = run(lambda tp: tree_all_reduce(tp, Collective(ALL_REDUCE, N, chunks, True)), p)
    depth = p.bit_length() - 1
    d = N / (chunks * BW)
    assert full == pytest.approx(2 * depth * (LAT + d) + (chunks - 1) * d, rel=1e-9)
    assert full == pytest.approx(tree_time(p, N, BW, LAT, chunks), rel=1e-12)
    assert sym == pytest.approx(full, rel=1e-12)


def test_tree_moves_every_byte_on_every_edge_twice() -> None:
    p = 8
    _, topo = run(lambda tp: tree_all_reduce(tp, Collective(ALL_REDUCE, N, 4)), p)
    assert sum(link.total_bytes for link in topo.links.values()) == pytest.approx(2 * (p - 1) * N)


def test_single_socket_and_empty_messages_are_free() -> None:
    assert run(lambda tp: ring(tp, Collective(ALL_REDUCE, N)), 1)[0] == 0.0
    assert run(lambda tp: ring(tp, Collective(ALL_REDUCE, 0.0)), 4)[0] == 0.0
    assert run(lambda tp: tree_all_reduce(tp, Collective(ALL_REDUCE, N)), 1)[0] == 0.0


def test_subset_of_sockets_and_errors() -> None:
    t, topo = run(lambda tp: ring(tp, Collective(ALL_REDUCE, N, sockets=(8, 9, 10, 11))), 16)
    assert t == pytest.approx(ring_time(4, N, BW, LAT), rel=1e-12)
    assert set(topo.links) == {(8, 9), (9, 10), (10, 11), (8, 11)}
    env = CountingEnvironment()
    topo = Topology(env, 4, 4, BW, LAT)
    with pytest.raises(ValueError, match="unknown collective 'all_to_some'; valid: all_reduce"):
        Collective("all_to_some", N)
    with pytest.raises(ValueError, match="chunks must be >= 1 and nbytes >= 0, got 0, "):
        Collective(ALL_REDUCE, N, chunks=0)
    with pytest.raises(ValueError, match="chunks must be >= 1 and nbytes >= 0, got 1, -1"):
        Collective(ALL_REDUCE, -1.0)
    with pytest.raises(ValueError, match="the tree runs all-reduce only, not 'all_gather'"):
        tree_all_reduce(topo, Collective(ALL_GATHER, N))
    with pytest.raises(ValueError):
        topo.link(1, 1)
    with pytest.raises(ValueError):
        Topology(env, 4, 4, BW, LAT, inter_bandwidth=0.0)
    with pytest.raises(ValueError):
        Topology(env, 4, 4, BW, -LAT)


def test_deterministic() -> None:
    def once() -> tuple[float, float]:
        a = run(lambda tp: ring(tp, Collective(ALL_REDUCE, N, 8)), 8, 4, (10e9, 5e-6))[0]
        b = run(lambda tp: tree_all_reduce(tp, Collective(ALL_REDUCE, N, 8)), 13, 4, (10e9, 5e-6))[
            0
        ]
        return a, b

    assert once() == once()


@pytest.mark.parametrize("kind", [ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER])
@pytest.mark.parametrize("p", [3, 5, 8, 16])
@pytest.mark.parametrize("chunks", [1, 4])
def test_bidirectional_ring_matches_half_the_bytes_and_uses_both_directions(
    kind: str, p: int, chunks: int
) -> None:
    call = Collective(kind, N, chunks)
    both, topo = run(lambda tp: ring(tp, call, bidirectional=True), p)
    assert both == pytest.approx(
        ring_time(p, N, BW, LAT, chunks, kind, bidirectional=True), rel=1e-12
    )
    assert both == pytest.approx(ring_time(p, N / 2, BW, LAT, chunks, kind), rel=1e-12)
    one_way, topo_one = run(lambda tp: ring(tp, call), p)
    assert both < one_way
    # the same bytes in total, now on both directions of every neighbour link
    total = sum(link.total_bytes for link in topo.links.values())
    assert total == pytest.approx(sum(link.total_bytes for link in topo_one.links.values()))
    ring_link = topo.links[(0, 1)]
    assert ring_link.bytes[0].total == pytest.approx(ring_link.bytes[1].total)
    assert ring_link.bytes[0].total == pytest.approx(total / (2 * p))


def test_bidirectional_ring_on_two_sockets_is_the_plain_ring() -> None:
    call = Collective(ALL_REDUCE, N, 4)
    both, _ = run(lambda tp: ring(tp, call, bidirectional=True), 2)
    one, _ = run(lambda tp: ring(tp, call), 2)
    assert both == one


@pytest.mark.parametrize("kind", [ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER])
@pytest.mark.parametrize("chunks", [1, 4])
@pytest.mark.parametrize(("p", "spn"), [(16, 16), (16, 8), (12, 4)])
def test_bidirectional_symmetric_shortcut_is_exact(
    kind: str, chunks: int, p: int, spn: int
) -> None:
    # The reverse ring is the forward ring's mirror image: one rotational period of each
    # gives the full simulation's time, one node or several.
    inter = (10e9, 10e-6)
    full, topo_full = run(lambda tp: ring(tp, Collective(kind, N, chunks), True), p, spn, inter)
    sym, topo_sym = run(lambda tp: ring(tp, Collective(kind, N, chunks, True), True), p, spn, inter)
    assert sym == pytest.approx(full, rel=1e-12)
    sent_by_0 = sum(
        link.bytes[0 if a == 0 else 1].total
        for (a, b), link in topo_sym.links.items()
        if 0 in (a, b)
    )
    sent_by_0_full = sum(
        link.bytes[0 if a == 0 else 1].total
        for (a, b), link in topo_full.links.items()
        if 0 in (a, b)
    )
    assert sent_by_0 == pytest.approx(sent_by_0_full)


@pytest.mark.parametrize("kind", [ALL_REDUCE, REDUCE_SCATTER])
@pytest.mark.parametrize(("p", "spn"), [(8, 4), (16, 8), (12, 4), (8, 2)])
@pytest.mark.parametrize("series", [False, True])
@pytest.mark.parametrize("network", [12.5e9, 90e9])
def test_bidirectional_symmetric_shortcut_is_exact_through_switched_ports(
    kind: str, p: int, spn: int, series: bool, network: float
) -> None:
    # Over several switched nodes both halves leave a socket through its ports: socket 1
    # sends the forward half to 2 and the reverse half to 0 through one in-node port. The
    # shortcut simulates the same sockets in both halves, so the ports are shared as in the
    # whole ring (it simulated the reverse ring's sockets 0, p-1, ...: at 8 sockets in two
    # nodes and a 90 GB/s network 0.49 ms against the whole ring's 0.88 ms)
    def once(symmetric: bool) -> tuple[float, float]:
        env = CountingEnvironment()
        topo = Topology(env, p, spn, BW, LAT, network, 3e-6, True,
                        network_through_node_port=series)  # fmt: skip
        ring(topo, Collective(kind, 3e7, 4, symmetric), bidirectional=True)
        env.run()
        return float(env.now), topo.bytes_sent(0)

    (sym, sent), (full, sent_full) = once(True), once(False)
    assert sym == pytest.approx(full, rel=1e-12)
    assert sent == pytest.approx(sent_full, rel=1e-12)


def test_bidirectional_ring_over_a_subset_not_starting_at_socket_0() -> None:
    # the RendezvousPort path: a TP group of sockets 4..7 of 8; the reverse ring starts at 4
    group = (4, 5, 6, 7)
    call = Collective(ALL_REDUCE, N, 4, sockets=group)
    t, topo = run(lambda tp: ring(tp, call, bidirectional=True), 8)
    assert t == pytest.approx(ring_time(4, N, BW, LAT, 4, bidirectional=True), rel=1e-12)
    assert set(topo.links) == {(4, 5), (5, 6), (6, 7), (4, 7)}
    for link in topo.links.values():  # both directions of every ring link carry half
        assert link.bytes[0].total == pytest.approx(link.bytes[1].total)
    inter = (10e9, 10e-6)  # and over two-socket nodes, the shortcut still equals the full ring
    full, _ = run(lambda tp: ring(tp, call, bidirectional=True), 8, 2, inter)
    sym_call = Collective(ALL_REDUCE, N, 4, symmetric=True, sockets=group)
    sym, _ = run(lambda tp: ring(tp, sym_call, bidirectional=True), 8, 2, inter)
    assert sym == pytest.approx(full, rel=1e-12)


def test_a_hop_is_made_once_per_pair_and_is_its_link_direction() -> None:
    """``Topology.hop`` is asked at every symmetric collective's start and kept per pair: it
    is ``hop_of`` the link ``link`` gives for the pair, whose ``free_at`` it shares."""
    topo = Topology(CountingEnvironment(), 16, 8, BW, LAT)
    for src, dst in [(0, 1), (1, 0), (0, 9), (9, 0)]:
        first = topo.hop(src, dst)
        link, direction = topo.link(src, dst)
        assert topo.hop(src, dst) == first == hop_of(link, direction)
        assert first[0] is link.free_at and first[4] is link
    assert topo.hop(0, 1)[1] != topo.hop(1, 0)[1]  # the two directions of one link
