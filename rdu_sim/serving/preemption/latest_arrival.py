"""``latest_arrival``: the running request that arrived last (the default).

vLLM's rule under first-come-first-served priority (V0's, and V1's ``priority`` policy with
equal priorities: ``max(running, key=(priority, arrival_time))``): the running queue in
arrival order, its tail preempted first, so the oldest requests keep advancing. Ties (one
arrival instant) go to the larger request id.
"""

from __future__ import annotations

from rdu_sim.serving.preemption.base import PreemptionPolicy, RunningView, register


class LatestArrival(PreemptionPolicy):
    """The latest arrival among the running requests (module docstring)."""

    def victim(self, running: RunningView) -> int:
        """The slot of the largest (arrival, request id)."""
        victim, latest = -1, (-1, -1)
        for slot in range(len(running)):
            request = running.request(slot)
            if request >= 0 and (running.arrival_ps(slot), request) > latest:
                victim, latest = slot, (running.arrival_ps(slot), request)
        return victim


register("latest_arrival", LatestArrival)
