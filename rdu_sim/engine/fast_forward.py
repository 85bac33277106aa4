"""Time all of a kernel's calls while simulating as few of them as is exact.

* Unlooped calls are separated by a synchronization, so every call starts from an empty
  machine and takes exactly as long as the first: one call is simulated and counted ``calls``
  times (records are repeated on the timeline). This is not an approximation.
* A looped kernel is one pipelined call over ``L`` layers, simulated in one *live* run that
  is cut short once it is periodic. The stages read the number of layers they run from one
  shared, mutable ``LayerCount`` (``stage_runner``) exactly where it matters: whether to go
  on to the next tile, whether to issue the load of the tile ``prefetch`` tiles ahead (at
  most one layer ahead), whether a layer's output also feeds the next layer, and in the
  launcher body which event a layer waits for. ``LayerCount`` records the highest layer any
  stage (on any simulated socket) has started a tile of (``started``) and issued a load for
  (``loaded``); lowering the count to ``n >= safe() = max(loaded + 1, started + 2)`` changes
  no decision already taken, so from then on the run is exactly a run of ``n`` layers from
  the start (same boundaries, totals and events, bit for bit; the tests check it). At a
  layer boundary ``m`` the stages have started layer ``m + 1``: ``safe()`` is ``m + 3``
  (the boundaries ``0 .. n - 3`` a run of ``n`` layers shares with every longer one).
* At each layer boundary ``m`` of socket 0 (every boundary so far is the full run's), from
  ``first_boundary(L) = ceil(max(MIN_PROBE, L / 4)) - 3`` on (pipelines with latencies and
  collectives take 5-15 layers to settle), ``LiveCycle`` looks for the shortest cycle ``k``
  of ``LONG_CYCLES`` (1, 2, 3, 5, 6, 10 layers: stages that take turns running ahead make
  2 or 3; collectives on a ring over two nodes, whose slower inter-node hop the chunks of
  successive collectives share, can settle into 5 or 10) by the rule of ``_cycle``: the
  spans ``c[j] - c[j - k]`` of the last ``k + 2`` boundaries agree within ``PERIOD_RTOL``,
  and so do the increments of every total (bytes, FLOPs, busy time) over them; a drifting
  span is accepted only if its trend, continued over the skipped cycles, moves the kernel's
  time by less than ``DRIFT_RTOL``. On a cycle ``k`` with increments ``dS`` it cuts the run
  to the fewest layers ``n >= safe()`` with ``L - n`` a multiple of ``k``; the run drains
  and ``S(L) = S(n) + (L - n) / k * dS`` for the time-like totals (time, busy times). The
  work totals (``WORK_TOTALS``: bytes per tier, FLOPs) are exact instead: every layer of a
  looped kernel does the same work, so ``W(L) = W(n) * L / n``. (Work is counted when it is
  issued, so how much of the next layer's prefetch lands before a boundary varies a little
  between layers; multiplying such a boundary increment by the skipped cycles would miss
  bytes by up to ~1e-4.)
  A periodic pipeline differs between ``n`` and ``L`` layers only by whole cycles inserted
  before the drain, so this is exact for it; a settling one (a damped oscillation of the
  period) is accepted once its swings are below ``PERIOD_RTOL``, which moves the step time
  by far less (its remaining swings alternate in sign and shrink). The tests compare with
  full simulations within 0.5%; on compiled DeepSeek-R1 and Llama programs the step times
  agree within 5e-4 (typically 1e-5) and the work totals to rounding. A run that finds no
  cycle simulates all ``L`` layers once: it *is* the full run. Kernels of fewer than
  ``MIN_PROBED_CALLS`` layers are simulated in full.
  ``fast_forward=False`` always simulates every layer and call (the reference); its runs
  never lower their ``LayerCount``.

The event budget is charged as the live run goes: ``first_boundary(L) + 3`` layers before
it starts, then ``ALIGN`` layers more whenever the run reaches the layers charged, and at a
cut whatever the cut run goes beyond the layers charged (an ``EventBudgetError`` can then
stop it mid-run). ``steady_cycle`` applies the same rule to a
finished run of ``n`` layers (at boundary ``n - 3``). (The former scheme ran a short probe,
then a long probe, then the full run, restarting each time; the live run replaced it.)

``events`` counts what was really simulated; records are those of the live run, with an
``agcu`` slice marking the fast-forwarded layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from rdu_sim.compiler.program import KernelProgram
from rdu_sim.engine.kernel_run import KernelRun, Watch
from rdu_sim.engine.records import Recorder
from rdu_sim.engine.run_stats import RunStats

PERIOD_RTOL = 1e-3
"""Spans of a cycle (and the totals' increments over them) agree within this fraction."""

DRIFT_RTOL = 1e-3
"""A linear drift of the cycle span, continued over the fast-forwarded cycles, may move the
kernel's time by at most this fraction (else the cycle is not accepted)."""

CYCLES = (1, 2, 3, 6)
"""Cycle lengths (layers) ``steady_cycle`` looks for by default."""

WORK_TOTALS = ("hbm_bytes", "ddr_bytes", "sram_bytes", "p2p_bytes", "flops", "vector_flops")
"""``RunStats`` fields that are work (the same in every layer of a looped kernel): scaled by
layers when fast-forwarding, not extrapolated from boundary increments."""

ALIGN = 6
"""Least common multiple of ``CYCLES``; a live run charges the event budget by this many
layers at a time."""

LONG_CYCLES = (1, 2, 3, 5, 6, 10)
"""Cycle lengths a live run looks for."""


MIN_PROBE = 10
"""A live run accepts no cycle before the boundary ``n - 3`` of a run of this many layers (nor
of ``L / 4``): pipelines with latencies and collectives take 5-15 layers to settle."""

MIN_PROBED_CALLS = 2 * MIN_PROBE
"""Looped kernels of fewer layers are simulated in full (too little to skip)."""


def first_boundary(calls: int) -> int:
    """The first layer boundary (0-based) at which a live run may accept a cycle: that of
    boundary ``n - 3`` of a run of ``max(MIN_PROBE, calls / 4)`` layers (pipelines with
    latencies and collectives take 5-15 layers to settle)."""
    return math.ceil(max(MIN_PROBE, calls / 4)) - 3


RunFn = Callable[[int, bool, Watch | None], KernelRun]
"""Simulate ``iterations`` layers, looped or not, cut short where the watch says (looped):
``run(iterations, looped, watch)``."""

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


def time_kernel(
    kernel: KernelProgram, run: RunFn, budget: BudgetFn, fast_forward: bool
) -> KernelResult:
    """All ``kernel.calls`` calls of ``kernel``, fast-forwarded when exact (module docstring)."""
    calls = kernel.calls
    if calls < 1:
        raise ValueError(f"kernel {kernel.name!r}: calls must be >= 1, got {calls}")
    if not kernel.looped:
        if not fast_forward or calls == 1:
            budget(calls, False)
            r = run(calls, False, None)
            return KernelResult(r.stats, r.events, calls, None, r.recorder)
        budget(1, False)
        r = run(1, False, None)
        return KernelResult(
            r.stats.scaled(calls), r.events, 1, None, _repeat(r.recorder, calls, r.stats.time_s)
        )
    if not fast_forward or calls < MIN_PROBED_CALLS:
        budget(calls, True)
        r = run(calls, True, None)
        return KernelResult(r.stats, r.events, calls, None, r.recorder)
    watch = LiveCycle(calls, budget)
    r = run(calls, True, watch)
    if watch.found is None:  # no cycle: this was the full run
        return KernelResult(r.stats, r.events, calls, None, r.recorder)
    k, per_cycle, n = watch.found
    if len(r.iteration_ends) != n:
        raise RuntimeError(
            f"kernel {kernel.name!r}: cut to {n} layers, ran {len(r.iteration_ends)}"
        )
    cycles = (calls - n) // k
    exact = {name: getattr(r.stats, name) * k / n for name in WORK_TOTALS}
    per_cycle = replace(per_cycle, **exact)
    stats = r.stats.affine(per_cycle, cycles)
    rec = r.recorder
    if rec is not None:
        rec.slice(
            0,
            "agcu",
            f"fast-forward {calls - n} layers ({cycles} cycles of {k} x {per_cycle.time_s:.4g} s)",
            r.stats.time_s,
            stats.time_s,
        )
    return KernelResult(stats, r.events, n, per_cycle.time_s / k, rec)


class LiveCycle:
    """The ``Watch`` of a live run of ``calls`` layers: at each layer boundary ``m`` from
    ``first_boundary(calls)`` on, looks for the shortest cycle of ``LONG_CYCLES`` in the
    boundaries so far (``_cycle``); once one is found, cuts the run to the fewest layers it
    may be cut to with ``calls - n`` a multiple of the cycle and records ``found = (k,
    increment per cycle, n)``. Charges the event budget for the layers the run may reach,
    ``ALIGN`` layers at a time."""

    def __init__(self, calls: int, budget: BudgetFn) -> None:
        self.calls = calls
        self.first = first_boundary(calls)
        self.budget = budget
        self.found: tuple[int, RunStats, int] | None = None
        self.charged = min(calls, self.first + 3)
        budget(self.charged, True)

    def __call__(self, ends: Sequence[float], snaps: Sequence[RunStats], safe: int) -> int | None:
        m = len(ends) - 1
        if self.found is None and m >= self.first:
            self.found = _cycle(
                ends, snaps, m, self.calls, LONG_CYCLES, lambda k: safe + (self.calls - safe) % k
            )
            if self.found is not None:
                n = self.found[2]
                if n > self.charged:  # the cut may end up to k - 1 layers past the charge
                    self.budget(n - self.charged, True)
                    self.charged = n
                return n
        if self.found is None and self.charged < self.calls and m + 4 > self.charged:
            more = min(ALIGN, self.calls - self.charged)
            self.budget(more, True)
            self.charged += more
        return None


def steady_cycle(
    probe: KernelRun, calls: int, lengths: tuple[int, ...] = CYCLES
) -> tuple[int, RunStats] | None:
    """The shortest cycle ``k`` (layers) of a periodic probe of ``n`` layers and every total's
    increment over one cycle, or None: the criterion of ``_cycle`` at boundary ``n - 3`` (the
    last one a probe shares with every longer run), for cycles with ``calls - n`` a
    multiple of ``k``."""
    ends, snaps = probe.iteration_ends, probe.snapshots
    n = len(ends)
    if len(snaps) != n or n < 3:
        return None
    found = _cycle(
        ends,
        snaps,
        n - 3,
        calls,
        lengths,
        lambda k: n if (calls - n) % k == 0 else calls,
        probe.stats.time_s,
    )
    return None if found is None else found[:2]


def _cycle(
    ends: Sequence[float],
    snaps: Sequence[RunStats],
    m: int,
    calls: int,
    lengths: tuple[int, ...],
    layers: Callable[[int], int],
    run_time: float | None = None,
) -> tuple[int, RunStats, int] | None:
    """The shortest cycle ``k`` of ``lengths`` the boundaries ``0 .. m`` (all on the full
    trajectory) end in, its totals' increment and the layers ``n = layers(k)`` the run
    stops at (skipping ``(calls - n) / k`` cycles), or None.

    The spans ``c[j] - c[j - k]`` for the last ``k + 2`` boundaries ``j`` must agree within
    ``PERIOD_RTOL``, their linear trend continued over the skipped cycles must move the
    kernel's time (the run's ``run_time``, by default estimated from boundary ``m``) by less
    than ``DRIFT_RTOL``, and the totals' increments over the spans must agree too.
    """
    for k in lengths:
        window = range(m - k - 1, m + 1)
        if window.start - k < 0:
            break
        n = layers(k)
        if n >= calls:
            continue
        spans = [ends[j] - ends[j - k] for j in window]
        if max(spans) - min(spans) > PERIOD_RTOL * max(spans):
            continue
        cycles = (calls - n) // k
        # the span grows by `drift` per boundary, so by k * drift per skipped cycle
        drift = (spans[-1] - spans[0]) / (len(spans) - 1)
        base = run_time if run_time is not None else ends[m] + (n - m) / k * spans[-1]
        total = base + cycles * spans[-1]
        if abs(drift) * k * cycles * (cycles + 1) / 2 > DRIFT_RTOL * total:
            continue
        last = snaps[m].minus(snaps[m - k])
        if all(_close(last, snaps[j].minus(snaps[j - k])) for j in window):
            return k, last, n
    return None


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
