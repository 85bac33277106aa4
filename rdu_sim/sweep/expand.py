"""Expand a spec into points, each resolved to a full, validated Scenario before anything runs.

The grid is the product of every axis and every zip group (a zip group is one dimension whose
axes step together). Each point's overrides (`set` plus its axis values) go through
`build_scenario`, the same path as `--set` on the command line, hardware (`hw.`) included.
So an axis naming an unknown field, or a value the config refuses, is a ConfigError pointing
at the spec's line before a single point runs; nothing half-runs on a typo.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from rdu_sim.config.errors import ConfigError, ConfigIssue
from rdu_sim.config.loader import LineMap, read_yaml
from rdu_sim.config.overrides import HW_PREFIX, STACK_PREFIX, SWEEP
from rdu_sim.config.show import short
from rdu_sim.scenario import Scenario, build_scenario
from rdu_sim.serving.named_policies import check_named
from rdu_sim.sweep.key import config_key, resolved_config
from rdu_sim.sweep.spec import LoadedSpec, axis_values

_FROM_SPEC = re.compile(rf"\s*\(from {re.escape(SWEEP)}: [^)]*\)$")  # build_scenario's note
MAX_POINTS = 100_000  # a bigger grid is almost surely a mistake; split it into several specs
MAX_REPORTED_FAILURES = 50  # stop resolving after this many invalid points
SAMPLE_POINTS = 500
"""Points `check` and a dry run resolve at most: a larger grid is counted, and this many of
its points, evenly spaced in grid order (the first and the last among them), are resolved.
A sweep that runs resolves every point before the first one runs."""


@dataclass(frozen=True)
class Point:
    """One design point: its key, the axis values that define it, and its resolved input.

    This is what an evaluator receives. It pickles cheaply (the Scenario is immutable data),
    so it can go to a worker process or a Dask worker as is.
    """

    key: str
    overrides: dict[str, Any]  # axis path -> value for this point (`set` not repeated)
    scenario: Scenario
    config: dict[str, Any]  # resolved workload + hardware + model, the key's input

    def describe(self) -> str:
        """'serving.batch_slots=4, kv.budget=8192' (or 'base' for a point with no axes)."""
        return _describe(self.overrides)


@dataclass(frozen=True)
class Expansion:
    """A spec's distinct points in grid order, and how many grid points were duplicates."""

    spec: LoadedSpec
    axes: tuple[str, ...]  # axis paths, grid order (axes first, then zip groups)
    points: tuple[Point, ...]
    duplicates: int  # grid points whose resolved config equals an earlier point's
    grid_points: int = 0  # of the whole grid, when only a sample was resolved (else 0)

    @property
    def grid_size(self) -> int:
        return self.grid_points or len(self.points) + self.duplicates

    @property
    def sampled(self) -> bool:
        """True when only a sample of the grid was resolved (``expand(..., sample=N)``)."""
        return self.grid_points > 0


