"""Which collective algorithm to run, chosen per message size and wiring as a communication
library does: a cost estimate per candidate, latency and bandwidth terms kept apart.

Like NCCL's tuning model (per algorithm a latency of hops in sequence times a per-hop
latency, plus bytes over bandwidth; the smallest estimate wins), each candidate's estimate is
its time on idle links, split so the terms add up: ``bandwidth_s`` = the binding link
direction or port's bytes (``bytes_per_link``) over its bandwidth, ``latency_s`` = the rest
(the hops' latencies, the pipeline's fill and one port's wait for another, less what the
pieces overlap: a two-shot in many pieces pays one hop's latency exposed, not two). That
time is what the simulation gives the collective alone, by one rule: inside one node in
closed form (identical links: ``hw.collectives``, ``hw.direct_collectives``; the tests check
each against the simulation), across nodes by simulating it alone on idle ports
(:func:`alone`: the same transfers the engine's ports run, through ``hw.collective_run``),
where the link classes, a network reached through the in-node port and the hierarchical
form's phases overlapping on different ports (piece k's rail all-reduce beside piece k+1's
reduce-scatter) leave no closed form that follows them.
The simulation then runs the chosen algorithm as link transfers, sharing the links with
whatever else is in flight. There is no protocol choice (NCCL's LL/LL128/Simple trade
bandwidth for latency on a GPU's memory model); the SN40L P2P protocol streams tiles with
hardware flow control, so its per-hop latency is one number.

Which algorithms a wiring allows is ``rdu_sim.config.wiring`` (rings on a ring wiring, the
direct forms on a switched fabric, the tree too with a link per pair). Both ways round a ring
through one switched port move no more bytes per second than one way, but each half's
transfers fill the port while the other half's are in flight, as two pieces of one ring
would (so ``bidirectional_ring`` costs the ring's time with twice the pieces there).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from rdu_sim.config import wiring as wirings
from rdu_sim.config.wiring import (
    ALGORITHMS,
    allowed_algorithms,
    forced_algorithm,
    peer_levels,
)
from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.hw.collective_run import start_collective
from rdu_sim.hw.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    REDUCE_SCATTER,
    Collective,
    Topology,
    ring_time,
    tree_time,
)

POLICIES = ("auto", *ALGORITHMS)
"""``auto`` chooses per collective; a name forces that algorithm."""
KINDS = (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER)
TIE_RTOL = 1e-9
"""Estimates this close are equal (two closed forms of the same time differ in rounding)."""


@dataclass(frozen=True)
class Wiring:
    """How the sockets are wired: the kind, sockets per node, (bandwidth, latency) per class."""

    kind: wirings.Topology
    sockets_per_node: int
    intra: tuple[float, float]
    inter: tuple[float, float]
    sockets_per_rack: int | None = None  # None: no rack level
    rack: tuple[float, float] | None = None  # between racks (None: as between nodes)
    # a send to another node crosses the in-node port first (switched only; the hardware's
    # ``system.network_through_node_port``: ``hw.collectives``)
    network_through_node_port: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("ring", "fully_connected", "switched"):
            raise ValueError(f"unknown wiring {self.kind!r}")
        if self.network_through_node_port and self.kind != "switched":
            raise ValueError("a send crosses the in-node port to the network only when switched")
        for bw, lat in (self.intra, self.inter, self.rack or self.inter):
            if bw <= 0 or lat < 0:
                raise ValueError(f"link bandwidth must be > 0 and latency >= 0: {bw}, {lat}")


@dataclass(frozen=True)
class Estimate:
    """One algorithm's cost on idle links."""

    algorithm: str
    hops: int  # link hops in sequence (each pays the per-hop latency)
    # bytes through the binding link direction or port (the one whose bytes take longest
    # at its bandwidth: a slower class's port may carry fewer bytes and bind)
    bytes_per_link: float
    # the rest of the idle-link time above bandwidth_s: the hops' latencies, a pipeline's
    # fill, one port's wait for another, less what the pieces overlap (not hops x latency)
    latency_s: float
    # the binding link direction or port's bytes over its bandwidth: bytes_per_link at that
    # direction's bandwidth when it also carries the most bytes
    bandwidth_s: float
    # where the estimate simulated the call: the seconds each link direction or port it used
    # is busy (its bytes over its bandwidth), by name (``Topology.directions``, socket 0's
    # for the symmetric shortcut), for a choice between calls that share them
    # (``engine.collective_port.plan_all_to_alls``); empty for a closed form
    busy_s: tuple[tuple[str, float], ...] = ()

    @property
    def time_s(self) -> float:
        """Estimated time: latency term plus bandwidth term."""
        return self.latency_s + self.bandwidth_s


