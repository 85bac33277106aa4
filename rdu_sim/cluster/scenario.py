"""A ClusterScenario: a cluster file with every pool's workload resolved and cross-checked.

Loading validates the cluster file (unknown keys, units and lines, as for any config file),
applies ``--set`` overrides (``pools.serve.replicas=16``, ``router.policy=round_robin``),
loads each pool's workload with the pool's own ``set`` overrides through the same path as
``rdu-sim run`` (so a pool's bad field names its workload file and line), and checks the
rules that span pools: one context limit for the whole cluster, prefill and decode pools
that can hand a KV cache to each other, a prefix-aware router only with a prefix cache, a
prefix cache only with a trace that has block hashes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rdu_sim import plugins
from rdu_sim.cluster.routers import router_factory, router_names
from rdu_sim.config import shipped
from rdu_sim.config.cluster import ClusterConfig, Role
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.hardware_file import device_noun
from rdu_sim.config.kinds import file_kind_problem, refuse_other_kind
from rdu_sim.config.loader import LineMap, did_you_mean, read_yaml, validate
from rdu_sim.config.overrides import (
    HW_PREFIX,
    SET,
    STACK_PREFIX,
    GivenOverrides,
    SetSource,
    normalize_overrides,
    origin_of,
    overridden,
    set_path,
)
from rdu_sim.scenario import Scenario, load_scenario
from rdu_sim.serving.named_policies import check_named, field_line
from rdu_sim.serving.traces.published import detect

HASHED_FORMATS = ("mooncake",)


@dataclass(frozen=True)
class PoolScenario:
    """One pool: its replicas' workload, resolved."""

    name: str
    role: Role
    replicas: int
    scenario: Scenario

    @property
    def sockets(self) -> int:
        """Sockets the pool occupies: each replica's tp x dp_attention x pp."""
        return self.replicas * self.scenario.workload.parallelism.devices

    @property
    def ranks(self) -> int:
        """Attention ranks of one replica (data-parallel attention), each served by its own
        server, the replica's ranks in lockstep: the router spreads requests over every rank
        of every replica."""
        return self.scenario.workload.parallelism.dp_attention


@dataclass(frozen=True)
class ClusterScenario:
    """Everything a cluster simulation needs, validated (``overrides``: the ``--set`` edits
    applied to the cluster file, recorded in its outputs)."""

    config: ClusterConfig
    file: str
    pools: tuple[PoolScenario, ...]
    lines: LineMap
    overrides: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def base_dir(self) -> Path:
        """Folder that the file's relative paths (workloads, trace) are resolved against."""
        return Path(self.file).parent

    @property
    def sockets(self) -> int:
        """Sockets of the whole cluster."""
        return sum(pool.sockets for pool in self.pools)

    @property
    def device(self) -> str:
        """What one device of the cluster is called: its pools' ``device_noun`` (``socket``,
        ``GPU``), or ``device`` when the pools run on different kinds."""
        nouns = {device_noun(pool.scenario.hardware) for pool in self.pools}
        return nouns.pop() if len(nouns) == 1 else "device"

    @property
    def replicas(self) -> int:
        """Replicas of the whole cluster."""
        return sum(pool.replicas for pool in self.pools)

    @property
    def max_context(self) -> int:
        """The context limit every replica shares."""
        return self.pools[0].scenario.workload.serving.max_context

    def issue(self, field: str, message: str) -> ConfigError:
        """A ConfigError at ``field`` of the cluster file (with its line when known)."""
        return _error(self.file, self.lines, field, message)


def _error(file: str, lines: LineMap, field: str, message: str) -> ConfigError:
    parts = tuple(field.split("."))
    line = next((lines[parts[:n]] for n in range(len(parts), 0, -1) if parts[:n] in lines), None)
    return ConfigError.single(file, field, message, line)


def _missing(path: Path) -> bool:
    """No file at ``path`` (a broken link, or a name the OS refuses, is the loader's to
    name)."""
    try:
        return not (path.exists() or path.is_symlink())
    except (OSError, ValueError):
        return False


