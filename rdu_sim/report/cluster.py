"""Metrics of a cluster run: SLO goodput, per-class percentiles, per-replica and cluster views.

Definitions (docs/cluster.md repeats them for users). Times come from the per-request
records the replicas wrote; a disaggregated request's TTFT ends on its prefill replica (the
first token is produced there) and its TPOT spans the KV transfer and the wait for a decode
slot, as a user sees it.

- A request **meets the SLO** when it was served, ``ttft <= slo.ttft`` and (with more than one
  output token) ``tpot <= slo.tpot``. ``goodput.fraction`` is the share of *all* requests of
  the trace that did (a rejected request counts against it); the cluster meets its SLO when
  that share is at least ``slo.attainment``. ``goodput.requests_per_s`` and ``tokens_per_s``
  are those requests and their output tokens over the makespan.
- ``makespan_s``: first arrival to last completion. ``output_tokens_per_s``: every output
  token over it. ``energy``: every pool's sockets and hosts powered for the makespan
  (``report.energy.fleet_energy``), None when a pool's hardware gives no power.
- Per replica: the requests it took (prefill side) or decoded, their latencies, slot
  occupancy (slot-seconds held over slots x makespan: a prefill replica holds a slot until
  its KV cache is sent, a decode replica from the reservation on), HBM and PCU utilization
  (time-weighted over its steps, over the makespan), steps run and its prefix cache.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rdu_sim.cluster.records import UNSET
from rdu_sim.cluster.replica import Replica
from rdu_sim.cluster.simulate import ClusterRun
from rdu_sim.cluster.traffic import ClassLabels
from rdu_sim.config.cluster import SLOConfig
from rdu_sim.report.energy import Machine, fleet_energy
from rdu_sim.report.summary import rounded, stats, steps_run, utilization
from rdu_sim.serving.step_cache import PS_PER_S

BRIEF = (50, 99)  # percentiles in the per-replica view


def request_columns(run: ClusterRun) -> dict[str, NDArray[Any]]:
    """Per-request columns (seconds; NaN where a time or a decode replica does not apply),
    in request order."""
    serving, records = run.serving, run.records
    sec = serving.seconds
    arrival, admit = sec(serving.arrival_ps), sec(serving.admit_ps)
    first, finish = sec(serving.first_token_ps), sec(serving.finish_ps)
    served = serving.finish_ps != UNSET
    output = serving.output_tokens
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(served & (output > 1), (finish - first) / np.maximum(output - 1, 1), np.nan)
    nan = np.nan
    kv_start, kv_end = sec(records.kv_start_ps), sec(records.kv_end_ps)
    return {
        "request": np.arange(len(serving), dtype=np.int64),
        "status": np.asarray(["pending", "served", "rejected"], dtype=np.object_)[records.status],
        "truncated": records.truncated.astype(np.int64),
        "prompt_tokens": serving.prompt_tokens,
        "output_tokens": output,
        "cached_tokens": records.cached_tokens,
        "replica": records.replica,
        "decode_replica": _replica_or_nan(records.decode_replica),
        "arrival_s": arrival,
        "admit_s": np.where(served, admit, nan),
        "first_token_s": np.where(served, first, nan),
        "finish_s": np.where(served, finish, nan),
        "queue_delay_s": np.where(served, admit - arrival, nan),
        "ttft_s": np.where(served, first - arrival, nan),
        "tpot_s": tpot,
        "e2e_s": np.where(served, finish - arrival, nan),
        "kv_bytes": records.kv_bytes,
        "kv_transfer_s": np.where(records.kv_end_ps != UNSET, kv_end - kv_start, nan),
    }


def _replica_or_nan(replicas: NDArray[np.int64]) -> NDArray[np.float64]:
    """Replica indices with NaN for "none" (an empty CSV cell, never the sentinel -1)."""
    return np.where(replicas >= 0, replicas, np.nan)


def meets_slo(cols: Mapping[str, NDArray[Any]], slo: SLOConfig) -> NDArray[np.bool_]:
    """Requests served within both targets (TPOT only for more than one output token)."""
    served = cols["status"] == "served"
    ttft_ok = cols["ttft_s"] <= slo.ttft
    tpot = cols["tpot_s"]
    tpot_ok = np.isnan(tpot) | (tpot <= slo.tpot)
    good: NDArray[np.bool_] = served & ttft_ok & tpot_ok
    return good


def _finite(values: NDArray[np.float64]) -> NDArray[np.float64]:
    return values[np.isfinite(values)]


def _latency(cols: Mapping[str, NDArray[Any]], mask: NDArray[np.bool_]) -> dict[str, Any]:
    return {
        key: stats(_finite(cols[key][mask]))
        for key in ("ttft_s", "tpot_s", "queue_delay_s", "e2e_s")
    }


def _goodput(
    good: NDArray[np.bool_], output: NDArray[np.int64], total: int, span: float
) -> dict[str, Any]:
    count = int(good.sum())
    return {
        "requests": count,
        "fraction": count / total if total else 0.0,
        "requests_per_s": count / span if span > 0 else 0.0,
        "tokens_per_s": float(output[good].sum()) / span if span > 0 else 0.0,
    }


def _classes(
    cols: Mapping[str, NDArray[Any]], labels: ClassLabels | None, good: NDArray[np.bool_]
) -> dict[str, Any] | None:
    if labels is None:
        return None
    out: dict[str, Any] = {}
    for name in labels.names:
        mask = labels.values == name
        total = int(mask.sum())
        served = mask & (cols["status"] == "served")
        out[name] = {
            "requests": total,
            "served": int(served.sum()),
            "rejected": int((mask & (cols["status"] == "rejected")).sum()),
            "goodput_fraction": float((good & mask).sum()) / total if total else 0.0,
            **_latency(cols, served),
        }
    return out


def _brief(values: NDArray[np.float64]) -> dict[str, float | None]:
    if values.size == 0:
        return {f"p{p}": None for p in BRIEF}
    return {f"p{p}": float(np.percentile(values, p)) for p in BRIEF}


def _slot_seconds(run: ClusterRun, cols: Mapping[str, NDArray[Any]]) -> NDArray[np.float64]:
    """Seconds each replica's slots were held, summed over its requests."""
    n = len(run.cluster.replicas)
    records = run.records
    served = cols["status"] == "served"
    sent = records.kv_end_ps != UNSET
    front_end = np.where(sent, records.kv_end_ps / PS_PER_S, cols["finish_s"])
    front = served & (records.replica >= 0)
    held: NDArray[np.float64] = np.bincount(
        records.replica[front], weights=(front_end - cols["admit_s"])[front], minlength=n
    ).astype(np.float64)
    back = served & (records.decode_replica >= 0) & sent
    held += np.bincount(
        records.decode_replica[back],
        weights=(cols["finish_s"] - records.kv_start_ps / PS_PER_S)[back],
        minlength=n,
    )
    return held


