"""Step times memoized by static shape: each shape is simulated once per workload.

Static graphs make this exact, not an approximation: a step's time depends only on the
shape it was compiled for (phase, batch slots, new tokens, cache bucket), never on which
requests fill the slots. The serving level therefore asks the engine once per shape and
counts every step it runs per shape, from which the report derives utilization.

Two owners, one job each:

- :class:`StepTimes`: what a shape costs (the engine's ``StepCost``) and its time in integer
  picoseconds, simulated on first use; shared by every server of one workload (a cluster
  pool's replicas, the pools of equal workloads);
- :class:`StepCache`: one server's steps, a typed :class:`StepEntry` per shape it met (its
  shape, its time, the steps of it run), in the order it met them.

Time inside the serving simulation is integer picoseconds (``PS_PER_S``, ``serving.clock``),
so advancing ``k`` identical steps in one go (``k * step_ps``) is exactly the same as ``k``
single steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rdu_sim.engine.timing import StepTiming, device_time
from rdu_sim.pickled import Reduced, by_fields
from rdu_sim.serving.clock import PS_PER_S, step_ps, to_s
from rdu_sim.shapes import StepShape

__all__ = [
    "PS_PER_S",
    "StepCache",
    "StepCost",
    "StepCounts",
    "StepEntry",
    "StepFn",
    "StepTimes",
    "TimedCost",
]


@dataclass(frozen=True)
class StepCost:
    """What the serving level needs from one simulated step of one shape."""

    step_s: float  # wall time of the step
    hbm_util: float = 0.0  # HBM bytes moved / (step time x peak HBM bandwidth) (0..1)
    pcu_util: float = 0.0  # fraction of PCU-time busy during the step (0..1)
    flops: float = 0.0  # matrix FLOPs of the step over all its sockets (0: not known)
    detail: StepTiming | None = None  # the engine's full timing (for `step` and reports)
    flops_util: float = 0.0  # matrix FLOPs / (step time x the socket's peak FLOP/s) (0..1)
    runtime_s: float = 0.0  # of step_s, what the serving stack's host added to the device's

    def __reduce__(self) -> Reduced:
        return by_fields(self)  # (compiled, a frozen dataclass: ``rdu_sim.pickled``)


StepFn = Callable[[StepShape], StepCost]


class StepCounts:
    """The steps a server ran: prefill steps (the mixed ones among them: they decoded too),
    decode steps, batched decode advances (one simulation event each) and the output tokens
    they produced (first tokens included)."""

    def __init__(self) -> None:
        self.prefill_steps = 0
        self.mixed_steps = 0
        self.decode_steps = 0
        self.decode_runs = 0
        self.tokens_generated = 0
        # a paged KV pool's (``serving.kv_pool``): the most pages in use at once (requests'
        # own and cached blocks'), the most its prefix cache's blocks took, and the pages in
        # use x picoseconds summed over the run (0, 0 and 0 for static slots)
        self.kv_pages_peak = 0
        self.kv_cached_pages_peak = 0
        self.kv_page_ps = 0
        # requests preempted for a decode step's pages (a pool giving pages on demand)
        self.preemptions = 0


@dataclass(frozen=True)
class TimedCost:
    """A shape's cost and its time in integer picoseconds (what :class:`StepTimes` keeps):
    the whole step's, and the device's alone (without what the stack's host added)."""

    cost: StepCost
    step_ps: int
    device_ps: int

    def __reduce__(self) -> Reduced:
        return by_fields(self)  # (compiled, a frozen dataclass: ``rdu_sim.pickled``)


class StepTimes:
    """Each shape's cost and its time in picoseconds, simulated on first use by
    ``step_fn`` (the engine through the API, a formula in tests); one for every server of a
    workload."""

    def __init__(self, step_fn: StepFn) -> None:
        self._step_fn = step_fn
        self._known: dict[StepShape, TimedCost] = {}

    def __reduce__(
        self,
    ) -> tuple[type[StepTimes], tuple[StepFn], dict[StepShape, TimedCost]]:
        """Pickled as its constructor's call and what it knows (``__setstate__``): compiled
        (mypyc), a class is rebuilt through its ``__init__``, not field by field."""
        return (StepTimes, (self._step_fn,), self._known)

    def __setstate__(self, known: dict[StepShape, TimedCost]) -> None:
        self._known = known

    def __len__(self) -> int:
        """Shapes simulated so far."""
        return len(self._known)

    def costs(self) -> list[StepCost]:
        """Every cost simulated so far, in the order first asked."""
        return [known.cost for known in self._known.values()]

    def cost(self, shape: StepShape) -> StepCost:
        """The cost of ``shape`` (simulated if new)."""
        return self.timed(shape).cost

    def timed(self, shape: StepShape) -> TimedCost:
        """The cost of ``shape`` and its time (ps), simulated if new; ValueError for a step
        of no time, SimulatedTimeError for one no clock can hold."""
        known = self._known.get(shape)
        if known is None:
            cost = self._step_fn(shape)
            if not cost.step_s > 0:
                raise ValueError(f"step time of {shape} must be > 0 s, got {cost.step_s}")
            what = f"a {shape.phase} step (batch {shape.batch}, cache {shape.cache_len})"
            whole = step_ps(cost.step_s, what)
            device_s = device_time(cost.step_s, cost.runtime_s)
            device = step_ps(device_s, what) if cost.runtime_s else whole
            known = self._known[shape] = TimedCost(cost, whole, device)
        return known


class StepEntry:
    """One shape in a server's cache: the shape, its time (ps) and the steps of it run.
    A caller that runs the shape again keeps its entry (:meth:`run`: no lookup of the
    shape, whose hash is a Python call)."""

    def __init__(self, cache: StepCache, shape: StepShape, timed: TimedCost) -> None:
        self.cache = cache
        self.shape = shape
        self.cost = timed.cost
        self.step_ps = timed.step_ps
        self.device_ps = timed.device_ps  # the step without the stack's host time
        self.runs = 0
        self._listed = False  # in the cache's ``ran`` (run at least once)

    def __reduce__(
        self,
    ) -> tuple[type[StepEntry], tuple[StepCache, StepShape, TimedCost], tuple[int, bool]]:
        """Pickled as its constructor's call and its counts (as :meth:`StepTimes.__reduce__`);
        its cache is made before it (``StepCache.__reduce__``), so the cycle closes."""
        return (
            StepEntry,
            (self.cache, self.shape, TimedCost(self.cost, self.step_ps, self.device_ps)),
            (
                self.runs,
                self._listed,
            ),
        )

    def __setstate__(self, state: tuple[int, bool]) -> None:
        self.runs, self._listed = state

    def run(self, count: int = 1) -> int:
        """Account ``count`` steps of the shape; the time of one (ps)."""
        if not self._listed:
            self._listed = True
            self.cache.ran.append(self)
        self.runs += count
        return self.step_ps


class StepCache:
    """One server's steps by shape (:class:`StepEntry`), their times from ``times`` (shared
    by the servers of a workload; a step function: this server's own).

    ``hits`` and ``misses`` count steps (a miss is the first step of a shape run here), so
    they do not depend on how many identical steps the scheduler advances at once.
    """

    def __init__(self, times: StepTimes | StepFn) -> None:
        self.times = times if isinstance(times, StepTimes) else StepTimes(times)
        self._entries: dict[StepShape, StepEntry] = {}  # in the order first met
        self.ran: list[StepEntry] = []  # the entries run, in the order first run
        self._longest_ps = 0  # the longest step met here (for the clock's range error)

    def __reduce__(
        self,
    ) -> tuple[
        type[StepCache],
        tuple[StepTimes],
        tuple[dict[StepShape, StepEntry], list[StepEntry], int],
    ]:
        """Pickled as its constructor's call, then its entries (``__setstate__``: they point
        back at it, so it must exist first); as :meth:`StepTimes.__reduce__`."""
        return (StepCache, (self.times,), (self._entries, self.ran, self._longest_ps))

    def __setstate__(self, state: tuple[dict[StepShape, StepEntry], list[StepEntry], int]) -> None:
        self._entries, self.ran, self._longest_ps = state

    def entry(self, shape: StepShape) -> StepEntry:
        """``shape``'s entry here, simulating the shape if no server of the workload has."""
        entry = self._entries.get(shape)
        if entry is None:
            timed = self.times.timed(shape)
            entry = self._entries[shape] = StepEntry(self, shape, timed)
            if timed.step_ps > self._longest_ps:
                self._longest_ps = timed.step_ps
        return entry

    def cost(self, shape: StepShape) -> StepCost:
        """The step cost of a shape (simulated on first use; not counted as a step)."""
        return self.entry(shape).cost

    def step_ps(self, shape: StepShape) -> int:
        """The step time of a shape in integer picoseconds (what the scheduler advances)."""
        return self.entry(shape).step_ps

    def device_ps(self, shape: StepShape) -> int:
        """The device's time of a shape's step in integer picoseconds: the step without what
        the serving stack's host added to it (a step launched within a program that the host
        launched once: ``StackConfig.speculative_rounds``)."""
        return self.entry(shape).device_ps

    def step_s(self, shape: StepShape) -> float:
        """The step time the scheduler uses, in seconds (``step_ps / 1e12``)."""
        return to_s(self.step_ps(shape))

    def run(self, shape: StepShape, count: int = 1) -> int:
        """Account ``count`` steps of ``shape``; return the time of one step (ps)."""
        return self.entry(shape).run(count)

    @property
    def steps(self) -> dict[StepShape, int]:
        """Steps run per shape, in first-run order (a new dict)."""
        return {entry.shape: entry.runs for entry in self.ran}

    @property
    def misses(self) -> int:
        """Steps that simulated their shape: the first of each shape run."""
        return len(self.ran)

    @property
    def hits(self) -> int:
        """Steps that found their shape already simulated: every other step run."""
        return sum(entry.runs for entry in self.ran) - len(self.ran)

    @property
    def longest_step_s(self) -> float:
        """The longest step met so far, in seconds (0 before any)."""
        return to_s(self._longest_ps)

    @property
    def shapes(self) -> list[StepShape]:
        """Shapes met so far (in first-use order)."""
        return list(self._entries)

    @property
    def hit_rate(self) -> float:
        """Hits / (hits + misses), 0 before any step."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
