"""The serving clock: integer picoseconds in an int64, and the bounds that follow from it.

Serving time is integer picoseconds so that ``k`` identical steps advance exactly ``k *
step`` (docs/serving.md). SimPy and the NumPy records hold it in 64 bits, so a run's
simulated time must stay below ``MAX_PS`` = 2^63 - 1 ps, about 9.2e6 s (106.7 days).
What follows:

- arrival times (a trace's ``arrival_s``, drawn Poisson arrivals) are at most
  ``MAX_ARRIVAL_S`` = 2^62 ps (53 days): the first half of the range, leaving the other
  half to serve them. Checked where they are read or drawn, before anything is simulated;
- one step is at most the whole range, and the clock never advances past it: a workload
  whose steps would carry it further (a hardware rate of 1 MB/s, say) stops with
  :class:`SimulatedTimeError`, naming the longest step, instead of wrapping around.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:  # numpy is loaded by the arrivals' cast only: a step runs without it
    import numpy as np
    from numpy.typing import NDArray

PS_PER_S: Final = 10**12
MAX_PS: Final = 2**63 - 1
MAX_SECONDS = MAX_PS / PS_PER_S
MAX_ARRIVAL_S = 2**62 / PS_PER_S


class Clock(Protocol):
    """Where the scheduler and an admission decision read the time: the loop's ``now``
    (integer picoseconds)."""

    @property
    def now(self) -> int:
        """Now, in integer picoseconds."""
        ...


class SimulatedTimeError(Exception):
    """A run whose simulated time would leave the serving clock's range (input, not a bug:
    the hardware is too slow for the workload, or its arrivals too late). `field` names the
    input at fault when the raiser knows it ("" otherwise)."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message, field)  # both in args: SimPy re-raises type(exc)(*args)
        self.field = field

    def __str__(self) -> str:
        return str(self.args[0])


def arrivals_ps(arrival_s: NDArray[np.float64], field: str = "") -> NDArray[np.int64]:
    """Arrival times in picoseconds; SimulatedTimeError (naming `field`) when one is past
    ``MAX_ARRIVAL_S`` or NaN, checked before the int64 cast, which would wrap silently."""
    import numpy as np

    latest = float(np.max(arrival_s, initial=0.0))
    if not latest <= MAX_ARRIVAL_S:
        raise SimulatedTimeError(
            f"an arrival at {latest:.4g} s is beyond {MAX_ARRIVAL_S:.4g} s, the latest the "
            "serving clock (int64 picoseconds) can hold with room left to serve it",
            field,
        )
    return np.rint(arrival_s * PS_PER_S).astype(np.int64)


def to_ps(seconds: float) -> int:
    """Seconds -> integer picoseconds (rounded to nearest)."""
    return round(seconds * PS_PER_S)


def to_s(ps: int) -> float:
    """Integer picoseconds -> seconds."""
    return ps / PS_PER_S


def step_ps(seconds: float, what: str) -> int:
    """A step's duration in picoseconds; SimulatedTimeError when no clock can hold it."""
    if not math.isfinite(seconds) or seconds * PS_PER_S > MAX_PS:
        raise SimulatedTimeError(
            f"{what} takes {seconds:.4g} s, beyond the serving clock's range of "
            f"{MAX_SECONDS:.4g} s (2^63 ps): the hardware's rates are too low for this workload"
        )
    return max(1, to_ps(seconds))


def advance(now: int, delay: int, longest_step_s: Callable[[], float]) -> int:
    """``now + delay``; SimulatedTimeError when it passes the clock's range (naming the
    longest step, asked only then: this runs at every step of a serving run)."""
    if now + delay > MAX_PS:
        raise SimulatedTimeError(
            f"the run's simulated time would pass {MAX_SECONDS:.4g} s (2^63 ps, the serving "
            f"clock's range) at {to_s(now):.4g} s; its longest step takes "
            f"{longest_step_s():.4g} s: the hardware's rates are too low for this workload "
            "(or serve fewer requests)"
        )
    return now + delay
