"""A collective algorithm by its name, started on the links: the one place a name becomes its
simulation, for the engine's ports (``engine.collective_port``) and for the chooser's
estimate across nodes (``hw.collective_choice``), which runs the collective alone here."""

from __future__ import annotations

from rdu_sim.config.wiring import ALGORITHMS
from rdu_sim.des.environment import Event
from rdu_sim.hw.collectives import Collective, Topology, ring, tree_all_reduce
from rdu_sim.hw.direct_collectives import one_shot, two_shot
from rdu_sim.hw.hierarchical import hierarchical_all_reduce


def start_collective(topo: Topology, call: Collective, algorithm: str) -> Event:
    """Start ``call`` on ``topo``'s links with ``algorithm``; fires when done."""
    if algorithm == "ring":
        return ring(topo, call)
    if algorithm == "bidirectional_ring":
        return ring(topo, call, bidirectional=True)
    if algorithm == "one_shot":
        return one_shot(topo, call)
    if algorithm == "two_shot":
        return two_shot(topo, call)
    if algorithm == "tree":
        return tree_all_reduce(topo, call)
    if algorithm == "hierarchical":
        return hierarchical_all_reduce(topo, call)
    raise ValueError(f"unknown collective algorithm {algorithm!r}; valid: {', '.join(ALGORITHMS)}")
