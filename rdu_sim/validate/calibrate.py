"""Fit named parameters, each one value on a machine or on a serving stack, to measured rows
and published figures together (``rdu-sim calibrate``).

The problem (``rdu_sim.validate.calibration_problem.Problem``): targets (rows and figures,
each with its tolerance), the units that simulate them, the parameters with their bounds and
scopes (``rdu_sim.validate.scope``), and which targets are held out (by group). The fit
minimizes the sum of the trained targets' squared residuals with SciPy's bounded least
squares (a trust-region method, deterministic), on parameters scaled to [0, 1] over their
bounds, starting at the middle. Parameters that no trained target joins (one machine and its
stacks, another machine and its) are fitted apart, each group on the targets it reaches
(``Problem.blocks``), so a change to one machine's model never moves another's values. A
unit is simulated with exactly the parameters that reach it, so moving a stack's parameter
re-simulates that stack's rows only; every
result is kept in the evaluation cache (``rdu_sim.validate.evaluation_cache``) under a key of
everything it depends on (``rdu_sim.validate.evaluator``). Units run in this process or,
with ``workers`` > 1, in a pool of processes: the same results either way.

The objective records every target it read (``Calibration.seen``): a held-out target never
reaches the fit, and a test checks it. Fitted values are rounded to 4 significant digits in
their unit (``quantity_text``), and every target is simulated once more at exactly those
values: what the overlay files say is what was evaluated. A value the targets do not fix
(undetermined: ``identification``) is the fit's arbitrary point, not a finding: it is left
out of that last simulation and of the overlay, so its file's own value stands (a value
held at a bound is kept: the targets push it there). How well the targets determine
each value, and which values trade off, is read from the Jacobian at the solution
(``rdu_sim.validate.identification``).

Each group's fit says how it stopped (``GroupStop``: scipy's status): one that ran out of its
``max_evaluations`` fit steps before converging is warned of (``UnconvergedFitWarning``) and
recorded ``converged: false`` in the JSON and the overlays' headers: its values are where the
optimizer stopped, not a fit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rdu_sim.sim_warnings import warn
from rdu_sim.validate.calibration_problem import Problem
from rdu_sim.validate.evaluation_cache import EvaluationCache
from rdu_sim.validate.evaluator import Evaluator
from rdu_sim.validate.fit_result import (
    SLOPE_STEP,
    FitResult,
    GroupStop,
    TargetResult,
    UnconvergedFitWarning,
    at_bound,
    at_its_bound,
)
from rdu_sim.validate.identification import identify
from rdu_sim.validate.scope import rounded

Progress = Callable[["Evaluation"], None]


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of the objective, for progress reports: ``objective`` is what the fit
    minimizes, the sum of the squared residuals of the ``targets`` it read (a group's
    trained targets; ``targets.Target.residual``: log error over the tolerance); the median
    |error| of those targets is shown beside it, and is not what is minimized."""

    number: int
    values: tuple[float, ...]
    median_abs_error: float
    simulated: int
    cached: int
    seconds: float
    objective: float = math.nan
    targets: int = 0