@dataclass(frozen=True)
class CollectivePlan:
    """The algorithm chosen for one collective message, with every candidate's estimate."""

    kind: str
    group: int
    message_bytes: float
    policy: str
    chosen: Estimate
    candidates: tuple[Estimate, ...]

    @property
    def algorithm(self) -> str:
        """The algorithm that runs."""
        return self.chosen.algorithm


def _check(kind: str, group: int, nbytes: float, pieces: int) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown collective {kind!r}; valid: {', '.join(KINDS)}")
    if group < 1 or nbytes < 0 or pieces < 1:
        raise ValueError(f"need group >= 1, nbytes >= 0, pieces >= 1: {group}, {nbytes}, {pieces}")


def candidates(kind: str, wiring: Wiring, group: int) -> tuple[str, ...]:
    """Algorithms ``wiring`` can run for ``kind`` over ``group`` sockets."""
    _check(kind, group, 0.0, 1)
    return allowed_algorithms(kind == ALL_REDUCE, wiring.kind, group, wiring.sockets_per_node)


def link_classes(wiring: Wiring, group: int) -> list[tuple[int, float, float]]:
    """(peers, bandwidth, latency) per link class a socket reaches in its group of
    consecutive sockets: within its node, its rack's other nodes, other racks."""
    links = {"node": wiring.intra, "rack": wiring.inter, "racks": wiring.rack or wiring.inter}
    levels = peer_levels(group, wiring.sockets_per_node, wiring.sockets_per_rack)
    return [(peers, *links[level]) for peers, level in levels]


def estimate(
    kind: str, algorithm: str, nbytes: float, group: int, wiring: Wiring, pieces: int = 1
) -> Estimate:
    """``algorithm``'s cost for a ``kind`` of ``nbytes`` (NCCL-style: the all-reduce vector,
    the all-gather output, the reduce-scatter input) in ``pieces`` pieces: its time alone on
    idle links as the simulation runs it (module docstring), in closed form inside one node,
    simulated across nodes (:func:`alone`)."""
    _check(kind, group, nbytes, pieces)
    p = group
    if p == 1 or nbytes == 0:
        return Estimate(algorithm, 0, 0.0, 0.0, 0.0)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown collective algorithm {algorithm!r}; valid: {ALGORITHMS}")
    if algorithm in ("tree", "two_shot", "hierarchical") and kind != ALL_REDUCE:
        raise ValueError(f"{algorithm} runs all-reduce only, not {kind!r}")
    if p > wiring.sockets_per_node or algorithm == "hierarchical":
        return alone(kind, algorithm, nbytes, group, wiring, pieces)
    bw, lat = wiring.intra
    if algorithm in ("ring", "bidirectional_ring"):
        steps = 2 * (p - 1) if kind == ALL_REDUCE else p - 1
        both = algorithm == "bidirectional_ring" and p > 2
        if both and wiring.kind == "switched":  # two half rings through one port
            total = ring_time(p, nbytes, bw, lat, 2 * pieces, kind)
            per_link = steps * nbytes / p
        else:
            total = ring_time(p, nbytes, bw, lat, pieces, kind, bidirectional=both)
            per_link = steps * nbytes / p / (2 if both else 1)
        return _closed(algorithm, steps, per_link, bw, total)
    if algorithm == "tree":
        hops = 2 * math.floor(math.log2(p))
        total = tree_time(p, nbytes, bw, lat, pieces)
        return _closed(algorithm, hops, nbytes, bw, total)
    shard = nbytes if (algorithm == "one_shot" and kind == ALL_REDUCE) else nbytes / p
    phases = 2 if algorithm == "two_shot" else 1
    sends = p - 1 if wiring.kind == "switched" else 1  # sends sharing one port or link
    u = sends * shard / pieces / bw  # one piece of one phase through the port
    if phases == 1:
        t = pieces * u + lat
    else:
        t = max(2 * pieces * u + lat, 2 * (u + lat) + (pieces - 1) * u)
    return _closed(algorithm, phases, phases * sends * shard, bw, t)


def _closed(
    algorithm: str, hops: int, per_link: float, bandwidth: float, time_s: float
) -> Estimate:
    """A closed form's ``time_s`` split as :func:`split` does, its links identical: the
    busiest direction's ``per_link`` bytes at ``bandwidth``, the latency term the rest."""
    return Estimate(algorithm, hops, per_link, time_s - per_link / bandwidth, per_link / bandwidth)


def idle_topology(wiring: Wiring, group: int) -> Topology:
    """The first ``group`` sockets of ``wiring`` on idle links, on their own clock: what
    :func:`alone` (and the all-to-all's estimate) simulates a call on."""
    rack = wiring.rack
    return Topology(
        CountingEnvironment(),
        group,
        wiring.sockets_per_node,
        *wiring.intra,
        *wiring.inter,
        switched=wiring.kind == "switched",
        sockets_per_rack=wiring.sockets_per_rack,
        rack_bandwidth=None if rack is None else rack[0],
        rack_latency=None if rack is None else rack[1],
        network_through_node_port=wiring.network_through_node_port,
    )


