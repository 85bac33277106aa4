"""Read what the plots need out of run results, whatever form they come in.

Plots take results as a run's JSON dict (``RunResult.to_dict()`` or the file ``rdu-sim run
--json`` writes), a list of them, or a sweep DataFrame (``rdu_sim.sweep.load``). This module
turns all three into a list of plain mappings and looks fields up by dotted path, so each plot
states *what* it needs and a missing field becomes one clear :class:`PlotInputError` naming
the key (the CLI turns it into exit status 2) instead of a ``KeyError`` deep in matplotlib.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "GIB",
    "MEMORY_PARTS",
    "TIERS",
    "PlotInputError",
    "as_runs",
    "context_of",
    "find",
    "group_runs",
    "label_of",
    "lookup",
    "memory_of",
    "model_of",
    "number",
    "policy_of",
    "result_record",
    "tiers_present",
]

Run = Mapping[str, Any]

GIB = float(2**30)
"""Bytes in a GiB: memory axes are in GiB because capacities are powers of two."""

TIERS = ("sram", "hbm", "ddr")
"""Memory tiers in the order plots show them (on-chip first)."""

MEMORY_PARTS = ("weights", "kv", "activations", "free")
"""Stacked parts of a tier's footprint, bottom to top."""

_MISSING = object()
_ABSENT = object()  # lookup's answer inside find, distinct from the raise sentinel


class PlotInputError(ValueError):
    """The results lack a field a plot needs, or are not results at all."""


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
        parts = str(key).replace("__", ".").split(".")
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


