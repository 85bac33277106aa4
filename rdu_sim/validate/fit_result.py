"""A calibration's outcome: every target at the fitted values, the errors per group, the
fitted values as written, and how they are told (``describe``, ``FitResult.to_dict``: the
JSON that ``fit.json`` holds and ``rdu-sim plot deployment`` reads)."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from rdu_sim import human
from rdu_sim.sim_warnings import RduSimWarning
from rdu_sim.validate.deployment import ErrorSummary, summarize_errors
from rdu_sim.validate.identification import Identification
from rdu_sim.validate.scope import FitParameter, Scoped, quantity_text
from rdu_sim.validate.targets import Target

ROLES = ("fitted", "held out", "not reached")
"""What a target was to the fit: trained on and reached by a fitted parameter, held out (and
reached), or reached by no fitted parameter (held out or not: simulated as its files say)."""

ERROR_SIGN = (
    "error = simulated / measured - 1 of each row's metric: + is slower than measured for a "
    "time (s), faster for a rate (tokens/s), higher for a ratio (x) or a share; - the other "
    "way"
)
"""What a signed error means, said under every table of them (calibrate's, and validate's of
measured deployments): the one wording."""


STOPS = {
    -1: "scipy refused its input",
    0: "stopped at its budget of fit steps before converging",
    1: "converged: the gradient vanished (gtol)",
    2: "converged: the cost stopped falling (ftol)",
    3: "converged: the step became negligible (xtol)",
    4: "converged: the cost stopped falling and the step became negligible (ftol, xtol)",
}
"""Why scipy's ``least_squares`` stopped, by its ``status``: above 0 it converged."""

RAISE_BUDGET = "raise --max-evaluations (a spec's max_evaluations)"
"""How to give a group that stopped at its budget more fit steps."""


class UnconvergedFitWarning(RduSimWarning):
    """A group of parameters whose fit stopped before converging (at its budget of fit
    steps): its values are where the optimizer stopped, not a fit."""


@dataclass(frozen=True)
class GroupStop:
    """How the fit of one group of parameters (``Problem.blocks``) stopped."""

    parameters: tuple[int, ...]  # the group's parameters (indices)
    status: int  # scipy least_squares' status (``STOPS``)
    steps: int  # its fit steps (scipy's nfev)
    budget: int  # the most fit steps it was allowed (max_nfev)

    @property
    def converged(self) -> bool:
        """Whether scipy stopped because a tolerance was met, not at the budget."""
        return self.status > 0

    @property
    def reason(self) -> str:
        """Why it stopped, in words."""
        return STOPS.get(self.status, f"scipy status {self.status}")

    def warning(self, parameters: tuple[Scoped, ...]) -> str:
        """The one line said of a group that did not converge."""
        names = [parameters[k].name for k in self.parameters]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        if self.status == 0:
            why = (
                f"stopped at its budget of {human.count(self.budget, 'fit step')} before "
                f"converging: its values are where it stopped, not fitted ones; {RAISE_BUDGET}"
            )
        else:
            why = f"did not converge ({self.reason})"
        return f"the fit of {shown} {why}"

    def to_dict(self, parameters: tuple[Scoped, ...]) -> dict[str, Any]:
        """JSON-safe."""
        return {
            "parameters": [parameters[k].name for k in self.parameters],
            "converged": self.converged,
            "stop": self.reason,
            "status": self.status,
            "fit_steps": self.steps,
            "max_fit_steps": self.budget,
        }