def _replica(
    replica: Replica,
    cols: Mapping[str, NDArray[Any]],
    took: NDArray[np.int64],
    decoded: NDArray[np.int64],
    good: NDArray[np.bool_],
    held_s: float,
    span: float,
) -> dict[str, Any]:
    runtime, records = replica.runtime, replica.server.records
    row: dict[str, Any] = {
        "replica": replica.index,
        "pool": runtime.name,
        "role": runtime.config.role,
        "requests": int(took.size),
        "decoded": int(decoded.size),
        "output_tokens": int(records.tokens_generated),
        "goodput_fraction": float(good[took].mean()) if took.size else None,
        "ttft_s": _brief(_finite(cols["ttft_s"][took])),
        "tpot_s": _brief(_finite(cols["tpot_s"][decoded])),
        "occupancy": held_s / (runtime.config.batch_slots * span) if span > 0 else 0.0,
        "utilization": utilization(replica.cache, span),
        "steps": steps_run(records),
    }
    if replica.prefix is not None:
        row["prefix_cache"] = _prefix([replica])
    return row


def _prefix(replicas: Sequence[Replica]) -> dict[str, Any]:
    caches = [r.prefix for r in replicas if r.prefix is not None]
    lookups = sum(c.lookups for c in caches)
    hits = sum(c.hits for c in caches)
    return {
        "capacity_blocks": sum(c.capacity for c in caches),
        "lookups": lookups,
        "hit_blocks": hits,
        "hit_rate": hits / lookups if lookups else 0.0,
        "inserted": sum(c.inserted for c in caches),
        "evicted": sum(c.evicted for c in caches),
        "not_cached": sum(c.not_cached for c in caches),
    }


