"""``rdu-sim validate --suite deployment``: every shipped measured row simulated, grouped and
held to its group's limits.

A group is the rows of one hardware file under one serving stack measured one way: batches
sent together (Argonne's grids) or full-load runs (``batch`` auto: TensorRT-LLM's
maximum-throughput table), so a table measured at full load is reported as its own group.
Every row's workload is built before the first simulation (``resolve_rows``: every row that
cannot run is named at once, by its file, line and column, the rule ``rdu-sim check`` reads a
measurement file by); values passed back from calibrated overlays (``--overlay``) reach the
rows on the machine or stack they extend, and an overlay that reaches no row is refused
(``check_overlays``: it would change nothing).

The same evaluation (``evaluate``) runs a user's own measurement files (``validate --suite
deployment FILE...``): each row as it stands, its errors grouped the same way, but held to no
limits (the limits are the suite's claim about the shipped measurements).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdu_sim.config.errors import ConfigError, ConfigIssue, bounded
from rdu_sim.config.stack import NONE
from rdu_sim.engine.shared_steps import sharing as share_steps
from rdu_sim.validate.deployment import (
    BATCH,
    FULL_LOAD,
    ErrorSummary,
    MeasuredPoint,
    PointResult,
    grouped,
    simulate_run,
)
from rdu_sim.validate.scope import (
    Deployment,
    Fixed,
    deployment_of,
    fixed_overrides,
    label_of,
    settings_of,
    stack_of,
)

LIMITS: dict[tuple[str, str], tuple[float, float]] = {
    (BATCH, "rdu"): (0.08, 0.25),
    (BATCH, "gpu"): (0.08, 0.20),
    (FULL_LOAD, "rdu"): (0.10, 0.20),
    (FULL_LOAD, "gpu"): (0.10, 0.20),
}
"""(way of measuring, kind of machine) -> (largest median |error|, largest |error| of any row)
its groups pass with: batches sent together within 8% at the median on either machine, no row
beyond 20% on a GPU's grids or 25% on the SN40L's 22 rows; full-load tables 10% and 20%."""


def group_of(point: MeasuredPoint, deployment: Deployment) -> str:
    """The row's group: its hardware file, its stack, and how it was measured when at full
    load (``dgx-h100 · tensorrt-llm · full-load``)."""
    parts = [deployment.hardware.stem, label_of(deployment.stack)]
    if point.method == FULL_LOAD:
        parts.append(FULL_LOAD)
    return " · ".join(parts)


@dataclass(frozen=True)
class GroupVerdict:
    """One group's errors, its limits and whether it is within them (no limits: a user's
    own rows, reported but not held to the suite's limits)."""

    errors: ErrorSummary
    median_limit: float | None
    worst_limit: float | None
    hardware: str = ""  # what the group is, field by field
    stack: str = ""
    method: str = ""

    @property
    def passed(self) -> bool:
        """Median and worst |error| within the limits (True when it has none)."""
        if self.median_limit is None or self.worst_limit is None:
            return True
        return (
            self.errors.median_abs_error <= self.median_limit
            and self.errors.worst_abs_error <= self.worst_limit
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (the limits and verdict only when it is held to limits)."""
        out = {
            **self.errors.to_dict(),
            "hardware": self.hardware,
            "stack": self.stack,
            "method": self.method,
        }
        if self.median_limit is None:
            return out
        return {
            **out,
            "median_limit": self.median_limit,
            "worst_limit": self.worst_limit,
            "pass": self.passed,
        }


@dataclass(frozen=True)
class DeploymentReport:
    """Every row's result and every group's verdict."""

    results: tuple[PointResult, ...]
    groups: tuple[GroupVerdict, ...]
    group_of_row: tuple[str, ...]
    stack_of_row: tuple[str, ...]  # each row's stack, resolved (its hardware's default too)
    held: bool = True  # the groups held to LIMITS (the shipped suite), or only reported

    @property
    def passed(self) -> bool:
        """Every group within its limits."""
        return all(group.passed for group in self.groups)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``points`` (each with its ``group`` and its resolved ``stack``),
        ``systems`` (the groups, each with its ``hardware``, ``stack`` and ``method``), and
        when held to limits, the ``limits`` and the verdict (``pass``)."""
        rows = zip(self.results, self.group_of_row, self.stack_of_row, strict=True)
        out: dict[str, Any] = {
            "points": [{**r.to_dict(), "group": g, "stack": s} for r, g, s in rows],
            "systems": [group.to_dict() for group in self.groups],
        }
        if not self.held:
            return out
        return {
            **out,
            "limits": {
                f"{method} · {kind}": {"median": m, "worst": w}
                for (method, kind), (m, w) in LIMITS.items()
            },
            "pass": self.passed,
        }


@dataclass(frozen=True)
class Row:
    """A measured row resolved, nothing simulated: where it runs and on what kind of
    machine (``rdu``, ``gpu``)."""

    point: MeasuredPoint
    deployment: Deployment
    kind: str
    runs_as: str = ""  # the machine and stack as the row runs them (``scope.settings_of``)


def resolve_rows(points: Sequence[MeasuredPoint], overrides: Sequence[str] = ()) -> list[Row]:
    """Each row's workload built (``MeasuredPoint.scenario``, as ``calibrate`` builds it) and
    its deployment resolved, nothing simulated; one ConfigError naming every row that
    cannot run or repeats an earlier row's measurement (its file, line, column and problem;
    at most ``config.errors.MAX_ROW_ISSUES`` of them)."""
    rows, issues = _resolved(points, overrides)
    if issues:
        raise ConfigError(bounded([issue for _, issue in issues]))
    return rows


def read_rows(
    paths: Sequence[Path],
    read: tuple[Sequence[MeasuredPoint], Sequence[ConfigIssue]],
    overrides: Sequence[str] = (),
) -> list[Row]:
    """Every row of the measurement files ``paths``, as ``measurement_file.read_each`` read
    them (``read``: the good points and an issue per bad row), resolved (``resolve_rows``);
    one ConfigError naming every bad row of every file, in file then line order: a cell
    that does not read, a row that cannot run, a repeated measurement (``rdu-sim check``
    names the same rows)."""
    points, bad = read
    rows, issues = _resolved(points, overrides)
    issues.extend((issue.file, issue) for issue in bad)
    if issues:
        order = {str(path): number for number, path in enumerate(paths)}

        def position(source: str) -> tuple[int, int]:
            file, _, line = source.rpartition(":")
            return order.get(file, len(order)), int(line) if line.isdigit() else 0

        issues.sort(key=lambda pair: position(pair[0]))
        raise ConfigError(bounded([issue for _, issue in issues]))
    return rows


def _resolved(
    points: Sequence[MeasuredPoint], overrides: Sequence[str]
) -> tuple[list[Row], list[tuple[str, ConfigIssue]]]:
    """The rows that resolve, and each issue with the row (``file:line``) it is about."""
    rows: list[Row] = []
    issues: list[tuple[str, ConfigIssue]] = []
    known: dict[tuple[str, str], Deployment] = {}  # a deployment's files read once
    for point in points:
        try:
            scenario = point.scenario(overrides)
        except ConfigError as exc:  # (a fault in a file the row names names that file)
            issues.extend((point.source, issue) for issue in exc.issues)
            continue
        where = (scenario.hardware_file, stack_of(scenario))
        deployment = known.get(where) or known.setdefault(where, deployment_of(scenario))
        stack = NONE if deployment.stack == NONE else settings_of(scenario.stack)
        runs_as = f"{settings_of(scenario.hardware)} {stack}"
        rows.append(Row(point, deployment, scenario.hardware.kind, runs_as))
    issues.extend((issue.file, issue) for issue in duplicate_issues(rows))
    return rows, issues


def measurement_key(row: Row) -> tuple[Any, ...]:
    """What makes two rows the same measurement: where it ran (the machine and the stack as
    the row runs them, ``--set`` applied: ``Row.runs_as``, so a copy of a hardware or stack
    file that only renames it is the same machine or stack), what ran (model, dtypes, tp,
    batch, requests, lengths, the KV share), the metric and the measured value; not the
    label (a human name: two names of one model mapped to one preset are one run), not the
    file or line."""
    p = row.point
    return (
        row.runs_as,
        p.model,
        p.weights,
        p.kv,
        p.tp,
        p.batch,
        p.requests or p.batch,
        p.input_tokens,
        p.output_tokens,
        p.kv_memory_fraction,
        p.metric,
        p.measured,
    )


def content_key(row: Row) -> str:
    """A short name of a row's measurement (``measurement_key``), the same wherever its file
    lies and whatever line it is on: how an overlay records the rows it was fitted on."""
    import hashlib
    import json

    text = json.dumps(measurement_key(row), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def duplicate_issues(rows: Sequence[Row]) -> list[ConfigIssue]:
    """One issue per row that repeats an earlier row's measurement (``measurement_key``),
    naming both: counted twice it would pull a fit twice as hard, and one copy fitted while
    the other is held out would test the fit on its own data. Two rows of the same run with
    different measured values are repeat measurements, and both count."""
    first: dict[tuple[Any, ...], Row] = {}
    issues = []
    for row in rows:
        earlier = first.setdefault(measurement_key(row), row)
        if earlier.point.source != row.point.source:  # (not one row read twice)
            labels = (earlier.point.label, row.point.label)
            differ = (
                f"; the labels differ, {labels[0]!r} and {labels[1]!r}, but a label is a "
                "name for people, not part of a measurement"
                if labels[0] != labels[1]
                else ""
            )
            issues.append(
                ConfigIssue(
                    row.point.source,
                    "",
                    f"the same measurement as {earlier.point.source} (the same hardware, stack, "
                    "model, dtypes, tp, batch, requests, lengths, metric and measured value"
                    f"{differ}): a measurement counts once (a held-out copy of a fitted row "
                    "would test the fit on its own data); remove one of the two",
                )
            )
    return issues


def check_overlays(overlays: Sequence[tuple[Path, Sequence[Fixed]]], rows: Sequence[Row]) -> None:
    """A ConfigError for an overlay (``--overlay``: its path and fields) that reaches no
    row: it extends a machine or stack none of them runs on, so it would change nothing."""
    for path, fixed in overlays:
        if any(one.reaches(row.deployment) for one in fixed for row in rows):
            continue
        first = fixed[0]
        what = "machine" if first.kind == "machine" else "serving stack"
        runs = sorted(
            {f"{r.deployment.hardware.stem} · {label_of(r.deployment.stack)}" for r in rows}
        )
        raise ConfigError.single(
            "--overlay",
            str(path),
            f"extends the {what} {label_of(first.target)} ({first.target}), which no row runs "
            f"on (the rows run on {', '.join(runs)}): it would change nothing",
        )


def run_deployment_suite(
    points: Sequence[MeasuredPoint],
    overrides: Sequence[str] = (),
    fixed: Sequence[Fixed] = (),
) -> DeploymentReport:
    """Check every row, then simulate each (``overrides`` on every run; each ``fixed``
    value on the runs it reaches) and group the results, held to the suite's limits."""
    return evaluate(resolve_rows(points, overrides), overrides, fixed)


def row_overrides(
    deployment: Deployment, overrides: Sequence[str], fixed: Sequence[Fixed]
) -> list[str]:
    """A row's run's overrides: the caller's, then the given values reaching its deployment
    (the order ``calibrate`` gives them in, before any fitted value)."""
    return [*overrides, *fixed_overrides(fixed, deployment)]


def evaluate(
    rows: Sequence[Row],
    overrides: Sequence[str] = (),
    fixed: Sequence[Fixed] = (),
    held: bool = True,
) -> DeploymentReport:
    """Simulate each resolved row (``row_overrides``) and group the results; ``held``: each
    group held to ``LIMITS`` (the shipped suite), else only reported (a user's rows)."""
    points = [row.point for row in rows]
    deployments = [row.deployment for row in rows]
    kinds = {row.deployment.hardware: row.kind for row in rows}
    results = []
    with share_steps():  # rows of one machine and model meet many of each other's steps
        for point, deployment in zip(points, deployments, strict=True):
            done = simulate_run(point, row_overrides(deployment, overrides, fixed))
            results.append(PointResult(point, done.value, done.batch_slots))
    names = [group_of(p, d) for p, d in zip(points, deployments, strict=True)]
    by_name = dict(zip((id(r) for r in results), names, strict=True))
    summaries = grouped(results, lambda r: by_name[id(r)])
    named = list(zip(names, points, deployments, strict=True))
    first = {name: (p, d) for name, p, d in reversed(named)}  # each group's first row
    verdicts = []
    for summary in summaries:
        point, deployment = first[summary.group]
        limits: tuple[float | None, float | None] = (None, None)
        if held:
            limits = LIMITS[point.method, kinds[deployment.hardware]]
        verdicts.append(
            GroupVerdict(
                summary,
                limits[0],
                limits[1],
                hardware=deployment.hardware.stem,
                stack=label_of(deployment.stack),
                method=point.method,
            )
        )
    stacks = tuple(label_of(d.stack) for d in deployments)
    return DeploymentReport(tuple(results), tuple(verdicts), tuple(names), stacks, held)
