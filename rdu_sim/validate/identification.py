"""How well the fitted targets determine each fitted value, read from the residuals' Jacobian
at the solution (``rdu-sim calibrate``).

A residual is a target's log-error in units of its tolerance, so the objective grows by one
when one target moves by its whole tolerance. Under the Gauss-Newton approximation the
objective near the solution is ``(u - u*)' J'J (u - u*)``, and ``(J'J)^-1`` is the
parameters' covariance with each target's tolerance read as its standard error: a value's
``plus_minus`` is how far it can move (the others following) before the objective grows by
one, and two values whose correlation is near ±1 trade against each other: the targets fix
a combination of them, not each. A value no trained target moves, or one that could move
further than its bounds' span, is undetermined (inf)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rdu_sim.validate.scope import FitParameter

TRADE_OFF = 0.9
"""|correlation| at or above which two fitted values are reported as trading off."""

RIDGE = 1e-12
"""The ridge added to J'J, relative to its mean diagonal."""

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
    """Each value's half-width in its internal unit (inf: undetermined within its bounds) and
    the pairs that trade off."""

    plus_minus: tuple[float, ...]
    trade_offs: tuple[TradeOff, ...]


def identify(jacobian: np.ndarray, parameters: Sequence[FitParameter]) -> Identification:
    """The identification of ``parameters`` from ``jacobian`` (rows: trained residuals;
    columns: the parameters on [0, 1] over their bounds, as the fit moves them)."""
    jac = np.asarray(jacobian, dtype=float).reshape(-1, len(parameters))
    moved = [bool(np.linalg.norm(jac[:, i]) > NO_EFFECT) for i in range(len(parameters))]
    live = [i for i, m in enumerate(moved) if m]
    widths = [math.inf] * len(parameters)
    trade_offs: list[TradeOff] = []
    if live:
        sub = jac[:, live]
        normal = sub.T @ sub
        # a ridge far below any determined direction: an exactly degenerate pair keeps its
        # direction (the two trading off) instead of vanishing as a pseudo-inverse would
        ridge = RIDGE * float(np.trace(normal)) / len(live)
        covariance = np.linalg.inv(normal + ridge * np.eye(len(live)))
        spread = np.sqrt(np.clip(np.diag(covariance), 0.0, None))
        for k, i in enumerate(live):
            width = float(spread[k])  # in units of the bounds' span
            if width <= 1.0:  # wider than its bounds: not determined inside them
                p = parameters[i]
                widths[i] = width * (p.high - p.low)
        for a in range(len(live)):
            for b in range(a + 1, len(live)):
                scale = spread[a] * spread[b]
                if scale > 0:
                    r = float(covariance[a, b] / scale)
                    if abs(r) >= TRADE_OFF:
                        trade_offs.append(TradeOff(live[a], live[b], max(-1.0, min(1.0, r))))
    return Identification(tuple(widths), tuple(trade_offs))
