"""Which collective algorithms a socket wiring can run: the one rule that the workload check
(``rdu_sim.scenario``) and the collective chooser (``rdu_sim.hw.collective_choice``) share;
and which link class joins a socket to each peer of its group (`peer_levels`: the chooser's
and the compiler's estimates, ``compiler.query_choice``).

* ``ring``: each socket has links to its two neighbours only, so only rings run (one way, or
  half the bytes each way round), except in a pair, where the one link joins everyone;
* ``switched``: one port per socket into a non-blocking switch, so any socket reaches any other
  in one hop: rings, one-shot and two-shot. Not the binary tree: its inner sockets send three
  vectors through one port in 2 log2(p) hops, so two-shot always beats it;
* ``fully_connected``: a link per pair: every algorithm, the tree included.

All-gather and reduce-scatter have a ring and a one-shot (direct) form; forcing ``two_shot``
runs their one-shot form (two-shot's halves), forcing ``tree`` or ``hierarchical`` their
ring. The ``hierarchical`` all-reduce (inside each node, then across nodes on each socket's
own rail: ``hw.hierarchical``) runs over two or more whole nodes of a switched or fully
connected wiring.
"""

from __future__ import annotations

from typing import Literal

Topology = Literal["ring", "fully_connected", "switched"]
Algorithm = Literal["ring", "bidirectional_ring", "one_shot", "two_shot", "tree", "hierarchical"]
Policy = Literal[
    "auto", "ring", "bidirectional_ring", "one_shot", "two_shot", "tree", "hierarchical"
]
ALGORITHMS: tuple[Algorithm, ...] = (
    "ring",
    "bidirectional_ring",
    "one_shot",
    "two_shot",
    "tree",
    "hierarchical",
)
"""Every algorithm, in the order ties are broken (simplest first)."""
ALL_REDUCE_ONLY = ("two_shot", "tree", "hierarchical")


def allowed_algorithms(
    all_reduce: bool, topology: Topology, group: int, sockets_per_node: int | None = None
) -> tuple[str, ...]:
    """Algorithms ``topology`` can run over ``group`` consecutive sockets, ``sockets_per_node``
    a node (None: within one node), for an all-reduce (``all_reduce``) or for an all-gather /
    reduce-scatter (module docstring)."""
    names = [a for a in ALGORITHMS if all_reduce or a not in ALL_REDUCE_ONLY]
    nodes = sockets_per_node is not None and group > sockets_per_node
    if not (nodes and sockets_per_node and group % sockets_per_node == 0):
        names = [a for a in names if a != "hierarchical"]
    if group <= 2:
        return tuple(names)
    if topology == "ring":
        return ("ring", "bidirectional_ring")
    if topology == "switched":
        return tuple(a for a in names if a != "tree")
    return tuple(names)


LinkLevel = Literal["node", "rack", "racks"]
"""The link class joining two sockets: within a node, between a rack's nodes (between any
nodes without a rack level), between racks."""


def peer_levels(
    group: int, sockets_per_node: int, sockets_per_rack: int | None = None
) -> list[tuple[int, LinkLevel]]:
    """(peers, level) per link class a socket reaches in its group of ``group`` consecutive
    sockets (``sockets_per_rack`` None: no rack level): within its node, its rack's other
    nodes, other racks; classes with no peers left out."""
    local = min(group, sockets_per_node)
    rack = min(group, sockets_per_rack or group)
    out: list[tuple[int, LinkLevel]] = [(local - 1, "node")] if local > 1 else []
    if rack > local:
        out.append((rack - local, "rack"))
    if group > rack:
        out.append((group - rack, "racks"))
    return out


def forced_algorithm(all_reduce: bool, policy: Policy) -> str | None:
    """The algorithm a ``policy`` forces for a collective (None: ``auto`` chooses)."""
    if policy == "auto":
        return None
    if not all_reduce and policy in ALL_REDUCE_ONLY:
        return "one_shot" if policy == "two_shot" else "ring"
    return policy
