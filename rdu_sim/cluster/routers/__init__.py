"""Routers: which replica of a pool takes a request, decided at the instant it arrives.

A router sees each candidate replica's real state at that instant (``Candidate``: the work
still outstanding there, what its prefix cache holds for this request) because it runs on
the same event loop as the replicas' servers (``des.timeline``). Routers register by name
(``router.policy``); a duplicate name is refused and an unknown one lists the valid names.
Each shipped router is one small module beside this file; one written outside rdu-sim
registers from a plugin module (``rdu_sim.plugins``), loaded when a name is not found here.
"""

from rdu_sim.cluster.routers import (  # noqa: F401
    least_outstanding,
    least_queued,
    prefix_aware,
    round_robin,
)
from rdu_sim.cluster.routers.base import (
    PoolState,
    Router,
    make_router,
    register,
    router_factory,
    router_names,
)

__all__ = ["PoolState", "Router", "make_router", "register", "router_factory", "router_names"]
