"""The results a plot reads, typed: :class:`RunPoint`, built once from whatever form they come in.

Plots take a run (``RunResult``, its typed ``RunSummary``, or its JSON dict as ``rdu-sim run
--json`` writes it), a row of ``rdu_sim.studies`` (memory plans, decode steps), a list of
them, or a sweep DataFrame (``rdu_sim.sweep.load``: one row per point, the metrics in
dotted columns such as ``memory.hbm.kv_bytes``). :func:`as_runs` reads each into a
:class:`RunPoint` by the names of the JSON contract, one name per quantity; a plot then reads
attributes, and a quantity it needs but the results lack is one :class:`PlotInputError`
naming it (the CLI turns it into exit status 2) instead of a ``KeyError`` deep in matplotlib.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rdu_sim.input_errors import InputError
from rdu_sim.report.summary import RunSummary, TierMemory

__all__ = [
    "GIB",
    "MEMORY_PARTS",
    "TIERS",
    "PlotInputError",
    "RunPoint",
    "as_runs",
    "group_runs",
    "label_of",
    "lookup",
    "number",
    "result_record",
    "settings_note",
    "short_names",
    "titled",
    "with_subject",
]

GIB = float(2**30)
"""Bytes in a GiB: memory axes are in GiB because capacities are powers of two."""

TIERS = ("sram", "hbm", "ddr")
"""Memory tiers in the order plots show them (on-chip first)."""

MEMORY_PARTS = ("weights", "kv", "activations", "free")
"""Stacked parts of a tier's footprint, bottom to top."""

REQUEST_RECORDS = "request_records"
"""Key of a run's per-request columns (``RunResult.requests()``; ``requests.csv``)."""

SLOT_OCCUPANCY = "slot_occupancy"
"""Key of a run's state time series (``RunResult.timeseries()``; ``timeseries.csv``)."""

_MISSING = object()

Columns = Mapping[str, NDArray[np.float64]]


class PlotInputError(ValueError, InputError):
    """The results lack a quantity a plot needs, or are not results at all: bad input, an
    ``rdu_sim.InputError`` as every other (the CLI's one ``error:`` line, exit 2)."""


