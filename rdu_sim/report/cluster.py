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
from dataclasses import asdict, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rdu_sim.cluster.records import UNSET
from rdu_sim.cluster.replica import Replica
from rdu_sim.cluster.simulate import ClusterRun
from rdu_sim.cluster.traffic import ClassLabels, TrafficSummary
from rdu_sim.config.cluster import SLOConfig
from rdu_sim.kv.policies import KeptCounts, kept_counts
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.report.cluster_summary import (
    Brief,
    ClassSummary,
    ClusterMeta,
    ClusterPrefixCache,
    ClusterSummary,
    Goodput,
    KVTransfer,
    LockstepCost,
    OfferedLoad,
    PoolKVPool,
    PoolSummary,
    PrefillQueueing,
    PrefixCacheStats,
    ReplicaSummary,
    SLOTargets,
    rounded_fields,
)
from rdu_sim.report.energy import Energy, Machine, fleet_energy
from rdu_sim.report.percentiles import Percentiles, rounded
from rdu_sim.report.slo_why import Verdict, binding, half_metrics
from rdu_sim.report.summary import (
    StepCounts,
    Utilization,
    queue_grew,
    steps_run,
    throughput_bound,
    utilization,
)
from rdu_sim.serving.step_cache import PS_PER_S

BRIEF = (50, 99)  # percentiles in the per-replica view


