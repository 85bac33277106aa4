"""A step simulated through the API and the bound its report names (tests of report.bound)."""

from __future__ import annotations

from rdu_sim import api
from rdu_sim.engine.timing import StepTiming
from rdu_sim.report.bound import StepBound, step_bound


def bound_of(
    workload: str, overrides: dict[str, object], **shape: object
) -> tuple[StepTiming, StepBound]:
    """``workload``'s step (``api.step``'s shape arguments) and its ``step_bound``."""
    timing = api.step(workload, overrides, **shape).detail  # type: ignore[arg-type]
    assert isinstance(timing, StepTiming)
    return timing, step_bound(timing, api.load(workload, overrides).hardware)