def number(value: Any, what: str) -> float:
    """``value`` as a float, or PlotInputError naming ``what``."""
    if isinstance(value, bool):
        raise PlotInputError(f"{what} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise PlotInputError(f"{what} must be a number, got {value!r}") from None


def whole(value: Any, what: str) -> int:
    """``value`` as an int (a count, a size), or PlotInputError naming ``what``: a number that
    is not finite has no whole value."""
    result = number(value, what)
    if not math.isfinite(result):
        raise PlotInputError(f"{what} must be a finite number, got {value!r}")
    return int(result)


def _columns(table: Any, what: str) -> dict[str, NDArray[np.float64]]:
    """A mapping of equal-length numeric columns (empty cells are NaN)."""
    if not isinstance(table, Mapping):
        raise PlotInputError(f"{what} must be columns (name -> values), got {type(table).__name__}")
    out: dict[str, NDArray[np.float64]] = {}
    for name, values in table.items():
        if isinstance(values, str) or not isinstance(values, Sequence | np.ndarray):
            raise PlotInputError(f"{what} column {name!r} is not a list of numbers")
        out[str(name)] = np.asarray(
            [np.nan if v is None else number(v, f"{what} {name}") for v in values],
            dtype=np.float64,
        )
    if len({len(v) for v in out.values()}) > 1:
        raise PlotInputError(f"{what} columns differ in length")
    return out


def _tier(usage: Any, tier: str) -> TierMemory:
    """One tier's memory from the contract's ``*_bytes`` keys (capacity required; a part a
    partial result leaves out counts as 0, free as what the parts leave)."""
    if not isinstance(usage, Mapping):
        raise PlotInputError(f"memory.{tier} must be a mapping of *_bytes")
    if "capacity_bytes" not in usage:
        raise PlotInputError(f"results have no 'memory.{tier}.capacity_bytes'")

    def part(name: str, default: float = 0.0) -> int:
        value = usage.get(name)
        return whole(default if value is None else value, f"memory.{tier}.{name}")

    capacity = part("capacity_bytes")
    weights, kv, act = part("weights_bytes"), part("kv_bytes"), part("activations_bytes")
    used = weights + kv + act
    return TierMemory(
        capacity_bytes=capacity,
        used_bytes=used,
        weights_bytes=weights,
        kv_bytes=kv,
        activations_bytes=act,
        free_bytes=max(0, part("free_bytes", capacity - used)),
    )


@dataclass(frozen=True)
class RunPoint:
    """What the plots read of one run or point of a study; ``None`` when the results do not
    say (a plot that needs it raises :class:`PlotInputError` through :meth:`need`)."""

    model: str = ""
    kv_policy: str = "?"
    max_context: int | None = None
    batch_slots: int | None = None
    batch_capacity: int | None = None
    # slots memory holds beside the weights, what bounds batch_capacity below it, and both
    # in words (a run's JSON keys, from `compiler.capacity_words`)
    memory_capacity: int | None = None
    capacity_limit: str | None = None
    capacity: str | None = None
    decode_tokens_per_s: float | None = None
    steady_decode_tokens_per_s: float | None = None  # the slots kept full (None: no window)
    tiers: Mapping[str, Any] | None = None  # memory per tier, as given (read by `memory`)
    source: str = "run"  # "run", or a study's "plan" / "decode_step"
    settings: Mapping[str, Any] = field(default_factory=dict)
    requests: Columns | None = None  # per-request columns (ttft_s, tpot_s ...)
    occupancy: Columns | None = None  # state time series (time_s, occupied ...)
    # the run's ``occupancy``: the summary's time-mean share of slots held over the makespan
    # (first arrival to last token), read, never recomputed from the series
    mean_occupancy: float | None = None
    row: Mapping[str, Any] = field(default_factory=dict)  # the flat record, for lookups

    @property
    def memory(self) -> dict[str, TierMemory] | None:
        """Memory per tier (one socket); read when a plot asks, so results that carry only
        some memory columns (a sweep's chosen metrics) still plot what else they hold."""
        if self.tiers is None:
            return None
        return {
            str(t): u if isinstance(u, TierMemory) else _tier(u, str(t))
            for t, u in self.tiers.items()
            if t in TIERS
        }

    def need(self, name: str) -> Any:
        """Attribute ``name``, or PlotInputError when the results do not have it."""
        value = getattr(self, name)
        if value is None:
            what = name.replace("_", " ").replace("max context", "context length")
            raise PlotInputError(f"results have no {what} ({name!r}, needed for this plot)")
        return value

    @classmethod
    def of_summary(cls, summary: RunSummary, **extra: Any) -> RunPoint:
        """A run's typed summary (plus its columns)."""
        return cls(
            model=summary.model,
            kv_policy=summary.kv_policy,
            max_context=summary.max_context,
            batch_slots=summary.batch_slots,
            batch_capacity=summary.batch_capacity,
            memory_capacity=summary.memory_capacity,
            capacity_limit=summary.capacity_limit,
            capacity=summary.capacity,
            decode_tokens_per_s=summary.decode_tokens_per_s,
            steady_decode_tokens_per_s=summary.steady_decode_tokens_per_s,
            mean_occupancy=summary.occupancy,
            tiers=dict(summary.memory),
            **{"row": {"workload": summary.workload, "hardware": summary.hardware}, **extra},
        )

    @classmethod
    def of_mapping(cls, data: Mapping[str, Any], row: Mapping[str, Any] | None = None) -> RunPoint:
        """A run's JSON dict or a study's row, by the names of the JSON contract."""

        def integer(name: str) -> int | None:
            value = data.get(name)
            return None if value is None else whole(value, name)

        def text(name: str) -> str | None:
            value = data.get(name)
            return None if value is None else str(value)

        memory = data.get("memory")
        if memory is not None and not isinstance(memory, Mapping):
            raise PlotInputError("results' 'memory' must map tiers to their *_bytes")
        rate, steady = data.get("decode_tokens_per_s"), data.get("steady_decode_tokens_per_s")
        held = data.get("occupancy")
        requests, series = data.get(REQUEST_RECORDS), data.get(SLOT_OCCUPANCY)
        settings = data.get("settings") or {}
        if not isinstance(settings, Mapping):
            raise PlotInputError("results' 'settings' must map override paths to values")
        return cls(
            model=str(data.get("model") or ""),
            kv_policy=str(data.get("kv_policy") or "?"),
            max_context=integer("max_context"),
            batch_slots=integer("batch_slots"),
            batch_capacity=integer("batch_capacity"),
            memory_capacity=integer("memory_capacity"),
            capacity_limit=text("capacity_limit"),
            capacity=text("capacity"),
            decode_tokens_per_s=None if rate is None else number(rate, "decode_tokens_per_s"),
            steady_decode_tokens_per_s=None
            if steady is None
            else number(steady, "steady_decode_tokens_per_s"),
            mean_occupancy=None if held is None else number(held, "occupancy"),
            tiers=memory,
            source=str(data.get("source") or "run"),
            settings=dict(settings),
            requests=None if requests is None else _columns(requests, "per-request records"),
            occupancy=None if series is None else _columns(series, "slot-occupancy series"),
            row=dict(row if row is not None else data),
        )


def _decode(value: Any) -> Any:
    """A JSON-string cell (a list or an object) decoded; anything else unchanged."""
    if isinstance(value, str) and value.startswith(("[", "{")):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _unflatten(row: Mapping[str, Any]) -> dict[str, Any]:
    """A flat sweep row (``memory.hbm.kv_bytes`` columns, JSON strings) as a nested dict.

    Empty cells (NaN) are dropped; when a dotted column collides with a scalar one the
    column is kept under its flat name.
    """
    nested: dict[str, Any] = {}
    for key, raw in row.items():
        value = _decode(raw)
        if isinstance(value, float) and math.isnan(value):
            continue
        parts = str(key).split(".")
        node = nested
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                nested.setdefault(str(key), value)
                break
            node = child
        else:
            node.setdefault(parts[-1], value)
    return nested


SWEPT_FIELDS = {
    "max_context": ("serving", "max_context"),
    "kv_policy": ("kv", "policy"),
    "batch_slots": ("serving", "batch_slots"),
}
"""A run's figure by its JSON name, and the config field a sweep may vary to set it: a sweep
that stored no ``max_context`` metric but swept ``serving.max_context`` still says each
point's context."""


def _sweep_subject(frame: Any) -> dict[str, str]:
    """The workload, model and hardware every point of a sweep frame ran (its ``attrs``, from
    ``rdu_sim.sweep.load``), each only when it is one name."""
    attrs = getattr(frame, "attrs", {})
    out: dict[str, str] = {}
    for part in ("workload", "model", "hardware"):
        names = attrs.get(part) or []
        if len(names) == 1:
            out[part] = str(names[0])
    return out


def _sweep_config(frame: Any) -> dict[str, Any]:
    """The :data:`SWEPT_FIELDS` every point of a sweep frame ran with one value of (its
    ``attrs``, read off each point's resolved config by ``rdu_sim.sweep.load``)."""
    attrs = getattr(frame, "attrs", {})
    out: dict[str, Any] = {}
    for name in SWEPT_FIELDS:
        values = attrs.get(name) or []
        if len(values) == 1 and values[0] != "auto":
            out[name] = values[0]
    return out


def _sweep_row(
    nested: dict[str, Any], subject: Mapping[str, str], config: Mapping[str, Any]
) -> dict[str, Any]:
    """A sweep row with the figures its metrics left out but its axes or config say: the
    swept fields under their JSON names (not ``auto`` slots), else the one value every point
    ran with, and the names of what it ran."""
    for name, (section, key) in SWEPT_FIELDS.items():
        block = nested.get(section)
        value = block.get(key) if isinstance(block, Mapping) else None
        if name not in nested and value is not None and value != "auto":
            nested[name] = value
        elif name not in nested and name in config:
            nested[name] = config[name]
    for part, value in subject.items():
        nested.setdefault(part, value)
    return nested


def _table(table: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Columns of NumPy arrays (or lists) as JSON-safe lists."""
    return {str(k): (v.tolist() if hasattr(v, "tolist") else list(v)) for k, v in table.items()}


def result_record(result: Any) -> dict[str, Any]:
    """A ``RunResult`` as one JSON-safe dict holding everything the plots read: its
    ``to_dict()``, plus ``request_records`` (``requests()``) and ``slot_occupancy``
    (``timeseries()``)."""
    record = dict(result.to_dict())
    record[REQUEST_RECORDS] = _table(result.requests())
    record[SLOT_OCCUPANCY] = _table(result.timeseries())
    return record


def _point(item: Any) -> RunPoint:
    if isinstance(item, RunPoint):
        return item
    if isinstance(item, RunSummary):
        return RunPoint.of_summary(item)
    if hasattr(item, "summary") and hasattr(item, "requests") and hasattr(item, "timeseries"):
        record = result_record(item)  # a RunResult
        return RunPoint.of_summary(
            item.summary(),
            requests=_columns(record[REQUEST_RECORDS], "per-request records"),
            occupancy=_columns(record[SLOT_OCCUPANCY], "slot-occupancy series"),
            row=record,
        )
    if isinstance(item, Mapping):
        return RunPoint.of_mapping(item)
    raise PlotInputError(
        f"expected a run's results (a RunResult, a mapping, a list of them or a DataFrame), "
        f"got {type(item).__name__}"
    )


def as_runs(results: Any) -> list[RunPoint]:
    """Results as a list of :class:`RunPoint`.

    Accepts a ``RunResult``, a ``RunSummary``, a mapping (one run or study row), a sequence
    of those, or a pandas DataFrame whose rows are runs (dotted column names become nested
    keys, JSON-string cells are decoded).
    """
    if hasattr(results, "to_dict") and hasattr(results, "columns"):  # a DataFrame
        rows = results.to_dict(orient="records")
        subject, config = _sweep_subject(results), _sweep_config(results)
        runs = []
        for row in rows:
            try:
                nested = _sweep_row(_unflatten(row), subject, config)
                runs.append(RunPoint.of_mapping(nested, {**subject, **row}))
            except PlotInputError as exc:
                axes = results.attrs.get("axes", [])
                point = ", ".join(f"{axis}={row.get(axis)}" for axis in axes) or row.get("key")
                raise PlotInputError(f"the point {point}: {exc}") from None
        return runs
    if (
        isinstance(results, Mapping)
        or not isinstance(results, Iterable)
        or isinstance(results, str | bytes)
    ):
        return [_point(results)]
    runs = [_point(item) for item in results]
    if not runs:
        raise PlotInputError("no runs given: the results are empty")
    return runs


def _common(runs: Sequence[RunPoint], get: Callable[[RunPoint], Any]) -> str:
    values = {str(get(run) or "") for run in runs}
    return values.pop() if len(values) == 1 else ""


def titled(title: str, runs: Sequence[RunPoint]) -> str:
    """``title — workload: model on hardware``, each part only when every run shares it (a
    figure names what was simulated, as the run report's header does)."""
    return with_subject(
        title,
        workload=_common(runs, lambda r: r.row.get("workload")),
        model=_common(runs, lambda r: r.model),
        hardware=_common(runs, lambda r: r.row.get("hardware")),
    )


def with_subject(title: str, *, workload: str = "", model: str = "", hardware: str = "") -> str:
    """``title — workload: model on hardware`` (the parts given)."""
    what = " on ".join(part for part in (model, hardware) if part)
    subject = f"{workload}: {what}" if workload and what else workload or what
    return f"{title} — {subject}" if subject else title


def lookup(run: RunPoint, path: str, default: Any = _MISSING) -> Any:
    """The value at ``path`` in the point's flat record (a sweep column such as
    ``hw.socket.hbm.bandwidth``, or a dotted path into a nested record); an empty cell
    counts as missing."""
    row = run.row
    flat = row.get(path)
    if flat is not None and not (isinstance(flat, float) and math.isnan(flat)):
        return flat  # an empty sweep cell (NaN) is as missing as an absent one
    node: Any = row
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            if default is _MISSING:
                empty = " (its cell is empty: NaN)" if path in row else ""
                raise PlotInputError(f"results have no {path!r}{empty} (needed for this plot)")
            return default
    return node


def short_names(paths: Sequence[str]) -> dict[str, str]:
    """Each column's name in a plot's legend and title: the shortest tail of its path, of at
    least two parts, that no other of ``paths`` ends with (``hbm.bandwidth`` beside
    ``intra_node_link.bandwidth``, ``pcu.count``, ``kv.policy``): a last part alone
    (``count``, ``bandwidth``) does not say which."""
    split = {path: path.split(".") for path in paths}
    names: dict[str, str] = {}
    for path, parts in split.items():
        for size in range(min(2, len(parts)), len(parts) + 1):
            tail = parts[-size:]
            if not any(o != path and other[-size:] == tail for o, other in split.items()):
                break
        names[path] = ".".join(tail)
    return names


def label_of(run: RunPoint, keys: Sequence[str] = ("model", "kv_policy")) -> str:
    """A legend label: the values of ``keys`` (``model``, ``kv_policy``, ``max_context``, or a
    column of the record, named as ``short_names`` names it)."""
    names = short_names(keys)
    parts: list[str] = []
    for key in keys:
        if key == "model":
            value = run.model
        elif key == "kv_policy":
            value = run.kv_policy
        elif key == "max_context":
            value = f"{run.need('max_context') // 1024}k ctx"
        else:
            raw = lookup(run, key, None)
            value = "" if raw is None else f"{names[key]}={raw}"
        if value:
            parts.append(str(value))
    return " · ".join(parts) or "run"


def group_runs(runs: Sequence[RunPoint], keys: Sequence[str]) -> dict[str, list[RunPoint]]:
    """Runs grouped by their label over ``keys``, in first-seen order.

    A key whose value is the same in every run is left out of the labels (a legend that
    repeats the model name on every line says nothing).
    """
    varying = [k for k in keys if len({label_of(r, (k,)) for r in runs}) > 1]
    groups: dict[str, list[RunPoint]] = {}
    for run in runs:
        groups.setdefault(
            label_of(run, varying) if varying else label_of(run, keys[-1:]), []
        ).append(run)
    return groups


def settings_note(runs: Sequence[RunPoint], asides: Mapping[str, str] | None = None) -> str | None:
    """What the points changed on top of their workload (a study's ``settings``), to print
    on the figure; None when nothing was changed. ``asides``: words in brackets after a
    setting's values (a setting that does not change what the plot draws says so, so its
    values do not read as the plotted ones)."""
    values: dict[str, list[Any]] = {}
    for run in runs:
        for key, value in run.settings.items():
            seen = values.setdefault(key, [])
            if value not in seen:
                seen.append(value)
    if not values:
        return None
    parts = []
    for key, seen in values.items():
        if key == "serving.max_context":
            parts.append(f"{key} = the context")
        elif key == "kv.policy":
            parts.append(f"{key} = the policy")
        elif len(seen) == 1:
            parts.append(f"{key} = {seen[0]}")
        else:
            shown = ", ".join(str(v) for v in seen[:5]) + (", ..." if len(seen) > 5 else "")
            parts.append(f"{key} in {{{shown}}}")
        if asides and key in asides:
            parts[-1] += f" ({asides[key]})"
    return "each point: the workload with " + "; ".join(parts)
