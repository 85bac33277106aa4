"""Least outstanding work: the replica holding the fewest tokens.

Load is counted in tokens as a production router can count it (``serving.load``): over the
requests queued or running on the replica, as of the arrival instant, each one's prompt plus
the output tokens generated so far, i.e. prompt tokens still to prefill plus KV tokens held
(decode steps already finished in a batched run count). How many output tokens are still to
come is not known, so not counted. Tokens are the one unit every replica shares; the count
does not weigh replicas of different speed differently. Ties go to the lowest replica index,
so routing is deterministic.
"""

from __future__ import annotations

from rdu_sim.cluster.routers.base import PoolState, register


@register("least_outstanding")
class LeastOutstanding:
    """argmin over replicas of their outstanding tokens."""

    def choose(self, request: int, pool: PoolState) -> int:
        """The least loaded replica (lowest index among equals)."""
        return int(pool.outstanding_tokens().argmin())  # (np.argmin's wrapper costs 2 us)