def request_columns(run: ClusterRun) -> dict[str, NDArray[Any]]:
    """Per-request columns (seconds; NaN where a time, a decode replica or a KV transfer's
    bytes and time do not apply), in request order (arrival order); a replayed trace's
    requests also name their line in the trace file (``trace_line``: request ``i`` is not
    row ``i`` when rows were left out or out of time order)."""
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
    sent = records.kv_end_ps != UNSET  # a KV cache went to a decode replica
    lines = run.fit.requests.trace_lines
    source = {} if lines is None else {"trace_line": lines}  # a replayed trace's rows
    return {
        "request": np.arange(len(serving), dtype=np.int64),
        **source,
        "status": np.asarray(["pending", "served", "rejected"], dtype=np.object_)[records.status],
        "truncated": records.truncated.astype(np.int64),
        "prompt_tokens": serving.prompt_tokens,
        "output_tokens": output,
        "cached_tokens": records.cached_tokens,
        "replica": _replica_or_nan(records.replica),  # a rejected request reached none
        "decode_replica": _replica_or_nan(records.decode_replica),
        "arrival_s": arrival,
        "admit_s": np.where(served, admit, nan),
        "first_token_s": np.where(served, first, nan),
        "finish_s": np.where(served, finish, nan),
        "queue_delay_s": np.where(served, admit - arrival, nan),
        "ttft_s": np.where(served, first - arrival, nan),
        "tpot_s": tpot,
        "e2e_s": np.where(served, finish - arrival, nan),
        "kv_bytes": np.where(sent, records.kv_bytes, nan),  # empty, as its time, when none
        "kv_transfer_s": np.where(sent, kv_end - kv_start, nan),
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


def _round(value: float) -> float:
    result: float = rounded(value)
    return result


def _latency(cols: Mapping[str, NDArray[Any]], mask: NDArray[np.bool_]) -> dict[str, Percentiles]:
    return {
        key: Percentiles.of(_finite(cols[key][mask]))
        for key in ("ttft_s", "tpot_s", "queue_delay_s", "e2e_s")
    }


def _goodput(
    good: NDArray[np.bool_], output: NDArray[np.int64], total: int, span: float
) -> Goodput:
    count = int(good.sum())
    return Goodput(
        requests=count,
        fraction=_round(count / total if total else 0.0),
        requests_per_s=_round(count / span if span > 0 else 0.0),
        tokens_per_s=_round(float(output[good].sum()) / span if span > 0 else 0.0),
    )


def _offered(arrival_s: NDArray[np.float64], output_tokens_asked: int) -> OfferedLoad:
    """The traffic's rates over its arrival window (``OfferedLoad``); ``output_tokens_asked``
    sums every request's output as the traffic asked it, before a context limit cut it."""
    n = len(arrival_s)
    window = float(arrival_s.max() - arrival_s.min()) if n else 0.0
    if window <= 0.0:
        return OfferedLoad(window_s=0.0, requests_per_s=None, output_tokens_per_s=None)
    rate = (n - 1) / window
    return OfferedLoad(
        window_s=_round(window),
        requests_per_s=_round(rate),
        output_tokens_per_s=_round(rate * output_tokens_asked / n),
    )


def _classes(
    cols: Mapping[str, NDArray[Any]], labels: ClassLabels | None, good: NDArray[np.bool_]
) -> dict[str, ClassSummary] | None:
    if labels is None:
        return None
    out: dict[str, ClassSummary] = {}
    for name in labels.names:
        mask = labels.values == name
        total = int(mask.sum())
        served = mask & (cols["status"] == "served")
        latency = _latency(cols, served)
        out[name] = ClassSummary(
            requests=total,
            served=int(served.sum()),
            rejected=int((mask & (cols["status"] == "rejected")).sum()),
            goodput_fraction=_round(float((good & mask).sum()) / total) if total else None,
            ttft_s=latency["ttft_s"],
            tpot_s=latency["tpot_s"],
            queue_delay_s=latency["queue_delay_s"],
            e2e_s=latency["e2e_s"],
        )
    return out


def _brief(values: NDArray[np.float64]) -> Brief:
    if values.size == 0:
        return Brief(p50=None, p99=None)
    p50, p99 = (rounded(float(np.percentile(values, p))) for p in BRIEF)
    return Brief(p50=p50, p99=p99)


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
    rank: tuple[int, int] | None,
) -> ReplicaSummary:
    runtime, records = replica.runtime, replica.server.records
    return ReplicaSummary(
        replica=replica.index,
        pool=runtime.name,
        role=runtime.config.role,
        requests=int(took.size),
        decoded=int(decoded.size),
        output_tokens=int(records.tokens_generated),
        goodput_fraction=rounded(float(good[took].mean())) if took.size else None,
        ttft_s=_brief(_finite(cols["ttft_s"][took])),
        tpot_s=_brief(_finite(cols["tpot_s"][decoded])),
        occupancy=_round(held_s / (runtime.config.batch_slots * span) if span > 0 else 0.0),
        utilization=rounded_fields(Utilization(**utilization(replica.cache, span))),
        steps=StepCounts(**steps_run(records)),
        prefix_cache=None if replica.prefix is None else _prefix([replica]),
        rank=None if rank is None else rank[0],
        of_replica=None if rank is None else rank[1],
    )


def _ranks(replicas: Sequence[Replica]) -> list[tuple[int, int] | None]:
    """Per server: None for a one-server replica, else (its attention rank in its replica,
    that replica's number), replicas counted in server order (a replica's ranks are
    consecutive servers of its pool, ``Cluster._group``)."""
    out: list[tuple[int, int] | None] = []
    seen: dict[str, int] = {}  # servers of each pool so far
    number = -1  # the replica of the last server
    for replica in replicas:
        runtime = replica.runtime
        position = seen.get(runtime.name, 0)
        seen[runtime.name] = position + 1
        rank = position % runtime.ranks
        if rank == 0:
            number += 1
        out.append(None if runtime.ranks == 1 else (rank, number))
    return out


def _prefix(replicas: Sequence[Replica]) -> PrefixCacheStats:
    caches = [r.prefix for r in replicas if r.prefix is not None]
    paged = any(r.block_pages for r in replicas)  # its blocks share a paged pool's pages
    lookups = sum(c.lookups for c in caches)
    hits = sum(c.hits for c in caches)
    return PrefixCacheStats(
        capacity_blocks=sum(c.capacity for c in caches),
        lookups=lookups,
        hit_blocks=hits,
        hit_rate=_round(hits / lookups if lookups else 0.0),
        inserted=sum(c.inserted for c in caches),
        evicted=sum(c.evicted for c in caches),
        not_cached=sum(c.not_cached for c in caches),
        evicted_for_room=sum(c.evicted_for_room for c in caches) if paged else None,
    )


