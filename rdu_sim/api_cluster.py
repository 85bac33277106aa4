"""The public, in-process API for clusters: what `rdu-sim run CLUSTER` and `rdu-sim plan` call.

    >>> from rdu_sim.api_cluster import run_cluster
    >>> result = run_cluster("workloads/clusters/llama3.1-8b-chat.yaml",
    ...                      {"traffic.requests": 40})   # or the shipped name: llama3.1-8b-chat
    >>> result.summary().goodput.fraction                # typed (report.cluster_summary)
    >>> result.to_dict()["goodput"]                      # the JSON contract (docs/cluster.md)
    >>> result.requests()["replica"]                     # per-request columns (NaN: none)

(tests/test_api_examples.py runs these examples.) A ClusterResult pickles (a worker process
can return it) without its live simulation: ``ClusterResult.__getstate__`` says what comes
along.

``run_cluster`` loads and validates the cluster file and its pools' workloads, reads the
traffic (a trace or a synthetic mix), applies the context limit (rejecting or truncating,
counted), and for each pool resolves what ``api.run`` resolves for a workload: batch slots,
memory plan, KV policy. Pools with equal workloads share one step function, memoised by
static shape, so a shape is compiled and simulated once for all their replicas (a step's
time depends only on its shape and config). Then the replicas, router and KV link run in
one SimPy environment (``rdu_sim.cluster.simulate``). Nothing is written to disk.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from numpy.typing import NDArray

from rdu_sim import __version__
from rdu_sim.api import (
    Backend,
    EngineBackend,
    Overrides,
    check_backend,
    check_progress,
    resolve_batch_slots,
)
from rdu_sim.cluster.replica import PoolRuntime
from rdu_sim.cluster.routers.base import reads_load, router_factory, takes_seed
from rdu_sim.cluster.scenario import ClusterScenario, PoolScenario, build_cluster, load_cluster
from rdu_sim.cluster.simulate import ClusterRun, simulate_cluster
from rdu_sim.cluster.traffic import (
    ClassLabels,
    ContextFit,
    class_labels,
    fit_context,
    load_traffic,
)
from rdu_sim.compiler.errors import CapacityError
from rdu_sim.compiler.placement import unrunnable_note
from rdu_sim.compiler.program import Placement
from rdu_sim.compiler.view import compile_role
from rdu_sim.config import shipped
from rdu_sim.config.cluster import UnreadRouterFieldWarning
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.origins import predicted_words
from rdu_sim.config.overrides import API, overridden
from rdu_sim.config.show import cut_middle
from rdu_sim.input_errors import InputError
from rdu_sim.kv.paged import PagedKV, block_pages
from rdu_sim.provenance import file_digest, of_scenario, outside_code, shown_file, simulator
from rdu_sim.report.cluster import request_columns, summarize_cluster
from rdu_sim.report.cluster_summary import ClusterMeta, ClusterSummary, PoolSummary
from rdu_sim.report.energy import Machine
from rdu_sim.scenario import Scenario
from rdu_sim.serving.clock import SimulatedTimeError
from rdu_sim.serving.limits import check_pool, warn_unchunked
from rdu_sim.serving.server import ServerConfig
from rdu_sim.serving.step_cache import PS_PER_S, StepTimes
from rdu_sim.sim_warnings import RduSimWarning, warn

__all__ = ["ClusterResult", "load", "run_cluster"]

Progress = Callable[[int, int], None]

E = TypeVar("E", bound=InputError)

MAX_CLUSTER_SLOTS = 10_000_000
"""Batch slots over all replicas: each costs ~60 bytes of slot state (and a few NumPy
arrays per replica); 64 racks of 1,024 Llama 8B replicas at their capacity hold ~50,000."""


@dataclass(frozen=True)
class PoolResolved:
    """A pool's resolved serving parameters (what ``api.run`` resolves for a workload)."""

    pool: PoolScenario
    batch_capacity: int
    placement: Placement
    runtime: PoolRuntime

    def describe(self) -> PoolSummary:
        """The pool's identity and sizes, for the run's summary."""
        scenario = self.pool.scenario
        return PoolSummary(
            role=self.pool.role,
            replicas=self.pool.replicas,
            workload=scenario.workload.name,
            model=scenario.model.name,
            hardware=scenario.hardware.name,
            tp=scenario.tp,
            layout=scenario.workload.parallelism.layout(),
            sockets=self.pool.sockets,
            kv_policy=scenario.workload.kv.policy,
            batching_policy=scenario.workload.serving.prefill_priority,
            batch_capacity=self.batch_capacity,
            batch_slots=self.runtime.config.batch_slots,
            prefix_cache_blocks=self.runtime.prefix_blocks,
            ranks=self.pool.ranks,
            predicted=predicted_words(scenario.hardware_file),
            batch_note=unrunnable_note(scenario, self.runtime.config.batch_slots),
        )


