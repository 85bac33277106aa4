"""A hierarchical all-reduce over several nodes, built from the direct collectives: what a
communication library does across nodes (NCCL's rings laid one per NIC rail, or its tree),
where one ring through every socket would push the whole vector through each node's one
crossing.

For a group of ``nodes`` whole nodes of ``local`` sockets each (consecutive ids), each piece:

1. a one-shot reduce-scatter inside each node: each socket holds its node's sum of one
   ``1 / local`` shard (``local - 1`` sends of ``nbytes / local^2``, over the node's links);
2. a two-shot all-reduce of that shard among the sockets of the same local index in every
   node (its rail: one socket per node, each over its port to the network, through its
   in-node port first where the network is reached through it): every byte
   that crosses the network is ``1 / local`` of the vector;
3. a one-shot all-gather inside each node of the reduced shards.

A piece's phases follow each other; pieces are started together, each phase's sends queued
on their ports in order (as the direct collectives'). ``symmetric=True`` simulates socket 0's
node and socket 0's rail: every node and rail does the same at the same instants (exact
against simulating all of them: tests).
"""

from __future__ import annotations

from collections.abc import Callable

from rdu_sim.des.environment import Event
from rdu_sim.hw.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    REDUCE_SCATTER,
    Collective,
    Countdown,
    Topology,
)
from rdu_sim.hw.direct_collectives import one_shot, two_shot


def spans_nodes(group: int, sockets_per_node: int) -> bool:
    """Whether a group of ``group`` consecutive sockets is two or more whole nodes (what the
    hierarchical all-reduce runs over)."""
    return group > sockets_per_node and group % sockets_per_node == 0


def hierarchical_all_reduce(topo: Topology, call: Collective) -> Event:
    """Start the all-reduce ``call`` in three phases per piece (module docstring); fires when
    every socket has the whole sum."""
    if call.kind != ALL_REDUCE:
        raise ValueError(f"the hierarchical form runs all-reduce only, not {call.kind!r}")
    ids = call.ids(topo)
    p, local, env = len(ids), topo.sockets_per_node, topo.env
    if p == 1 or call.nbytes == 0:
        return Countdown(env, 0).done
    if not spans_nodes(p, local):
        raise ValueError(f"a hierarchical all-reduce needs whole nodes of {local}: {p} sockets")
    nodes = p // local
    piece = call.nbytes / call.chunks
    node_groups = [tuple(ids[n * local : (n + 1) * local]) for n in range(nodes)]
    rails = [tuple(ids[slot::local]) for slot in range(local)]
    if call.symmetric:
        node_groups, rails = node_groups[:1], rails[:1]
    done = Countdown(env, call.chunks)

    def phase(
        groups: list[tuple[int, ...]], kind: str, nbytes: float, then: Callable[[], None]
    ) -> None:
        """Run ``kind`` over every group of ``groups``; ``then`` once all are done."""
        left = Countdown(env, len(groups))
        left.done.add_callback(lambda _e: then())
        for group in groups:
            part = Collective(kind, nbytes, 1, call.symmetric, tuple(group), call.tag)
            started = two_shot(topo, part) if kind == ALL_REDUCE else one_shot(topo, part)
            started.add_callback(lambda _e: left.tick())

    def gather() -> None:
        phase(node_groups, ALL_GATHER, piece, done.tick)

    def across() -> None:
        phase(rails, ALL_REDUCE, piece / local, gather)

    for _ in range(call.chunks):
        phase(node_groups, REDUCE_SCATTER, piece, across)
    return done.done
