"""A run's P2P links from the system description, and what socket 0 did on them.

One rule for both engines (SN40L's kernel simulation and a GPU's): the ``Topology`` of a TP
group built from ``SystemConfig`` (link classes within a node, between nodes, between racks;
links per pair or a switched port per socket), and the link totals a run reports: the bytes
socket 0 sent and the busiest link direction's serialisation time, of each link class.
"""

from __future__ import annotations

from rdu_sim.config.hardware import SystemConfig
from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.hw.collectives import Topology


def topology_for(env: CountingEnvironment, tp: int, system: SystemConfig) -> Topology:
    """The links among ``tp`` sockets (or GPUs) of ``system``, created as they are used."""
    return Topology(
        env,
        tp,
        system.sockets_per_node,
        system.intra_node_link.bandwidth,
        system.intra_node_link.latency,
        system.inter_node_link.bandwidth,
        system.inter_node_link.latency,
        switched=system.topology == "switched",
        sockets_per_rack=system.sockets_per_rack,
        rack_bandwidth=None if system.inter_rack_link is None else system.inter_rack_link.bandwidth,
        rack_latency=None if system.inter_rack_link is None else system.inter_rack_link.latency,
        network_through_node_port=system.network_through_node_port,
    )


LINK_FIELDS: tuple[str, ...] = ("intra_node_link", "inter_node_link", "inter_rack_link")
"""The hardware's ``system.*`` field of each ``Topology.link_class`` (0, 1, 2)."""


def link_field(topo: Topology, i: int, j: int) -> str:
    """The ``system.*`` field whose link joins devices ``i`` and ``j`` of ``topo`` (what a
    report names a transfer's link by: ``hw.system.<field>`` sets it)."""
    return LINK_FIELDS[topo.link_class(i, j)]


LinkTimes = tuple[float, float, float]
"""A time of each link class, in ``LINK_FIELDS``' order."""


def link_totals(topo: Topology) -> tuple[float, LinkTimes, LinkTimes]:
    """(bytes socket 0 sent, the busiest link direction's serialisation time of each link
    class, the longest time a direction of each class had a transfer under way: from its
    first byte leaving to its arrival, latency included, ``P2PLink.flight_time``) so far,
    after the symmetric collectives' sends computed ahead are flushed up to now. The busiest
    direction of all is the largest of the three."""
    topo.chains.flush()
    busiest = [0.0, 0.0, 0.0]
    flight = [0.0, 0.0, 0.0]
    for link_class, link, direction in topo.classed_directions():
        busiest[link_class] = max(busiest[link_class], link.busy_time(direction))
        flight[link_class] = max(flight[link_class], link.flight_time(direction))
    return (
        topo.bytes_sent(0),
        (busiest[0], busiest[1], busiest[2]),
        (flight[0], flight[1], flight[2]),
    )


BUSY_FIELDS: tuple[str, ...] = tuple(f"{field}_busy_s" for field in LINK_FIELDS)
FLIGHT_FIELDS: tuple[str, ...] = tuple(f"{field}_flight_s" for field in LINK_FIELDS)
"""``RunStats``' field of each link class's busy and flight time (named once: a kernel
simulation builds its totals at every fast-forward mark)."""


def link_busy_fields(busiest: LinkTimes, flight: LinkTimes) -> dict[str, float]:
    """``RunStats``' link times from ``link_totals``' of each class: the busiest direction's
    serialisation (``<field>_busy_s``, and the busiest of all ``link_busy_s``) and its time
    under way (``<field>_flight_s``, ``link_flight_s``)."""
    return {
        "link_busy_s": max(busiest),
        **dict(zip(BUSY_FIELDS, busiest, strict=True)),
        "link_flight_s": max(flight),
        **dict(zip(FLIGHT_FIELDS, flight, strict=True)),
    }