def _energy(machines: Sequence[Machine], span: float, tokens: int) -> Energy | None:
    """The pools' power, energy and cost over the makespan (None without power)."""
    energy = fleet_energy(machines, span, tokens)
    return None if energy is None else rounded_fields(energy)


def _groups(index: NDArray[np.int64], n: int) -> list[NDArray[np.int64]]:
    """Request ids per replica (``index`` = replica of each request, -1 for none)."""
    order = np.argsort(index, kind="stable")
    sorted_index = index[order]
    bounds = np.searchsorted(sorted_index, np.arange(n + 1))
    return [order[bounds[i] : bounds[i + 1]] for i in range(n)]


def summarize_cluster(
    *,
    meta: ClusterMeta,
    pools: Mapping[str, PoolSummary],
    run: ClusterRun,
    slo: SLOConfig,
    labels: ClassLabels | None,
    traffic: TrafficSummary,
    shapes_simulated: int,
    machines: Sequence[Machine] = (),
    provenance: Mapping[str, Any] | None = None,
) -> ClusterSummary:
    """The cluster run's metrics (``to_dict()``: the JSON of ``rdu-sim run CLUSTER --json``)."""
    cols = request_columns(run)
    good = meets_slo(cols, slo)
    served = cols["status"] == "served"
    total = len(served)
    output = cols["output_tokens"]
    first_arrival = float(cols["arrival_s"].min()) if total else 0.0
    last_finish = float(np.nanmax(cols["finish_s"])) if served.any() else first_arrival
    span = last_finish - first_arrival
    replicas = run.cluster.replicas
    took = _groups(run.records.replica, len(replicas))
    decoded_by = np.where(
        run.records.decode_replica >= 0, run.records.decode_replica, run.records.replica
    )
    decoded_by = np.where(served & (output > 1), decoded_by, -1)
    decoded = _groups(decoded_by, len(replicas))
    held = _slot_seconds(run, cols)
    ranks = _ranks(replicas)
    slots = sum(r.runtime.config.batch_slots for r in replicas)
    occupancy = float(held.sum()) / (slots * span) if span > 0 and slots else 0.0
    by_pool = _pool_occupancy(replicas, held, span)
    kept = _pool_kept(replicas, cols, took, decoded, served)
    goodput = _goodput(good, output, total, span)
    latency = _latency(cols, served)
    prefix_cache = None
    if any(r.prefix is not None for r in replicas):
        skipped = int(run.records.cached_tokens[served].sum())
        prompts = int(cols["prompt_tokens"][served].sum())
        prefix_cache = ClusterPrefixCache(
            **asdict(_prefix(replicas)),
            prefill_tokens_skipped=skipped,
            token_hit_rate=_round(skipped / prompts if prompts else 0.0),
        )
    link = run.cluster.link
    kv_transfer = None
    if link is not None:
        kv_transfer = KVTransfer(
            transfers=link.transfers,
            bytes=link.bytes,
            seconds=Percentiles.of(_finite(cols["kv_transfer_s"])),
            port_wait_s=_round(link.queued_ps / PS_PER_S),
        )
    return ClusterSummary(
        **asdict(meta),
        pools={
            name: replace(
                pool,
                occupancy=_round(by_pool.get(name, 0.0)),
                requests=kept[name][0],
                kv_kept=kept[name][1],
                kv_pool=_kv_pool(replicas, name),
            )
            for name, pool in pools.items()
        },
        traffic=traffic,
        requests=total,
        requests_served=int(served.sum()),
        requests_rejected=int((cols["status"] == "rejected").sum()),
        requests_truncated=int(cols["truncated"].sum()),
        prompt_tokens_truncated=run.fit.prompt_tokens_cut,
        output_tokens_truncated=run.fit.output_tokens_cut,
        output_tokens=int(output[served].sum()),
        makespan_s=_round(span),
        output_tokens_per_s=_round(float(output[served].sum()) / span if span > 0 else 0.0),
        ttft_s=latency["ttft_s"],
        tpot_s=latency["tpot_s"],
        queue_delay_s=latency["queue_delay_s"],
        e2e_s=latency["e2e_s"],
        slo=SLOTargets(
            ttft_s=_round(slo.ttft), tpot_s=_round(slo.tpot), attainment=_round(slo.attainment)
        ),
        goodput=goodput,
        slo_met=(goodput.requests / total if total else 0.0) >= slo.attainment,
        offered=_offered(cols["arrival_s"], int(output.sum()) + run.fit.output_tokens_cut),
        classes=_classes(cols, labels, good),
        per_replica=[
            _replica(r, cols, took[i], decoded[i], good, float(held[i]), span, ranks[i])
            for i, r in enumerate(replicas)
        ],
        step_shapes_simulated=shapes_simulated,
        energy=_energy(machines, span, int(output[served].sum())),
        prefix_cache=prefix_cache,
        kv_transfer=kv_transfer,
        provenance=dict(provenance or {}),
        lockstep=lockstep_costs(run),
        slo_binding=_slo_binding(cols, served, slo),
        occupancy=_round(occupancy),
        throughput_bound=cluster_bound(by_pool, latency),
        prefill_queueing=prefill_queueing(run, served, by_pool),
    )