def pool_machine(pool: PoolScenario) -> Machine:
    """A pool's sockets with its hardware's power and prices (for the cluster's energy)."""
    hardware = pool.scenario.hardware
    return Machine(hardware.power, hardware.cost, pool.sockets, hardware.system.sockets_per_node)


class EmptyPrefixCacheWarning(RduSimWarning):
    """A pool that prefills, in a cluster with a prefix cache, has room for no block."""


class UncappedPrefixCacheWarning(RduSimWarning):
    """``prefix_cache.capacity`` holds at least every block a pool's memory leaves its cache
    (a paged pool's whole KV pool, static slots' free HBM): it caps nothing there (its cache
    takes that room, as without a cap)."""


def _prefix_blocks(
    cluster: ClusterScenario, pool: PoolScenario, placement: Placement
) -> tuple[int, int]:
    """How many prefix-cache blocks one replica of the pool holds at most, from its memory
    plan, and the pages of one block in its paged KV pool, whose pages the blocks share (0
    for static slots)."""
    prefix = cluster.config.prefix_cache
    if prefix is None or pool.role == "decode":  # a decode replica never prefills
        return 0, 0
    if placement.kv_pool is not None:
        blocks, pages = _paged_prefix_blocks(cluster, pool, placement.kv_pool)
    else:
        blocks, pages = _static_prefix_blocks(cluster, pool, placement), 0
    if not blocks:
        warn(
            EmptyPrefixCacheWarning(
                f"{cluster.file}: prefix_cache: the memory plan of pool {pool.name!r} leaves "
                "its prefix cache no block, so it caches nothing; give the KV cache more "
                "memory"
            )
        )
    return blocks, pages


def _paged_prefix_blocks(
    cluster: ClusterScenario, pool: PoolScenario, kv: PagedKV
) -> tuple[int, int]:
    """A paged pool's prefix cache lives in its KV pool, as vLLM's and TensorRT-LLM's cached
    blocks do: its blocks (each of whole pages: ``kv.paged.block_pages``) share the pool's
    pages with the running requests, idle ones evicted as admissions need their pages
    (``serving.kv_pool``); at most the whole pool, or ``prefix_cache.capacity`` bytes per
    socket of it when given (a cap: :func:`_capped_blocks`). The blocks it holds at most,
    and one block's pages."""
    prefix = cluster.config.prefix_cache
    assert prefix is not None
    try:
        per_block = block_pages(prefix.block_tokens, kv.page_tokens)
    except ValueError:
        raise overridden(
            cluster.issue(
                "prefix_cache.block_tokens",
                f"{prefix.block_tokens} tokens are not whole pages of the paged KV pool of "
                f"pool {pool.name!r} ({kv.page_tokens}-token pages, its stack's "
                "kv_page_tokens): the runtime caches whole pages, so a cached block must be a "
                "multiple of the page; use a trace whose blocks are, or a stack whose pages "
                "divide them",
            ),
            cluster.file,
            cluster.overrides,
        ) from None
    room = (
        f"its paged KV pool ({kv.pages} pages of {kv.page_tokens} tokens, "
        f"{kv.pages * kv.page_bytes} bytes per socket), and its cached blocks may take any "
        "pages no running request holds (evicted as admissions need them)"
    )
    blocks = _capped_blocks(
        cluster,
        pool,
        kv.pages // per_block,
        per_block * kv.page_bytes,
        room,
        f" ({per_block} pages of its paged KV pool)",
        "a cache sharing the whole pool",
    )
    return blocks, per_block


