"""How a stage's collective chunk reaches the links: one socket's chain, or all sockets.

A stage with a ``CollectiveSpec`` hands each finished chunk of its output to a port, which
starts the chunk's collective on the run's ``Topology`` and returns the event that fires when
the chunk has been reduced/gathered everywhere.

* :class:`SymmetricPort` (one simulated socket): every socket of the group reaches the chunk at
  the same instant, so the hw collectives' symmetric shortcut (one rotational period of the
  ring: socket 0's chain for identical links, one node's sockets and outgoing links for a ring
  over several nodes; exact either way) gives the chunk's completion.
* :class:`RendezvousPort` (all sockets simulated): the collective starts when the last socket
  of the group has produced the chunk (a socket cannot forward a partial sum it does not yet
  have), and then every hop of every socket is simulated. With identical sockets they all
  arrive together, which is why both ports give the same step time.

Groups are consecutive sockets: socket ``s`` belongs to group ``s // spec.group``.
"""

from __future__ import annotations

from collections.abc import Sequence

import simpy

from rdu_sim.compiler.program import CollectiveSpec
from rdu_sim.hw.collectives import Topology, all_gather, all_reduce, reduce_scatter


def start_collective(
    topo: Topology,
    spec: CollectiveSpec,
    nbytes: float,
    chunks: int,
    algorithm: str,
    symmetric: bool,
    sockets: Sequence[int],
) -> simpy.Event:
    """Start ``spec.kind`` of ``nbytes`` in ``chunks`` over ``sockets``; fires when done."""
    if spec.kind == "allreduce":
        return all_reduce(topo, nbytes, algorithm, chunks, symmetric, sockets)
    both_ways = algorithm == "bidirectional_ring"
    if spec.kind == "allgather":
        return all_gather(topo, nbytes, chunks, symmetric, sockets, bidirectional=both_ways)
    if spec.kind == "reduce_scatter":
        return reduce_scatter(topo, nbytes, chunks, symmetric, sockets, bidirectional=both_ways)
    raise ValueError(
        f"unknown collective kind {spec.kind!r}; valid: allreduce, allgather, reduce_scatter"
    )


def group_of(socket: int, group: int) -> list[int]:
    """The sockets of ``socket``'s collective group (consecutive ids)."""
    first = (socket // group) * group
    return list(range(first, first + group))


class SymmetricPort:
    """One simulated socket: run the symmetric shortcut of the collective (exact)."""

    def __init__(self, topo: Topology, spec: CollectiveSpec, algorithm: str) -> None:
        self.topo, self.spec, self.algorithm = topo, spec, algorithm
        self.sockets = group_of(0, spec.group)

    def start(self, socket: int, key: int, nbytes: float, chunks: int) -> simpy.Event:
        """Chunk ``key`` of ``nbytes`` is ready on ``socket`` (always 0 here)."""
        return start_collective(
            self.topo, self.spec, nbytes, chunks, self.algorithm, True, self.sockets
        )


class RendezvousPort:
    """All sockets simulated: start each chunk's collective when its whole group is ready."""

    def __init__(self, topo: Topology, spec: CollectiveSpec, algorithm: str) -> None:
        self.topo, self.spec, self.algorithm = topo, spec, algorithm
        self._waiting: dict[tuple[int, int], tuple[int, simpy.Event]] = {}

    def start(self, socket: int, key: int, nbytes: float, chunks: int) -> simpy.Event:
        """Chunk ``key`` of ``nbytes`` is ready on ``socket``; fires when the group is done."""
        group = self.spec.group
        slot = (socket // group, key)
        arrived, done = self._waiting.get(slot, (0, self.topo.env.event()))
        arrived += 1
        if arrived < group:
            self._waiting[slot] = (arrived, done)
            return done
        self._waiting.pop(slot, None)
        finished = start_collective(
            self.topo, self.spec, nbytes, chunks, self.algorithm, False, group_of(socket, group)
        )
        if finished.triggered:
            done.succeed()
        else:
            finished.callbacks.append(lambda _ev: _succeed(done))
        return done


def _succeed(event: simpy.Event) -> None:
    event.succeed()


CollectivePort = SymmetricPort | RendezvousPort