def prefill_queueing(
    run: ClusterRun, served: NDArray[np.bool_], by_pool: Mapping[str, float]
) -> PrefillQueueing | None:
    """A disaggregated run's prefill queueing split by what held the slots it waited for
    (:class:`PrefillQueueing`), from the per-request times: on each prefill replica a slot
    is held from admission to its KV cache's arrival (to the finish for a request of one
    token, never sent); of that, from the first token to the decode slot's reservation it
    waits for the decode pool, then for the transfer. Each request's queueing, instant by
    instant, is shared in proportion to its replica's slots in each state (nothing held:
    the prefill's). None without a prefill pool."""
    replicas = run.cluster.replicas
    fronts = [r.index for r in replicas if r.runtime.config.role == "prefill"]
    if not fronts:
        return None
    serving, records = run.serving, run.records
    sent = records.kv_end_ps != UNSET
    release = np.where(sent, records.kv_end_ps, serving.finish_ps)
    queued = np.zeros(3)  # behind: prefills, decode slots, transfers (ps)
    for index in fronts:
        took = np.flatnonzero(served & (records.replica == index))
        mine = took[sent[took]]
        busy = _step_function(serving.admit_ps[took], release[took])
        waiting = _step_function(serving.first_token_ps[mine], records.kv_start_ps[mine])
        sending = _step_function(records.kv_start_ps[mine], records.kv_end_ps[mine])
        arrive, admit = serving.arrival_ps[took], serving.admit_ps[took]
        for i, held in enumerate((waiting, sending), start=1):
            queued[i] += _share_integral(busy, held, arrive, admit)
        queued[0] += float((admit - arrive).sum())
    queued[0] -= queued[1] + queued[2]
    total = float(queued.sum())
    share = (queued[1] + queued[2]) / total if total > 0 else 0.0
    decode = {
        r.runtime.name: _round(by_pool.get(r.runtime.name, 0.0))
        for r in replicas
        if r.runtime.config.role == "decode"
    }
    prefill_s, decode_slot_s, kv_transfer_s = (_round(float(q) / PS_PER_S) for q in queued)
    return PrefillQueueing(
        total_s=_round(total / PS_PER_S),
        prefill_s=prefill_s,
        decode_slot_s=decode_slot_s,
        kv_transfer_s=kv_transfer_s,
        decode_share=_round(share),
        waits_for="decode" if share > 0.5 else "prefill",
        decode_pools=decode,
    )


StepFunction = tuple[NDArray[np.int64], NDArray[np.int64]]


