"""Symmetric collectives computed in plain Python (``hw.link_chains``) against one SimPy event
per transfer and against the full ring, alone and overlapping on the same links."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import simpy

from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.hw import Collective, Topology, ring, tree_all_reduce
from rdu_sim.hw.collectives import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from rdu_sim.hw.p2p_link import P2PLink

BW, LAT = 64e9, 1e-6
INTER = (50e9, 3e-6)
N = 4e6

Plan = list[tuple[float, str, float, int]]  # (start delay, kind, bytes, chunks)


def plan(seed: int, count: int, algorithm: str = "ring") -> Plan:
    """Collectives started at random moments, so that several are in flight at once."""
    rng = random.Random(seed)
    kinds = ["all_reduce", "all_gather", "reduce_scatter"]
    if algorithm == "tree":
        kinds = ["tree", "all_gather"]
    t, out = 0.0, []
    for _ in range(count):
        t += rng.choice([0.0, rng.uniform(0, 40e-6)])
        out.append((t, rng.choice(kinds), N * rng.choice([0.25, 1.0, 2.5]), rng.choice([1, 2, 4])))
    return out


def simulate(
    steps: Plan,
    p: int,
    spn: int,
    symmetric: bool,
    fast: bool,
    sends: list[tuple[float, int, int, float]] | None = None,
) -> tuple[list[float], Topology, int]:
    """Completion time of each collective, the topology and the SimPy events processed."""
    env = CountingEnvironment()
    topo = Topology(env, p, spn, BW, LAT, *INTER)
    topo.fast_chains = fast
    finished: list[float] = [float("nan")] * len(steps)
    processed = [0]

    def begin(i: int, kind: str, nbytes: float, chunks: int) -> None:
        fn: dict[str, Callable[[], simpy.Event]] = {
            "all_reduce": lambda: ring(topo, Collective(ALL_REDUCE, nbytes, chunks, symmetric)),
            "tree": lambda: tree_all_reduce(
                topo, Collective(ALL_REDUCE, nbytes, chunks, symmetric)
            ),
            "all_gather": lambda: ring(topo, Collective(ALL_GATHER, nbytes, chunks, symmetric)),
            "reduce_scatter": lambda: ring(
                topo, Collective(REDUCE_SCATTER, nbytes, chunks, symmetric)
            ),
        }
        ev = fn[kind]()
        ev.callbacks.append(lambda _e: finished.__setitem__(i, float(env.now)))

    for i, (delay, kind, nbytes, chunks) in enumerate(steps):
        env.timeout(delay).callbacks.append(
            lambda _e, i=i, k=kind, b=nbytes, c=chunks: begin(i, k, b, c)
        )
    for delay, src, dst, nbytes in sends or []:
        env.timeout(delay).callbacks.append(
            lambda _e, s=src, d=dst, b=nbytes: topo.send(s, d, b).callbacks.append(lambda _a: None)
        )
    while env.peek() != float("inf"):
        env.step()
        processed[0] += 1
    return finished, topo, processed[0]


def counters(link: P2PLink) -> tuple[float, ...]:
    return (
        link.bytes[0].total,
        link.bytes[1].total,
        link.busy_time(0),
        link.busy_time(1),
        link.free_at[0],
        link.free_at[1],
    )


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("p", "spn"), [(16, 8), (8, 8), (12, 4)])
def test_overlapping_symmetric_collectives_match_one_event_per_transfer(
    seed: int, p: int, spn: int
) -> None:
    steps = plan(seed, 12)
    fast, topo_fast, ev_fast = simulate(steps, p, spn, symmetric=True, fast=True)
    slow, topo_slow, ev_slow = simulate(steps, p, spn, symmetric=True, fast=False)
    full, _, _ = simulate(steps, p, spn, symmetric=False, fast=False)
    assert fast == pytest.approx(slow, rel=1e-12, abs=0)
    assert fast == pytest.approx(full, rel=1e-12, abs=0)  # the reduced ring is exact
    assert topo_fast.links.keys() == topo_slow.links.keys()
    for key, link in topo_fast.links.items():
        assert counters(link) == pytest.approx(counters(topo_slow.links[key]), rel=1e-12)
    assert ev_fast < ev_slow / 4


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("p", [7, 13, 16])
def test_tree_and_ring_sharing_links_match_one_event_per_transfer(seed: int, p: int) -> None:
    # A symmetric tree's route and the ring share link 0-1.
    steps = plan(100 + seed, 10, algorithm="tree")
    fast, topo_fast, _ = simulate(steps, p, 8, symmetric=True, fast=True)
    slow, topo_slow, _ = simulate(steps, p, 8, symmetric=True, fast=False)
    assert fast == pytest.approx(slow, rel=1e-12, abs=0)
    for key, link in topo_fast.links.items():
        assert counters(link) == pytest.approx(counters(topo_slow.links[key]), rel=1e-12)


def test_plain_transfers_on_the_chains_links_are_ordered_as_with_events() -> None:
    # Transfers outside the collectives (one event each) interleave with the computed chains.
    steps = plan(7, 8)
    sends = [(t * 1e-6, 0, 1, 3e5) for t in range(0, 120, 9)] + [(33e-6, 7, 8, 1e6)]
    fast, topo_fast, _ = simulate(steps, 16, 8, True, True, sends)
    slow, topo_slow, _ = simulate(steps, 16, 8, True, False, sends)
    assert fast == pytest.approx(slow, rel=1e-12, abs=0)
    for key, link in topo_fast.links.items():
        assert counters(link) == pytest.approx(counters(topo_slow.links[key]), rel=1e-12)


def test_flush_counts_the_sends_made_so_far() -> None:
    env = CountingEnvironment()
    topo = Topology(env, 16, 8, BW, LAT, *INTER)
    ring(topo, Collective(ALL_REDUCE, N, chunks=4, symmetric=True))
    env.run(until=5e-6)
    link = topo.links[(0, 1)]
    assert link.bytes[0].total == 0  # computed ahead, not yet final
    topo.chains.flush()
    sent = link.bytes[0].total
    assert 0 < sent < 30 * 4 * N / 16 / 4
    topo.chains.flush()
    assert link.bytes[0].total == sent  # counted once
    env.run()
    assert link.bytes[0].total == pytest.approx(30 * N / 16)
    assert not topo.chains.busy