@dataclass(frozen=True)
class TargetResult:
    """One target at the fitted values."""

    target: Target
    simulated: float
    batch_slots: int
    held_out: bool
    reached_by: tuple[int, ...] = ()  # the fitted parameters (indices) whose value reaches it

    @property
    def relative_error(self) -> float:
        """simulated / measured - 1 of the target's metric (``ERROR_SIGN``)."""
        return self.target.relative_error(self.simulated)

    @property
    def role(self) -> str:
        """One of ``ROLES``."""
        if not self.reached_by:
            return "not reached"
        return "held out" if self.held_out else "fitted"

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
        for key, _ in t.groups:
            if key not in groups:
                values = t.values_of(key)
                # a machine is listed whole (a run's hardware file and every file it extends),
                # any other key as its one value, or every value it has (a figure's runs)
                groups[key] = values if key == "machine" or len(values) > 1 else values[0]
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
            "reached": bool(self.reached_by),
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
    identification: Identification | None = None  # how well the targets fix each value
    steps: int = 0  # the fit's steps (scipy's nfev), every group's: evaluations less slopes
    left_out: tuple[bool, ...] = ()  # each value undetermined: not applied, not written
    stops: tuple[GroupStop, ...] = ()  # how each group's fit stopped

    @property
    def converged(self) -> bool:
        """Whether every group's fit converged (none stopped at its budget)."""
        return all(stop.converged for stop in self.stops)

    def stops_of(self, indices: Collection[int]) -> list[GroupStop]:
        """The groups holding any of parameters ``indices``."""
        return [s for s in self.stops if set(s.parameters) & set(indices)]

    def is_left_out(self, index: int) -> bool:
        """Whether parameter ``index`` was undetermined, so left out of the overlay and of
        the final simulations (its file's own value stands)."""
        return bool(self.left_out) and self.left_out[index]

    def plus_minus(self, index: int) -> float | None:
        """Parameter ``index``'s half-width (inf: undetermined; nan: held at a bound), None
        without a Jacobian."""
        return None if self.identification is None else self.identification.plus_minus[index]

    def described(self, index: int) -> str:
        """Parameter ``index``'s fitted value for people (``describe``), with its ±."""
        one = self.parameters[index]
        if self.is_left_out(index):
            return left_out_text(one)
        return describe(one, self.values[index], self.texts[index], self.plus_minus(index))

    def trade_off_lines(self) -> list[str]:
        """One line per pair of fitted values that trade off, for people."""
        if self.identification is None:
            return []
        names = [one.name for one in self.parameters]
        return [
            f"trade off: {names[t.first]} and {names[t.second]} (correlation "
            f"{t.correlation:+.2f}): the fitted targets fix a combination of the two, not each"
            for t in self.identification.trade_offs
        ]

    def bound_lines(self) -> list[str]:
        """One line per value held at a bound that fitted targets it reaches miss by
        :data:`FAR_OFF` or more, for people: the bound, not the targets, may be what stops
        the fit there."""
        lines = []
        for i, (one, value) in enumerate(zip(self.parameters, self.values, strict=True)):
            side = at_bound(one.parameter, value)
            if side is None or self.is_left_out(i):
                continue
            far = [
                r
                for r in self._chosen("fitted", (i,))
                if not r.passed and abs(r.relative_error) >= FAR_OFF
            ]
            if not far:
                continue
            worst = max(far, key=lambda r: abs(r.relative_error))
            lines.append(
                f"at its {side} bound: {one.name} = {self.texts[i]}, and "
                f"{human.count(len(far), 'fitted target')} it reaches "
                f"{'is' if len(far) == 1 else 'are'} {human.percent(FAR_OFF)} off or more "
                f"(worst {worst.target.id}, {human.percent(worst.relative_error, signed=True)}"
                "): the bound may be what holds the fit back (widen it to see), or the model "
                "lacks what they measure"
            )
        return lines

    def _chosen(self, role: str, reaching: Collection[int] | None) -> list[TargetResult]:
        """The targets of ``role`` (``ROLES``), of those a parameter of ``reaching`` reaches
        when given."""
        return [
            r
            for r in self.results
            if r.role == role
            and math.isfinite(r.relative_error)
            and (reaching is None or any(k in reaching for k in r.reached_by))
        ]

    def errors(
        self, key: str, role: str, reaching: Collection[int] | None = None
    ) -> list[ErrorSummary]:
        """Median and worst |error| of the targets of ``role`` (``ROLES``), one summary per
        value of group ``key`` (``set``, ``stack`` ...), in order of first appearance."""
        groups: dict[str, list[tuple[str, float]]] = {}
        for result in self._chosen(role, reaching):
            for value in result.target.values_of(key)[:1]:
                groups.setdefault(value, []).append((result.target.id, result.relative_error))
        return [summarize_errors(rows, name) for name, rows in groups.items()]

    def total(self, role: str, reaching: Collection[int] | None = None) -> ErrorSummary | None:
        """All targets of ``role`` (of those ``reaching`` reaches) as one group."""
        rows = [(r.target.id, r.relative_error) for r in self._chosen(role, reaching)]
        return summarize_errors(rows, role) if rows else None

    def count(self, role: str, reaching: Collection[int]) -> int:
        """How many targets of ``role`` a parameter of ``reaching`` reaches."""
        return sum(
            1 for r in self.results if r.role == role and any(k in reaching for k in r.reached_by)
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe and the same bytes for the same inputs (what the run cost, which a
        resumed run does not repeat, is left out): parameters with their values (internal
        unit and as written), every target, the errors per set and per stack, fitted and
        held out."""
        errors: dict[str, Any] = {}
        for role in ROLES:
            total = self.total(role)
            errors[role.replace(" ", "_")] = {
                "all": None if total is None else total.to_dict(),
                **{key: [e.to_dict() for e in self.errors(key, role)] for key in ("set", "stack")},
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
                    "value": None if self.is_left_out(i) else value,
                    "text": None if self.is_left_out(i) else text,
                    "at_bound": None if self.is_left_out(i) else at_bound(one.parameter, value),
                    "plus_minus": _finite(self.plus_minus(i)),
                    "determined": _finite(self.plus_minus(i)) is not None,
                    "in_overlay": not self.is_left_out(i),
                }
                for i, (one, value, text) in enumerate(
                    zip(self.parameters, self.values, self.texts, strict=True)
                )
            ],
            "trade_offs": [
                {
                    "parameters": [self.parameters[t.first].name, self.parameters[t.second].name],
                    "correlation": t.correlation,
                }
                for t in (self.identification.trade_offs if self.identification else ())
            ],
            "targets": [r.to_dict() for r in self.results],
            "errors": errors,
            "error_sign": ERROR_SIGN,
            "evaluations": self.evaluations,
            "fit_steps": self.steps,
            "converged": self.converged,
            "groups": [stop.to_dict(self.parameters) for stop in self.stops],
        }


FAR_OFF = 0.5
"""How far off (``|relative_error|``) a fitted target is said beside a value held at a bound
that reaches it (``FitResult.bound_lines``): past it, the bound is a likelier stop than noise."""

SLOPE_STEP = 1e-3
"""The fit's step for its slopes, as a share of a parameter's span (scipy's ``diff_step`` on
values scaled to [0, 1]): nearer a bound than this, the fit cannot tell a value from it."""


def at_bound(parameter: FitParameter, value: float) -> str | None:
    """``low`` or ``high`` when the fit ended within ``SLOPE_STEP`` of the span at a bound."""
    span = parameter.high - parameter.low
    if value <= parameter.low + SLOPE_STEP * span:
        return "low"
    if value >= parameter.high - SLOPE_STEP * span:
        return "high"
    return None


def at_its_bound(parameter: FitParameter, value: float) -> float:
    """The bound itself for a value that ended at it (``at_bound``), else the value: the
    bounded solver nears a bound without reaching it, and closer than ``SLOPE_STEP`` it
    cannot tell the two apart, so 0.0001 ns fitted on 0..2 ms is written 0."""
    side = at_bound(parameter, value)
    return parameter.low if side == "low" else parameter.high if side == "high" else value


def tried_text(parameter: FitParameter, value: float) -> str:
    """A value the fit tried, for its progress lines, as the fitted value is said
    (``describe``): in the parameter's unit (``quantity_text``), and nearer a bound than the
    fit tells apart (``at_bound``) that bound, ``0 (at its low bound)``, not the
    ``6.174e-07 ns`` the solver's step above it is."""
    side = at_bound(parameter, value)
    if side is None:
        return quantity_text(value, parameter.unit)
    return f"{quantity_text(at_its_bound(parameter, value), parameter.unit)} (at its {side} bound)"


def _rough(value: float, unit: str) -> str:
    """``value`` to 2 significant digits in its unit, or its whole part where that is longer
    (``370 us``, not ``3.7e+02 us``)."""
    text = quantity_text(value, unit, 2)
    for digits in (3, 4, 5):
        if "e" not in text.split()[0]:
            break
        text = quantity_text(value, unit, digits)
    return text


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def describe(one: Scoped, value: float, text: str, plus_minus: float | None = None) -> str:
    """A fitted value for people: ``sn40l-8:hw.system.intra_node_link.bandwidth = 24.31
    GB/s ± 1.2 GB/s (bounds 8 GB/s..64 GB/s)``, noting a value that ended at a bound (held
    there, with no ±) and one the fitted targets do not fix."""
    p = one.parameter
    bounds = f"{quantity_text(p.low, p.unit)}..{quantity_text(p.high, p.unit)}"
    edge = at_bound(p, value)
    note = f", at its {edge} bound" if edge else ""
    if plus_minus is None or math.isnan(plus_minus):  # no Jacobian, or held at its bound
        spread = ""
    elif math.isfinite(plus_minus):
        spread = f" ± {_rough(plus_minus, p.unit)}"
    else:
        spread = ", undetermined: the fitted targets do not fix it within its bounds"
    return f"{one.name} = {text}{spread} (bounds {bounds}{note})"


def left_out_text(one: Scoped) -> str:
    """An undetermined value for people: not written, so its file's own value stands."""
    p = one.parameter
    bounds = f"{quantity_text(p.low, p.unit)}..{quantity_text(p.high, p.unit)}"
    return (
        f"{one.name} undetermined: the fitted targets do not fix it within its bounds "
        f"(bounds {bounds}), so it is left out of the overlay and {one.label}'s own value "
        "stands (the targets are simulated with it)"
    )