def _step_function(start: NDArray[np.int64], end: NDArray[np.int64]) -> StepFunction:
    """How many of the intervals ``[start, end)`` are open: the times it changes at and its
    value from each on."""
    times = np.concatenate([start, end])
    if times.size == 0:  # no interval: never open
        return times, times
    deltas = np.concatenate([np.ones_like(start), -np.ones_like(end)])
    order = np.argsort(times, kind="stable")
    times, count = times[order], np.cumsum(deltas[order])
    last = np.append(times[1:] != times[:-1], True)  # the value after an instant's changes
    return times[last], count[last]


def _value_at(function: StepFunction, times: NDArray[np.int64]) -> NDArray[np.int64]:
    """A step function's value on ``[t, next change)`` for each of ``times``."""
    at, value = function
    if at.size == 0:
        return np.zeros(len(times), dtype=np.int64)
    index = np.searchsorted(at, times, side="right") - 1
    return np.where(index >= 0, value[np.maximum(index, 0)], 0)


def _share_integral(
    busy: StepFunction, held: StepFunction, start: NDArray[np.int64], end: NDArray[np.int64]
) -> float:
    """The sum over ``[start, end)`` intervals of the time-integral of ``held / busy`` (0
    where nothing is busy), in ps."""
    times = np.union1d(busy[0], held[0])
    if times.size == 0:
        return 0.0
    b, h = _value_at(busy, times), _value_at(held, times)
    ratio = np.divide(h, b, out=np.zeros(times.size), where=b > 0)
    widths = np.diff(times).astype(np.float64)
    cumulative = np.concatenate([[0.0], np.cumsum(ratio[:-1] * widths)])
    at = times.astype(np.float64)  # the integral is linear between changes: interp is exact
    return float((np.interp(end, at, cumulative) - np.interp(start, at, cumulative)).sum())


def _kv_pool(replicas: Sequence[Replica], pool: str) -> PoolKVPool | None:
    """Pool ``pool``'s paged KV pool, the most pages any of its servers held, and the most
    its prefix caches' blocks took when they share it (None for static slots)."""
    servers = [r for r in replicas if r.runtime.name == pool]
    kv = servers[0].runtime.config.kv_pool if servers else None
    if kv is None:
        return None
    counts = [r.server.records.counts for r in servers]
    cached = None
    if servers[0].block_pages:
        cached = max(c.kv_cached_pages_peak for c in counts)
    return PoolKVPool(
        page_tokens=kv.page_tokens,
        pages=kv.pages,
        peak_pages=max(c.kv_pages_peak for c in counts),
        peak_cached_pages=cached,
        preemptions=sum(c.preemptions for c in counts)
        if kv.gives_on_demand(servers[0].runtime.config.role)
        else None,
    )


def _pool_occupancy(
    replicas: Sequence[Replica], held: NDArray[np.float64], span: float
) -> dict[str, float]:
    """Each pool's occupancy: its replicas' slot-seconds held over their slots x the
    makespan (a pool's own, so an idle prefill pool does not hide a full decode pool)."""
    held_by: dict[str, float] = {}
    slots_by: dict[str, int] = {}
    for replica, seconds in zip(replicas, held, strict=True):
        name = replica.runtime.name
        held_by[name] = held_by.get(name, 0.0) + float(seconds)
        slots_by[name] = slots_by.get(name, 0) + replica.runtime.config.batch_slots
    return {
        name: held_by[name] / (slots_by[name] * span) if span > 0 and slots_by[name] else 0.0
        for name in held_by
    }


