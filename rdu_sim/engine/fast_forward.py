"""Time all of a kernel's calls while simulating as few of them as is exact.

* Unlooped calls are separated by a synchronization, so every call starts from an empty
  machine and takes exactly as long as the first: one call is simulated and counted ``calls``
  times (records are repeated on the timeline). This is not an approximation.
* A looped kernel is one pipelined call over ``L`` layers. Nothing in a run depends on how
  many layers follow until its last layers (a stage loads at most one layer ahead), so a run
  of ``n`` layers follows exactly the trajectory of the full run until a stage would load
  layer ``n``, which happens once it computes in layer ``n - 1``, after the sinks finished
  layer ``n - 3``: the boundaries of layers ``0 .. n - 3`` are the full run's. Once the
  pipeline is periodic (each layer boundary repeats the previous one shifted by a period
  ``P``, and every total grows by the same amount per layer), a longer run differs from a
  shorter one only by whole periods inserted before the drain: ``T(L) = T(n) + (L - n) P``,
  and likewise for every other total (bytes, FLOPs, busy time). The engine simulates ``n``
  layers (``n = 6``, then 9, 13, ...), samples the totals at each layer boundary, and
  accepts when the last three periods of the shared prefix agree within ``PERIOD_RTOL`` and
  so do the last two per-layer increments of every total; then ``S(L) = S(n) + (L - n) dS``.
  This is exact for a periodic pipeline (the tests compare it with full simulations). When
  probing would cost more than a third of a full run without finding a period, the ``L``
  layers are simulated in full. Pipelines that settle into a multi-layer pattern (e.g. a
  3-layer cycle of which stage runs ahead) are not recognised as periodic and are simulated
  in full: for the usual 32-80 layers, probing for such patterns would cost about as much as
  the full run. ``fast_forward=False`` always simulates every layer and call (the
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

FIRST_PROBE = 6
"""Layers of the first probe run (then x1.5: 9, 13, 19, ...). Three periods are compared
inside the shared prefix (layers 0 .. n - 3), so 6 is the fewest; pipelines with latencies
and collectives typically settle within 2-4 layers, without them at once."""

MIN_PROBED_CALLS = 3 * FIRST_PROBE
"""Probing is only worth it when probes cost at most a third of the layers."""

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
    while fast_forward and calls >= MIN_PROBED_CALLS and simulated + n <= calls // 3:
        budget(n, True)
        probe = run(n, True)
        events += probe.events
        simulated += n
        per_layer = steady_increment(probe)
        if per_layer is not None:
            stats = probe.stats.affine(per_layer, calls - n)
            rec = probe.recorder
            if rec is not None:
                rec.slice(0, "agcu",
                          f"fast-forward {calls - n} layers x {per_layer.time_s:.4g} s",
                          probe.stats.time_s, stats.time_s)
            return KernelResult(stats, events, simulated, per_layer.time_s, rec)
        n = (3 * n + 1) // 2
    budget(calls, True)
    r = run(calls, True)
    return KernelResult(r.stats, events + r.events, simulated + calls, None, r.recorder)


def steady_increment(probe: KernelRun) -> RunStats | None:
    """The per-layer increment of every total if the probe's pipeline is periodic, else None.

    Uses the boundaries of layers ``n - 6 .. n - 3`` (the last ones inside the prefix shared
    with any longer run): three equal periods, and two equal per-layer increments of every
    total.
    """
    ends, snaps = probe.iteration_ends, probe.snapshots
    n = len(ends)
    if n < FIRST_PROBE or len(snaps) != n:
        return None
    periods = [ends[i] - ends[i - 1] for i in (n - 5, n - 4, n - 3)]
    if max(periods) - min(periods) > PERIOD_RTOL * max(periods):
        return None
    last = snaps[n - 3].minus(snaps[n - 4])
    before = snaps[n - 4].minus(snaps[n - 5])
    for name, a in last.as_dict().items():
        b = before.as_dict()[name]
        if abs(a - b) > PERIOD_RTOL * max(abs(a), abs(b)):
            return None
    return last


def _repeat(rec: Recorder | None, times: int, period: float) -> Recorder | None:
    """``times`` copies of a call's records, one after another."""
    if rec is None:
        return None
    out = Recorder()
    for i in range(times):
        rec.extend_into(out, i * period)
    return out
