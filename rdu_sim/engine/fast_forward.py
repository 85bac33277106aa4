"""Time all of a kernel's calls while simulating as few of them as is exact.

* Unlooped calls are separated by a synchronization, so every call starts from an empty
  machine and takes exactly as long as the first: one call is simulated and counted ``calls``
  times (records are repeated on the timeline). This is not an approximation.
* A looped kernel is one pipelined call over ``L`` layers. Nothing in a run depends on how
  many layers follow until its last layers (a stage loads at most one layer ahead), so a run
  of ``n`` layers follows exactly the same trajectory as the full run until about two layers
  before its end, then drains. Once the pipeline is periodic (every layer boundary repeats
  the previous one shifted by a period ``P``), a longer run differs from a shorter one only
  by whole periods inserted before the drain: ``T(L) = T(n) + (L - n) P``, and likewise for
  every other total (bytes, FLOPs, busy time). The engine simulates ``n`` and ``n + 1``
  layers (``n = 5``, then 8, 12, ...) and accepts when the last two layer periods inside the
  shared prefix of the runs and ``T(n + 1) - T(n)`` all agree within ``PERIOD_RTOL`` of the
  period; every total is then extrapolated as ``S(L) = S(n+1) + (L-n-1) (S(n+1) - S(n))``.
  This is exact for a periodic pipeline (the tests compare it with full simulations). When
  probing would cost more than half a full run without finding a period, the ``L`` layers are
  simulated in full. ``fast_forward=False`` always simulates every layer and call (the
  reference).

``events`` counts what was really simulated; records are those of the last probe run, with an
``agcu`` slice marking the fast-forwarded layers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rdu_sim.compiler.program import KernelProgram
from rdu_sim.engine.kernel_run import KernelRun
from rdu_sim.engine.records import Recorder
from rdu_sim.engine.run_stats import RunStats

PERIOD_RTOL = 1e-9
"""Layer periods are identical when they differ by at most this fraction of the period."""

FIRST_PROBE = 5
"""Layers of the first probe (then x1.5: 8, 12, 18, ...). Pipelines with latencies and
collectives typically settle within 3-5 layers; without them at once."""

MIN_PROBED_CALLS = 2 * (2 * FIRST_PROBE + 1)
"""Probing costs 2n + 1 layers: only worth it when that is at most half the layers."""

RunFn = Callable[[int, bool], KernelRun]
"""Simulate ``iterations`` layers, looped or not: ``run(iterations, looped)``."""

BudgetFn = Callable[[int, bool], None]
"""Check a planned run (iterations, looped) against the event budget before it starts."""


@dataclass(frozen=True)
class KernelResult:
    """All calls of one kernel: totals, what was simulated, and its records (local time)."""

    stats: RunStats
    events: int
    simulated_iterations: int
    period_s: float | None
    recorder: Recorder | None


def time_kernel(kernel: KernelProgram, run: RunFn, budget: BudgetFn,
                fast_forward: bool) -> KernelResult:
    """All ``kernel.calls`` calls of ``kernel``, fast-forwarded when exact (module docstring)."""
    calls = kernel.calls
    if calls < 1:
        raise ValueError(f"kernel {kernel.name!r}: calls must be >= 1, got {calls}")
    if not kernel.looped:
        if not fast_forward or calls == 1:
            budget(calls, False)
            r = run(calls, False)
            return KernelResult(r.stats, r.events, calls, None, r.recorder)
        budget(1, False)
        r = run(1, False)
        return KernelResult(r.stats.scaled(calls), r.events, 1, None,
                            _repeat(r.recorder, calls, r.stats.time_s))
    events = simulated = 0
    n = FIRST_PROBE
    while fast_forward and calls >= MIN_PROBED_CALLS and simulated + 2 * n + 1 <= calls // 2:
        budget(n, True)
        short = run(n, True)
        budget(n + 1, True)
        long = run(n + 1, True)
        events += short.events + long.events
        simulated += 2 * n + 1
        period = steady_period(short, long)
        if period is not None:
            delta = long.stats.minus(short.stats)
            stats = long.stats.affine(delta, calls - n - 1)
            rec = long.recorder
            if rec is not None:
                rec.slice(0, "agcu", f"fast-forward {calls - n - 1} layers x {period:.4g} s",
                          long.stats.time_s, stats.time_s)
            return KernelResult(stats, events, simulated, period, rec)
        n = (3 * n + 1) // 2
    budget(calls, True)
    r = run(calls, True)
    return KernelResult(r.stats, events + r.events, simulated + calls, None, r.recorder)


def steady_period(short: KernelRun, long: KernelRun) -> float | None:
    """The layer period if runs of n and n + 1 layers show a periodic pipeline, else None.

    A run of ``m`` layers shares its layer boundaries with every longer run up to that of
    layer ``m - 2`` (its loads for layer ``m`` would start no earlier than its first stage
    enters layer ``m - 1``, which needs layer ``m - 2`` out of the sinks). So the last two
    periods of the shared prefix of the longer run (layers ``n - 3`` and ``n - 2``) and the
    extra layer's cost ``T(n+1) - T(n)`` must agree.
    """
    ends = long.iteration_ends
    n = len(short.iteration_ends)
    if n < 4 or len(ends) != n + 1:
        return None
    added = long.stats.time_s - short.stats.time_s
    periods = (ends[n - 3] - ends[n - 4], ends[n - 2] - ends[n - 3], added)
    tol = PERIOD_RTOL * abs(added)
    if max(periods) - min(periods) <= tol:
        return added
    return None


def _repeat(rec: Recorder | None, times: int, period: float) -> Recorder | None:
    """``times`` copies of a call's records, one after another."""
    if rec is None:
        return None
    out = Recorder()
    for i in range(times):
        rec.extend_into(out, i * period)
    return out
