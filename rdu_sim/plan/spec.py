"""Load a plan spec: validate it, load its base cluster, enumerate its configurations.

Each configuration (tp, batch slots, KV policy, disaggregation) is turned, for a number of
replica units, into a cluster: the base cluster file's data with the configuration's
``--set`` paths applied (``LoadedPlan.set_paths``: its one pool edited, a decode pool added
for a disaggregation). The cluster is built through ``cluster.build_cluster``, the same path
as ``rdu-sim run CLUSTER --set ...``, so the answer's printed command runs the cluster the
plan evaluated, and a configuration the config refuses (a tp that does not divide the heads)
fails with the config's own message.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdu_sim import human
from rdu_sim.cluster.scenario import ClusterScenario, build_cluster
from rdu_sim.config import shipped
from rdu_sim.config.base import StrictModel
from rdu_sim.config.cluster import KVTransferConfig, SLOConfig
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.kinds import kind_problem, refuse_other_kind
from rdu_sim.config.loader import LineMap, read_yaml, validate
from rdu_sim.config.overrides import written_value as written_value  # (re-exported)
from rdu_sim.config.plan import PlanSpec, parse_ratio
from rdu_sim.config.units import parse_seconds
from rdu_sim.kv import policy_names
from rdu_sim.provenance import outside_code
from rdu_sim.sweep.key import config_key, resolved_config

SPLIT_AXIS = "split"
"""The axis of a configuration's parallelism fields in ``Configuration.fields``: the spec's
``search.tp`` or ``search.parallelism``, whichever it gives (``LoadedPlan.origins``)."""


@dataclass(frozen=True)
class Configuration:
    """One point of the searched space, before its replica count is chosen; ``parallelism``
    the parallelism fields it sets (``(("tp", 16),)`` for plain tensor parallelism)."""

    parallelism: tuple[tuple[str, Any], ...]
    batch_slots: int | str  # a number or 'auto'
    kv_policy: str
    disaggregation: str  # 'none' or 'P:D'

    @property
    def tp(self) -> int:
        """Its tensor-parallel degree."""
        return int(dict(self.parallelism).get("tp", 1))

    @property
    def devices(self) -> int:
        """Devices of one replica: tp x dp_attention x pp."""
        fields = dict(self.parallelism)
        return self.tp * int(fields.get("dp_attention", 1)) * int(fields.get("pp", 1))

    @property
    def tensor_only(self) -> bool:
        """Whether it sets the tensor-parallel degree alone (a replica is one TP group)."""
        return tuple(name for name, _ in self.parallelism) == ("tp",)

    def split(self) -> str:
        """Its parallelism in a few words: ``tp=1 dp_attention=32 ep=32``."""
        return " ".join(f"{name}={value}" for name, value in self.parallelism)

    @property
    def ratio(self) -> tuple[int, int] | None:
        """(prefill, decode) replicas per unit, None for mixed replicas."""
        return parse_ratio(self.disaggregation)

    @property
    def unit(self) -> int:
        """Replicas per unit of the search (P + D, or 1)."""
        ratio = self.ratio
        return 1 if ratio is None else ratio[0] + ratio[1]

    def fields(self) -> dict[str, tuple[Any, str]]:
        """The workload fields this configuration sets (``--set`` paths), each with the
        search axis its value comes from."""
        return {
            **{f"parallelism.{name}": (value, SPLIT_AXIS) for name, value in self.parallelism},
            "hw.system.sockets": (self.devices, SPLIT_AXIS),  # a replica: a system of its devices
            "serving.batch_slots": (self.batch_slots, "batch_slots"),
            "kv.policy": (self.kv_policy, "kv_policy"),
        }

    def overrides(self) -> dict[str, Any]:
        """The workload fields this configuration sets (``--set`` paths)."""
        return {path: value for path, (value, _) in self.fields().items()}

    def label(self) -> str:
        """The configuration in a few words, for progress lines."""
        split = "" if self.disaggregation == "none" else f" disaggregation={self.disaggregation}"
        return f"{self.split()} slots={self.batch_slots} kv={self.kv_policy}{split}"

    def describe(self) -> dict[str, Any]:
        """The configuration's axes, for tables and the database (``parallelism`` only
        beyond plain tensor parallelism)."""
        described: dict[str, Any] = {
            "tp": self.tp,
            "batch_slots": self.batch_slots,
            "kv_policy": self.kv_policy,
            "disaggregation": self.disaggregation,
        }
        if not self.tensor_only:
            described["parallelism"] = self.split()
        return described


@dataclass(frozen=True)
class PlanPoint:
    """A configuration at a replica count: what the sweep machinery evaluates and stores."""

    key: str
    overrides: dict[str, Any]  # the configuration's axes and its units / replicas
    config: dict[str, Any]  # resolved config (the key's input)
    cluster: ClusterScenario

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.overrides.items())


@dataclass(frozen=True)
class LoadedPlan:
    """A validated plan spec with its base cluster."""

    spec: PlanSpec
    file: Path
    lines: LineMap
    base_file: Path
    base_data: dict[str, Any]
    base: ClusterScenario
    pool_name: str

    @property
    def name(self) -> str:
        return self.spec.name or self.file.stem

    kv_transfer: KVTransferConfig | None = None  # the cluster file's, for disaggregation

    @property
    def slo(self) -> SLOConfig:
        """The SLO every configuration is held to: the cluster file's, with the fields the
        spec's ``slo`` gives replaced (``SLOOverride.over``)."""
        base = self.base.config.slo
        return base if self.spec.slo is None else self.spec.slo.over(base)

    def slo_words(self) -> str:
        """The SLO in words, each field's origin when the spec changes some:
        ``TTFT <= 500 ms and TPOT <= 40 ms for 95% of requests (attainment from the cluster
        file)``."""
        slo = self.slo
        text = (
            f"TTFT <= {human.duration(slo.ttft)} and TPOT <= {human.duration(slo.tpot)} for "
            f"{human.target_percent(slo.attainment)} of requests"
        )
        given = self.spec.slo.given() if self.spec.slo is not None else []
        kept = [name for name in ("ttft", "tpot", "attainment") if name not in given]
        if given and kept:
            return f"{text} ({', '.join(kept)} from the cluster file)"
        return f"{text} (the {'plan' if given else 'cluster file'}'s)"

    def link_words(self) -> str:
        """The KV link disaggregated configurations use, in words, with where it is set."""
        link = self.kv_transfer or KVTransferConfig()
        where = "the cluster file's kv_transfer" if self.kv_transfer else "the default"
        return (
            f"KV link {human.bandwidth(link.bandwidth)} each way a replica, "
            f"{human.duration(link.latency)} latency ({where})"
        )

    def batch_note(self, configuration: Configuration) -> str | None:
        """That the serving stack has no program of ``configuration``'s batch slots and runs
        them as if it had (``compiler.placement.unrunnable_note``, a lone run's words: the
        template pool's stack, which no search axis changes); None for slots it runs and
        for ``auto`` (which picks a batch it runs)."""
        from rdu_sim.compiler.placement import unrunnable_note

        slots = configuration.batch_slots
        if not isinstance(slots, int):
            return None
        return unrunnable_note(self.base.pools[0].scenario, slots)

    def error(self, field: str, message: str) -> ConfigError:
        parts = tuple(field.split("."))
        line = next(
            (self.lines[parts[:n]] for n in range(len(parts), 0, -1) if parts[:n] in self.lines),
            None,
        )
        return ConfigError.single(str(self.file), field, message, line)

    def origins(self, configuration: Configuration) -> dict[str, str]:
        """Where each field ``configuration`` sets comes from, for errors: the plan's search
        axis when the spec gives it (``the plan's search.tp``), else nothing (the template
        pool's value: its own file's or set's)."""
        given = self.spec.search.model_dump(exclude_unset=True)
        split = "parallelism" if given.get("parallelism") is not None else "tp"
        named = {SPLIT_AXIS: split}
        return {
            path: f"the plan's search.{named.get(axis, axis)}"
            for path, (_, axis) in configuration.fields().items()
            if given.get(named.get(axis, axis)) is not None
        }

    def configurations(self) -> list[Configuration]:
        """Every configuration of the searched space, in spec order."""
        search = self.spec.search
        template = self.base.pools[0].scenario.workload
        splits: list[tuple[tuple[str, Any], ...]]
        if search.parallelism is not None:
            splits = [
                tuple(choice.model_dump(exclude_unset=True).items())
                for choice in search.parallelism
            ]
        else:
            splits = [(("tp", tp),) for tp in search.tp or [template.parallelism.tp]]
        slots = search.batch_slots or [template.serving.batch_slots]
        policies = search.kv_policy or [template.kv.policy]
        axes = itertools.product(splits, slots, policies, search.disaggregation)
        return [Configuration(*values) for values in axes]

    def decode_pool(self) -> str:
        """The name of the decode pool a disaggregated configuration adds beside the template
        pool (which becomes its prefill pool, keeping its name)."""
        return "decode" if self.pool_name != "decode" else "decode_pool"

    def set_paths(self, configuration: Configuration, units: int) -> dict[str, Any]:
        """The ``--set`` paths that make the cluster file into ``configuration`` at ``units``,
        with their values: the template pool's replicas and fields; for a disaggregation, the
        template pool as the prefill pool and a decode pool beside it with the same workload
        and fields; for mixed replicas, no KV link (``kv_transfer`` null: the config refuses
        one without prefill and decode pools); the plan's SLO fields, durations with their
        unit (:func:`exact_duration`). :meth:`build` applies them to the cluster file's data,
        so the cluster evaluated is the one ``rdu-sim run CLUSTER --set ...`` runs."""
        pool = f"pools.{self.pool_name}"
        fields = {f"{pool}.set.{path}": value for path, value in configuration.overrides().items()}
        ratio = configuration.ratio
        paths: dict[str, Any] = {f"{pool}.replicas": units if ratio is None else ratio[0] * units}
        if ratio is None:
            if self.base_data.get("kv_transfer") is not None:
                paths["kv_transfer"] = None
        else:
            decode = f"pools.{self.decode_pool()}"
            template = self.base_data["pools"][self.pool_name]
            paths[f"{pool}.role"] = "prefill"
            paths[f"{decode}.workload"] = template["workload"]
            paths[f"{decode}.replicas"] = ratio[1] * units
            paths[f"{decode}.role"] = "decode"
            for path, value in (template.get("set") or {}).items():
                paths[f"{decode}.set.{path}"] = value
            fields.update({k.replace(pool, decode, 1): v for k, v in fields.items()})
        slo = self.spec.slo
        given = {} if slo is None else {name: getattr(slo, name) for name in slo.given()}
        written = {
            name: exact_duration(value) if name in ("ttft", "tpot") else value
            for name, value in given.items()
        }
        return {**paths, **fields, **{f"slo.{name}": value for name, value in written.items()}}

    def set_args(self, configuration: Configuration, units: int) -> list[str]:
        """:meth:`set_paths` as ``--set`` arguments, ``PATH=VALUE``, each value written as
        the override parser reads it back (:func:`written_value`)."""
        return [
            f"{path}={written_value(value)}"
            for path, value in self.set_paths(configuration, units).items()
        ]

    def build(self, configuration: Configuration, units: int) -> PlanPoint:
        """The cluster of ``configuration`` at ``units`` replica units (ConfigError if the
        config refuses it): the cluster file's data with :meth:`set_args` applied by the
        cluster loader, the one rule the printed ``reproduce:`` command runs too."""
        cluster = build_cluster(
            self.base_data,
            file=str(self.base_file),
            overrides=self.set_args(configuration, units),
            set_origins=self.origins(configuration),
            overrides_from=PLAN_SET,
        )
        resolved = resolved_cluster(cluster)
        overrides = {**configuration.describe(), "units": units, "replicas": cluster.replicas}
        return PlanPoint(config_key(resolved), overrides, resolved, cluster)


