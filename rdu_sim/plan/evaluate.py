"""What a plan point's evaluation returns: the cluster run's verdict, headline metrics, and
each SLO half's share and value, run and alone (``report.slo_why``, ``plan.floors``).

``evaluate`` is module level, so it pickles by reference into pool and Dask workers. A
configuration the hardware cannot hold (a CapacityError: its batch slots do not fit) or the
config refuses is *infeasible*, a result like any other (stored, never retried), not a failure.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rdu_sim.input_errors import InputError
from rdu_sim.plan.spec import Configuration, LoadedPlan, PlanPoint
from rdu_sim.plugins import PolicyAnswerError

if TYPE_CHECKING:
    from rdu_sim.api_cluster import ClusterResult
    from rdu_sim.report.cluster_summary import ClusterSummary


def headline(result: ClusterSummary) -> dict[str, Any]:
    """The plan's view of a cluster run's typed summary (the names of its JSON; with
    attention ranks in lockstep, the largest share of a pool's decoding time that waited on
    another rank's prefill; disaggregated, the share of the prefill queueing that waited on
    the decode pool; ``requests`` and ``goodput_requests`` for ``plan.margin``;
    ``batch_slots.POOL`` each pool's slots as resolved, ``auto`` a number (a metric path,
    as the store keeps it); what its KV policy cut, for an answer that trades accuracy; the
    traffic's offered rate, the same for every configuration of a plan)."""
    held = {}
    if result.lockstep:
        shares = (cost.prefill_held_share for cost in result.lockstep.values())
        held = {"lockstep_prefill_held_share": max(shares)}
    split = result.prefill_queueing
    if split is not None:  # what the prefill queue waited for (report.slo_why.moves)
        held["prefill_queue_decode_share"] = split.decode_share
    return {
        **held,
        "disaggregated": result.disaggregated,
        "feasible": True,
        "slo_met": result.slo_met,
        "goodput_fraction": result.goodput.fraction,
        "goodput_tokens_per_s": result.goodput.tokens_per_s,
        "offered_requests_per_s": result.offered.requests_per_s,
        "output_tokens_per_s": result.output_tokens_per_s,
        "ttft_p99_s": result.ttft_s.p99,
        "tpot_p99_s": result.tpot_s.p99,
        "requests": result.requests,
        "goodput_requests": result.goodput.requests,
        "requests_rejected": result.requests_rejected,
        "replicas": result.replicas,
        **{f"batch_slots.{name}": pool.batch_slots for name, pool in result.pools.items()},
        **_kv_cut(result),
        "sockets": result.sockets,
    }


def _kv_cut(result: ClusterSummary) -> dict[str, int]:
    """What the pools' KV policies cut, summed: prompts compressed, slots wrapped."""
    kept = [pool.kv_kept for pool in result.pools.values() if pool.kv_kept is not None]
    return {
        "kv_prompts_compressed": sum(k.prompts_compressed for k in kept),
        "kv_slots_wrapped": sum(k.slots_wrapped for k in kept),
    }


def measure(result: ClusterResult) -> dict[str, Any]:
    """Everything the plan keeps of one cluster run: the headline, each SLO half's share and
    value at the attainment quantile, the same for every request alone (its floors), the
    floors' steps at that quantile with what binds them, and whether the decoding pool's
    prefill steps carry its decode rows (``mixed_batching``, for ``report.slo_why``)."""
    import numpy as np

    from rdu_sim.plan.floors import bound_of, request_floors
    from rdu_sim.report.bound import bound_label
    from rdu_sim.report.slo_why import half_metrics, value_at

    slo = result.scenario.config.slo
    columns = result.requests()
    served = columns["status"] == "served"
    ttft = np.where(served, columns["ttft_s"], np.inf)
    tpot = np.where(served, columns["tpot_s"], np.inf)
    floors = request_floors(result)
    decoding = next(p for p in result.pools if p.runtime.config.role != "prefill")
    metrics = {
        **headline(result.summary()),
        # prefill steps carry the decode rows (stack.mixed_batching): chunking then helps TPOT
        "mixed_batching": decoding.runtime.config.mixed_batching,
        **half_metrics(ttft, tpot, slo),
        **half_metrics(floors.ttft_s, floors.tpot_s, slo, prefix="floor_"),
    }
    for half, values, shapes in (
        ("ttft", floors.ttft_s, floors.prefill_shapes),
        ("tpot", floors.tpot_s, floors.decode_shapes),
    ):
        at = value_at(values, slo.attainment)
        index = int(np.flatnonzero(values == at)[0])
        shape = shapes[index]
        if shape is None:  # rejected, or no TPOT: no step to name
            continue
        bound = bound_of(result, shape)
        metrics[f"{half}_step_s"] = at
        metrics[f"{half}_step_bound"] = None if bound is None else bound.bound
        if bound is not None:  # "bound by" only at the share that binds (report.bound)
            metrics[f"{half}_step_label"] = bound_label(bound.limit_s, bound.step_s)
            if bound.link:  # the link class the links' time is (report.bound.StepBound.link)
                metrics[f"{half}_step_link"] = bound.link
                metrics[f"{half}_step_link_term"] = bound.link_term
        if half == "ttft":
            metrics["ttft_step_tokens"] = int(floors.prompt_tokens[index])
            if shape.cache_len == 0:  # the whole prompt in one step: the bucket it runs at
                metrics["ttft_step_bucket"] = shape.tokens
        else:
            metrics["tpot_step_batch"] = shape.batch
            metrics["tpot_step_context"] = shape.cache_len
    return metrics


def infeasible_reason(exc: Exception) -> str:
    """An input error's message on one line, as ``rdu-sim plan`` records an infeasible
    configuration's reason."""
    return " ".join(str(exc).split())


def early_verdict(loaded: LoadedPlan, configuration: Configuration) -> str | None:
    """Why ``configuration`` is infeasible before anything is simulated, in the words
    ``rdu-sim plan`` marks it with, or None when it may run: the cluster of its first
    search step (one replica unit, ``Search.next_units``) refused by the config (a layout the
    model or the machine cannot take: ``LoadedPlan.build``), or by what its cluster run
    decides before simulating (each pool's batch slots and memory plan,
    ``api_cluster.plan_cluster``). ``rdu-sim check`` asks it of every configuration."""
    api_cluster: Any = importlib.import_module("rdu_sim.api_cluster")
    try:
        api_cluster.plan_cluster(loaded.build(configuration, 1).cluster)
    except PolicyAnswerError:  # a plugin's defect, not an infeasible configuration
        raise
    except InputError as exc:
        return infeasible_reason(exc)
    return None


def evaluate(point: PlanPoint) -> dict[str, Any]:
    """Run the point's cluster (real compiler and engine) and return its headline."""
    api_cluster: Any = importlib.import_module("rdu_sim.api_cluster")
    try:
        result = api_cluster.run_cluster(point.cluster)
        return measure(result)
    except PolicyAnswerError:  # a plugin's defect, not an infeasible configuration: said as such
        raise
    except InputError as exc:
        return {"feasible": False, "reason": infeasible_reason(exc)}