class Calibration:
    """A fit of ``problem`` through ``cache``, with ``workers`` processes."""

    def __init__(
        self,
        problem: Problem,
        cache: EvaluationCache | None = None,
        *,
        workers: int = 1,
        progress: Progress | None = None,
    ) -> None:
        self.problem = problem
        self.evaluator = Evaluator(problem, cache or EvaluationCache(None), workers)
        self.progress = progress
        self.evaluations = 0
        self.seen: set[str] = set()
        """Every target id the objective read: never a held-out one."""

    def values(self, units: Sequence[float] | np.ndarray) -> tuple[float, ...]:
        """Parameter values at ``units`` (each in [0, 1] over its bounds)."""
        return tuple(
            one.parameter.value(float(u))
            for one, u in zip(self.problem.parameters, units, strict=True)
        )

    def residuals(
        self, values: Sequence[float], targets: Sequence[int] | None = None
    ) -> np.ndarray:
        """The trained targets' residuals at ``values`` (what the fit minimizes); ``targets``:
        of those trained targets only (a group's)."""
        problem = self.problem
        trained = [problem.targets[i] for i in (problem.train if targets is None else targets)]
        began = time.perf_counter()
        before = (self.evaluator.simulated, self.evaluator.cached)
        found = self.evaluator.evaluate(values, sorted({t.unit for t in trained}))
        self.seen.update(t.id for t in trained)
        self.evaluations += 1
        simulated = [found[t.unit].values[t.index] for t in trained]
        residuals = np.array(
            [t.residual(s) for t, s in zip(trained, simulated, strict=True)], dtype=float
        )
        if self.progress is not None:
            errors = [abs(t.relative_error(s)) for t, s in zip(trained, simulated, strict=True)]
            finite = [e for e in errors if math.isfinite(e)]
            self.progress(
                Evaluation(
                    self.evaluations,
                    tuple(values),
                    float(np.median(finite)) if finite else math.nan,
                    self.evaluator.simulated - before[0],
                    self.evaluator.cached - before[1],
                    time.perf_counter() - began,
                    float(np.sum(residuals**2)),
                    len(trained),
                )
            )
        return residuals

    def fit(self, max_evaluations: int = 60) -> FitResult:
        """Fit on the trained targets, each group of parameters apart (``max_evaluations``
        each); report every target at the fitted values."""
        from scipy.optimize import least_squares

        began = time.perf_counter()
        n = len(self.problem.parameters)
        units = np.full(n, 0.5)
        rows: list[np.ndarray] = []  # the Jacobian's rows, group by group (zero elsewhere)
        steps = 0
        stops: list[GroupStop] = []
        try:
            for group, targets in self.problem.blocks():
                columns = list(group)

                def residuals(
                    sub: np.ndarray,
                    columns: list[int] = columns,
                    targets: tuple[int, ...] = targets,
                ) -> np.ndarray:
                    whole = units.copy()
                    whole[columns] = sub
                    return self.residuals(self.values(whole), targets)

                solution = least_squares(
                    residuals,
                    units[columns],
                    bounds=(0.0, 1.0),
                    method="trf",
                    diff_step=SLOPE_STEP,
                    x_scale=1.0,
                    max_nfev=max_evaluations,
                )
                units[columns] = solution.x
                steps += int(solution.nfev)  # its slopes' evaluations are counted apart
                stop = GroupStop(
                    tuple(columns), int(solution.status), int(solution.nfev), max_evaluations
                )
                stops.append(stop)
                if not stop.converged:
                    warn(UnconvergedFitWarning(stop.warning(self.problem.parameters)))
                block = np.zeros((len(targets), n))
                block[:, columns] = solution.jac
                rows.append(block)
            pairs = [
                rounded(one.parameter, at_its_bound(one.parameter, value))
                for one, value in zip(self.problem.parameters, self.values(units), strict=True)
            ]
            values = tuple(value for value, _ in pairs)
            fitted = [one.parameter for one in self.problem.parameters]
            identification = identify(
                np.vstack(rows),
                fitted,
                [at_bound(p, v) is not None for p, v in zip(fitted, values, strict=True)],
            )
            # an undetermined value is the fit's arbitrary point, not a finding: it is not
            # applied (nor written), so every target is simulated with its file's own value
            left_out = tuple(math.isinf(w) for w in identification.plus_minus)
            applied = [None if out else v for v, out in zip(values, left_out, strict=True)]
            every = range(len(self.problem.units))
            found = self.evaluator.evaluate(applied, every)
        finally:
            self.evaluator.close()
        held = set(self.problem.held_out)
        results = tuple(
            TargetResult(
                t,
                found[t.unit].values[t.index],
                (found[t.unit].batch_slots or (0,) * (t.index + 1))[t.index],
                i in held,
                self.problem.reaching(i),
            )
            for i, t in enumerate(self.problem.targets)
        )
        return FitResult(
            self.problem.parameters,
            values,
            tuple(text for _, text in pairs),
            results,
            self.evaluations,
            self.evaluator.simulated,
            self.evaluator.cached,
            time.perf_counter() - began,
            identification,
            steps,
            left_out,
            tuple(stops),
        )
