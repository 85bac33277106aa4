"""Least outstanding work: the replica with the fewest tokens still to process.

Work is counted in tokens, prompt tokens to prefill plus output tokens to generate, over the
requests queued or running on the replica, as of the arrival instant (decode steps already
finished in a batched run are counted as done). Tokens are the one unit every replica
shares; the count does not weigh replicas of different speed differently. Ties go to the
lowest replica index, so routing is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

from rdu_sim.cluster.routers.base import Candidate, register


@register("least_outstanding")
class LeastOutstanding:
    """argmin over replicas of their outstanding tokens."""

    def choose(self, request: int, candidates: Sequence[Candidate]) -> int:
        """The least loaded replica (lowest index among equals)."""
        best, best_load = 0, candidates[0].outstanding_tokens()
        for index in range(1, len(candidates)):
            load = candidates[index].outstanding_tokens()
            if load < best_load:
                best, best_load = index, load
        return best