def _pool(
    file: str, lines: LineMap, name: str, pool: Any, set_origins: Mapping[str, str]
) -> PoolScenario:
    near = shipped.written_in(file, pool.workload)
    path = shipped.locate_near(near, pool.workload, ("workload",))
    if _missing(path):
        raise _error(
            file,
            lines,
            f"pools.{name}.workload",
            f"pool {name!r}: workload {str(near)!r} not found (paths are relative to the "
            "cluster file; a bare name is a shipped workload's)",
        )
    problem = file_kind_problem(path, pool.workload, "workload")
    if problem is not None:  # one error here, not one per field of a cluster it is not
        raise _error(file, lines, f"pools.{name}.workload", f"pool {name!r}: {problem}")
    try:
        source = SetSource(f"pools.{name}.set", set_origins)
        scenario = load_scenario(path, pool.set, overrides_from=source)
    except ConfigError as exc:
        context = _error(file, lines, f"pools.{name}", f"pool {name!r}: workload is not valid:")
        raise ConfigError([*context.issues, *exc.issues]) from None
    _check_policies(file, lines, name, pool.set, scenario)
    if scenario.workload.speculation is not None:
        raise _error(
            file,
            lines,
            f"pools.{name}",
            f"pool {name!r}: its workload speculates (speculation:), which a cluster's "
            "replicas do not model yet (their routers count outstanding tokens one per slot "
            "and step); remove the section, or set speculation: null in the pool's set",
        )
    if scenario.workload.coe is not None:
        raise _error(
            file,
            lines,
            f"pools.{name}",
            f"pool {name!r}: its workload is a Composition of Experts (coe:), which a "
            "cluster's replicas do not serve (they run one model, without expert switches); "
            "run it alone with rdu-sim run, or set coe: null in the pool's set",
        )
    # the pool's role decides how its paged pool gives pages, so what batch auto sizes by
    return PoolScenario(name, pool.role, pool.replicas, replace(scenario, role=pool.role))


def _check_policies(
    file: str, lines: LineMap, name: str, overrides: Mapping[str, Any], scenario: Scenario
) -> None:
    """A pool's batching and preemption policies are registered ones (the registries are
    serving's, which the scenario below it cannot read): a name from the pool's ``set`` is
    this file's error at that field, one written in the workload its file's, under the
    pool's."""
    try:
        check_named(
            scenario.workload.serving, scenario.workload_file, field_line(scenario.lines.get)
        )
    except ConfigError as exc:
        (issue,) = exc.issues
        field = issue.field
        if field in overrides:
            at = ("pools", name, "set")
            line = lines.get((*at, field), lines.get(at))  # a dotted key is one key
            raise ConfigError.single(
                file, f"pools.{name}.set.{field}", issue.message, line
            ) from None
        context = _error(file, lines, f"pools.{name}", f"pool {name!r}: workload is not valid:")
        raise ConfigError([*context.issues, *exc.issues]) from None


def _handoff_problem(prefill: Scenario, decode: Scenario) -> str | None:
    """Why a decode replica could not take a prefill replica's KV cache, or None."""
    a, b = prefill.workload, decode.workload
    if prefill.model != decode.model:
        return f"models differ ({prefill.model.name} vs {decode.model.name})"
    if a.dtypes.kv != b.dtypes.kv:
        return f"KV dtypes differ ({a.dtypes.kv} vs {b.dtypes.kv})"
    if a.kv != b.kv:
        return f"KV policies differ ({a.kv.policy} vs {b.kv.policy}, or their parameters)"
    return None


def _cross_check(cluster: ClusterScenario) -> None:
    config = cluster.config
    first = cluster.pools[0]
    for pool in cluster.pools[1:]:
        context = pool.scenario.workload.serving.max_context
        if context != cluster.max_context:
            raise cluster.issue(
                f"pools.{pool.name}",
                f"serving.max_context {context} differs from the {cluster.max_context} of pool "
                f"{first.name!r}: a cluster has one context limit (a request that "
                "fits one replica must fit any)",
            )
    prefill = [p for p in cluster.pools if p.role == "prefill"]
    for pool in cluster.pools:
        if pool.role != "decode":
            continue
        problem = _handoff_problem(prefill[0].scenario, pool.scenario)
        if problem is not None:
            raise cluster.issue(
                f"pools.{pool.name}",
                f"decode pool {pool.name!r} cannot take the KV caches of prefill pool "
                f"{prefill[0].name!r}: {problem}",
            )
    for pool in prefill[1:]:
        problem = _handoff_problem(prefill[0].scenario, pool.scenario)
        if problem is not None:
            raise cluster.issue(f"pools.{pool.name}", f"prefill pools differ: {problem}")
    if config.router.policy == "prefix_aware" and config.prefix_cache is None:
        raise cluster.issue(
            "router.policy",
            "prefix_aware routing needs a prefix_cache (without one it is least_outstanding)",
        )
    traffic = config.traffic
    if config.prefix_cache is not None:
        if traffic.trace is None:
            raise cluster.issue(
                "prefix_cache", "a prefix cache needs a trace with block hashes (mooncake)"
            )
        trace = shipped.trace_path(cluster.base_dir, traffic.trace)
        if trace.is_file():
            fmt = traffic.format if traffic.format != "auto" else detect(trace, str(trace))
            if fmt not in HASHED_FORMATS:
                raise cluster.issue(
                    "prefix_cache",
                    f"a prefix cache needs block hashes, which the {fmt} trace format lacks "
                    f"(formats with hash_ids: {', '.join(HASHED_FORMATS)})",
                )


