"""``rdu-sim validate --suite deployment``: every shipped measured row simulated, grouped and
held to its group's limits.

A group is the rows of one hardware file under one serving stack measured one way: batches
sent together (Argonne's grids) or full-load runs (``batch`` auto: TensorRT-LLM's
maximum-throughput table), so a table measured at full load is reported as its own group.
Every row's workload is built before the first simulation (a row that cannot run fails at
once, naming its file and line); values passed back from calibrated overlays (``--overlay``)
reach the rows on the machine or stack they extend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
from rdu_sim.validate.scope import Deployment, Fixed, deployment_of, fixed_overrides, label_of

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
    """One group's errors, its limits and whether it is within them."""

    errors: ErrorSummary
    median_limit: float
    worst_limit: float
    hardware: str = ""  # what the group is, field by field
    stack: str = ""
    method: str = ""

    @property
    def passed(self) -> bool:
        """Median and worst |error| within the limits."""
        return (
            self.errors.median_abs_error <= self.median_limit
            and self.errors.worst_abs_error <= self.worst_limit
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe."""
        return {
            **self.errors.to_dict(),
            "hardware": self.hardware,
            "stack": self.stack,
            "method": self.method,
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

    @property
    def passed(self) -> bool:
        """Every group within its limits."""
        return all(group.passed for group in self.groups)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``points`` (each with its ``group`` and its resolved ``stack``),
        ``systems`` (the groups, each with its ``hardware``, ``stack`` and ``method``)."""
        rows = zip(self.results, self.group_of_row, self.stack_of_row, strict=True)
        return {
            "points": [{**r.to_dict(), "group": g, "stack": s} for r, g, s in rows],
            "systems": [group.to_dict() for group in self.groups],
            "limits": {
                f"{method} · {kind}": {"median": m, "worst": w}
                for (method, kind), (m, w) in LIMITS.items()
            },
            "pass": self.passed,
        }


def run_deployment_suite(
    points: Sequence[MeasuredPoint],
    overrides: Sequence[str] = (),
    fixed: Sequence[Fixed] = (),
) -> DeploymentReport:
    """Check every row, then simulate each (``overrides`` on every run; each ``fixed``
    value on the runs it reaches) and group the results."""
    scenarios = [p.scenario(overrides) for p in points]  # all checked first
    deployments = [deployment_of(s) for s in scenarios]
    kinds = {d.hardware: s.hardware.kind for s, d in zip(scenarios, deployments, strict=True)}
    results = []
    with share_steps():  # rows of one machine and model meet many of each other's steps
        for point, deployment in zip(points, deployments, strict=True):
            done = simulate_run(point, [*overrides, *fixed_overrides(fixed, deployment)])
            results.append(PointResult(point, done.value, done.batch_slots))
    names = [group_of(p, d) for p, d in zip(points, deployments, strict=True)]
    by_name = dict(zip((id(r) for r in results), names, strict=True))
    summaries = grouped(results, lambda r: by_name[id(r)])
    rows = list(zip(names, points, deployments, strict=True))
    first = {name: (p, d) for name, p, d in reversed(rows)}  # each group's first row
    verdicts = []
    for summary in summaries:
        point, deployment = first[summary.group]
        verdicts.append(
            GroupVerdict(
                summary,
                *LIMITS[point.method, kinds[deployment.hardware]],
                hardware=deployment.hardware.stem,
                stack=label_of(deployment.stack),
                method=point.method,
            )
        )
    stacks = tuple(label_of(d.stack) for d in deployments)
    return DeploymentReport(tuple(results), tuple(verdicts), tuple(names), stacks)
