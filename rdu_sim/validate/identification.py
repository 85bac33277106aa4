"""How well the fitted targets determine each fitted value, read from the residuals' Jacobian
at the solution (``rdu-sim calibrate``).

A residual is a target's log-error in units of its tolerance, so the objective grows by one
when one target moves by its whole tolerance. Under the Gauss-Newton approximation the
objective near the solution is ``(u - u*)' J'J (u - u*)``, and ``(J'J)^-1`` is the
parameters' covariance with each target's tolerance read as its standard error: a value's
``plus_minus`` is how far it can move (the others following) before the objective grows by
one, and two values whose correlation is near ±1 trade against each other: the targets fix
a combination of them, not each. A value no trained target moves, or one that could move by
more than half its bounds' span, is undetermined (inf); a value the fit left at a bound is
held there, not by the targets (nan)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rdu_sim.validate.scope import FitParameter

TRADE_OFF = 0.9
"""|correlation| at or above which two fitted values are reported as trading off."""

UNDETERMINED = 0.5
"""A half-width beyond this share of the bounds' span leaves the value undetermined: its
interval would reach past the bounds themselves."""

RIDGE = 1e-12
"""The ridge added to the normalized J'J (unit diagonal): far below any determined
direction, it keeps an exactly degenerate pair's direction (the two trading off) where a
pseudo-inverse would drop it."""

NO_EFFECT = 1e-12
"""A Jacobian column whose norm is at most this (residual units per unit of span) moves no
trained target."""


@dataclass(frozen=True)
class TradeOff:
    """Two fitted values (indices into the fit's parameters) and their correlation."""

    first: int
    second: int
    correlation: float


@dataclass(frozen=True)
class Identification:
    """Each value's half-width in its internal unit (inf: undetermined within its bounds;
    nan: held at a bound, so not a free value) and the pairs that trade off."""

    plus_minus: tuple[float, ...]
    trade_offs: tuple[TradeOff, ...]


def identify(
    jacobian: np.ndarray,
    parameters: Sequence[FitParameter],
    at_bound: Sequence[bool] = (),
) -> Identification:
    """The identification of ``parameters`` from ``jacobian`` (rows: trained residuals;
    columns: the parameters on [0, 1] over their bounds, as the fit moves them). A value
    ``at_bound`` is held by its bound, not by the targets: it is left out of the covariance
    (the others' widths are those with it fixed there)."""
    n = len(parameters)
    pinned = list(at_bound) or [False] * n
    jac = np.asarray(jacobian, dtype=float).reshape(-1, n)
    widths = [math.nan if pinned[i] else math.inf for i in range(n)]
    if not np.all(np.isfinite(jac)):  # no slope to read: nothing is determined
        return Identification(tuple(widths), ())
    norms = np.linalg.norm(jac, axis=0)
    live = [i for i in range(n) if not pinned[i] and norms[i] > NO_EFFECT]
    trade_offs: list[TradeOff] = []
    if not live:
        return Identification(tuple(widths), ())
    # columns scaled to unit norm, so the ridge is the same small share of every one of them
    scale = norms[live]
    unit = jac[:, live] / scale
    covariance = np.linalg.inv(unit.T @ unit + RIDGE * np.eye(len(live)))
    spread = np.sqrt(np.clip(np.diag(covariance), 0.0, None))
    for k, i in enumerate(live):
        width = float(spread[k] / scale[k])  # in units of the bounds' span
        if width <= UNDETERMINED:
            p = parameters[i]
            widths[i] = width * (p.high - p.low)
    for a in range(len(live)):
        for b in range(a + 1, len(live)):
            r = float(covariance[a, b] / (spread[a] * spread[b]))
            if abs(r) >= TRADE_OFF:
                trade_offs.append(TradeOff(live[a], live[b], max(-1.0, min(1.0, r))))
    return Identification(tuple(widths), tuple(trade_offs))
