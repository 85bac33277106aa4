"""Collectives across sockets, simulated as individual P2P link transfers.

Topology: ``n_sockets`` sockets, ``sockets_per_node`` per node (and, with a rack level,
``sockets_per_rack`` per rack: three link classes, within a node, between the nodes of a rack
and between racks; without one, every other node is of the second class), wired one of two ways
(SN40L's real wiring is not public; docs/calibration.md says what the shipped files assume):

* links per pair (``switched=False``): every pair of sockets has its own full-duplex
  :class:`P2PLink` (created on first use), with intra-node or inter-node bandwidth/latency.
  A ring wiring uses only the neighbour pairs; a fully connected one any pair;
* switched (``switched=True``): each socket has one egress port per link class (within its
  node, to other nodes of its rack, to other racks) into a non-blocking switch, a FIFO
  :class:`P2PLink` direction that everything the socket sends on that class shares; any
  socket reaches any other in one hop. Ingress ports are not a separate resource: every
  schedule here sends in rotated order (at each position of its send sequence a socket's
  peers are a permutation), so no port receives faster than its peer sends. With
  ``network_through_node_port`` (a socket with one I/O unit, SN40L's AGCU) what a socket
  sends to another node or rack crosses its in-node port first and then its port of that
  class, two FIFO servers in series (``P2PLink.transfer_via``): it queues behind the socket's
  in-node traffic and is bound by the slower port. Without it (a GPU with its own NIC) each
  class's port is the socket's own.

Algorithms (``nbytes`` is NCCL-style: the all-reduce vector, the all-gather
output, the reduce-scatter input, per socket):

* ring: ``steps`` = 2(p-1) for all-reduce (reduce-scatter then all-gather),
  p-1 for the others, each moving ``nbytes / p`` per socket, split into
  ``chunks`` that flow around the ring back to back: chunk k of step s leaves
  as soon as chunk k of step s-1 has arrived and the link is free.
* tree (all-reduce only): binary heap tree over the participants, chunked
  reduce towards the root then broadcast back, each edge its own link.
* bidirectional ring (``bidirectional=True``; hardware ``collective_algorithm:
  bidirectional_ring``): half of the data goes around the ring one way and half the other
  way, concurrently, so each socket sends on both of its neighbour links (each full duplex)
  instead of one: the same steps and latency, half the bytes per link direction. The reverse
  ring is the mirror image of the forward one, so the symmetric shortcut applies to it too.

``symmetric=True`` exploits the ring's rotational symmetry. Every socket starts each chunk at
the same instant and does the same thing, and rotating the ring by ``d`` positions maps it onto
itself (link parameters included) when ``d`` is the period of its hop sequence: 1 for identical
hops, ``sockets_per_node`` for a ring over several nodes (``d - 1`` intra-node hops then one
inter-node hop). The whole collective is then a function of the position modulo ``d``: socket
``r + d`` receives chunk (s, k) exactly when socket ``r`` does. So only sockets ``0 .. d-1`` and
their outgoing links are simulated, and what socket ``d - 1`` sends on its (inter-node) link
lands on socket 0 as the data socket ``d`` would receive: the simulated ring closes back on
itself. This is exact (same event times as the full ring) for any hop mix with that period,
at ``d / p`` of the full ring's events (for identical hops: one socket's chain, socket 0's
outgoing link only). Only the simulated links' counters move: the p2p bytes socket 0 sends are
its own link's. For a tree it simulates the deepest root-leaf path (exact for identical
links). Reduction arithmetic is not charged here: it is fused into the consuming stage's PCUs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rdu_sim.des.environment import CountingEnvironment, Event
from rdu_sim.hw.link_chains import Hop, LinkChains, hop_of
from rdu_sim.hw.p2p_link import P2PLink
from rdu_sim.hw.p2p_link import series as ports_in_series
from rdu_sim.hw.port_queue import PortQueue
from rdu_sim.pickled import Reduced, by_fields

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER = "all_reduce", "all_gather", "reduce_scatter"
KINDS = (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER)
"""The collectives the links run, by their hw names."""


@dataclass(frozen=True)
class Collective:
    """One collective call, whatever algorithm runs it: its ``kind``, ``nbytes`` per socket
    (NCCL-style, module docstring), sent in ``chunks`` pieces, over ``sockets`` (None: every
    socket of the topology), simulated whole or by the ``symmetric`` shortcut, its transfers
    tagged ``tag`` in the trace. Checked once here, for every algorithm."""

    kind: str
    nbytes: float
    chunks: int = 1
    symmetric: bool = False
    sockets: tuple[int, ...] | None = None
    tag: str | None = None

    def __reduce__(self) -> Reduced:
        return by_fields(self)  # (compiled, a frozen dataclass: ``rdu_sim.pickled``)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown collective {self.kind!r}; valid: {', '.join(KINDS)}")
        if self.chunks < 1 or self.nbytes < 0:
            raise ValueError(
                f"chunks must be >= 1 and nbytes >= 0, got {self.chunks}, {self.nbytes}"
            )

    def ids(self, topo: Topology) -> list[int]:
        """The sockets taking part, in ring order."""
        return list(range(topo.n_sockets)) if self.sockets is None else list(self.sockets)

    def over(self, sockets: Sequence[int], nbytes: float) -> Collective:
        """The same call over other ``sockets`` (in that order) with ``nbytes``."""
        return Collective(self.kind, nbytes, self.chunks, self.symmetric, tuple(sockets), self.tag)


class Topology:
    """Which link joins sockets i and j, with intra-node vs inter-node parameters."""

    def __init__(
        self,
        env: CountingEnvironment,
        n_sockets: int,
        sockets_per_node: int,
        intra_bandwidth: float,
        intra_latency: float = 0.0,
        inter_bandwidth: float | None = None,
        inter_latency: float | None = None,
        switched: bool = False,
        sockets_per_rack: int | None = None,
        rack_bandwidth: float | None = None,
        rack_latency: float | None = None,
        network_through_node_port: bool = False,
    ) -> None:
        if n_sockets < 1 or sockets_per_node < 1:
            raise ValueError(f"n_sockets and sockets_per_node must be >= 1: {n_sockets}")
        if sockets_per_rack is not None and sockets_per_rack % sockets_per_node:
            raise ValueError(f"a rack of {sockets_per_rack} is not whole nodes")
        for field, value in (
            ("intra_bandwidth", intra_bandwidth),
            ("inter_bandwidth", inter_bandwidth),
            ("rack_bandwidth", rack_bandwidth),
        ):
            if value is not None and value <= 0:
                raise ValueError(f"topology.{field} must be > 0, got {value}")
        for field, value in (
            ("intra_latency", intra_latency),
            ("inter_latency", inter_latency),
            ("rack_latency", rack_latency),
        ):
            if value is not None and value < 0:
                raise ValueError(f"topology.{field} must be >= 0, got {value}")
        self.env = env
        self.n_sockets = n_sockets
        self.sockets_per_node = sockets_per_node
        self.intra = (float(intra_bandwidth), float(intra_latency))
        self.inter = (
            self.intra[0] if inter_bandwidth is None else float(inter_bandwidth),
            self.intra[1] if inter_latency is None else float(inter_latency),
        )
        self.sockets_per_rack = n_sockets if sockets_per_rack is None else sockets_per_rack
        self.rack = (
            self.inter[0] if rack_bandwidth is None else float(rack_bandwidth),
            self.inter[1] if rack_latency is None else float(rack_latency),
        )
        if network_through_node_port and not switched:
            raise ValueError("a send crosses the in-node port to the network only when switched")
        self.switched = switched
        # a send to another node crosses the sender's in-node port first (the hardware's
        # ``system.network_through_node_port``, resolved by the caller)
        self.series = network_through_node_port
        self.links: dict[tuple[int, int], P2PLink] = {}  # per pair (not switched)
        self.ports: dict[tuple[int, int], P2PLink] = {}  # (socket, link class) (switched)
        # Symmetric collectives' chains of transfers, computed in plain Python (exact, a few
        # SimPy events per collective); False: one SimPy event per transfer (the reference).
        self.fast_chains = True
        self.chains = LinkChains(env)
        self._hops: dict[tuple[int, int], Hop] = {}  # (src, dst) -> its link direction
        # sends served oldest piece first, by the port direction they enter (``send_by_age``)
        self.queues: dict[tuple[P2PLink, int], PortQueue] = {}

    def same_node(self, i: int, j: int) -> bool:
        """True when sockets i and j sit in the same node."""
        return i // self.sockets_per_node == j // self.sockets_per_node

    def link_class(self, i: int, j: int) -> int:
        """0 within a node, 1 between the nodes of a rack, 2 between racks."""
        if self.same_node(i, j):
            return 0
        return 1 if i // self.sockets_per_rack == j // self.sockets_per_rack else 2

    def params(self, i: int, j: int) -> tuple[float, float]:
        """(bandwidth, latency) of the link between i and j."""
        if self.same_node(i, j):
            return self.intra
        return self.inter if self.link_class(i, j) == 1 else self.rack

    def link(self, i: int, j: int) -> tuple[P2PLink, int]:
        """The link joining i and j (switched: i's egress port for j's link class), and the
        direction index for sending i -> j."""
        if i == j or not (0 <= i < self.n_sockets and 0 <= j < self.n_sockets):
            raise ValueError(f"no link between sockets {i} and {j} of {self.n_sockets}")
        if self.switched:
            return self.port(i, self.link_class(i, j)), 0
        key = (i, j) if i < j else (j, i)  # (min, max) without two calls (per link transfer)
        if key not in self.links:
            bw, lat = self.params(i, j)
            self.links[key] = P2PLink(self.env, bw, lat, name=f"p2p{key[0]}-{key[1]}")
        return self.links[key], 0 if i < j else 1

    def port(self, i: int, link_class: int) -> P2PLink:
        """Socket ``i``'s egress port of ``link_class`` (switched wiring), made on first use."""
        port = self.ports.get((i, link_class))
        if port is None:
            bw, lat = (self.intra, self.inter, self.rack)[link_class]
            name = f"port{i}{('', '.inter', '.rack')[link_class]}"
            port = self.ports[(i, link_class)] = P2PLink(self.env, bw, lat, name=name)
        return port

    def via(self, i: int, j: int) -> P2PLink | None:
        """The port a send ``i -> j`` crosses before its own (``i``'s in-node port, when the
        network is reached through it and ``j`` is in another node), else None."""
        if not self.series or self.same_node(i, j):
            return None
        return self.port(i, 0)

    def idle_transfer_time(self, src: int, dst: int, nbytes: float) -> float:
        """Seconds one send ``src -> dst`` of ``nbytes`` takes on idle ports: its link's
        latency after its bytes, through the in-node port first where ``via`` says so
        (``p2p_link.series``: the slower port binds)."""
        link, _direction = self.link(src, dst)
        via = self.via(src, dst)
        if via is None:
            return link.transfer_time(nbytes)
        end = ports_in_series(0.0, 0.0, via.bandwidth, 0.0, link.bandwidth, nbytes)[3]
        return end + link.latency

    def send(self, src: int, dst: int, nbytes: float, tag: str | None = None) -> Event:
        """Transfer ``nbytes`` from ``src`` to ``dst``; fires on arrival."""
        link, direction = self.link(src, dst)
        via = self.via(src, dst) if self.series else None
        if not self.chains.busy:
            if via is not None:
                return link.transfer_via(via, nbytes, tag)
            return link.transfer(nbytes, direction, tag)
        self.chains.interrupt()  # the chains' sends computed ahead must come after this one
        if via is not None:
            ev = link.transfer_via(via, nbytes, tag)
        else:
            ev = link.transfer(nbytes, direction, tag)
        self.chains.resume()
        return ev

    def send_by_age(
        self, src: int, dst: int, nbytes: float, age: float, tag: str | None = None
    ) -> Event:
        """:meth:`send` once the first port it crosses (``via``'s, else its own) is free and
        no older send waits for that port: waiting sends are served oldest piece first,
        ``age`` the time its piece was handed to the links (``hw.port_queue``)."""
        via = self.via(src, dst) if self.series else None
        key = (via, 0) if via is not None else self.link(src, dst)
        queue = self.queues.get(key)
        if queue is None:
            queue = self.queues[key] = PortQueue(self.env, key[0], key[1], self.chains)
        return queue.send(age, lambda: self.send(src, dst, nbytes, tag))

    def directions(self) -> list[tuple[P2PLink, int, int]]:
        """(link, direction, sending socket) for every link direction created so far."""
        out: list[tuple[P2PLink, int, int]] = []
        for (a, b), link in sorted(self.links.items()):
            out += [(link, 0, a), (link, 1, b)]
        out += [(port, 0, socket) for (socket, _), port in sorted(self.ports.items())]
        return out

    def classed_directions(self) -> list[tuple[int, P2PLink, int]]:
        """(link class, link, direction) for every link direction created so far: a pair's
        link is of its sockets' class, a switched port of its own (``link_class``)."""
        out: list[tuple[int, P2PLink, int]] = []
        for (a, b), link in sorted(self.links.items()):
            c = self.link_class(a, b)
            out += [(c, link, 0), (c, link, 1)]
        out += [(c, port, 0) for (_, c), port in sorted(self.ports.items())]
        return out

    def bytes_sent(self, socket: int) -> float:
        """Bytes ``socket`` has sent on its links so far, each once (a send to another node
        that crossed its in-node port first is counted there, not again on the network's)."""
        behind = {id(port) for (_, c), port in self.ports.items() if self.series and c > 0}
        return sum(
            link.bytes[direction].total
            for link, direction, sender in self.directions()
            if sender == socket and id(link) not in behind
        )

    def hop(self, src: int, dst: int) -> Hop:
        """The link direction ``src -> dst`` as :class:`LinkChains` sends on it (made once
        per pair: a symmetric collective asks for its hops every time it starts)."""
        hop = self._hops.get((src, dst))
        if hop is None:
            hop = self._hops[(src, dst)] = hop_of(*self.link(src, dst), self.via(src, dst))
        return hop


