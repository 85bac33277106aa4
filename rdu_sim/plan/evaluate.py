"""What a plan point's evaluation returns: the cluster run's verdict and headline metrics.

``evaluate`` is module level, so it pickles by reference into pool and Dask workers. A
configuration the hardware cannot hold (a CapacityError: its batch slots do not fit) or the
config refuses is *infeasible*, a result like any other (stored, never retried), not a failure.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rdu_sim.config.errors import ConfigError
from rdu_sim.plan.spec import PlanPoint

if TYPE_CHECKING:
    from rdu_sim.report.cluster_summary import ClusterSummary

METRICS = (
    "slo_met",
    "goodput_fraction",
    "goodput_tokens_per_s",
    "output_tokens_per_s",
    "ttft_p99_s",
    "tpot_p99_s",
    "requests_rejected",
    "replicas",
    "sockets",
)


def headline(result: ClusterSummary) -> dict[str, Any]:
    """The plan's view of a cluster run's typed summary (the names of its JSON)."""
    return {
        "feasible": True,
        "slo_met": result.slo_met,
        "goodput_fraction": result.goodput.fraction,
        "goodput_tokens_per_s": result.goodput.tokens_per_s,
        "output_tokens_per_s": result.output_tokens_per_s,
        "ttft_p99_s": result.ttft_s.p99,
        "tpot_p99_s": result.tpot_s.p99,
        "requests_rejected": result.requests_rejected,
        "replicas": result.replicas,
        "sockets": result.sockets,
    }


def _input_errors() -> tuple[type[BaseException], ...]:
    compiler: Any = importlib.import_module("rdu_sim.compiler")
    engine: Any = importlib.import_module("rdu_sim.engine")
    return (ConfigError, compiler.CapacityError, engine.EventBudgetError)


def evaluate(point: PlanPoint) -> dict[str, Any]:
    """Run the point's cluster (real compiler and engine) and return its headline."""
    api_cluster: Any = importlib.import_module("rdu_sim.api_cluster")
    try:
        result = api_cluster.run_cluster(point.cluster).summary()
    except _input_errors() as exc:
        return {"feasible": False, "reason": " ".join(str(exc).split())}
    return headline(result)