def split(algorithm: str, hops: int, topo: Topology, time_s: float) -> Estimate:
    """A call's ``time_s`` on ``topo``'s idle links, split so the terms add up: the bandwidth
    term is the binding link direction or port's bytes over its bandwidth (the most of
    those), ``bytes_per_link`` that direction's bytes; the latency term the rest (the hops'
    latencies, a pipeline's fill and the waits of one port for another, less what the pieces
    overlap); ``busy_s`` each direction's or port's busy seconds."""
    topo.chains.flush()
    bound, busiest = 0.0, 0.0
    busy: list[tuple[str, float]] = []
    for link, d, _ in topo.directions():
        nbytes = link.bytes[d].total
        if nbytes > 0:
            busy.append((f"{link.name}/{d}", nbytes / link.bandwidth))
        if nbytes / link.bandwidth > bound:
            bound, busiest = nbytes / link.bandwidth, nbytes
    return Estimate(algorithm, hops, busiest, time_s - bound, bound, tuple(busy))


def tied(ests: tuple[Estimate, ...]) -> list[Estimate]:
    """The estimates equal to the smallest, to rounding (``TIE_RTOL``): what a tie-break
    chooses among."""
    best = min(e.time_s for e in ests)
    return [e for e in ests if e.time_s <= best * (1 + TIE_RTOL)]


@functools.lru_cache(maxsize=4096)
def alone(
    kind: str, algorithm: str, nbytes: float, group: int, wiring: Wiring, pieces: int
) -> Estimate:
    """``algorithm``'s ``kind`` of ``nbytes`` in ``pieces`` pieces simulated alone over the
    first ``group`` sockets of ``wiring`` on idle links (the symmetric shortcut the engine's
    ports run, exact: ``hw.collective_run``): its time, split by :func:`split`. Memoized: a
    serving run asks for the same messages again at every step of a shape."""
    topo = idle_topology(wiring, group)
    env = topo.env
    done = start_collective(topo, Collective(kind, nbytes, pieces, symmetric=True), algorithm)
    env.run()
    assert done.triggered
    hops, _ = latency_term(kind, algorithm, group, wiring)
    return split(algorithm, hops, topo, float(env.now))


def latency_term(kind: str, algorithm: str, group: int, wiring: Wiring) -> tuple[int, float]:
    """(hops in sequence, their latency) of ``algorithm`` over ``group`` sockets: each hop at
    the largest latency of the link classes the group spans; the hierarchical form's two
    hops inside a node at the in-node latency, its rail's two at the network's."""
    classes = link_classes(wiring, group)
    lat = max(c[2] for c in classes)
    if algorithm == "hierarchical":
        network = max(c[2] for c in classes[1:]) if len(classes) > 1 else lat
        return 4, 2 * wiring.intra[1] + 2 * network
    if algorithm in ("ring", "bidirectional_ring"):
        hops = 2 * (group - 1) if kind == ALL_REDUCE else group - 1
    elif algorithm == "tree":
        hops = 2 * math.floor(math.log2(group))
    else:
        hops = 2 if algorithm == "two_shot" else 1
    return hops, hops * lat


def choose(
    kind: str, nbytes: float, group: int, wiring: Wiring, policy: str = "auto", pieces: int = 1
) -> CollectivePlan:
    """The plan for one ``kind`` collective: ``policy`` "auto" takes the candidate with the
    smallest estimate (ties: the smaller latency term, then the first in ``ALGORITHMS``); a
    name forces that algorithm, which must be a candidate of ``wiring``."""
    if policy not in POLICIES:
        raise ValueError(f"unknown collective algorithm {policy!r}; valid: {', '.join(POLICIES)}")
    names = candidates(kind, wiring, group)
    ests = tuple(estimate(kind, a, nbytes, group, wiring, pieces) for a in names)
    if policy == "auto":
        # equal estimates (to rounding): fewer hops in sequence first (less exposed when the
        # pieces trickle in behind their producer), then the simpler algorithm
        chosen = min(
            tied(ests),
            key=lambda e: (
                latency_term(kind, e.algorithm, group, wiring)[1],
                ALGORITHMS.index(e.algorithm),
            ),
        )
    else:
        name = forced_algorithm(kind == ALL_REDUCE, policy)  # type: ignore[arg-type]
        if name not in names:
            raise ValueError(
                f"collective algorithm {policy!r} cannot run a {kind} over {group} sockets "
                f"wired as {wiring.kind!r}; it allows: {', '.join(names)}"
            )
        chosen = ests[names.index(name)]
    return CollectivePlan(kind, group, nbytes, policy, chosen, ests)
