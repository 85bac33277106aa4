"""Least queued tokens: the replica whose waiting requests hold the fewest prompt tokens.

Join the shortest queue, counted in tokens: a replica's queued tokens are the prompts of its
requests still waiting for a slot (``PoolState.queued_tokens``; not what its slots are
already prefilling or decoding), so a request goes where its prefill would start soonest if
prompts cost alike. Under light load every queue is empty; ties then go to the least
outstanding tokens (``least_outstanding``'s load), then to the lowest index, so routing is
deterministic and spreads while nothing queues.
"""

from __future__ import annotations

import numpy as np

from rdu_sim.cluster.routers.base import PoolState, register


@register("least_queued")
class LeastQueued:
    """argmin over replicas of their queued tokens (ties: outstanding tokens, then index)."""

    def choose(self, request: int, pool: PoolState) -> int:
        """The replica with the fewest queued tokens (module docstring for ties)."""
        queued = pool.queued_tokens()
        best = np.flatnonzero(queued == queued.min())
        if len(best) == 1:
            return int(best[0])
        load = pool.outstanding_tokens()
        return int(best[load[best].argmin()])  # argmin: the first of equal minima
