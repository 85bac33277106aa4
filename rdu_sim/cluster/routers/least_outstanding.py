"""Least outstanding work: the replica with the fewest tokens still to process.

Work is counted in tokens, prompt tokens to prefill plus output tokens to generate, over the
requests queued or running on the replica, as of the arrival instant (decode steps already
finished in a batched run are counted as done). Tokens are the one unit every replica
shares; the count does not weigh replicas of different speed differently. Ties go to the
lowest replica index, so routing is deterministic.
"""

from __future__ import annotations

from rdu_sim.cluster.routers.base import PoolState, register


@register("least_outstanding")
class LeastOutstanding:
    """argmin over replicas of their outstanding tokens."""

    def choose(self, request: int, pool: PoolState) -> int:
        """The least loaded replica (lowest index among equals)."""
        return int(pool.outstanding_tokens().argmin())  # (np.argmin's wrapper costs 2 us)
