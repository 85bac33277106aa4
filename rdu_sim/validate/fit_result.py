"""A calibration's outcome: every target at the fitted values, the errors per group, the
fitted values as written, and how they are told (``describe``, ``FitResult.to_dict``: the
JSON that ``fit.json`` holds and ``rdu-sim plot deployment`` reads)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rdu_sim.validate.deployment import ErrorSummary, summarize_errors
from rdu_sim.validate.identification import Identification
from rdu_sim.validate.scope import FitParameter, Scoped, quantity_text
from rdu_sim.validate.targets import Target


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

    def plus_minus(self, index: int) -> float | None:
        """Parameter ``index``'s half-width (inf: undetermined; nan: held at a bound), None
        without a Jacobian."""
        return None if self.identification is None else self.identification.plus_minus[index]

    def described(self, index: int) -> str:
        """Parameter ``index``'s fitted value for people (``describe``), with its ±."""
        one = self.parameters[index]
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
                    "plus_minus": _finite(self.plus_minus(i)),
                    "determined": _finite(self.plus_minus(i)) is not None,
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
