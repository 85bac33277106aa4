"""Fit named hardware parameters to measured deployment points (``rdu-sim calibrate``).

The user names the parameters (``hw.`` field paths, each with bounds); the fit minimizes the
squared log-ratios simulated / measured over the training points with SciPy's bounded
least squares (a trust-region method, deterministic), on parameters scaled to [0, 1] over
their bounds. A seeded share of the points is held out and only reported. Every evaluation
(a parameter vector and its simulated points) is appended to a cache file, so a stopped
fit run again with the same inputs replays what it had and goes on where it stopped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rdu_sim.config.errors import ConfigError, WriteError
from rdu_sim.config.units import UnitError, parse_bandwidth, parse_flops, parse_seconds
from rdu_sim.validate.deployment import MeasuredPoint, PointResult, simulate

Progress = Callable[[int, dict[str, float], float], None]
"""``progress(evaluation, parameters, median abs error on the training points)``."""

CACHE_VERSION = 1


@dataclass(frozen=True)
class FitParameter:
    """One parameter to fit: an ``hw.`` field path and its bounds, in internal units."""

    path: str
    low: float
    high: float

    def value(self, unit: float) -> float:
        """The parameter's value at ``unit`` in [0, 1] over its bounds."""
        return self.low + unit * (self.high - self.low)


def _quantity(text: str, where: str) -> float:
    """A bound: a bare number (the field's internal unit) or a time, bandwidth or FLOP/s."""
    for parse in (parse_seconds, parse_bandwidth, parse_flops):
        try:
            return float(parse(text.strip()))
        except (UnitError, ValueError):
            continue
    raise ConfigError.single("--fit", where, f"cannot read {text!r} as a number or a quantity")


def parse_fit(text: str) -> FitParameter:
    """``hw.path=LOW:HIGH`` or ``stack.path=LOW:HIGH`` (e.g.
    ``stack.host.serial_per_step=0:2ms``) as a FitParameter."""
    path, sep, bounds = text.partition("=")
    path = path.strip()
    if not sep or not path.startswith(("hw.", "stack.")) or bounds.count(":") != 1:
        raise ConfigError.single(
            "--fit",
            path or text,
            "expected hw.FIELD=LOW:HIGH or stack.FIELD=LOW:HIGH, e.g. "
            "stack.host.serial_per_step=0:2ms",
        )
    low_text, high_text = bounds.split(":")
    low, high = _quantity(low_text, path), _quantity(high_text, path)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ConfigError.single("--fit", path, f"needs finite bounds LOW < HIGH, got {bounds}")
    return FitParameter(path, low, high)


