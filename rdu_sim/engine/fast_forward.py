"""Time all of a kernel's calls while simulating as few of them as is exact.

* Unlooped calls are separated by a synchronization, so every call starts from an empty
  machine and takes exactly as long as the first: one call is simulated and counted ``calls``
  times (records are repeated on the timeline). This is not an approximation.
* A looped kernel is one pipelined call over ``L`` layers, simulated once (``KernelSim``) and
  cut short once it is periodic, by a plain loop over its layer boundaries: at each boundary
  ``m`` of socket 0, ``find_cycle`` (pure) looks at the boundary log for a cycle; on a cycle
  of ``k`` layers the run is cut to the fewest layers ``n >= safe`` with ``L - n`` a multiple
  of ``k`` and finished, and ``extrapolate`` (pure) adds the skipped ``(L - n) / k`` cycles.

  The cut is exact: the stages read the number of layers they run from one shared, mutable
  ``LayerCount`` (``stage_runner``) exactly where it matters (whether to go on to the next
  tile, whether to issue the load of the tile ``prefetch`` tiles ahead (at most one layer
  ahead), whether a layer's output also feeds the next layer, and in the launcher body which
  event a layer waits for), and ``LayerCount`` records the highest layer any stage (on any
  simulated socket) has started a tile of (``started``) and issued a load for (``loaded``);
  lowering the count to ``n >= safe = max(loaded + 1, started + 2)`` changes no decision
  already taken, so from then on the run is exactly a run of ``n`` layers from the start
  (same boundaries, totals and events, bit for bit; the tests check it). At a layer boundary
  ``m`` the stages have started layer ``m + 1``: ``safe`` is ``m + 3`` in practice.

  The cycle rule (``find_cycle``), from boundary ``first_boundary(L) = ceil(max(SETTLE_LAYERS,
  L / 4)) - 3`` on (pipelines with latencies and collectives take 5-15 layers to settle): the
  shortest ``k`` of ``CYCLE_LENGTHS`` (1, 2, 3, 5, 6, 10 layers: stages that take turns
  running ahead make 2 or 3; collectives on a ring over two nodes, whose slower inter-node
  hop the chunks of successive collectives share, can settle into 5 or 10) for which the
  spans ``c[j] - c[j - k]`` of the last ``k + 2`` boundaries agree within ``PERIOD_RTOL``, and
  so do the increments of every total (bytes, FLOPs, busy time) over them; a drifting span
  is accepted only if its trend, continued over the skipped cycles, moves the kernel's time
  by less than ``DRIFT_RTOL``. The time-like totals (time, busy times) extrapolate as
  ``S(L) = S(n) + (L - n) / k * dS``; the work totals (``WORK_TOTALS``: bytes per tier,
  FLOPs) are exact instead: every layer of a looped kernel does the same work, so ``W(L) =
  W(n) * L / n``. (Work is counted when it is issued, so how much of the next layer's
  prefetch lands before a boundary varies a little between layers; multiplying such a
  boundary increment by the skipped cycles would miss bytes by up to ~1e-4.)
  A periodic pipeline differs between ``n`` and ``L`` layers only by whole cycles inserted
  before the drain, so this is exact for it; a settling one (a damped oscillation of the
  period) is accepted once its swings are below ``PERIOD_RTOL``, which moves the step time
  by far less (its remaining swings alternate in sign and shrink). The tests compare with
  full simulations within 0.5%; on compiled DeepSeek-R1 and Llama programs the step times
  agree within 5e-4 (typically 1e-5) and the work totals to rounding. A run that finds no
  cycle simulates all ``L`` layers once: it *is* the full run. Kernels of fewer than
  ``MIN_FAST_FORWARD_LAYERS`` layers are simulated in full.
* ``fast_forward=False`` always simulates every layer and call (the reference).

``events`` counts what was really simulated; records are those of the run, with an ``agcu``
slice marking the fast-forwarded layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from rdu_sim.compiler.program import KernelProgram
from rdu_sim.engine.kernel_sim import Boundary, KernelRun
from rdu_sim.engine.records import Recorder
from rdu_sim.engine.run_stats import RunStats

PERIOD_RTOL = 1e-3
"""Spans of a cycle (and the totals' increments over them) agree within this fraction."""

DRIFT_RTOL = 1e-3
"""A linear drift of the cycle span, continued over the fast-forwarded cycles, may move the
kernel's time by at most this fraction (else the cycle is not accepted)."""

CYCLE_LENGTHS = (1, 2, 3, 5, 6, 10)
"""Cycle lengths (layers) ``find_cycle`` looks for, shortest first."""

WORK_TOTALS = ("hbm_bytes", "ddr_bytes", "sram_bytes", "p2p_bytes", "flops", "vector_flops")
"""``RunStats`` fields that are work (the same in every layer of a looped kernel): scaled by
layers when fast-forwarding, not extrapolated from boundary increments."""

SETTLE_LAYERS = 10
"""No cycle is accepted before the boundary ``n - 3`` of a run of this many layers (nor of
``L / 4``): pipelines with latencies and collectives take 5-15 layers to settle."""

MIN_FAST_FORWARD_LAYERS = 2 * SETTLE_LAYERS
"""Looped kernels of fewer layers are simulated in full (too little to skip)."""


def first_boundary(calls: int) -> int:
    """The first layer boundary (0-based) at which a cycle may be accepted: boundary
    ``n - 3`` of a run of ``max(SETTLE_LAYERS, calls / 4)`` layers."""
    return math.ceil(max(SETTLE_LAYERS, calls / 4)) - 3


class Simulation(Protocol):
    """A kernel simulation ``time_kernel`` drives (``KernelSim``): run to the next layer
    boundary, cut to fewer layers, finish."""

    @property
    def boundaries(self) -> Sequence[Boundary]:
        """The layer boundaries so far (looped calls)."""

    @property
    def safe(self) -> int:
        """The fewest layers the run may be cut to now."""

    def run_to_boundary(self) -> Boundary | None:
        """Simulate to the next layer boundary; None when the run has ended."""

    def cut(self, layers: int) -> None:
        """Run ``layers`` layers instead."""

    def finish(self) -> KernelRun:
        """Simulate to the end."""


StartFn = Callable[[int, bool], Simulation]
"""A new simulation of ``layers`` layers of the kernel, looped or as separate calls."""


@dataclass(frozen=True)
class Cycle:
    """A cycle of ``length`` layers, every total's ``increment`` over one cycle, and the
    ``layers`` the run is cut to (``calls - layers`` a multiple of ``length``)."""

    length: int
    increment: RunStats
    layers: int


@dataclass(frozen=True)
class KernelResult:
    """All calls of one kernel: totals, what was simulated, and its records (local time)."""

    stats: RunStats
    events: int
    simulated_iterations: int
    period_s: float | None
    recorder: Recorder | None


def fewest_layers(kernel: KernelProgram, fast_forward: bool) -> int:
    """The fewest layers (or calls) ``time_kernel`` simulates of ``kernel``: a cut comes at
    a boundary ``m >= first_boundary`` and keeps at least ``m + 2`` layers."""
    calls = kernel.calls
    if not fast_forward:
        return calls
    if not kernel.looped:
        return 1
    if calls < MIN_FAST_FORWARD_LAYERS:
        return calls
    return min(calls, first_boundary(calls) + 2)


def time_kernel(kernel: KernelProgram, start: StartFn, fast_forward: bool) -> KernelResult:
    """All ``kernel.calls`` calls of ``kernel``, fast-forwarded when exact (module docstring)."""
    calls = kernel.calls
    if not kernel.looped and fast_forward and calls > 1:
        r = start(1, False).finish()
        stats = r.stats.scaled(calls)
        return KernelResult(stats, r.events, 1, None, _repeat(r.recorder, calls, r.stats.time_s))
    if not kernel.looped or not fast_forward or calls < MIN_FAST_FORWARD_LAYERS:
        r = start(calls, kernel.looped).finish()
        return KernelResult(r.stats, r.events, calls, None, r.recorder)
    sim = start(calls, True)
    cycle = None
    while cycle is None and sim.run_to_boundary() is not None:
        cycle = find_cycle(sim.boundaries, calls, sim.safe)
    if cycle is None:  # no cycle: this was the full run
        r = sim.finish()
        return KernelResult(r.stats, r.events, calls, None, r.recorder)
    sim.cut(cycle.layers)
    r = sim.finish()
    n, k = cycle.layers, cycle.length
    if len(r.boundaries) != n:
        raise RuntimeError(f"kernel {kernel.name!r}: cut to {n} layers, ran {len(r.boundaries)}")
    stats = extrapolate(r.stats, cycle, calls)
    if r.recorder is not None:
        r.recorder.slice(
            0,
            "agcu",
            f"fast-forward {calls - n} layers ({(calls - n) // k} cycles of {k} x "
            f"{cycle.increment.time_s:.4g} s)",
            r.stats.time_s,
            stats.time_s,
        )
    return KernelResult(stats, r.events, n, cycle.increment.time_s / k, r.recorder)


def find_cycle(
    boundaries: Sequence[Boundary],
    calls: int,
    safe: int,
    lengths: tuple[int, ...] = CYCLE_LENGTHS,
) -> Cycle | None:
    """The shortest cycle of ``lengths`` the boundaries ``0 .. m`` of a looped run of
    ``calls`` layers end in (all on the full run's trajectory), or None; never before
    ``first_boundary(calls)``. The run is to be cut to ``n = safe + (calls - safe) % k``
    layers (skipping ``(calls - n) / k`` cycles).

    The spans ``c[j] - c[j - k]`` for the last ``k + 2`` boundaries ``j`` must agree within
    ``PERIOD_RTOL``, their linear trend continued over the skipped cycles must move the
    kernel's time (estimated from boundary ``m``) by less than ``DRIFT_RTOL``, and the
    totals' increments over the spans must agree too.
    """
    m = len(boundaries) - 1
    if m < first_boundary(calls):
        return None
    ends = [b.end_s for b in boundaries]
    for k in lengths:
        window = range(m - k - 1, m + 1)
        if window.start - k < 0:
            break
        n = safe + (calls - safe) % k
        if n >= calls:
            continue
        spans = [ends[j] - ends[j - k] for j in window]
        if max(spans) - min(spans) > PERIOD_RTOL * max(spans):
            continue
        cycles = (calls - n) // k
        # the span grows by `drift` per boundary, so by k * drift per skipped cycle
        drift = (spans[-1] - spans[0]) / (len(spans) - 1)
        total = ends[m] + (n - m) / k * spans[-1] + cycles * spans[-1]
        if abs(drift) * k * cycles * (cycles + 1) / 2 > DRIFT_RTOL * total:
            continue
        last = boundaries[m].totals.minus(boundaries[m - k].totals)
        if all(_close(last, boundaries[j].totals.minus(boundaries[j - k].totals)) for j in window):
            return Cycle(k, last, n)
    return None


def extrapolate(run: RunStats, cycle: Cycle, calls: int) -> RunStats:
    """The totals of all ``calls`` layers from a run cut to ``cycle.layers``: the time-like
    totals grow by the cycle's increment per skipped cycle, the work totals by layers."""
    n = cycle.layers
    exact = {name: getattr(run, name) * cycle.length / n for name in WORK_TOTALS}
    return run.affine(replace(cycle.increment, **exact), (calls - n) // cycle.length)


def _close(a: RunStats, b: RunStats) -> bool:
    """Every total of ``a`` within ``PERIOD_RTOL`` of ``b``'s."""
    other = b.as_dict()
    return all(
        abs(x - other[name]) <= PERIOD_RTOL * max(abs(x), abs(other[name]))
        for name, x in a.as_dict().items()
    )


def _repeat(rec: Recorder | None, times: int, period: float) -> Recorder | None:
    """``times`` copies of a call's records, one after another."""
    if rec is None:
        return None
    out = Recorder()
    for i in range(times):
        rec.extend_into(out, i * period)
    return out