def _pool_kept(
    replicas: Sequence[Replica],
    cols: Mapping[str, NDArray[Any]],
    took: Sequence[NDArray[np.int64]],
    decoded: Sequence[NDArray[np.int64]],
    served: NDArray[np.bool_],
) -> dict[str, tuple[int, KeptCounts]]:
    """Each pool's served requests and what its KV policy cut of them, by the one rule
    (``kept_counts``) over the requests its slots held: those its replicas took, or for a
    decode pool those they decoded (each arrives with the prompt's cache the prefill left).
    A prefill replica's slot holds the prompt only, so it counts no slot as outgrown and
    evicts nothing at decode."""
    chosen: dict[str, list[NDArray[np.int64]]] = {}
    policies: dict[str, KVPolicy] = {}
    roles: dict[str, str] = {}
    for i, replica in enumerate(replicas):
        runtime = replica.runtime
        role = runtime.config.role
        held = decoded[i] if role == "decode" else took[i]
        chosen.setdefault(runtime.name, []).append(held[served[held]])
        policies[runtime.name] = runtime.policy
        roles[runtime.name] = role
    result: dict[str, tuple[int, KeptCounts]] = {}
    for name, parts in chosen.items():
        ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        prompts = cols["prompt_tokens"][ids]
        if roles[name] == "prefill":  # its slots never decode: nothing outgrown or evicted
            kept = kept_counts(policies[name], prompts, np.ones_like(prompts))
            result[name] = (len(ids), replace(kept, decode_evicts=False))
        else:
            kept = kept_counts(policies[name], prompts, cols["output_tokens"][ids])
            result[name] = (len(ids), kept)
    return result


def cluster_bound(by_pool: Mapping[str, float], latency: Mapping[str, Percentiles]) -> str:
    """What set a cluster's throughput: ``report.summary.throughput_bound`` of an open loop on
    its busiest pool's occupancy, ``offered_load`` only when even that pool's slots stood
    mostly idle and the requests' queueing was not most of their time to first token
    (``queue_grew`` against the TTFT, which the prefill queue is part of: it holds whichever
    pool is full, a decode pool's included, as the prefill replicas wait to hand their
    requests on). Not the single run's whole rule: its saturation test
    (``summary.machine_saturated``: requests waiting while slots stood empty, as the machine
    prefilled others) reads a server's time series of held slots and waiting requests, which
    a cluster's replicas do not keep (``ServingRecords.replica_view``); so a pool whose
    prefill kept its slots below 90% full, with queueing under half the TTFT, reads
    ``offered_load`` where a lone run of its workload may read ``machine``."""
    busiest = max(by_pool.values(), default=0.0)
    return throughput_bound(False, busiest, queue_grew(latency["queue_delay_s"], latency["ttft_s"]))


def _slo_binding(
    cols: Mapping[str, NDArray[Any]], served: NDArray[np.bool_], slo: SLOConfig
) -> tuple[Verdict, ...]:
    """The SLO half that binds (``slo_why.binding``: those missed, else the nearer its
    target), without advice: a run measures no floors, so whether more replicas help is
    ``rdu-sim plan``'s to say. A request not served misses both halves."""
    ttft = np.where(served, cols["ttft_s"], np.inf)
    tpot = np.where(served, cols["tpot_s"], np.inf)
    return tuple(binding(half_metrics(ttft, tpot, slo), slo, advise=False))


def lockstep_costs(run: ClusterRun) -> dict[str, LockstepCost] | None:
    """Per pool whose replicas' attention ranks step together: what it cost them, over its
    replicas (``serving.lockstep.Ranks``'s counters summed); None when no pool's do."""
    totals: dict[str, list[int]] = {}  # pool -> ranks, joint x ranks, busy, own, decode, held
    for pool, together in run.cluster.lockstep:
        ranks = len(together.ranks)
        total = totals.setdefault(pool, [ranks, 0, 0, 0, 0, 0])
        total[1] += ranks * together.joint_ps
        total[2] += together.busy_ps
        total[3] += together.own_ps
        total[4] += together.decode_ps
        total[5] += together.held_ps
    if not totals:
        return None
    return {
        pool: LockstepCost(
            ranks=ranks,
            idle_share=_round(1.0 - busy / joint if joint else 0.0),
            wait_share=_round(1.0 - own / busy if busy else 0.0),
            prefill_held_share=_round(held / decode if decode else 0.0),
        )
        for pool, (ranks, joint, busy, own, decode, held) in totals.items()
    }
