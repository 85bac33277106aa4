"""The metrics of a cluster run, typed: what the console reads and what the JSON is.

:class:`ClusterSummary` plays for a cluster the part :class:`~rdu_sim.report.summary.RunSummary`
plays for a lone workload: ``report.cluster.summarize_cluster`` builds it, the console
(``report.cluster_console``) reads its attributes, and :meth:`ClusterSummary.to_dict` is the
JSON contract of ``rdu-sim run CLUSTER --json`` (docs/cluster.md). A renamed field is then
an attribute error or a type error in mypy, never a "None" printed in a table. Floats are
rounded as the JSON is (12 significant digits) when the summary is built, so an attribute
and its JSON value are the same number.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any, TypeVar

from rdu_sim import human
from rdu_sim.cluster.traffic import TrafficSummary
from rdu_sim.kv.policies import KeptCounts
from rdu_sim.report.energy import Energy
from rdu_sim.report.percentiles import Percentiles, rounded
from rdu_sim.report.slo_why import Verdict
from rdu_sim.report.summary import StepCounts, Utilization

__all__ = [
    "Brief",
    "ClassSummary",
    "ClusterMeta",
    "ClusterPrefixCache",
    "ClusterSummary",
    "Goodput",
    "KVTransfer",
    "OfferedLoad",
    "PoolSummary",
    "PrefixCacheStats",
    "ReplicaSummary",
    "SLOTargets",
    "rounded_fields",
]

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


def rounded_fields(value: T) -> T:
    """A dataclass with its float fields rounded as the JSON rounds them (non-finite: None)."""
    changes = {
        f.name: rounded(getattr(value, f.name))
        for f in fields(value)
        if isinstance(getattr(value, f.name), float)
    }
    return replace(value, **changes)


@dataclass(frozen=True)
class ClusterMeta:
    """What a cluster run is, beside its metrics: names, sizes, the simulator's version."""

    cluster: str
    router: str
    disaggregated: bool
    replicas: int
    sockets: int  # devices of the whole cluster, sockets or GPUs (`device` says which)
    device: str  # what one device is: 'socket', 'GPU', or 'device' when the pools differ
    max_context: int
    version: str


@dataclass(frozen=True)
class PoolKVPool:
    """A pool's paged KV pool (``kv.paged``; one device's share of each page): each
    server's pages and their tokens, and the most pages any of its servers held at once,
    requests' own and cached blocks' (never more than ``pages``: a decode replica's hand-off
    reserves them as an admission does); with a prefix cache, whose blocks share the pool
    (``serving.kv_pool``), the most pages its blocks took on any server (None without one,
    and left out of the JSON); under pages given on demand (``kv_allocation: on_demand``)
    the requests its servers preempted for a decode step's pages (None, and left out of the
    JSON, for a pool that reserves)."""

    page_tokens: int
    pages: int
    peak_pages: int
    peak_cached_pages: int | None = None
    preemptions: int | None = None


@dataclass(frozen=True)
class PoolSummary:
    """A pool's identity and sizes: its role, replicas and what each replica runs."""

    role: str
    replicas: int
    workload: str
    model: str
    hardware: str
    tp: int
    # each replica's parallel degrees by their parallelism.* names (ParallelismConfig.layout)
    layout: dict[str, int]
    sockets: int
    kv_policy: str
    batching_policy: str  # serving.prefill_priority: the batching policy's registered name
    batch_capacity: int  # of one attention rank (of a replica, without data-parallel attention)
    batch_slots: int  # of one attention rank, likewise
    prefix_cache_blocks: int
    ranks: int = 1  # attention ranks of a replica, a server each (data-parallel attention)
    # its replicas' batch slots together: slot-seconds held over slots x makespan
    occupancy: float = 0.0
    # the served requests its slots held (took, or for a decode pool decoded), and what its
    # KV policy cut of them (``kv.policies.kept_counts``; None before the run is summarized)
    requests: int = 0
    kv_kept: KeptCounts | None = None
    kv_pool: PoolKVPool | None = None  # a paged KV cache's (absent from the JSON else)
    # hardware predicted, not measured (``config.origins.predicted_words``), as a run says it
    predicted: str | None = None
    # that the serving stack has no program of the pool's batch_slots and runs them as if
    # it had (``compiler.placement.unrunnable_note``; absent from the JSON else)
    batch_note: str | None = None


@dataclass(frozen=True)
class SLOTargets:
    """The cluster's SLO: TTFT and TPOT targets, and the share of requests that must meet both."""

    ttft_s: float
    tpot_s: float
    attainment: float


@dataclass(frozen=True)
class Goodput:
    """Requests that met the SLO: how many, their share of all requests, and their request
    and output-token rates over the makespan."""

    requests: int
    fraction: float
    requests_per_s: float
    tokens_per_s: float


