"""Step times memoized by static shape: each shape is simulated once per run.

Static graphs make this exact, not an approximation: a step's time depends only on the
shape it was compiled for (phase, batch slots, new tokens, cache bucket), never on which
requests fill the slots. The serving level therefore asks the engine once per shape and
counts every step it runs per shape, from which the report derives utilization.

Time inside the serving simulation is integer picoseconds (``PS_PER_S``, ``serving.clock``),
so advancing ``k`` identical steps in one go (``k * step_ps``) is exactly the same as ``k``
single steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rdu_sim.serving.clock import PS_PER_S, step_ps, to_s
from rdu_sim.shapes import StepShape

__all__ = ["PS_PER_S", "StepCache", "StepCost", "StepFn"]


@dataclass(frozen=True)
class StepCost:
    """What the serving level needs from one simulated step of one shape."""

    step_s: float  # wall time of the step
    hbm_util: float = 0.0  # HBM bytes moved / (step time x peak HBM bandwidth) (0..1)
    pcu_util: float = 0.0  # fraction of PCU-time busy during the step (0..1)
    flops: float = 0.0  # matrix FLOPs of the step over all its sockets (0: not known)
    detail: Any = None  # the engine's full timing (for `--step` and reports), if any
    flops_util: float = 0.0  # matrix FLOPs / (step time x the socket's peak FLOP/s) (0..1)


StepFn = Callable[[StepShape], StepCost]


class StepCache:
    """Memo of step costs by shape, with per-shape step counts and hit/miss accounting.

    ``hits`` and ``misses`` count steps (one lookup per step run, a miss being the first
    step of a shape), so they do not depend on how many identical steps the scheduler
    advances at once.
    """

    def __init__(self, step_fn: StepFn) -> None:
        self._step_fn = step_fn
        self._costs: dict[StepShape, StepCost] = {}
        self._ps: dict[StepShape, int] = {}
        # shape -> [steps run, step ps], in first-run order: one lookup a run (the scheduler
        # runs ~3 a request); ``steps``, ``hits`` and ``misses`` are read from it
        self._runs: dict[StepShape, list[int]] = {}
        self._longest_ps = 0  # the largest of ``_ps`` (read at every serving event)

    def cost(self, shape: StepShape) -> StepCost:
        """The step cost of a shape (simulated on first use; not counted as a step)."""
        cost = self._costs.get(shape)
        if cost is None:
            cost = self._step_fn(shape)
            if not cost.step_s > 0:
                raise ValueError(f"step time of {shape} must be > 0 s, got {cost.step_s}")
            what = f"a {shape.phase} step (batch {shape.batch}, cache {shape.cache_len})"
            self._ps[shape] = step_ps(cost.step_s, what)
            self._longest_ps = max(self._longest_ps, self._ps[shape])
            self._costs[shape] = cost
        return cost

    def step_ps(self, shape: StepShape) -> int:
        """The step time of a shape in integer picoseconds (what the scheduler advances)."""
        step = self._ps.get(shape)
        if step is None:
            self.cost(shape)
            step = self._ps[shape]
        return step

    def step_s(self, shape: StepShape) -> float:
        """The step time the scheduler uses, in seconds (``step_ps / 1e12``)."""
        return to_s(self.step_ps(shape))

    def run(self, shape: StepShape, count: int = 1) -> int:
        """Account ``count`` steps of ``shape``; return the time of one step (ps)."""
        run = self._runs.get(shape)
        if run is None:
            step = self.step_ps(shape)
            self._runs[shape] = [count, step]
            return step
        run[0] += count
        return run[1]

    def run_tally(self, shape: StepShape, count: int = 1) -> list[int]:
        """Account ``count`` steps of ``shape`` (:meth:`run`) and return its live
        ``[steps run, step ps]``: a caller that runs the shape again adds its steps to the
        first item itself, with no lookup of the shape (whose hash is a Python call)."""
        self.run(shape, count)
        return self._runs[shape]

    @property
    def steps(self) -> dict[StepShape, int]:
        """Steps run per shape, in first-run order (a new dict)."""
        return {shape: run[0] for shape, run in self._runs.items()}

    @property
    def misses(self) -> int:
        """Steps that simulated their shape: the first of each shape run."""
        return len(self._runs)

    @property
    def hits(self) -> int:
        """Steps that found their shape already simulated: every other step run."""
        return sum(run[0] for run in self._runs.values()) - len(self._runs)

    @property
    def longest_step_s(self) -> float:
        """The longest step simulated so far, in seconds (0 before any)."""
        return to_s(self._longest_ps)

    @property
    def shapes(self) -> list[StepShape]:
        """Shapes simulated so far (in first-use order)."""
        return list(self._costs)

    @property
    def hit_rate(self) -> float:
        """Hits / (hits + misses), 0 before any step."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
