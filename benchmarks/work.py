"""What every benchmark case module shares: the repository root, a case's result (``Work``)
and how a serving run's events are counted (docs/performance.md). The case modules
(``cases``, ``cluster_cases``, ``sweep_eval``) import it; it imports none of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
"""The repository root (workload paths are relative to it)."""


@dataclass(frozen=True)
class Work:
    """What a case did: events simulated and case-specific details for the JSON."""

    events: int
    detail: dict[str, Any] = field(default_factory=dict)
    wall_s: float | None = None  # the case timed itself (a median of whole processes)


def run_events(result: Any) -> dict[str, int]:
    """Events of one ``api.run`` result: engine (per distinct shape, once) and serving."""
    cache = result.cache
    engine = sum(int(getattr(cache.cost(shape).detail, "events", 0)) for shape in cache.shapes)
    records = result.records
    serving = int(records.prefill_steps + records.decode_runs + len(records))
    return {
        "engine_events": engine,
        "serving_events": serving,
        "shapes": len(cache.shapes),
        "events": engine + serving,
    }
