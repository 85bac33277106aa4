"""Typed, validated description of a cluster workload: replica pools, a router, traffic, SLOs.

A cluster file composes ordinary workload files (one per pool of identical replicas: the
hardware, model, KV policy and batch slots of each replica) and adds what only a fleet has:
how requests are routed, where they come from (a published trace or a synthetic mix), the
latency targets they are judged against, prefix caching, and the link that carries KV caches
from prefill replicas to decode replicas when serving is disaggregated. docs/cluster.md
describes every field; field paths are the `--set` paths (`pools.serve.replicas=16`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from rdu_sim.config.base import StrictModel
from rdu_sim.config.errors import FieldProblem
from rdu_sim.config.limits import MIN_RATE
from rdu_sim.config.units import (
    Bytes,
    BytesPerSecond,
    Seconds,
    ShortSeconds,
    TPOTSeconds,
    TTFTSeconds,
)
from rdu_sim.config.workload import LengthDistribution, TraceFormat, fixed_shorthand, named_only
from rdu_sim.sim_warnings import RduSimWarning

Role = Literal["mixed", "prefill", "decode"]

_MAX_REPLICAS = 100_000
_MAX_SECONDS = 1e7  # ~4 months: longer than any published trace
_MAX_REQUESTS = 10_000_000  # ~150 bytes of records each: 1.5 GB; a trace holds <= 4M lines


class PoolConfig(StrictModel):
    """Identical replicas, each one workload (its own tensor-parallel group of sockets)."""

    workload: str = Field(min_length=1, description="workload file, relative to this file")
    replicas: int = Field(ge=1, le=_MAX_REPLICAS, description="replicas in the pool")
    role: Role = Field(
        default="mixed",
        description="'mixed' prefills and decodes; 'prefill' only prefills and sends each KV "
        "cache to a 'decode' replica, which only decodes (disaggregated serving)",
    )
    set: dict[str, Any] = Field(
        default_factory=dict,
        description="overrides of the workload's fields, as --set paths "
        "(serving.batch_slots: 32, parallelism.tp: 4, hw.system.sockets: 8)",
    )


class RouterConfig(StrictModel):
    """How an arriving request (and a prefilled one, when disaggregated) picks a replica."""

    policy: Annotated[
        str,
        named_only(
            "its settings are router's other fields (router.load_refresh, router.seed), and a "
            "variant is a router registered under a name of its own, from a plugin "
            '(docs/cluster.md, "How a cluster runs")'
        ),
    ] = Field(
        default="least_outstanding",
        min_length=1,
        max_length=100,
        description="the router by registered name (the registry in rdu_sim.cluster.routers "
        "is the one list of valid names, a plugin's included: rdu_sim.plugins; checked when "
        "the cluster is loaded; docs/cluster.md describes the shipped ones)",
    )
    load_refresh: Seconds = Field(
        default=0.0,
        ge=0,
        le=3600,
        description="how often the replicas publish their load to the routers (as a "
        "metrics scrape does): a router reads the last publication plus the requests it has "
        "itself sent since; 0 (the default) reads every replica's exact load at the arrival "
        "instant. Prefix caches are read exact either way (their events are pushed per block)",
    )

    seed: int | None = Field(
        default=None,
        ge=0,
        le=2**63 - 1,
        description="seed of a router that takes one (a plugin's that draws: its constructor's "
        "seed keyword; the decode pool's router gets it plus one); default: traffic.seed, "
        "which is 0 with a trace",
    )

    @field_validator("load_refresh")
    @classmethod
    def _refresh(cls, value: float) -> float:
        """A refresh the picosecond clock cannot hold would read as 0 (exact): refused."""
        if 0 < value < 1e-12:
            raise ValueError(
                f"{value} s is below the clock's 1 ps, so it would read the exact load: write "
                "0 for that, or at least 1 ps"
            )
        return value


class UnreadRouterFieldWarning(RduSimWarning):
    """A router field the chosen router does not read: it changes nothing."""


def _only_apply(fields: list[str]) -> str:
    """``traffic.seed only applies``, ``traffic.rate, traffic.seed only apply``."""
    return f"{', '.join(fields)} only {'applies' if len(fields) == 1 else 'apply'}"


class TrafficConfig(StrictModel):
    """Where requests come from: a trace file, or a Poisson rate and a length mix."""

    trace: str | None = Field(
        default=None, description="trace file, relative to this file (docs/cluster.md formats)"
    )
    format: TraceFormat = Field(
        default="auto",
        description="trace format: 'csv' or 'jsonl' (the project's: arrival_s, prompt_tokens, "
        "output_tokens), 'azure' (Azure LLM inference CSV), 'mooncake' (JSONL with "
        "hash_ids), 'burstgpt' (CSV); 'auto' reads it off the file's first line",
    )
    time_scale: float = Field(
        default=1.0,
        gt=0,
        le=1e6,
        description="multiply the trace's arrival times (0.5 replays it twice as fast)",
    )
    start: Seconds | None = Field(
        default=None,
        ge=0,
        le=_MAX_SECONDS,
        description="keep requests arriving at or after this time of the trace's own clock "
        "(from its first request, before time_scale)",
    )
    end: Seconds | None = Field(
        default=None,
        gt=0,
        le=_MAX_SECONDS,
        description="keep requests arriving before this time of the trace's own clock",
    )
    filter: dict[str, str | int | float] = Field(
        default_factory=dict,
        description="keep only rows whose column equals the value (BurstGPT: Model: GPT-4)",
    )
    requests: int | None = Field(
        default=None,
        ge=1,
        le=_MAX_REQUESTS,
        description="a trace: use at most this many requests (after filtering); synthetic: "
        "how many to draw",
    )
    over_context: Literal["reject", "truncate"] = Field(
        default="reject",
        description="a request longer than every replica's max_context: 'reject' it (counted "
        "as rejected) or 'truncate' it to fit (counted as truncated)",
    )
    rate: float | None = Field(
        default=None, gt=0, le=1e9, description="synthetic traffic: Poisson requests per second"
    )
    prompt_tokens: LengthDistribution | None = Field(
        default=None, description="synthetic traffic: prompt lengths"
    )
    output_tokens: LengthDistribution | None = Field(
        default=None, description="synthetic traffic: output lengths"
    )
    seed: int = Field(
        default=0,
        ge=0,
        le=2**63 - 1,
        description="synthetic traffic: seed of the arrivals and lengths; also a router's "
        "that takes one, unless router.seed is given (docs/cluster.md)",
    )

    @field_validator("prompt_tokens", "output_tokens", mode="before")
    @classmethod
    def _fixed(cls, value: Any) -> Any:
        """A bare number is a fixed length, as in a workload (the optional field would not
        reach LengthDistribution's own shorthand)."""
        return fixed_shorthand(value)

    @model_validator(mode="after")
    def _one_source(self) -> TrafficConfig:
        synthetic = ("rate", "prompt_tokens", "output_tokens", "seed")
        replay = ("format", "time_scale", "start", "end", "filter")
        given = self.model_fields_set
        if self.trace is not None:
            extra = [f"traffic.{f}" for f in synthetic if f in given]
            if extra:
                seeded = " (a router's seed is router.seed)" if "seed" in given else ""
                raise ValueError(f"{_only_apply(extra)} to synthetic traffic, not a trace{seeded}")
        else:
            extra = [f"traffic.{f}" for f in replay if f in given]
            if extra:
                raise ValueError(f"{_only_apply(extra)} to a trace (traffic.trace)")
            missing = [
                f"traffic.{f}"
                for f in ("rate", "prompt_tokens", "output_tokens", "requests")
                if getattr(self, f) is None
            ]
            if missing:
                raise ValueError(
                    f"give traffic.trace, or synthetic traffic with {', '.join(missing)}"
                )
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise FieldProblem("end", f"must be after start ({self.start} s), got {self.end} s")
        return self


TTFTTarget = Annotated[
    TTFTSeconds, Field(gt=0, le=_MAX_SECONDS, description="time to first token target")
]
"""An SLO's TTFT target (SLOConfig's field and SLOOverride's: the bounds in one place); a
bare number of a minute or more is refused as a forgotten unit (``ttft: 500`` meaning ms)."""
TPOTTarget = Annotated[
    TPOTSeconds, Field(gt=0, le=_MAX_SECONDS, description="time per output token target")
]
"""An SLO's TPOT target; a bare number of a second or more is refused as a forgotten unit."""
Attainment = Annotated[
    float,
    Field(
        gt=0,
        le=1,
        description="fraction of all requests (rejected ones included) that must meet both "
        "targets for the cluster to meet its SLO",
    ),
]
"""An SLO's attainment."""


class SLOConfig(StrictModel):
    """Latency targets: a request meets the SLO when it meets both."""

    ttft: TTFTTarget
    tpot: TPOTTarget
    attainment: Attainment = 0.99


def _kept(name: str) -> Any:
    """An SLOOverride field: omitted (None) keeps the other SLO's; described as SLOConfig's."""
    return Field(default=None, description=SLOConfig.model_fields[name].description)


class SLOOverride(StrictModel):
    """Some of an SLO's fields over another SLO (a plan's over its cluster file's): the
    one merge rule, ``over``; each field it omits keeps the other SLO's value. Its fields
    are SLOConfig's types (their bounds), each optional."""

    ttft: TTFTTarget | None = _kept("ttft")
    tpot: TPOTTarget | None = _kept("tpot")
    attainment: Attainment | None = _kept("attainment")

    def over(self, slo: SLOConfig) -> SLOConfig:
        """``slo`` with the fields this gives replaced (the values held, not a dump's: a
        target past its bare ceiling dumps as text with its unit)."""
        return slo.model_copy(update={name: getattr(self, name) for name in self.given()})

    def given(self) -> list[str]:
        """The fields it gives, in field order."""
        return [name for name in type(self).model_fields if getattr(self, name) is not None]


class ClassesConfig(StrictModel):
    """How requests are grouped for per-class percentiles."""

    by: Literal["prompt_tokens", "output_tokens", "column"] = Field(
        default="prompt_tokens",
        description="a length bucket (with edges) or a trace column (with column)",
    )
    edges: list[int] = Field(
        default_factory=list,
        description="ascending token boundaries: class i holds lengths in [edge i-1, edge i)",
    )
    column: str | None = Field(
        default=None, min_length=1, description="trace column naming the class (BurstGPT: Model)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> ClassesConfig:
        if self.by == "column":
            if self.column is None:
                raise FieldProblem("by", "'column' needs classes.column")
            if self.edges:
                raise FieldProblem("edges", "only apply to by: prompt_tokens or output_tokens")
        else:
            if self.column is not None:
                raise FieldProblem("column", "only applies to by: column")
            if not self.edges:
                raise FieldProblem("by", f"{self.by!r} needs classes.edges")
            if any(e < 1 for e in self.edges) or self.edges != sorted(set(self.edges)):
                raise FieldProblem("edges", "must be positive and strictly ascending")
        return self


class PrefixCacheConfig(StrictModel):
    """Replicas keep prompt KV blocks and reuse them for later prompts with the same prefix."""

    block_tokens: int = Field(
        default=512,
        ge=1,
        le=1_000_000,
        description="tokens per cached block: the block of the trace's hash_ids (Mooncake: 512)",
    )
    capacity: Bytes | None = Field(
        default=None,
        gt=0,
        le=2**60,
        description="HBM per socket holding cached blocks; omit for what the replica's memory "
        "plan leaves free (static slots), or, on a paged KV pool (TensorRT-LLM, vLLM), for no "
        "cap: the blocks share the pool's pages, idle ones evicted as admissions need them",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_pool_share(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "pool_share" in data:
            raise FieldProblem(
                "pool_share",
                "was removed: a paged KV pool's prefix cache no longer takes a fixed share of the "
                "pool; its blocks share the pool's pages with the running requests, idle ones "
                "evicted (least recently used first) as admissions need pages, as vLLM and "
                "TensorRT-LLM do. Remove it; prefix_cache.capacity (bytes per socket) caps "
                "the cache if a cap is wanted",
            )
        return data


class KVTransferConfig(StrictModel):
    """The network port of each replica that carries KV caches to decode replicas.

    Not public for SambaRack: the defaults describe one 400 Gb/s RDMA NIC per replica
    (50 GB/s each way) and a switch hop plus RDMA setup (10 us)."""

    bandwidth: BytesPerSecond = Field(
        default=50e9,
        ge=MIN_RATE,  # the floor of every hardware rate: a finite time
        le=1e15,
        description="bytes/s of one replica's port, each direction",
    )
    latency: ShortSeconds = Field(
        default=10e-6, ge=0, le=1.0, description="from a transfer's last byte sent to its arrival"
    )


class ClusterConfig(StrictModel):
    """A complete cluster workload file."""

    name: str = Field(
        default="cluster", min_length=1, max_length=200, description="the name reports show"
    )
    description: str = Field(default="", description="what the cluster is for (free text)")
    pools: dict[str, PoolConfig] = Field(
        description="replica pools by name (each a workload and a replica count)"
    )
    router: RouterConfig = Field(default_factory=RouterConfig)
    traffic: TrafficConfig
    slo: SLOConfig
    classes: ClassesConfig | None = Field(
        default=None, description="group requests for per-class percentiles (optional)"
    )
    prefix_cache: PrefixCacheConfig | None = Field(
        default=None, description="reuse cached prompt blocks (needs a trace with hash_ids)"
    )
    kv_transfer: KVTransferConfig | None = Field(
        default=None, description="the link moving KV caches (disaggregated pools only)"
    )

    @field_validator("pools")
    @classmethod
    def _pools(cls, pools: dict[str, PoolConfig]) -> dict[str, PoolConfig]:
        if not pools:
            raise ValueError("a cluster needs at least one pool")
        for name in pools:
            if not name or "." in name or name != name.strip():
                raise ValueError(f"pool name {name!r} must be non-empty, without dots or spaces")
        return pools

    @model_validator(mode="after")
    def _roles(self) -> ClusterConfig:
        roles = {pool.role for pool in self.pools.values()}
        split = roles & {"prefill", "decode"}
        if split and roles != {"prefill", "decode"}:
            raise ValueError(
                "disaggregated serving needs prefill and decode pools and no mixed one; got "
                f"roles {sorted(roles)}"
            )
        if not split and self.kv_transfer is not None:
            raise FieldProblem("kv_transfer", "only applies with prefill and decode pools")
        return self

    @property
    def router_seed(self) -> int:
        """The seed a router that takes one is made with (the decode pool's: plus one):
        ``router.seed``, else ``traffic.seed`` (0 with a trace). The one rule."""
        return self.router.seed if self.router.seed is not None else self.traffic.seed

    @property
    def disaggregated(self) -> bool:
        """True when prefill and decode run on separate pools."""
        return any(pool.role != "mixed" for pool in self.pools.values())
