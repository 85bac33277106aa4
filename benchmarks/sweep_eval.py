"""The sweep benchmark's evaluator: the real simulation of a point, plus its event count.

Module-level (so it pickles by reference into the pool's workers). It is exactly the sweep's
``simulate`` evaluator (``rdu_sim.api.run(point.scenario).to_dict()``) with one more key,
``bench_events``, counted as in ``benchmarks.work.run_events``, so the benchmark can report
events per second for the whole sweep.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def simulate_counted(point: Any) -> Mapping[str, Any]:
    """``api.run(point.scenario).to_dict()`` plus ``bench_events`` (engine + serving)."""
    from benchmarks.work import run_events
    from rdu_sim import api

    result = api.run(point.scenario)
    out = dict(result.to_dict())
    out["bench_events"] = run_events(result)["events"]
    return out