PLAN_SET = "the plan's configuration"
"""Where a plan point's overrides of the cluster file come from, which an error at one names
(``(from the plan's configuration: pools.serve.replicas)``)."""


def exact_duration(seconds: float) -> str:
    """``seconds`` with the unit that fits (``rdu_sim.human.duration``), to the fewest
    significant digits the config's parser reads back as the same float: ``10 us`` for
    ``10 us`` parsed (9.999999999999999e-06); bare seconds if no such text exists."""
    for digits in range(3, 18):
        text = human.duration(seconds, digits)
        try:
            if parse_seconds(text) == seconds:
                return text
        except ValueError:  # a form the parser does not take ('1,000 days')
            break
    return repr(seconds)


def resolved_cluster(cluster: ClusterScenario) -> dict[str, Any]:
    """Everything a cluster run depends on, as plain data (the point key's input): the
    cluster's fields but its pools, each pool resolved (``provenance.resolved_config``),
    its trace's digest, a plugin router's code."""
    resolved: dict[str, Any] = {
        "cluster": cluster.config.model_dump(mode="json", exclude={"name", "description", "pools"}),
        "pools": [
            {"name": p.name, "role": p.role, "replicas": p.replicas, **resolved_config(p.scenario)}
            for p in cluster.pools
        ],
        "trace_sha256": _trace_digest(cluster),
    }
    router = outside_code(None, cluster.config.router.policy)
    if router:  # a plugin's router, by its code (none for rdu-sim's: keys unchanged)
        resolved["plugins"] = router
    return resolved


