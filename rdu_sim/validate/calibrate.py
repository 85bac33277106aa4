"""Fit named parameters, each one value on a machine or on a serving stack, to measured rows
and published figures together (``rdu-sim calibrate``).

The problem (``Problem``): targets (``rdu_sim.validate.targets``: rows and figures, each with
its tolerance), the units that simulate them, the parameters with their bounds and scopes
(``rdu_sim.validate.scope``), and which targets are held out (``rdu_sim.validate.holdout``:
by group). The fit minimizes the sum of the trained targets' squared residuals with SciPy's
bounded least squares (a trust-region method, deterministic), on parameters scaled to [0, 1]
over their bounds, starting at the middle. A unit is simulated with exactly the parameters
that reach it, so moving a stack's parameter re-simulates that stack's rows only; every
result is kept in the evaluation cache (``rdu_sim.validate.evaluation_cache``) under a key of
everything it depends on. Units run in this process or, with ``workers`` > 1, in a pool of
processes: the same results either way.

The objective records every target it read (``Calibration.seen``): a held-out target never
reaches the fit, and a test checks it. Fitted values are rounded to 4 significant digits in
their unit (``quantity_text``), and every target is simulated once more at exactly those
values: what the overlay files say is what was evaluated.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rdu_sim.config.errors import ConfigError, ConfigIssue
from rdu_sim.validate.deployment import ErrorSummary, summarize_errors
from rdu_sim.validate.evaluation_cache import EvaluationCache
from rdu_sim.validate.scope import (
    FitParameter,
    Fixed,
    Scoped,
    fixed_overrides,
    label_of,
    overrides_for,
    read_bound,
)
from rdu_sim.validate.targets import Evaluated, Target, Unit

Progress = Callable[["Evaluation"], None]

QUANTITY_UNITS: dict[str, tuple[tuple[float, str], ...]] = {
    "s": ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")),
    "bytes/s": ((1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1.0, "B/s")),
    "FLOP/s": ((1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1.0, "FLOP/s")),
}
"""The units a fitted value is written in, largest first (each one the config reads)."""


def quantity_text(value: float, unit: str, digits: int = 4) -> str:
    """``value`` (internal unit) to ``digits`` significant digits in the unit that reads
    best, as a config file takes it: ``285.2 us``, ``24.31 GB/s``, ``0.8734``."""
    scales = QUANTITY_UNITS.get(unit)
    if scales is None or value == 0:
        return f"{value:.{digits}g}" + (" B" if unit == "bytes" and value == 0 else "")
    scale, name = next(((s, n) for s, n in scales if abs(value) >= s), scales[-1])
    return f"{value / scale:.{digits}g} {name}"


def rounded(parameter: FitParameter, value: float) -> tuple[float, str]:
    """The value as written to 4 significant digits in its unit, and read back."""
    text = quantity_text(value, parameter.unit)
    return read_bound(text, parameter.unit, parameter.path), text


@dataclass(frozen=True)
class Problem:
    """What to fit: targets, the units simulating them, parameters, the held-out split."""

    units: tuple[Unit, ...]
    targets: tuple[Target, ...]
    parameters: tuple[Scoped, ...]
    train: tuple[int, ...]
    held_out: tuple[int, ...]
    overrides: tuple[str, ...] = ()  # --set on every run, before the fitted values
    fixed: tuple[Fixed, ...] = ()  # values passed back (--overlay), where they reach

    def __post_init__(self) -> None:
        if not self.parameters:
            raise ConfigError.single("--fit", "", "name at least one parameter to fit")
        for one in self.parameters:
            if not any(self._reaches(one, self.targets[i]) for i in self.train):
                raise ConfigError.single(
                    "--fit",
                    one.parameter.text or one.name,
                    "reaches no trained row or figure (all held out?)",
                )
            if one.parameter.kind == "machine":
                self._spans_stacks(one)

    def _reaches(self, one: Scoped, target: Target) -> bool:
        return any(one.reaches(d) for d in self.units[target.unit].deployments)

    def _spans_stacks(self, one: Scoped) -> None:
        """A machine's parameter is one value under every stack it runs: fitted on one
        stack's measurements alone it would be that stack's, so it is refused."""
        stacks = {
            d.stack
            for i in self.train
            for d in self.units[self.targets[i].unit].deployments
            if one.reaches(d)
        }
        if len(stacks) < 2:
            raise ConfigError.single(
                "--fit",
                one.parameter.text or one.name,
                f"a hardware parameter is fitted on the rows of one serving stack only "
                f"({', '.join(sorted(label_of(s) for s in stacks))}): a machine's value "
                "must hold under every stack it runs, so fit it on at least two stacks' "
                "measurements (or fit a stack's own parameter instead)",
            )

    def unit_overrides(self, unit: int, values: Sequence[float]) -> list[list[str]]:
        """The overrides of each of ``unit``'s deployments at parameter ``values``."""
        owner = self.units[unit]
        return [
            [
                *base,
                *fixed_overrides(self.fixed, deployment),
                *overrides_for(self.parameters, values, deployment),
            ]
            for base, deployment in zip(owner.parts(self.overrides), owner.deployments, strict=True)
        ]


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of the objective, for progress reports."""

    number: int
    values: tuple[float, ...]
    median_abs_error: float
    simulated: int
    cached: int
    seconds: float


def _run(task: tuple[int, Unit, list[list[str]]]) -> tuple[int, Evaluated | list[ConfigIssue]]:
    """A unit's simulation in a worker process: its result, or the issues of the input
    error that stopped it (a ConfigError does not cross processes whole)."""
    from rdu_sim.compiler import CapacityError
    from rdu_sim.engine import EventBudgetError

    index, unit, overrides = task
    try:
        return index, unit.run(overrides)
    except ConfigError as exc:
        return index, list(exc.issues)
    except (CapacityError, EventBudgetError) as exc:
        return index, [ConfigIssue(unit.name, "", str(exc))]


def _quiet_worker() -> None:
    """A worker's start: Ctrl-C reaches the whole process group; the parent decides (it
    terminates its workers when it stops)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _ignoring_interrupts() -> Iterator[None]:
    """SIGINT ignored while inside (in the main thread; elsewhere signals never arrive)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


POLL_S = 0.2
"""How often the parent looks for a stop request while its workers simulate."""


@dataclass
class Evaluator:
    """Simulates units at parameter values, through the cache, in this process or a pool.

    ``checkpoint`` is called between units (and while waiting on workers): raising there
    stops the fit with every finished unit already in the cache."""

    problem: Problem
    cache: EvaluationCache
    workers: int = 1
    checkpoint: Callable[[], None] = lambda: None
    simulated: int = 0
    cached: int = 0
    _pool: Any = field(default=None, repr=False)

    def evaluate(self, values: Sequence[float], units: Sequence[int]) -> dict[int, Evaluated]:
        """Each of ``units``' results at ``values``."""
        found: dict[int, Evaluated] = {}
        todo: list[tuple[int, str, list[list[str]]]] = []
        for index in units:
            unit = self.problem.units[index]
            overrides = self.problem.unit_overrides(index, values)
            key = unit.key(overrides)
            hit = self.cache.get(key, unit.kind, unit.size)
            if hit is None:
                todo.append((index, key, overrides))
            else:
                found[index] = hit
                self.cached += 1
        keys = {index: key for index, key, _ in todo}
        for index, result in self._simulate(todo):
            unit = self.problem.units[index]
            self.cache.put(keys[index], unit.kind, unit.name, result)  # kept the moment it ends
            found[index] = result
            self.simulated += 1
        return found

    def _simulate(
        self, todo: list[tuple[int, str, list[list[str]]]]
    ) -> Iterator[tuple[int, Evaluated]]:
        """Each unit's result as it ends (an input error stops everything)."""
        tasks = [(index, self.problem.units[index], overrides) for index, _, overrides in todo]
        if self.workers <= 1 or len(tasks) <= 1:
            for task in tasks:
                self.checkpoint()
                yield _checked(_run(task))
            return
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            # the workers start with Ctrl-C ignored (an ignored signal stays ignored across
            # exec), so the terminal's signal to the whole group cannot reach one before its
            # initializer runs
            with _ignoring_interrupts():
                self._pool = context.Pool(self.workers, initializer=_quiet_worker)
        results = self._pool.imap_unordered(_run, tasks)
        for _ in tasks:
            while True:
                self.checkpoint()
                try:
                    outcome = results.next(timeout=POLL_S)
                except multiprocessing.TimeoutError:
                    continue
                break
            yield _checked(outcome)

    def close(self) -> None:
        """Stop the workers at once (a unit still simulating is lost, never half-kept)."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
        self.cache.close()


def _checked(outcome: tuple[int, Evaluated | list[ConfigIssue]]) -> tuple[int, Evaluated]:
    index, result = outcome
    if isinstance(result, list):
        raise ConfigError(result)
    return index, result


@dataclass(frozen=True)
class TargetResult:
    """One target at the fitted values."""

    target: Target
    simulated: float
    batch_slots: int
    held_out: bool

    @property
    def relative_error(self) -> float:
        """simulated / measured - 1."""
        return self.target.relative_error(self.simulated)

    @property
    def passed(self) -> bool:
        """Inside the target's tolerance (a bound: at or above its lowest passing value)."""
        if not math.isfinite(self.simulated):
            return False
        if self.target.bound == "at_least":
            return self.simulated >= self.target.low * (1 - 1e-12)
        return abs(self.relative_error) <= self.target.tolerance * (1 + 1e-12)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe."""
        t = self.target
        groups: dict[str, Any] = {}
        for key, value in t.groups:
            groups[key] = [*groups[key], value] if key in groups and key == "machine" else value
        if isinstance(groups.get("machine"), str):
            groups["machine"] = [groups["machine"]]
        finite = math.isfinite(self.simulated)
        return {
            "id": t.id,
            "label": t.label,
            "unit": t.measure_unit,
            "measured": t.measured,
            "simulated": self.simulated if finite else None,
            "relative_error": self.relative_error if finite else None,
            "tolerance": t.tolerance,
            "bound": t.bound,
            "pass": self.passed,
            "batch_slots": self.batch_slots,
            "held_out": self.held_out,
            "groups": groups,
        }


@dataclass(frozen=True)
class FitResult:
    """The fitted values, every target at them, and what the fit cost."""

    parameters: tuple[Scoped, ...]
    values: tuple[float, ...]
    texts: tuple[str, ...]  # each value as written, in its unit
    results: tuple[TargetResult, ...]
    evaluations: int
    simulated: int
    cached: int
    seconds: float

    def errors(self, key: str, held_out: bool) -> list[ErrorSummary]:
        """Median and worst |error| of the fitted (or held-out) targets, one summary per
        value of group ``key`` (``set``, ``stack`` ...), in order of first appearance."""
        groups: dict[str, list[tuple[str, float]]] = {}
        for result in self.results:
            error = result.relative_error
            if result.held_out == held_out and math.isfinite(error):
                for value in result.target.values_of(key)[:1]:
                    groups.setdefault(value, []).append((result.target.id, error))
        return [summarize_errors(rows, name) for name, rows in groups.items()]

    def total(self, held_out: bool) -> ErrorSummary | None:
        """All fitted (or held-out) targets as one group."""
        rows = [
            (r.target.id, r.relative_error)
            for r in self.results
            if r.held_out == held_out and math.isfinite(r.relative_error)
        ]
        return summarize_errors(rows, "held out" if held_out else "fitted") if rows else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe and the same bytes for the same inputs (what the run cost, which a
        resumed run does not repeat, is left out): parameters with their values (internal
        unit and as written), every target, the errors per set and per stack, fitted and
        held out."""
        errors: dict[str, Any] = {}
        for role, held in (("fitted", False), ("held_out", True)):
            total = self.total(held)
            errors[role] = {
                "all": None if total is None else total.to_dict(),
                **{key: [e.to_dict() for e in self.errors(key, held)] for key in ("set", "stack")},
            }
        return {
            "parameters": [
                {
                    "name": one.name,
                    "path": one.parameter.path,
                    "scope": one.label,
                    "kind": one.parameter.kind,
                    "unit": one.parameter.unit,
                    "low": one.parameter.low,
                    "high": one.parameter.high,
                    "value": value,
                    "text": text,
                    "at_bound": at_bound(one.parameter, value),
                }
                for one, value, text in zip(self.parameters, self.values, self.texts, strict=True)
            ],
            "targets": [r.to_dict() for r in self.results],
            "errors": errors,
            "evaluations": self.evaluations,
        }