def _describe(overrides: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={short(v)}" for k, v in overrides.items()) or "base"


def _dimensions(loaded: LoadedSpec) -> list[list[dict[str, Any]]]:
    """Each dimension is a list of {path: value} steps; the grid is their product."""
    spec = loaded.spec
    dims: list[list[dict[str, Any]]] = []
    for path, values in spec.axes.items():
        dims.append([{path: v} for v in axis_values(loaded, values, ("axes", path))])
    for index, group in enumerate(spec.zip):
        columns = {
            path: axis_values(loaded, values, ("zip", str(index), path))
            for path, values in group.items()
        }
        length = len(next(iter(columns.values())))
        dims.append([{path: column[i] for path, column in columns.items()} for i in range(length)])
    return dims


def grid_size(loaded: LoadedSpec) -> int:
    """The points of the spec's grid, counted without resolving any."""
    return math.prod(len(d) for d in _dimensions(loaded))


def _sources(loaded: LoadedSpec) -> dict[str, tuple[str, ...]]:
    """Override path -> where in the spec it is given (for error lines)."""
    spec = loaded.spec
    where: dict[str, tuple[str, ...]] = {p: ("set", p) for p in spec.set}
    where.update({p: ("axes", p) for p in spec.axes})
    for index, group in enumerate(spec.zip):
        where.update({p: ("zip", str(index), p) for p in group})
    return where


def _related(field: str, path: str) -> bool:
    """An issue at `field` is caused by an override of `path` (same, inside, or its parent)."""
    if not field:
        return False
    return field == path or field.startswith(path + ".") or path.startswith(field + ".")


def _blame(
    issue: ConfigIssue, loaded: LoadedSpec, sources: Mapping[str, tuple[str, ...]]
) -> tuple[str, ...] | None:
    """The spec location of the override that caused `issue`, if one did."""
    in_base = issue.file == str(loaded.base)
    for path, where in sources.items():
        prefix = next((p for p in (HW_PREFIX, STACK_PREFIX) if path.startswith(p)), None)
        if prefix is not None:
            if not in_base and _related(issue.field, path[len(prefix) :]):
                return where
        elif in_base and _related(issue.field, path):
            return where
    return None


class _Failures:
    """Invalid points, grouped by issue so one typo is reported once, not once per point."""

    def __init__(self, loaded: LoadedSpec) -> None:
        self.loaded = loaded
        self.sources = _sources(loaded)
        self.groups: dict[tuple[str, str, str, int | None], list[str]] = {}
        self.points = 0

    def add(self, error: ConfigError, overrides: Mapping[str, Any]) -> None:
        self.points += 1
        for issue in error.issues:
            where = _blame(issue, self.loaded, self.sources)
            if where is not None:
                message = _FROM_SPEC.sub("", issue.message)  # the spec line says where
                spec_issue = self.loaded.issue(message, *where)
            else:
                spec_issue = issue
            group = (spec_issue.file, spec_issue.field, spec_issue.message, spec_issue.line)
            self.groups.setdefault(group, []).append(_describe(overrides))

    def error(self, tried: int, total: int) -> ConfigError:
        issues = [
            self.loaded.issue(
                f"{self.points} of {total} points are invalid{'' if tried == total else ' (stopped after ' + str(tried) + ')'}; "  # noqa: E501
                "nothing was run",
                "axes" if self.loaded.spec.axes else "",
            )
        ]
        for (file, field, message, line), points in self.groups.items():
            if len(points) < tried:
                example = points[0]
                more = f" and {len(points) - 1} more" if len(points) > 1 else ""
                message = f"{message} (at {example}{more})"
            issues.append(ConfigIssue(file, field, message, line))
        return ConfigError(issues)


def _combinations(
    dims: list[list[dict[str, Any]]], total: int, sample: int | None
) -> tuple[Iterable[tuple[dict[str, Any], ...]], bool]:
    """The grid's combinations in grid order, or `sample` of them evenly spaced when the grid
    is larger (each found from its index, so the grid is never listed); and whether sampled."""
    if sample is None or total <= sample:
        return itertools.product(*dims), False
    step = (total - 1) / max(sample - 1, 1)
    indices = sorted({round(k * step) for k in range(sample)})

    def at(index: int) -> tuple[dict[str, Any], ...]:
        steps = []
        for dim in reversed(dims):  # the last dimension varies fastest, as in product()
            index, digit = divmod(index, len(dim))
            steps.append(dim[digit])
        return tuple(reversed(steps))

    return map(at, indices), True


def expand(loaded: LoadedSpec, *, sample: int | None = None) -> Expansion:
    """Resolve every point of the spec (or, with `sample`, at most that many, evenly spaced
    in grid order: see ``SAMPLE_POINTS``); ConfigError (naming the spec's lines) if any is
    invalid.

    Points whose resolved configs are equal are listed once (the first in grid order).
    """
    dims = _dimensions(loaded)
    total = math.prod(len(d) for d in dims)
    if total > MAX_POINTS:
        sizes = " x ".join(str(len(d)) for d in dims)
        raise loaded.error(
            f"the grid has {total} points ({sizes}); at most {MAX_POINTS} per "
            "spec: split it or use zip",
            "axes",
        )
    data, lines = read_yaml(loaded.base)
    if not isinstance(data, Mapping):
        raise ConfigError.single(str(loaded.base), "", "expected a mapping of workload fields")
    fixed = dict(loaded.spec.set)
    failures = _Failures(loaded)
    points: dict[str, Point] = {}
    duplicates = 0
    tried = 0
    combinations, sampled = _combinations(dims, total, sample)
    for combination in combinations:
        overrides: dict[str, Any] = {}
        for step in combination:
            overrides.update(step)
        tried += 1
        try:
            scenario = build_scenario(
                data,
                workload_file=str(loaded.base),
                lines=lines,
                overrides={**fixed, **overrides},
                overrides_from=SWEEP,
            )
            # (the policies' registries live in serving, which the scenario cannot import: a
            # run checks the names there, and a point is checked here before anything runs;
            # at the base file's line when the spec does not set it)
            set_here = {**fixed, **overrides}
            line_of = partial(_base_line, lines, set_here)
            check_named(scenario.workload.serving, str(loaded.base), line_of)
        except ConfigError as exc:
            failures.add(exc, overrides)
            if failures.points >= MAX_REPORTED_FAILURES:
                break
            continue
        config = resolved_config(scenario)
        key = config_key(config)
        if key in points:
            duplicates += 1
            continue
        points[key] = Point(key, overrides, scenario, config)
    if failures.points:
        raise failures.error(tried, total)
    axes = tuple(path for dim in dims for path in dim[0])
    return Expansion(loaded, axes, tuple(points.values()), duplicates, total if sampled else 0)


def _base_line(lines: LineMap, set_here: Mapping[str, Any], field: str) -> int | None:
    """The base file's line of a dotted ``field``; None when the spec sets it (its error is
    the spec's, ``(from the sweep spec: ...)``)."""
    return None if field in set_here else lines.get(tuple(field.split(".")))


def resolve(scenario: Scenario, overrides: Mapping[str, Any] | None = None) -> Point:
    """A Point for one scenario (for running a single config through the sweep machinery)."""
    config = resolved_config(scenario)
    return Point(config_key(config), dict(overrides or {}), scenario, config)