@dataclass(frozen=True)
class OfferedLoad:
    """What the traffic asked, as rates over its arrival window (first to last arrival), so
    the goodput can be read against it: requests a second, the inverse of the mean gap
    between arrivals, and the output tokens they asked for (before any context limit).
    Both are None when every request arrives at once."""

    window_s: float
    requests_per_s: float | None
    output_tokens_per_s: float | None


@dataclass(frozen=True)
class ClassSummary:
    """One request class: its requests, how many were served and rejected, the share that
    met the SLO (None for a class no request fell in: no share of nothing), and its
    latency percentiles over the served ones."""

    requests: int
    served: int
    rejected: int
    goodput_fraction: float | None
    ttft_s: Percentiles
    tpot_s: Percentiles
    queue_delay_s: Percentiles
    e2e_s: Percentiles


@dataclass(frozen=True)
class Brief:
    """p50 and p99 of a per-request quantity (None when no request has it)."""

    p50: float | None
    p99: float | None


@dataclass(frozen=True)
class PrefixCacheStats:
    """Prefix caches (one replica's, or all of them summed): blocks held at most, looked up,
    hit, inserted, evicted, and not cached; on a paged KV pool, of the evicted, those an
    admission's pages needed (``evicted_for_room``; None for static slots, whose cache has
    memory of its own, and left out of the JSON)."""

    capacity_blocks: int
    lookups: int
    hit_blocks: int
    hit_rate: float
    inserted: int
    evicted: int
    not_cached: int
    evicted_for_room: int | None

    @staticmethod
    def shown(data: dict[str, Any]) -> dict[str, Any]:
        """Its JSON, ``data`` (its ``asdict``), without a None ``evicted_for_room``."""
        if data["evicted_for_room"] is None:
            del data["evicted_for_room"]
        return data


@dataclass(frozen=True)
class ClusterPrefixCache(PrefixCacheStats):
    """Every replica's prefix cache, with the prompt tokens whose prefill it skipped."""

    prefill_tokens_skipped: int
    token_hit_rate: float


