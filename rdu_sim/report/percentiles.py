"""The rounding and percentiles every summary reports with (a run's, a cluster's, the
speculation section's): 12 significant digits, non-finite as None; p50, p90, p99 and mean."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

PERCENTILES = (50, 90, 99)
SIGNIFICANT_DIGITS = 12


def rounded(value: Any) -> Any:
    """Round every float in a JSON-like structure to 12 significant digits (non-finite:
    None)."""
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}") if np.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def rounded_float(value: float | None) -> float | None:
    """``value`` rounded as the JSON is (:func:`rounded`)."""
    result: float | None = rounded(value)
    return result


def stats(values: NDArray[np.float64]) -> dict[str, float | None]:
    """``{p50, p90, p99, mean}`` of the values (all None when there are none)."""
    if values.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    out: dict[str, float | None] = {f"p{p}": float(np.percentile(values, p)) for p in PERCENTILES}
    out["mean"] = float(values.mean())
    return out


@dataclass(frozen=True)
class Percentiles:
    """p50, p90, p99 and mean of a per-request quantity (all None when no request has it)."""

    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None

    @classmethod
    def of(cls, values: NDArray[np.float64]) -> Percentiles:
        """The percentiles of ``values`` (:func:`stats`), rounded as the JSON is."""
        return cls(**{key: rounded_float(value) for key, value in stats(values).items()})