def at_bound(parameter: FitParameter, value: float) -> str | None:
    """``low`` or ``high`` when the fit ended within 0.1% of the span at a bound."""
    span = parameter.high - parameter.low
    if value <= parameter.low + 1e-3 * span:
        return "low"
    if value >= parameter.high - 1e-3 * span:
        return "high"
    return None


class Calibration:
    """A fit of ``problem`` through ``cache``, with ``workers`` processes."""

    def __init__(
        self,
        problem: Problem,
        cache: EvaluationCache | None = None,
        *,
        workers: int = 1,
        progress: Progress | None = None,
        checkpoint: Callable[[], None] = lambda: None,
    ) -> None:
        self.problem = problem
        self.evaluator = Evaluator(problem, cache or EvaluationCache(None), workers, checkpoint)
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

    def residuals(self, values: Sequence[float]) -> np.ndarray:
        """The trained targets' residuals at ``values`` (what the fit minimizes)."""
        problem = self.problem
        trained = [problem.targets[i] for i in problem.train]
        began = time.perf_counter()
        before = (self.evaluator.simulated, self.evaluator.cached)
        found = self.evaluator.evaluate(values, sorted({t.unit for t in trained}))
        self.seen.update(t.id for t in trained)
        self.evaluations += 1
        simulated = [found[t.unit].values[t.index] for t in trained]
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
                )
            )
        return np.array(
            [t.residual(s) for t, s in zip(trained, simulated, strict=True)], dtype=float
        )

    def fit(self, max_evaluations: int = 60) -> FitResult:
        """Fit on the trained targets; report every target at the fitted values."""
        from scipy.optimize import least_squares

        began = time.perf_counter()
        try:
            solution = least_squares(
                lambda units: self.residuals(self.values(units)),
                np.full(len(self.problem.parameters), 0.5),
                bounds=(0.0, 1.0),
                method="trf",
                diff_step=1e-3,
                x_scale=1.0,
                max_nfev=max_evaluations,
            )
            pairs = [
                rounded(one.parameter, value)
                for one, value in zip(self.problem.parameters, self.values(solution.x), strict=True)
            ]
            values = tuple(value for value, _ in pairs)
            every = range(len(self.problem.units))
            found = self.evaluator.evaluate(values, every)
        finally:
            self.evaluator.close()
        held = set(self.problem.held_out)
        results = tuple(
            TargetResult(
                t,
                found[t.unit].values[t.index],
                (found[t.unit].batch_slots or (0,) * (t.index + 1))[t.index],
                i in held,
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
        )


def describe(one: Scoped, value: float, text: str) -> str:
    """A fitted value for people: ``sn40l-8:hw.system.intra_node_link.bandwidth = 24.31
    GB/s (bounds 8 GB/s..64 GB/s)``, noting a value that ended at a bound."""
    p = one.parameter
    bounds = f"{quantity_text(p.low, p.unit)}..{quantity_text(p.high, p.unit)}"
    edge = at_bound(p, value)
    note = f", at its {edge} bound" if edge else ""
    return f"{one.name} = {text} (bounds {bounds}{note})"
