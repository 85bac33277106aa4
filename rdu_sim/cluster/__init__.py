"""Cluster-scale serving: replica pools, routers, disaggregated prefill and decode, traces.

A cluster composes serving instances (``rdu_sim.serving.server.Server``, one per replica, each
a workload: hardware, model, KV policy, slots) with a router, optional prefix caches and
a KV-transfer link, on des's serving loop (``rdu_sim.des.timeline``); it never reaches into
the engine
(step times come through each pool's step function, which the API builds). docs/cluster.md
describes the model and its metrics; ``rdu_sim.api.run_cluster`` runs one.
"""

from rdu_sim.cluster.scenario import ClusterScenario, PoolScenario, build_cluster, load_cluster

__all__ = ["ClusterScenario", "PoolScenario", "build_cluster", "load_cluster"]