def _energy(machines: Sequence[Machine], span: float, tokens: int) -> dict[str, Any] | None:
    """The pools' power, energy and cost over the makespan (None without power)."""
    energy = fleet_energy(machines, span, tokens)
    return None if energy is None else asdict(energy)


def _groups(index: NDArray[np.int64], n: int) -> list[NDArray[np.int64]]:
    """Request ids per replica (``index`` = replica of each request, -1 for none)."""
    order = np.argsort(index, kind="stable")
    sorted_index = index[order]
    bounds = np.searchsorted(sorted_index, np.arange(n + 1))
    return [order[bounds[i] : bounds[i + 1]] for i in range(n)]


def summarize_cluster(
    *,
    meta: Mapping[str, Any],
    pools: Mapping[str, Any],
    run: ClusterRun,
    slo: SLOConfig,
    labels: ClassLabels | None,
    traffic: Mapping[str, Any],
    shapes_simulated: int,
    machines: Sequence[Machine] = (),
) -> dict[str, Any]:
    """The cluster run's result dict (the JSON contract of ``rdu-sim run CLUSTER --json``)."""
    cols = request_columns(run)
    good = meets_slo(cols, slo)
    served = cols["status"] == "served"
    total = len(served)
    output = cols["output_tokens"]
    first_arrival = float(cols["arrival_s"].min()) if total else 0.0
    last_finish = float(np.nanmax(cols["finish_s"])) if served.any() else first_arrival
    span = last_finish - first_arrival
    goodput = _goodput(good, output, total, span)
    replicas = run.cluster.replicas
    took = _groups(run.records.replica, len(replicas))
    decoded_by = np.where(
        run.records.decode_replica >= 0, run.records.decode_replica, run.records.replica
    )
    decoded_by = np.where(served & (output > 1), decoded_by, -1)
    decoded = _groups(decoded_by, len(replicas))
    held = _slot_seconds(run, cols)
    result: dict[str, Any] = {
        **meta,
        "pools": dict(pools),
        "traffic": dict(traffic),
        "requests": total,
        "requests_served": int(served.sum()),
        "requests_rejected": int((cols["status"] == "rejected").sum()),
        "requests_truncated": int(cols["truncated"].sum()),
        "output_tokens": int(output[served].sum()),
        "makespan_s": span,
        "output_tokens_per_s": float(output[served].sum()) / span if span > 0 else 0.0,
        **_latency(cols, served),
        "slo": {"ttft_s": slo.ttft, "tpot_s": slo.tpot, "attainment": slo.attainment},
        "goodput": goodput,
        "slo_met": goodput["fraction"] >= slo.attainment,
        "classes": _classes(cols, labels, good),
        "per_replica": [
            _replica(r, cols, took[i], decoded[i], good, float(held[i]), span)
            for i, r in enumerate(replicas)
        ],
        "step_shapes_simulated": shapes_simulated,
        "energy": _energy(machines, span, int(output[served].sum())),
    }
    if any(r.prefix is not None for r in replicas):
        skipped = int(run.records.cached_tokens[served].sum())
        prompts = int(cols["prompt_tokens"][served].sum())
        result["prefix_cache"] = {
            **_prefix(replicas),
            "prefill_tokens_skipped": skipped,
            "token_hit_rate": skipped / prompts if prompts else 0.0,
        }
    link = run.cluster.link
    if link is not None:
        moved = cols["kv_transfer_s"]
        result["kv_transfer"] = {
            "transfers": link.transfers,
            "bytes": link.bytes,
            "seconds": stats(_finite(moved)),
            "port_wait_s": link.queued_ps / PS_PER_S,
        }
    rounded_result: dict[str, Any] = rounded(result)
    return rounded_result