def split_holdout(
    count: int, fraction: float, seed: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(training, held-out) point indices: ``round(fraction * count)`` held out, drawn by a
    generator seeded with ``seed``; at least one point is always trained on."""
    if not 0 <= fraction < 1:
        raise ValueError(f"--holdout must be in [0, 1), got {fraction}")
    held = min(count - 1, round(fraction * count))
    order = np.random.default_rng(seed).permutation(count)
    return tuple(sorted(int(i) for i in order[held:])), tuple(sorted(int(i) for i in order[:held]))


@dataclass(frozen=True)
class FitResult:
    """The fitted values, every point's result, which were trained on, and the cost."""

    values: dict[str, float]
    results: tuple[PointResult, ...]
    train: tuple[int, ...]
    held_out: tuple[int, ...]
    evaluations: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe."""
        return {
            "values": self.values,
            "evaluations": self.evaluations,
            "points": [
                {**r.to_dict(), "held_out": i in self.held_out} for i, r in enumerate(self.results)
            ],
        }


class Calibration:
    """A fit of ``parameters`` to ``points`` on top of ``overrides`` (``hw.`` or workload
    overrides applied to every point), caching each evaluation in ``cache``."""

    def __init__(
        self,
        points: Sequence[MeasuredPoint],
        parameters: Sequence[FitParameter],
        *,
        overrides: Sequence[str] = (),
        cache: Path | None = None,
        progress: Progress | None = None,
        simulate_point: Callable[[MeasuredPoint, Sequence[str]], float] = simulate,
    ) -> None:
        if not parameters:
            raise ValueError("name at least one parameter to fit (--fit hw.FIELD=LOW:HIGH)")
        self.points = tuple(points)
        self.parameters = tuple(parameters)
        self.overrides = tuple(overrides)
        self.cache = cache
        self.progress = progress
        self.simulate_point = simulate_point
        self.evaluations = 0
        self._known: dict[str, list[float]] = self._read_cache()

    def _key(self, values: dict[str, float]) -> str:
        described = {
            "v": CACHE_VERSION,
            "values": values,
            "overrides": self.overrides,
            "points": [repr(p) for p in self.points],
        }
        return json.dumps(described, sort_keys=True)

    def _read_cache(self) -> dict[str, list[float]]:
        known: dict[str, list[float]] = {}
        if self.cache is None or not self.cache.is_file():
            return known
        for line in self.cache.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
                known[str(entry["key"])] = [float(v) for v in entry["simulated_s"]]
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a stop: that evaluation runs again
        return known

    def _append_cache(self, key: str, simulated: list[float]) -> None:
        if self.cache is None:
            return
        try:
            with self.cache.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"key": key, "simulated_s": simulated}) + "\n")
        except OSError as exc:
            raise WriteError.from_os(self.cache, exc) from None

    def values(self, units: Sequence[float] | np.ndarray) -> dict[str, float]:
        """Parameter values at ``units`` (each in [0, 1] over its bounds)."""
        return {p.path: p.value(float(u)) for p, u in zip(self.parameters, units, strict=True)}

    def simulated(self, values: dict[str, float], indices: Sequence[int]) -> list[float]:
        """Every point's simulated value with ``values`` set (cached); ``indices`` are the
        ones the caller needs (the others are simulated too, so a cached vector is whole)."""
        key = self._key(values)
        found = self._known.get(key)
        if found is None:
            sets = [*self.overrides, *(f"{path}={value!r}" for path, value in values.items())]
            found = [self.simulate_point(p, sets) for p in self.points]
            self._known[key] = found
            self._append_cache(key, found)
        return [found[i] for i in indices]

    def fit(
        self, train: Sequence[int], held_out: Sequence[int], max_evaluations: int = 60
    ) -> FitResult:
        """Fit on ``train``; report every point at the fitted values."""
        from scipy.optimize import least_squares

        measured = np.array([self.points[i].measured_s for i in train])

        def residuals(units: np.ndarray) -> np.ndarray:
            values = self.values(units)
            simulated = np.array(self.simulated(values, train))
            self.evaluations += 1
            log_ratio = np.log(simulated / measured)
            if self.progress is not None:
                errors = np.abs(simulated / measured - 1)
                self.progress(self.evaluations, values, float(np.median(errors)))
            return np.asarray(log_ratio, dtype=float)

        start = np.full(len(self.parameters), 0.5)
        solution = least_squares(
            residuals,
            start,
            bounds=(0.0, 1.0),
            method="trf",
            diff_step=1e-3,
            x_scale=1.0,
            max_nfev=max_evaluations,
        )
        # 4 significant digits: what the overlay file says is what was evaluated
        values = {path: float(f"{v:.4g}") for path, v in self.values(solution.x).items()}
        every = range(len(self.points))
        simulated = self.simulated(values, every)
        results = tuple(
            PointResult(point, value) for point, value in zip(self.points, simulated, strict=True)
        )
        return FitResult(values, results, tuple(train), tuple(held_out), self.evaluations)


def overlay_text(
    base: dict[str, Any], values: dict[str, float], header: Sequence[str], prefix: str = "hw."
) -> str:
    """A config file: ``base`` (a hardware or stack file's mapping) with the fitted
    ``values`` under ``prefix`` set (internal units; others are left out), below ``header``
    as comment lines."""
    import copy

    import yaml

    data = copy.deepcopy(base)
    for path, value in values.items():
        if not path.startswith(prefix):
            continue
        node = data
        parts = path.split(".")[1:]
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError.single("--fit", path, f"{part} is not a section of the file")
            node = child
        node[parts[-1]] = value
    body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    return "".join(f"# {line}\n" for line in header) + body