def _trace_digest(cluster: ClusterScenario) -> str | None:
    trace = cluster.config.traffic.trace
    if trace is None:
        return None
    digest = hashlib.sha256()
    with shipped.trace_path(cluster.base_dir, trace).open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class _Link(StrictModel):
    kv_transfer: KVTransferConfig


def _link(
    data: Mapping[str, Any],
    base_file: Path,
    base_lines: LineMap,
    spec: PlanSpec,
    file: Path,
    lines: LineMap,
) -> KVTransferConfig | None:
    """The template cluster's ``kv_transfer``, validated as the cluster file's field: the
    link its disaggregated configurations use (a cluster of one mixed pool has no use for
    it, so only a plan with a disaggregation other than 'none' may give it)."""
    if data.get("kv_transfer") is None:
        return None
    if all(parse_ratio(d) is None for d in spec.search.disaggregation):
        raise ConfigError.single(
            str(base_file),
            "kv_transfer",
            f"only applies with prefill and decode pools, and plan {file} searches none "
            "(its search.disaggregation is 'none')",
            base_lines.get(("kv_transfer",)),
        )
    checked = validate(_Link, {"kv_transfer": data["kv_transfer"]}, str(base_file), base_lines)
    return checked.kv_transfer


def load_plan(path: str | Path) -> LoadedPlan:
    """Read and validate a plan spec and its base cluster (ConfigErrors name file and line);
    ``path`` may also name a shipped plan (``rdu_sim.config.shipped``)."""
    file = shipped.locate(path, ("plan",))
    data, lines = read_yaml(file)
    refuse_other_kind(data, str(file), "plan")
    spec = validate(PlanSpec, data, str(file), lines)
    unknown = [name for name in spec.search.kv_policy or [] if name not in policy_names()]
    if unknown:  # the registry is the one list of valid policies
        raise ConfigError.single(
            str(file),
            "search.kv_policy",
            f"unknown kv.policy {unknown[0]!r}; valid policies: {', '.join(policy_names())}",
            lines.get(("search", "kv_policy")),
        )
    near = Path(spec.cluster)
    if not near.is_absolute():
        near = file.parent / near
    try:
        base_file = shipped.locate_near(near, spec.cluster, ("cluster",))
        if not base_file.is_file():  # missing or a folder: said at the plan's field
            read_yaml(base_file)
    except ConfigError as exc:
        said = "; ".join(f"{i.file}: {i.message}" for i in exc.issues)
        raise ConfigError.single(str(file), "cluster", said, lines.get(("cluster",))) from None
    base_data, base_lines = read_yaml(base_file)
    if not isinstance(base_data, Mapping):
        raise ConfigError.single(str(base_file), "", "expected a cluster file (a mapping)")
    problem = kind_problem(base_data, spec.cluster, "cluster")
    if problem is not None:  # one error here, not one per field of a workload it is not
        raise ConfigError.single(str(file), "cluster", problem, lines.get(("cluster",)))
    link = _link(base_data, base_file, base_lines, spec, file, lines)
    template = {k: v for k, v in base_data.items() if k != "kv_transfer"}
    base = build_cluster(template, file=str(base_file), lines=base_lines)
    loaded = LoadedPlan(
        spec, file, lines, base_file, dict(base_data), base, base.pools[0].name, link
    )
    if len(base.pools) != 1 or base.pools[0].role != "mixed":
        raise loaded.error(
            "cluster",
            f"the plan's cluster file must have one mixed pool, the template every "
            f"configuration edits; {base_file} has {len(base.pools)} pool(s)",
        )
    return loaded
