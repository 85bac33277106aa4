"""Round robin: each request goes to the next replica in turn, whatever their state."""

from __future__ import annotations

from rdu_sim.cluster.routers.base import PoolState, register


@register("round_robin")
class RoundRobin:
    """Replicas 0, 1, ..., n - 1, 0, 1, ... in arrival order."""

    reads_load = False  # (``routers.base.reads_load``: a load refresh changes nothing)

    def __init__(self) -> None:
        self._next = 0

    def choose(self, request: int, pool: PoolState) -> int:
        """The next replica in turn."""
        chosen = self._next % len(pool)
        self._next = chosen + 1
        return chosen