def _static_prefix_blocks(
    cluster: ClusterScenario, pool: PoolScenario, placement: Placement
) -> int:
    """Static slots: the prefix cache takes the HBM the slots leave of the KV room, or
    ``prefix_cache.capacity`` bytes per socket of it when given (a cap:
    :func:`_capped_blocks`)."""
    prefix = cluster.config.prefix_cache
    assert prefix is not None
    scenario = pool.scenario
    kv = sum(usage.kv_bytes for usage in placement.tiers.values())
    per_token = kv / (placement.batch_slots * scenario.kv_policy.slot_tokens())
    hbm = placement.tiers["hbm"]
    # the KV cache's room beside the slots' (the stack's share of HBM, ``StackConfig.kv_room``)
    room = scenario.stack.kv_room(hbm.capacity_bytes, hbm.weights_bytes, hbm.activations_bytes)
    free = max(0, min(hbm.free_bytes, int(room) - hbm.kv_bytes))
    block = prefix.block_tokens * per_token
    words = (
        f"the {free} bytes of HBM per socket that its memory plan leaves its KV cache beside "
        f"its {placement.batch_slots} slots, and the cache takes them all, as without a cap"
    )
    return _capped_blocks(cluster, pool, int(free // block), block, words, "", "the free HBM")


def _capped_blocks(
    cluster: ClusterScenario,
    pool: PoolScenario,
    room: int,
    block_bytes: float,
    room_words: str,
    block_words: str,
    omitted: str,
) -> int:
    """The one rule of ``prefix_cache.capacity`` (bytes per socket), for static slots and a
    paged pool alike: without it, a replica's cache holds the ``room`` blocks its memory
    leaves it (``room_words`` says what that is); a cap that holds at least those caps
    nothing there and warns so (:class:`UncappedPrefixCacheWarning`: one cluster-wide cap
    may still limit a larger pool beside this one), the cache keeping its room; a cap that
    holds no block (one takes ``block_bytes``, ``block_words`` says where) is refused, as
    it would cache nothing (``omitted``: what leaving it out gives)."""
    prefix = cluster.config.prefix_cache
    assert prefix is not None
    capacity = prefix.capacity
    if capacity is None:
        return room
    blocks = int(capacity // block_bytes)
    if blocks >= room:
        warn(
            UncappedPrefixCacheWarning(
                f"{cluster.file}: prefix_cache.capacity: {capacity} bytes per socket cap "
                f"nothing in pool {pool.name!r}: {room} blocks in all fit {room_words}"
            )
        )
        return room
    if not blocks:  # a cache of no block caches nothing
        raise overridden(
            cluster.issue(
                "prefix_cache.capacity",
                f"{capacity} bytes per socket hold no block: one block of "
                f"{prefix.block_tokens} tokens (prefix_cache.block_tokens) takes "
                f"{math.ceil(block_bytes)} bytes per socket{block_words} in pool "
                f"{pool.name!r}; give at least that, or omit capacity for {omitted}",
            ),
            cluster.file,
            cluster.overrides,
        )
    return blocks


def _in_pool(exc: E, cluster: ClusterScenario, pool: PoolScenario) -> E:
    """A pool's batch capacity, memory plan or KV pool refused in a lone run's words, ending
    with the pool that runs it (two pools may run one workload file under different sets)."""
    said = f" (pool {pool.name!r} of {cluster.file})"
    if isinstance(exc, ConfigError):  # its words are its issues'
        return type(exc)([replace(i, message=i.message + said) for i in exc.issues])
    named = copy.copy(exc)  # its type and field (``SlotsCapacityError.field``) kept
    named.args = (f"{exc}{said}",)
    return named


def _same_compile(one: Scenario, other: Scenario) -> bool:
    """Whether two pools' scenarios compile alike: equal but for a role the compile does not
    see (`compiler.view.compile_role`)."""
    return one == replace(other, role=one.role) and compile_role(one) == compile_role(other)


def resolve_pools(cluster: ClusterScenario, backend: Backend | None = None) -> list[PoolResolved]:
    """Each pool's batch slots, memory plan, KV policy and shared step function."""
    # per distinct compile: its backend (the engine's own, unless one is given) and one memo
    # of step times for every replica of every pool running it (pools of one workload whose
    # roles the compile tells apart, `compiler.view.compile_role`, each their own)
    shared: list[tuple[Scenario, Backend, StepTimes]] = []
    resolved: list[PoolResolved] = []
    for pool in cluster.pools:
        scenario = pool.scenario
        found = next(((b, t) for s, b, t in shared if _same_compile(s, scenario)), None)
        if found is None:
            pool_backend = backend or EngineBackend()
            found = (pool_backend, StepTimes(partial(pool_backend.step_cost, scenario)))
            shared.append((scenario, *found))
        pool_backend, times = found
        try:
            capacity, slots = resolve_batch_slots(scenario, pool_backend)
            placement = pool_backend.plan_memory(scenario, slots)
        except CapacityError as exc:
            raise _in_pool(exc, cluster, pool) from None
        serving = scenario.workload.serving
        prefix_blocks, per_block = _prefix_blocks(cluster, pool, placement)
        runtime = PoolRuntime(
            name=pool.name,
            replicas=pool.replicas * pool.ranks,  # a server per attention rank
            config=ServerConfig(
                slots,
                serving.max_context,
                serving.prefill_priority,
                serving.prefill_chunk_tokens,
                pool.role,
                scenario.stack.prefill_batch_tokens,
                scenario.stack.mixed_batching,
                scenario.stack.decode_rows,
                # a paged pool's admissions (a decode replica's hand-off reserves them too)
                kv_pool=placement.kv_pool,
                preemption=serving.preemption,
            ),
            policy=scenario.kv_policy,
            step_times=times,
            model=scenario.model,
            kv_dtype_bytes=scenario.kv_dtype_bytes,
            prefix_blocks=prefix_blocks,
            sockets=scenario.tp,
            ranks=pool.ranks,
            block_pages=per_block,
        )
        resolved.append(PoolResolved(pool, capacity, placement, runtime))
    slots = sum(p.runtime.replicas * p.runtime.config.batch_slots for p in resolved)
    if slots > MAX_CLUSTER_SLOTS:
        raise cluster.issue(
            f"pools.{resolved[-1].pool.name}.replicas",
            f"the pools hold {slots:,} batch slots in all (replicas x ranks x slots), more than "
            f"the {MAX_CLUSTER_SLOTS:,} a cluster run keeps state for; use fewer replicas or "
            "slots (serving.batch_slots in a pool's set)",
        )
    return resolved


@dataclass(eq=False)
class ClusterResult:
    """Everything a cluster run produced: pools, the run's records, the metrics dict.
    Compared and hashed by identity, as a ``RunResult`` is (compare two by ``to_json()``)."""

    scenario: ClusterScenario
    pools: list[PoolResolved]
    run: ClusterRun
    labels: ClassLabels | None
    _summary: ClusterSummary | None = field(default=None, repr=False)
    _requests: dict[str, NDArray[Any]] | None = field(default=None, repr=False)  # unpickled

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle of the result holds (one sent back from a worker process): its
        scenario, labels, summary and per-request columns, computed here first. Not the live
        simulation: ``run`` holds its replicas' SimPy processes, generators no pickle can
        hold, and ``pools`` their runtimes. Unpickled, ``summary()``, ``to_dict()``,
        ``to_json()``, ``requests()``, ``meta()`` and ``provenance()`` answer as here;
        ``run`` is None and ``pools`` empty."""
        return {
            "scenario": self.scenario,
            "pools": [],
            "run": None,
            "labels": self.labels,
            "_summary": self.summary(),
            "_requests": self.requests(),
        }

    def meta(self) -> ClusterMeta:
        """Identity of the run (names, sizes, version; no paths, no clocks)."""
        config = self.scenario.config
        return ClusterMeta(
            cluster=config.name,
            router=config.router.policy,
            disaggregated=config.disaggregated,
            replicas=self.scenario.replicas,
            sockets=self.scenario.sockets,
            device=self.scenario.device,
            max_context=self.scenario.max_context,
            version=__version__,
        )

    @property
    def shapes_simulated(self) -> int:
        """Distinct step shapes simulated by the engine, over all pools."""
        shared = {id(p.runtime.step_times): p.runtime.step_times for p in self.pools}
        return sum(len(times) for times in shared.values())

    def provenance(self) -> dict[str, Any]:
        """The simulator, the cluster file, its overrides, its traffic trace's sha256, each
        pool's workload provenance (``rdu_sim.provenance``) and a plugin router's code."""
        scenario = self.scenario
        trace = scenario.config.traffic.trace
        pools = {}
        for pool in scenario.pools:
            block = of_scenario(pool.scenario)
            block.pop("simulator")
            pools[pool.name] = block
        code = outside_code(None, scenario.config.router.policy)
        out: dict[str, Any] = {
            "simulator": simulator().to_dict(),
            "files": {"cluster": shown_file(scenario.file)},
            "overrides": dict(scenario.overrides),
            "traffic_sha256": None
            if trace is None
            else file_digest(shipped.trace_path(scenario.base_dir, trace)),
            "pools": pools,
        }
        if code:  # a router from a plugin (``provenance.outside_code``); none for rdu-sim's
            out["plugins"] = code
        return out

    def summary(self) -> ClusterSummary:
        """The run's metrics, typed (computed once): what the console reads."""
        if self._summary is None:
            self._summary = summarize_cluster(
                meta=self.meta(),
                pools={p.pool.name: p.describe() for p in self.pools},
                run=self.run,
                slo=self.scenario.config.slo,
                labels=self.labels,
                traffic=self.run.fit.requests.summary,
                shapes_simulated=self.shapes_simulated,
                machines=[pool_machine(p.pool) for p in self.pools],
                provenance=self.provenance(),
            )
        return self._summary

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (docs/cluster.md): cluster, per-class and per-replica metrics,
        and the provenance (``summary().to_dict()``)."""
        return self.summary().to_dict()

    def to_json(self, indent: int | None = 2) -> str:
        """``to_dict`` as JSON: sorted keys, byte-identical for identical inputs."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=indent)

    def requests(self) -> dict[str, NDArray[Any]]:
        """Per-request columns: status, lengths, replicas, times, TTFT, TPOT, KV transfer;
        new arrays each call. ``replica`` and ``decode_replica`` are float64: the replica's
        index, NaN where none applies (a rejected request reached no replica; a mixed
        replica's request has no decode replica), as ``requests.csv`` leaves those cells
        empty (docs/cluster.md); ``np.nan_to_num(column, nan=-1).astype(int)`` gives -1
        there. Times are NaN likewise where they do not apply."""
        if self._requests is not None:  # unpickled (``__getstate__``): as computed then
            return {name: column.copy() for name, column in self._requests.items()}
        columns = request_columns(self.run)
        if self.labels is not None:
            columns["class"] = self.labels.values
        return columns


def load(
    cluster_or_path: ClusterScenario | str | Path, overrides: Overrides = None
) -> ClusterScenario:
    """A validated ClusterScenario from a path or an existing one (plus overrides); anything
    else a TypeError naming the argument (``run_cluster(42)`` was pathlib's, naming none).
    An override's error names the ``overrides`` argument, or where the override says it was
    given (``config.overrides.origin_of``: ``--set`` for the command line's)."""
    if not isinstance(cluster_or_path, ClusterScenario | str | os.PathLike):
        raise TypeError(
            "cluster_or_path must be a ClusterScenario, a cluster file's path (str or Path) or "
            f"a shipped cluster's name, not {type(cluster_or_path).__name__} "
            f"{cut_middle(repr(cluster_or_path), 60)}"
        )
    if isinstance(cluster_or_path, ClusterScenario):
        if not overrides:
            return cluster_or_path
        data = cluster_or_path.config.model_dump(mode="json", exclude_unset=True)
        return build_cluster(
            data, file=cluster_or_path.file, overrides=overrides, overrides_from=API
        )
    return load_cluster(cluster_or_path, overrides, API)


def plan_cluster(
    cluster: ClusterScenario, backend: Backend | None = None
) -> tuple[ContextFit, ClassLabels | None, list[PoolResolved]]:
    """What a cluster run reads, decides and refuses before it simulates: its traffic, fit to
    the context; each request's class (by its lengths as the traffic sent them: a class
    describes the offered traffic, so a request truncate cut is counted where it was sent,
    as reject counts it); each pool's batch slots and memory plan
    (:func:`resolve_pools`, a refusal naming the pool); that each pool's paged KV pool holds
    every request (``serving.limits.check_pool``); a prefix cache's trace hashes.
    ``rdu-sim check`` calls it, so it refuses a cluster as its run would."""
    config = cluster.config
    requests = load_traffic(cluster)
    fit = fit_context(requests, cluster.max_context, config.traffic.over_context)
    labels = class_labels(requests, config.classes, cluster.file)  # as sent: before a cut
    pools = resolve_pools(cluster, backend)
    admitted = ~fit.rejected  # a rejected request reaches no pool
    prompts, outputs = fit.requests.prompt_tokens[admitted], fit.requests.output_tokens[admitted]
    for resolved in pools:  # a request no replica's KV pool ever holds would wait forever
        try:
            server = resolved.runtime.config
            check_pool(resolved.pool.scenario, server.kv_pool, prompts, outputs, server.role)
        except ConfigError as exc:
            raise _in_pool(exc, cluster, resolved.pool) from None
    if config.prefix_cache is not None and not fit.requests.has_hashes:
        raise ConfigError.single(
            cluster.file, "prefix_cache", "the trace has no block hashes to key a prefix cache on"
        )
    return fit, labels, pools


def _warn_unread_router_fields(cluster: ClusterScenario) -> None:
    """An UnreadRouterFieldWarning for each router field the chosen router does not read
    (what it reads is the router class's: ``routers.base.reads_load``, ``takes_seed``)."""
    router = cluster.config.router
    factory = router_factory(router.policy)
    assert factory is not None  # (checked when the cluster was loaded)
    unread = []
    if router.load_refresh and not reads_load(factory):
        unread.append(
            f"router.load_refresh: {router.policy} reads no replica's load, so a refresh of "
            f"{router.load_refresh:g} s changes nothing"
        )
    if router.seed is not None and not takes_seed(factory):
        unread.append(
            f"router.seed: {router.policy} takes no seed (its constructor has no seed "
            f"keyword), so a seed of {router.seed} changes nothing"
        )
    for message in unread:
        warn(UnreadRouterFieldWarning(f"{cluster.file}: {message}"))


def run_cluster(
    cluster_or_path: ClusterScenario | str | Path,
    overrides: Overrides = None,
    progress: Progress | None = None,
    *,
    backend: Backend | None = None,
) -> ClusterResult:
    """Simulate a cluster serving its traffic; ``progress(done, total)`` as requests finish
    (checked first, as ``api.run`` checks it)."""
    check_progress(progress)
    check_backend(backend)
    cluster = load(cluster_or_path, overrides)
    config = cluster.config
    fit, labels, pools = plan_cluster(cluster, backend)
    for resolved in pools:  # a pool that prefills: its stack's token budget
        if resolved.pool.role != "decode":
            warn_unchunked(resolved.pool.scenario, fit.requests.prompt_tokens)
    _warn_unread_router_fields(cluster)
    prefix = config.prefix_cache
    try:
        run = simulate_cluster(
            fit,
            [p.runtime for p in pools],
            config.router.policy,
            prefix.block_tokens if prefix is not None else None,
            config.kv_transfer,
            progress,
            seed=config.router_seed,
            load_refresh_ps=round(config.router.load_refresh * PS_PER_S),
        )
    except SimulatedTimeError as exc:  # the input's fault: name the cluster file
        raise cluster.issue(exc.field or "pools", str(exc)) from None
    run.records.truncated[:] = fit.truncated
    return ClusterResult(cluster, pools, run, labels)
