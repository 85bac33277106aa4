"""Prefix-aware (KV-aware): least outstanding work after counting what each cache saves.

A replica whose prefix cache holds the first ``h`` tokens of the prompt would prefill ``h``
fewer tokens, so the work the request adds there is ``h`` less. The router picks the
replica minimising ``load - h`` (the load: ``serving.load``, prompt tokens still to prefill
plus KV tokens held, as NVIDIA Dynamo's KV router costs a worker its prefill tokens less the
overlap plus its active blocks): a long shared prefix draws requests to the replica that has
it, and load pulls them away when that replica falls behind. Both terms are tokens; ties go
to the larger cached prefix, then to the lowest index. Without a prefix cache it is least
outstanding.
"""

from __future__ import annotations

import numpy as np

from rdu_sim.cluster.routers.base import PoolState, register


@register("prefix_aware")
class PrefixAware:
    """argmin over replicas of outstanding tokens minus cached prompt tokens."""

    def choose(self, request: int, pool: PoolState) -> int:
        """The replica where the request adds the least outstanding work."""
        cached = pool.cached_tokens(request)
        work = pool.outstanding_tokens() - cached
        best = np.flatnonzero(work == work.min())
        return int(best[np.argmax(cached[best])])  # argmax: the first of equal maxima