def _columns(table: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Columns of NumPy arrays (or lists) as JSON-safe lists."""
    return {str(k): (v.tolist() if hasattr(v, "tolist") else list(v)) for k, v in table.items()}


def result_record(result: Any) -> dict[str, Any]:
    """A ``RunResult`` as one JSON-safe dict holding everything the plots read.

    ``to_dict()`` (the metrics), plus the per-request columns of ``requests()`` under
    ``request_records`` and the state time series of ``timeseries()`` under
    ``slot_occupancy``.
    """
    record = dict(result.to_dict())
    for method, key in (("requests", "request_records"), ("timeseries", "slot_occupancy")):
        table = getattr(result, method, None)
        if callable(table):
            record[key] = _columns(table())
    return record


def as_runs(results: Any) -> list[Run]:
    """Results as a list of run mappings.

    Accepts a mapping (one run), a ``RunResult`` (see :func:`result_record`), a sequence
    of either, or a pandas DataFrame whose rows are runs (dotted or ``__``-joined column
    names become nested keys, JSON-string cells are decoded). A mapping with a ``runs`` or
    ``results`` list is unwrapped.
    """
    if hasattr(results, "to_dict") and hasattr(results, "columns"):  # a DataFrame
        return [_unflatten(row) for row in results.to_dict(orient="records")]
    if hasattr(results, "to_dict") and not isinstance(results, Mapping):
        results = result_record(results)
    if isinstance(results, Mapping):
        for key in ("runs", "results"):
            inner = results.get(key)
            if isinstance(inner, list) and inner and isinstance(inner[0], Mapping):
                return as_runs(inner)
        return [results]
    if isinstance(results, Iterable) and not isinstance(results, str | bytes):
        runs: list[Run] = []
        for item in results:
            runs.extend(as_runs(item))
        if not runs:
            raise PlotInputError("no runs given: the results are empty")
        return runs
    raise PlotInputError(
        f"expected a run's results (a mapping, a list of them or a DataFrame), "
        f"got {type(results).__name__}"
    )


def lookup(run: Run, path: str, default: Any = _MISSING) -> Any:
    """The value at dotted ``path`` in ``run``; ``default`` (or PlotInputError) if absent."""
    node: Any = run
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif (
            isinstance(node, Sequence)
            and not isinstance(node, str)
            and part.isdigit()
            and int(part) < len(node)
        ):
            node = node[int(part)]
        else:
            if default is _MISSING:
                raise PlotInputError(f"results have no {path!r} (needed for this plot)")
            return default
    return node


def find(run: Run, *paths: str, what: str, default: Any = _MISSING) -> Any:
    """The first of ``paths`` present in ``run``.

    Several spellings are tried because results reach the plots by several routes (the
    API's dict, a JSON file, a flattened sweep row). When none is there, the error names
    ``what`` and every key tried.
    """
    for path in paths:
        value = lookup(run, path, _ABSENT)
        if value is not _ABSENT and value is not None:
            return value
    if default is not _MISSING:
        return default
    tried = ", ".join(repr(p) for p in paths)
    raise PlotInputError(f"results have no {what} (looked for {tried})")


def number(value: Any, what: str) -> float:
    """``value`` as a float, or PlotInputError naming ``what``."""
    if isinstance(value, bool):
        raise PlotInputError(f"{what} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise PlotInputError(f"{what} must be a number, got {value!r}") from None


def policy_of(run: Run) -> str:
    """The run's KV policy name (``full``, ``snapstream``, ...)."""
    value = find(
        run,
        "kv_policy",
        "kv.policy",
        "scenario.kv.policy",
        "workload.kv.policy",
        "policy",
        what="KV policy",
        default="?",
    )
    if isinstance(value, Mapping):
        value = value.get("name", value.get("policy", "?"))
    return str(value)


def model_of(run: Run) -> str:
    """The run's model name, '' if the results do not say."""
    value = find(
        run, "model", "scenario.model", "workload.model", "model_name", what="model", default=""
    )
    if isinstance(value, Mapping):
        value = value.get("name", "")
    return str(value)


def context_of(run: Run) -> int:
    """The run's context length in tokens (the workload's ``serving.max_context``)."""
    value = find(
        run,
        "max_context",
        "context",
        "serving.max_context",
        "scenario.serving.max_context",
        "workload.serving.max_context",
        "config.serving.max_context",
        what="context length (max_context)",
    )
    return int(number(value, "max_context"))


def label_of(run: Run, keys: Sequence[str] = ("model", "kv_policy")) -> str:
    """A legend label: the values of ``keys`` (``model`` and ``kv_policy`` understood)."""
    parts: list[str] = []
    for key in keys:
        if key == "model":
            value = model_of(run)
        elif key in ("kv_policy", "policy"):
            value = policy_of(run)
        elif key in ("context", "max_context"):
            value = f"{context_of(run) // 1024}k ctx"
        else:
            raw = lookup(run, key, None)
            value = "" if raw is None else f"{key.rsplit('.', 1)[-1]}={raw}"
        if value:
            parts.append(str(value))
    return " · ".join(parts) or "run"


def group_runs(runs: Sequence[Run], keys: Sequence[str]) -> dict[str, list[Run]]:
    """Runs grouped by their label over ``keys``, in first-seen order.

    A key whose value is the same in every run is left out of the labels (a legend that
    repeats the model name on every line says nothing).
    """
    varying = [k for k in keys if len({label_of(r, (k,)) for r in runs}) > 1]
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(
            label_of(run, varying) if varying else label_of(run, keys[-1:]), []
        ).append(run)
    return groups


def memory_of(run: Run, tier: str, socket: int = 0) -> dict[str, float]:
    """Bytes of ``weights``, ``kv``, ``activations``, ``free`` and ``capacity`` of one tier.

    ``memory`` may be keyed by tier directly (one socket's view) or be a list of such
    mappings (one per socket), or ``{"per_socket": [...]}``. ``free`` is derived from the
    capacity when the results do not give it.
    """
    memory = find(run, "memory", "memory_per_socket", "placement.tiers", what="memory usage")
    if isinstance(memory, Mapping) and "per_socket" in memory:
        memory = memory["per_socket"]
    if isinstance(memory, Sequence) and not isinstance(memory, str):
        if not memory:
            raise PlotInputError("results have an empty 'memory' list")
        memory = memory[min(socket, len(memory) - 1)]
    if not isinstance(memory, Mapping) or tier not in memory:
        raise PlotInputError(f"results have no memory usage for tier {tier!r}")
    usage = memory[tier]
    out: dict[str, float] = {}
    for part in ("weights", "kv", "activations"):
        out[part] = number(
            find(usage, f"{part}_bytes", part, what=f"memory.{tier}.{part}_bytes", default=0.0),
            f"memory.{tier}.{part}_bytes",
        )
    capacity = number(
        find(usage, "capacity_bytes", "capacity", what=f"memory.{tier}.capacity_bytes"),
        f"memory.{tier}.capacity_bytes",
    )
    used = out["weights"] + out["kv"] + out["activations"]
    free = find(usage, "free_bytes", "free", what="free bytes", default=capacity - used)
    out["free"] = max(0.0, number(free, f"memory.{tier}.free_bytes"))
    out["capacity"] = capacity
    return out


def tiers_present(run: Run) -> list[str]:
    """The memory tiers a run reports, in :data:`TIERS` order."""
    present = []
    for tier in TIERS:
        try:
            memory_of(run, tier)
        except PlotInputError:
            continue
        present.append(tier)
    return present
