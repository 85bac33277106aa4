"""The state of a kernel simulation that decides its future, relative to now: what the
fast-forward's cycle rule compares between layer boundaries.

A deterministic simulation whose state at layer boundary ``m`` equals its state at boundary
``m - k`` (every time measured from the boundary) repeats the ``k`` layers in between for
as long as it runs: the run is then periodic, exactly. Comparing only the boundaries' times
is not enough: a memory stream prefetched ahead of its use can progress a little less every
layer while every boundary, and even every tile, still comes at the same place in the layer,
until the stream's lateness reaches a tile and the period changes (the full-attention
DeepSeek-R1 decode step did this: boundaries equal to 1e-6 while its streams slipped by
~190 kB a layer, then a 0.1% longer period from layer 28). So the state holds:

* every event scheduled in the environment (its time from now), which covers timeouts
  pending in every part (compute ends, port reads, memory latencies and wake-ups, link
  chain completions);
* per memory tier, the bytes each active stream has left (in seconds at the tier's
  effective bandwidth: the quantity the slipping stream showed);
* per stage buffer, its slot and tile counts, waiting producers and consumers, and when its
  write and read ports free up (times past are now: they no longer matter);
* per PCU group, when it frees up; per link direction, when it has finished serialising,
  and the link chains' pending sends;
* per stage, its position in the layer (tiles started past the boundary's layer), the
  layers it has started and finished past it, and the gates and rows others wait on.

Only what a later event can read is state: when a stage started or finished its last layer
is history (nothing reads it), and comparing it only delayed the cut by a mark.

Counts must be equal; times (seconds) must agree within a tolerance the caller gives
(``fast_forward.STATE_RTOL`` of the cycle's span: float rounding, nothing physical).
"""

from __future__ import annotations

from dataclasses import dataclass

from rdu_sim.pickled import Reduced, by_fields


@dataclass(frozen=True)
class KernelState:
    """Counts and times (seconds from the boundary, in a fixed order) of a kernel's state."""

    counts: tuple[int, ...] = ()
    times: tuple[float, ...] = ()

    def __reduce__(self) -> Reduced:
        return by_fields(self)  # (compiled, a frozen dataclass: ``rdu_sim.pickled``)

    def matches(self, other: KernelState, tolerance_s: float) -> bool:
        """Equal counts and every time within ``tolerance_s`` of ``other``'s."""
        if self.counts != other.counts or len(self.times) != len(other.times):
            return False
        return all(abs(a - b) <= tolerance_s for a, b in zip(self.times, other.times, strict=True))


class StateBuilder:
    """Collects a :class:`KernelState` part by part, at one instant ``now``."""

    def __init__(self, now: float) -> None:
        self.now = now
        self._counts: list[int] = []
        self._times: list[float] = []

    def count(self, *values: int) -> None:
        """Counts that must be equal."""
        self._counts.extend(values)

    def ahead(self, *times: float) -> None:
        """Absolute times: how far each lies ahead of now (0 for times past)."""
        now = self.now
        self._times.extend(t - now if t > now else 0.0 for t in times)

    def offsets(self, *times: float) -> None:
        """Absolute times, past or future, as offsets from now."""
        now = self.now
        self._times.extend(t - now for t in times)

    def durations(self, seconds: list[float]) -> None:
        """A list of durations (their number, and each)."""
        self._counts.append(len(seconds))
        self._times.extend(seconds)

    def pending(self, times: list[float]) -> None:
        """A set of pending times (their number, and each ahead of now, in order)."""
        self._counts.append(len(times))
        now = self.now
        self._times.extend(sorted(t - now for t in times))

    def build(self) -> KernelState:
        """The state collected so far."""
        return KernelState(tuple(self._counts), tuple(self._times))