def _on(ev: Event, fn: Callable[..., None], *args: int) -> None:
    """Call ``fn(*args)`` when ``ev`` is processed (cheaper than a process)."""
    ev.add_callback(lambda _ev: fn(*args))


class Countdown:
    """Fires ``done`` (value: time) after ``n`` calls to ``tick``."""

    def __init__(self, env: CountingEnvironment, n: int) -> None:
        self.env, self.left, self.done = env, n, env.event()
        if n == 0:
            self.done.succeed(env.now)

    def tick(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.done.succeed(self.env.now)


def ring_steps(kind: str, p: int) -> int:
    """Ring steps: 2(p-1) for all-reduce, p-1 for all-gather and reduce-scatter."""
    if kind not in KINDS:
        raise ValueError(f"unknown collective {kind!r}")
    return 2 * (p - 1) if kind == ALL_REDUCE else p - 1


def ring_period(topo: Topology, ring_ids: Sequence[int]) -> int:
    """Smallest ``d`` dividing the ring's size such that hop ``r`` and hop ``r + d`` have the
    same (bandwidth, latency) for every ``r``: the ring's rotational symmetry."""
    n = len(ring_ids)
    hops = [topo.params(ring_ids[r], ring_ids[(r + 1) % n]) for r in range(n)]
    for d in range(1, n + 1):
        if n % d == 0 and all(hops[r] == hops[(r + d) % n] for r in range(n)):
            return d
    return n  # unreachable: d = n always qualifies


def ring(topo: Topology, call: Collective, bidirectional: bool = False) -> Event:
    """Start ``call`` as a ring collective; the returned event fires when every socket is done.
    ``bidirectional``: half of the bytes each way round the ring (module docstring)."""
    ring_ids = call.ids(topo)
    p, env, kind, chunks = len(ring_ids), topo.env, call.kind, call.chunks
    steps = ring_steps(kind, p)
    if steps == 0 or call.nbytes == 0:
        return Countdown(env, 0).done
    if bidirectional and p > 2:
        # the reverse ring: ids[s], ids[s - 1], ..., ids[0], ids[-1], ... Simulated whole it
        # starts at the same socket (s = 0); by the symmetric shortcut at ids[d - 1], so that
        # its simulated sockets (its first d) are the forward ring's (ids[0 .. d - 1]) and a
        # port both halves use is shared in the shortcut as it is in the whole ring
        s = ring_period(topo, ring_ids) - 1 if call.symmetric else 0
        reverse = [ring_ids[(s - i) % p] for i in range(p)]
        both = Countdown(env, 2)
        for ids in (ring_ids, reverse):
            half = ring(topo, call.over(ids, call.nbytes / 2))
            half.add_callback(lambda _e: both.tick())
        return both.done
    size = call.nbytes / p / chunks
    # Simulated sockets: all p, or (symmetric) the first d, socket d - 1 sending to socket d
    # whose arrivals are socket 0's (module docstring).
    sim = ring_period(topo, ring_ids) if call.symmetric else p
    tag = call.tag
    if call.symmetric and topo.fast_chains:
        hops = [topo.hop(ring_ids[r], ring_ids[(r + 1) % p]) for r in range(sim)]
        return topo.chains.start(hops, steps, size, list(range(sim)) * chunks, tag)
    count = Countdown(env, sim * chunks)

    def hop(r: int, step: int) -> None:  # socket r sends (step, chunk) to socket r + 1
        ev = topo.send(ring_ids[r], ring_ids[(r + 1) % p], size, tag)
        nxt = count.tick if step + 1 == steps else (lambda: hop((r + 1) % sim, step + 1))
        ev.add_callback(lambda _e: nxt())

    for _ in range(chunks):
        for r in range(sim):
            hop(r, 0)
    return count.done


def tree_all_reduce(topo: Topology, call: Collective) -> Event:
    """Binary-tree all-reduce: chunked reduce to the root, then broadcast back."""
    if call.kind != ALL_REDUCE:
        raise ValueError(f"the tree runs all-reduce only, not {call.kind!r}")
    ids = call.ids(topo)
    p, env, chunks, tag = len(ids), topo.env, call.chunks, call.tag
    if p == 1 or call.nbytes == 0:
        return Countdown(env, 0).done
    size = call.nbytes / chunks
    if call.symmetric:  # the deepest leaf's path up and back down
        path = [p - 1]
        while path[-1] != 0:
            path.append((path[-1] - 1) // 2)
        route = [(ids[a], ids[b]) for a, b in itertools.pairwise(path)]
        route += [(b, a) for a, b in reversed(route)]
        if topo.fast_chains:
            hops = [topo.hop(a, b) for a, b in route]
            return topo.chains.start(hops, len(route), size, [0] * chunks, tag)
        count = Countdown(env, chunks)

        def hop_sym(j: int) -> None:
            ev = topo.send(*route[j], size, tag)
            nxt = count.tick if j + 1 == len(route) else (lambda: hop_sym(j + 1))
            ev.add_callback(lambda _e: nxt())

        for _ in range(chunks):
            hop_sym(0)
        return count.done
    children = [[c for c in (2 * i + 1, 2 * i + 2) if c < p] for i in range(p)]
    waiting = [[len(children[i])] * chunks for i in range(p)]
    count = Countdown(env, (p - 1) * chunks)

    def down(i: int, k: int) -> None:
        for c in children[i]:
            ev = topo.send(ids[i], ids[c], size, tag)
            _on(ev, landed, c, k)

    def landed(i: int, k: int) -> None:  # broadcast chunk k reached node i
        count.tick()
        down(i, k)

    def reduced(i: int, k: int) -> None:  # node i holds the partial sum of chunk k
        if i == 0:
            down(0, k)
            return
        parent = (i - 1) // 2
        ev = topo.send(ids[i], ids[parent], size, tag)
        ev.add_callback(lambda _e: arrived(parent, k))

    def arrived(i: int, k: int) -> None:
        waiting[i][k] -= 1
        if waiting[i][k] == 0:
            reduced(i, k)

    for k in range(chunks):
        for i in range(p):
            if not children[i]:
                reduced(i, k)
    return count.done


def ring_time(
    p: int,
    nbytes: float,
    bandwidth: float,
    latency: float,
    chunks: int = 1,
    kind: str = ALL_REDUCE,
    bidirectional: bool = False,
) -> float:
    """Closed form of :func:`ring` on identical links (pipelined latency).

    With S steps and chunk time d = nbytes / (p * chunks * bandwidth):
    ``max(S*chunks*d + latency, S*(d + latency) + (chunks-1)*d)``: either the
    link never idles, or every step waits for the round of latency. With
    chunks=1 this is S * (latency + nbytes / (p * bandwidth)). Bidirectional (p > 2): the
    same with half of ``nbytes`` (each direction carries half, concurrently).
    """
    steps = ring_steps(kind, p)
    if steps == 0 or nbytes == 0:
        return 0.0
    if bidirectional and p > 2:
        nbytes /= 2
    d = nbytes / (p * chunks * bandwidth)
    return max(steps * chunks * d + latency, steps * (d + latency) + (chunks - 1) * d)


def tree_time(p: int, nbytes: float, bandwidth: float, latency: float, chunks: int = 1) -> float:
    """Closed form of :func:`tree_all_reduce` on identical links.

    Depth D = floor(log2 p), chunk time d = nbytes / (chunks * bandwidth):
    ``2*D*(latency + d) + (chunks - 1)*d`` (reduce up D levels, broadcast down).
    """
    if p <= 1 or nbytes == 0:
        return 0.0
    depth = math.floor(math.log2(p))
    d = nbytes / (chunks * bandwidth)
    return 2 * depth * (latency + d) + (chunks - 1) * d
