"""Which collective algorithm to run, chosen per message size and wiring as a communication
library does: a cost estimate per candidate, latency and bandwidth terms kept apart.

Like NCCL's tuning model (per algorithm a latency of hops in sequence times a per-hop
latency, plus bytes over bandwidth; the smallest estimate wins), each candidate's estimate is
its time on idle links: ``latency_s`` = hops in sequence x per-hop latency, ``bandwidth_s`` =
the rest (the serialisation on the busiest link direction or port, including what its
pipeline of pieces leaves exposed). For one node of identical links it is exactly the time
the simulation gives the collective alone (``hw.collectives``, ``hw.direct_collectives``;
the tests check it); across nodes it uses the slower link class for the ring and the tree and
each port class separately for the direct forms, or, when the network is reached through the
in-node port (``network_through_node_port``), that port carrying every send and each
network port behind it (exact for one piece of a direct form). The simulation then runs the chosen
algorithm as link transfers, sharing the links with whatever else is in flight. There is no
protocol choice (NCCL's LL/LL128/Simple trade bandwidth for latency on a GPU's memory
model); the SN40L P2P protocol streams tiles with hardware flow control, so its per-hop
latency is one number.

Which algorithms a wiring allows is ``rdu_sim.config.wiring`` (rings on a ring wiring, the
direct forms on a switched fabric, the tree too with a link per pair). Both ways round a ring
through one switched port move no more bytes per second than one way, but each half's
transfers fill the port while the other half's are in flight, as two pieces of one ring
would (so ``bidirectional_ring`` costs the ring's time with twice the pieces there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rdu_sim.config.wiring import (
    ALGORITHMS,
    Topology,
    allowed_algorithms,
    forced_algorithm,
    peer_levels,
)
from rdu_sim.hw.collectives import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, ring_time, tree_time

POLICIES = ("auto", *ALGORITHMS)
"""``auto`` chooses per collective; a name forces that algorithm."""
KINDS = (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER)
TIE_RTOL = 1e-9
"""Estimates this close are equal (two closed forms of the same time differ in rounding)."""


@dataclass(frozen=True)
class Wiring:
    """How the sockets are wired: the kind, sockets per node, (bandwidth, latency) per class."""

    kind: Topology
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
    bytes_per_link: float  # bytes the busiest link direction (or port) carries
    latency_s: float  # hops x per-hop latency
    bandwidth_s: float  # the rest of the idle-link time

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
    the all-gather output, the reduce-scatter input) in ``pieces`` pieces (module docstring)."""
    _check(kind, group, nbytes, pieces)
    p = group
    if p == 1 or nbytes == 0:
        return Estimate(algorithm, 0, 0.0, 0.0, 0.0)
    classes = link_classes(wiring, p)
    bw = min(c[1] for c in classes)  # the slower class bounds a ring or tree step
    if wiring.network_through_node_port and p > wiring.sockets_per_node:
        bw = min(bw, wiring.intra[0])  # a step to another node crosses the in-node port too
    lat = max(c[2] for c in classes)
    if algorithm in ("ring", "bidirectional_ring"):
        steps = 2 * (p - 1) if kind == ALL_REDUCE else p - 1
        both = algorithm == "bidirectional_ring" and p > 2
        if both and wiring.kind == "switched":  # two half rings through one port
            total = ring_time(p, nbytes, bw, lat, 2 * pieces, kind)
            per_link = steps * nbytes / p
        else:
            total = ring_time(p, nbytes, bw, lat, pieces, kind, bidirectional=both)
            per_link = steps * nbytes / p / (2 if both else 1)
        return Estimate(algorithm, steps, per_link, steps * lat, total - steps * lat)
    if algorithm == "tree":
        if kind != ALL_REDUCE:
            raise ValueError(f"tree runs all-reduce only, not {kind!r}")
        hops = 2 * math.floor(math.log2(p))
        total = tree_time(p, nbytes, bw, lat, pieces)
        return Estimate(algorithm, hops, nbytes, hops * lat, total - hops * lat)
    if algorithm == "hierarchical":
        return _hierarchical(nbytes, group, wiring, pieces)
    if algorithm not in ("one_shot", "two_shot"):
        raise ValueError(f"unknown collective algorithm {algorithm!r}; valid: {ALGORITHMS}")
    if algorithm == "two_shot" and kind != ALL_REDUCE:
        raise ValueError(f"two_shot runs all-reduce only, not {kind!r}")
    shard = nbytes if (algorithm == "one_shot" and kind == ALL_REDUCE) else nbytes / p
    phases = 2 if algorithm == "two_shot" else 1
    if wiring.network_through_node_port and p > wiring.sockets_per_node:
        local = 1 if wiring.sockets_per_node > 1 else 0  # classes[:local]: within the node
        return _direct_in_series(algorithm, shard, phases, classes, wiring.intra[0], local, pieces)
    worst = (0.0, 0.0, 0.0)  # (time, bytes per link, latency term)
    for peers, c_bw, c_lat in classes:
        sends = peers if wiring.kind == "switched" else 1  # sends sharing one port or link
        u = sends * shard / pieces / c_bw  # one piece of one phase through the port
        if phases == 1:
            t = pieces * u + c_lat
        else:
            t = max(2 * pieces * u + c_lat, 2 * (u + c_lat) + (pieces - 1) * u)
        if t > worst[0]:
            worst = (t, phases * sends * shard, phases * c_lat)
    t, per_link, lat_term = worst
    return Estimate(algorithm, phases, per_link, lat_term, t - lat_term)