@dataclass(frozen=True)
class ReplicaSummary:
    """One server: a replica's, or under data-parallel attention one attention rank's (each
    rank a server of its own). ``replica`` is the server's index (the requests CSV's replica
    column); a rank also has ``rank``, its index in its replica, and ``of_replica``, that
    replica's number (replicas counted in server order, as the report's replica count
    counts them); both None for a one-server replica, and left out of its JSON. What it took
    (prefill side) and decoded, its latencies, slot occupancy, utilization, steps and prefix
    cache (None without one: the key is then left out)."""

    replica: int
    pool: str
    role: str
    requests: int
    decoded: int
    output_tokens: int
    goodput_fraction: float | None
    ttft_s: Brief
    tpot_s: Brief
    occupancy: float
    utilization: Utilization
    steps: StepCounts
    prefix_cache: PrefixCacheStats | None = None
    rank: int | None = None
    of_replica: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The server's JSON (``prefix_cache`` only when it has one; ``rank`` and
        ``of_replica`` only for an attention rank)."""
        data = asdict(self)
        for optional in ("prefix_cache", "rank", "of_replica"):
            if data[optional] is None:
                del data[optional]
        if "prefix_cache" in data:
            PrefixCacheStats.shown(data["prefix_cache"])
        return data


@dataclass(frozen=True)
class LockstepCost:
    """What stepping together cost a pool's data-parallel attention ranks, over its
    replicas: the share of the ranks' time in joint steps with nothing to do, the share of
    the busy ranks' time spent waiting for a slower rank, and the share of the decoding
    ranks' time spent in joint steps that held another rank's prefill (their tokens waited
    for it)."""

    ranks: int
    idle_share: float
    wait_share: float
    prefill_held_share: float


@dataclass(frozen=True)
class KVTransfer:
    """A disaggregated run's KV link: transfers, bytes, each transfer's seconds and the time
    transfers waited for the port."""

    transfers: int
    bytes: float
    seconds: Percentiles
    port_wait_s: float


@dataclass(frozen=True)
class PrefillQueueing:
    """A disaggregated run's queueing for a prefill slot (TTFT's wait: its first token comes
    out of the prefill), split by what held the slots each request waited for. A prefill
    replica's slot holds a prefilled request until its KV cache has left, which starts only
    once a decode replica reserved a slot for it: a full decode pool blocks the prefill
    slots, so a TTFT's queueing can be the decode pool's. Each instant a request waited is
    shared among the slots its replica held then, in proportion (seconds summed over served
    requests): ``prefill_s`` behind slots prefilling (or none held), ``decode_slot_s``
    behind prefilled requests waiting for a decode slot, ``kv_transfer_s`` behind caches
    being sent. ``waits_for``: ``decode`` when the last two are most of the queueing
    (``decode_share`` > 1/2), else ``prefill``; ``decode_pools`` each decode pool's
    occupancy."""

    total_s: float
    prefill_s: float
    decode_slot_s: float
    kv_transfer_s: float
    decode_share: float
    waits_for: str
    decode_pools: dict[str, float]

    def words(self) -> str:
        """The split in words, naming the pool that binds and its lever."""
        if self.total_s <= 0:
            return "no request queued for a prefill slot"
        pools = " and ".join(
            f"pool {name} ({human.percent(occupancy)} occupied)"
            for name, occupancy in self.decode_pools.items()
        )
        split = (
            f"{human.percent(self.decode_share)} of the queueing waited behind prefill slots "
            f"holding prefilled requests until {pools} took them (a decode slot "
            f"{human.percent(self.decode_slot_s / self.total_s)}, the KV transfer "
            f"{human.percent(self.kv_transfer_s / self.total_s)}), "
            f"{human.percent(self.prefill_s / self.total_s)} behind prefills"
        )
        if self.waits_for == "decode":
            lever = (
                "the decode pool binds: more decode replicas or decode batch slots would move "
                "it (more prefill slots would fill the same way)"
            )
            if self.kv_transfer_s > self.decode_slot_s:
                lever = "the hand-off binds: a faster KV link (kv_transfer) would move it"
            return f"{split}; {lever}"
        return f"{split}; the prefill pool binds: more prefill replicas would move it"


@dataclass(frozen=True)
class ClusterSummary(ClusterMeta):
    """The metrics of one cluster run, typed (after what the run is, :class:`ClusterMeta`);
    :meth:`to_dict` is the JSON contract of ``rdu-sim run CLUSTER --json`` (docs/cluster.md
    repeats the definitions)."""

    pools: dict[str, PoolSummary]
    traffic: TrafficSummary
    requests: int
    requests_served: int
    requests_rejected: int
    requests_truncated: int
    prompt_tokens_truncated: int
    output_tokens_truncated: int
    output_tokens: int
    makespan_s: float
    output_tokens_per_s: float
    ttft_s: Percentiles
    tpot_s: Percentiles
    queue_delay_s: Percentiles
    e2e_s: Percentiles
    slo: SLOTargets
    goodput: Goodput
    slo_met: bool
    offered: OfferedLoad
    classes: dict[str, ClassSummary] | None
    per_replica: list[ReplicaSummary]
    step_shapes_simulated: int
    energy: Energy | None
    prefix_cache: ClusterPrefixCache | None
    kv_transfer: KVTransfer | None
    provenance: dict[str, Any]
    lockstep: dict[str, LockstepCost] | None = None  # by pool, when a pool's ranks step together
    # the SLO half (or halves) that binds: those missed, or the one nearer its target
    slo_binding: tuple[Verdict, ...] = ()
    # every replica's batch slots together: slot-seconds held over slots x makespan
    occupancy: float = 0.0
    # what set the throughput, by a single run's rule (``report.summary.throughput_bound``)
    # on the busiest pool's occupancy (``pools[...].occupancy``): ``offered_load`` when even
    # its slots stood mostly idle and queueing was not most of the time to first token
    throughput_bound: str = "machine"
    # disaggregated: the prefill queueing split by what held the slots (None otherwise)
    prefill_queueing: PrefillQueueing | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract: nested plain dicts; ``prefix_cache``, ``kv_transfer``,
        ``lockstep`` and ``prefill_queueing`` only when the cluster has them. The provenance is
        kept exact, and copied, as a run's is (``RunSummary.to_dict``)."""
        data: dict[str, Any] = asdict(replace(self, provenance={}, per_replica=[], slo_binding=()))
        data["slo_binding"] = [v.to_dict() for v in self.slo_binding]
        for name, pool in data["pools"].items():  # a rank a replica: as before ranks existed
            if pool["ranks"] == 1:
                del pool["ranks"]
            kept = self.pools[name].kv_kept
            if kept is not None:
                pool["kv_kept"] = kept.to_dict()
            if pool["batch_note"] is None:
                del pool["batch_note"]
            if pool["kv_pool"] is None:
                del pool["kv_pool"]
            else:
                for key in ("peak_cached_pages", "preemptions"):
                    if pool["kv_pool"][key] is None:
                        del pool["kv_pool"][key]
        data["traffic"] = self.traffic.to_dict()
        data["per_replica"] = [r.to_dict() for r in self.per_replica]
        for optional in ("prefix_cache", "kv_transfer", "lockstep", "prefill_queueing"):
            if data[optional] is None:
                del data[optional]
        if "prefix_cache" in data:
            PrefixCacheStats.shown(data["prefix_cache"])
        result: dict[str, Any] = rounded(data)
        result["provenance"] = copy.deepcopy(self.provenance)
        return result