def _set_cluster_path(raw: dict[str, Any], path: str, value: Any, file: str) -> None:
    """Apply one ``--set`` path to cluster data. Under a pool's ``set`` mapping the rest of
    the path is one key, as the file writes it (``pools.serve.set.hw.system.sockets=2`` sets
    key ``hw.system.sockets`` of ``pools.serve.set``); elsewhere it nests (``set_path``)."""
    parts = path.split(".", 3)
    if len(parts) < 4 or parts[0] != "pools" or parts[2] != "set":
        set_path(raw, path, value, file)
        return
    pools = raw.get("pools")
    pool = pools.get(parts[1]) if isinstance(pools, dict) else None
    mapping = pool.get("set") if isinstance(pool, dict) else None
    if mapping is not None and not isinstance(mapping, dict):
        set_path(raw, path, value, file)  # its error: not a mapping
        return
    set_path(raw, ".".join(parts[:3]), {**(mapping or {}), parts[3]: value}, file)


def _refuse_unknown_pools(
    data: Mapping[str, Any], raw: Mapping[str, Any], file: str, overrides: GivenOverrides
) -> None:
    """An override under a pool the file does not have, and that gives it no workload (a
    misspelt ``--set pools.serv.replicas=2``), is an unknown pool, with the closest name
    (``config.loader.did_you_mean``), from that override: not the missing workload of a new
    pool at a line of the file the user did not write. A new pool given whole (its
    workload with it) is the file's to validate."""
    given = data.get("pools")
    pools = raw.get("pools")
    if not isinstance(given, Mapping) or not isinstance(pools, Mapping):
        return
    for path in overrides:
        parts = path.split(".")
        if parts[0] != "pools" or len(parts) < 2 or parts[1] in given:
            continue
        pool = pools.get(parts[1])
        if isinstance(pool, Mapping) and "workload" in pool:
            continue
        names = list(given)
        hint = did_you_mean(parts[1], names) or f"; the pools: {', '.join(names)}"
        problem = f"unknown pool {parts[1]!r}{hint}"
        error = ConfigError.single(file, f"pools.{parts[1]}", problem)
        raise overridden(error, file, overrides)


def build_cluster(
    data: Mapping[str, Any],
    *,
    file: str,
    lines: LineMap | None = None,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
    set_origins: Mapping[str, str] | None = None,
    overrides_from: str = SET,
) -> ClusterScenario:
    """Validate cluster data (already parsed), apply overrides, load every pool's workload.
    ``set_origins``: where keys of the pools' ``set`` came from, when a tool put them there
    (``config.overrides.SetSource``); ``overrides_from``: where ``overrides`` that do not
    say were given (``--set``, the API's ``overrides``; ``config.overrides.origin_of``),
    which their errors name."""
    lines = lines or {}
    source = origin_of(overrides, overrides_from)
    normalized = GivenOverrides(normalize_overrides(overrides, source), source)
    raw = copy.deepcopy(dict(data))
    for path, value in normalized.items():
        if path.startswith((HW_PREFIX, STACK_PREFIX)):
            raise ConfigError.single(
                source,
                path,
                f"{'hardware' if path.startswith(HW_PREFIX) else 'stack'} overrides apply to "
                f"a pool's workload: use pools.NAME.set={{{path}: ...}}",
            )
        _set_cluster_path(raw, path, value, file)
    _refuse_unknown_pools(data, raw, file, normalized)
    try:
        config = validate(ClusterConfig, raw, file, lines)
    except ConfigError as exc:
        raise overridden(exc, file, normalized) from None
    if router_factory(config.router.policy) is None:  # the registry is the one list of names
        unknown = plugins.unknown("router", config.router.policy, router_names())
        error = _error(file, lines, "router.policy", unknown)
        raise overridden(error, file, normalized)
    origins = set_origins or {}
    pools = tuple(_pool(file, lines, name, p, origins) for name, p in config.pools.items())
    cluster = ClusterScenario(config, file, pools, lines, normalized)
    try:
        _cross_check(cluster)
    except ConfigError as exc:  # a rule across fields an override set: say which override
        raise overridden(exc, file, normalized) from None
    return cluster


def load_cluster(
    path: str | Path,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
    overrides_from: str = SET,
) -> ClusterScenario:
    """Read a cluster file (and its pools' workloads) into a validated ClusterScenario;
    ``path`` may also name a shipped cluster (``rdu_sim.config.shipped``); ``overrides_from``
    as ``build_cluster`` reads it."""
    file = shipped.locate(path, ("cluster",))
    data, lines = read_yaml(file)
    refuse_other_kind(data, str(file), "cluster")
    if not isinstance(data, Mapping):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError.single(str(file), "", f"expected a mapping of fields, got {kind}")
    return build_cluster(
        data, file=str(file), lines=lines, overrides=overrides, overrides_from=overrides_from
    )