def _direct_in_series(
    algorithm: str,
    shard: float,
    phases: int,
    classes: list[tuple[int, float, float]],
    node_bw: float,
    network_from: int,
    pieces: int,
) -> Estimate:
    """A direct form's estimate when every send leaves through the in-node port (``node_bw``)
    and a send to another node (``classes[network_from:]``) then through its class's port,
    in series. Socket 0 sends in class order (``send_order``), so a class's port starts when
    the node port reaches its first send (``first``) and the class is done when the slower
    of the two ports is through: the node port streaming everything (then the class's last
    sends running on at the class's rate), the class's port streaming from its first send,
    or (two-shot) one piece's phases in sequence then the rest of the pieces at the slower
    port's rate. Exact for one piece."""
    node_u = sum(peers for peers, _, _ in classes) * shard / pieces / node_bw
    worst = (0.0, 0.0, 0.0)  # (time, bytes per link, latency term)
    first = 0.0  # node-port time of one piece's sends before this class's
    for index, (peers, c_bw, c_lat) in enumerate(classes):
        stage1 = peers * shard / pieces / node_bw
        if index < network_from:  # within the node: the node port alone, sent first
            first += stage1
            continue
        own = peers * shard / pieces / c_bw
        # the node port streams every piece; the class's last sends leave it ``after`` its
        # end and run on for what the class's port is slower
        after = node_u - first - stage1
        tail = (own - stage1 if own > stage1 else 0.0) - after
        if phases == 1:
            t = max(pieces * node_u + tail, first + pieces * own) + c_lat
        else:
            t = max(
                2 * pieces * node_u + tail + c_lat,
                first + 2 * pieces * own + c_lat,
                2 * (max(node_u, first + own) + c_lat) + (pieces - 1) * max(node_u, own),
            )
        first += stage1
        if t > worst[0]:
            worst = (t, phases * sum(p for p, _, _ in classes) * shard, phases * c_lat)
    t, per_link, lat_term = worst
    return Estimate(algorithm, phases, per_link, lat_term, t - lat_term)


def _hierarchical(nbytes: float, group: int, wiring: Wiring, pieces: int) -> Estimate:
    """The hierarchical all-reduce (``hw.hierarchical``): its three phases' estimates added
    (inside a node, across nodes on one rail, inside a node again). A rail's socket is alone
    in its node of the rail's wiring; when its network traffic crosses its in-node port, that
    port (at the in-node bandwidth) is the rail's node port."""
    local = wiring.sockets_per_node
    nodes = group // local
    rack_nodes = None if wiring.sockets_per_rack is None else wiring.sockets_per_rack // local
    node = wiring.intra if wiring.network_through_node_port else wiring.inter
    rail = Wiring(
        wiring.kind,
        1,
        node,
        wiring.inter,
        rack_nodes,
        wiring.rack,
        wiring.network_through_node_port,
    )
    phases = (
        estimate(REDUCE_SCATTER, "one_shot", nbytes, local, wiring, pieces),
        estimate(ALL_REDUCE, "two_shot", nbytes / local, nodes, rail, pieces),
        estimate(ALL_GATHER, "one_shot", nbytes, local, wiring, pieces),
    )
    return Estimate(
        "hierarchical",
        sum(e.hops for e in phases),
        max(e.bytes_per_link for e in phases),
        sum(e.latency_s for e in phases),
        sum(e.bandwidth_s for e in phases),
    )


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
        best = min(e.time_s for e in ests)
        tied = [e for e in ests if e.time_s <= best * (1 + TIE_RTOL)]
        chosen = min(tied, key=lambda e: (e.latency_s, ALGORITHMS.index(e.algorithm)))
    else:
        name = forced_algorithm(kind == ALL_REDUCE, policy)  # type: ignore[arg-type]
        if name not in names:
            raise ValueError(
                f"collective algorithm {policy!r} cannot run a {kind} over {group} sockets "
                f"wired as {wiring.kind!r}; it allows: {', '.join(names)}"
            )
        chosen = ests[names.index(name)]
    return CollectivePlan(kind, group, nbytes, policy, chosen, ests)
