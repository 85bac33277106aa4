"""Time all of a kernel's calls while simulating as few of them as is exact.

* Unlooped calls are separated by a synchronization, so every call starts from an empty
  machine and takes exactly as long as the first: one call is simulated and counted ``calls``
  times (records are repeated on the timeline). This is not an approximation.
* A looped kernel is one pipelined call over ``L`` layers. Nothing in a run depends on how
  many layers follow until its last layers (a stage loads at most one layer ahead), so a run
  of ``n`` layers follows exactly the trajectory of the full run until a stage would load
  layer ``n``, which happens once it computes in layer ``n - 1``, after the sinks finished
  layer ``n - 3``: the boundaries of layers ``0 .. n - 3`` are the full run's. Once the
  pipeline is periodic with a cycle of ``k`` layers (each layer boundary repeats the one
  ``k`` layers before shifted by a period ``P``, and every total grows by the same amount per
  cycle; stages that take turns running ahead make ``k`` = 2 or 3), a run longer by a
  multiple of ``k`` differs only by whole cycles inserted before the drain:
  ``T(L) = T(n) + (L - n) / k * P``, and likewise for every other total (bytes, FLOPs, busy
  time). The engine simulates one probe of ``n`` layers with ``L - n`` a multiple of 6 (so
  of every cycle length it looks for: 1, 2, 3, 6), ``n`` at least 10 and a quarter of ``L``
  (pipelines with latencies and collectives take 5-15 layers to settle), samples the totals
  at each layer boundary and accepts the shortest cycle whose last ``k + 2`` spans inside the
  shared prefix, and the totals' increments over them, agree within ``PERIOD_RTOL``; then
  ``S(L) = S(n) + (L - n) / k * dS``. This is exact for a periodic pipeline. A settling one
  (a damped oscillation of the period, decaying geometrically) is accepted once its swings
  are below ``PERIOD_RTOL``, which moves the step time by far less (its remaining swings
  alternate in sign and shrink); a drifting one only if its trend, continued over the
  skipped cycles, stays below ``DRIFT_RTOL`` of the kernel time. The tests compare with full
  simulations within 0.5%; on compiled DeepSeek-R1 and Llama programs they agree to 1e-4 or
  better. A probe that finds no cycle is extended by 6 layers while probing costs at most
  half the full run. If none finds one, one longer probe looks for cycles of 5 and 10 layers
  too (``LONG_CYCLES``; collectives on a ring over two nodes, whose slower inter-node hop
  the chunks of successive collectives share, can settle into such cycles: DeepSeek-R1's
  full-attention decode step on 16 sockets has a 10-layer one): ``L - n`` a multiple of 30,
  ``n`` at least 2 x 10 + 4 (two cycles and the window), as long as all probes together
  cost less than the full run. Otherwise the ``L`` layers are simulated in full (so a kernel
  without any cycle costs at most twice its layers). ``fast_forward=False`` always simulates
  every layer and call (the reference).

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

PERIOD_RTOL = 1e-3
"""Spans of a cycle (and the totals' increments over them) agree within this fraction."""

DRIFT_RTOL = 1e-3
"""A linear drift of the cycle span, continued over the fast-forwarded cycles, may move the
kernel's time by at most this fraction (else the probe is not accepted)."""

CYCLES = (1, 2, 3, 6)
"""Cycle lengths (layers) looked for; probes are sized so that each divides ``L - n``."""

ALIGN = 6
"""Least common multiple of ``CYCLES``."""

LONG_CYCLES = (1, 2, 3, 5, 6, 10)
"""Cycle lengths the long probe looks for when the short probes found none."""

LONG_ALIGN = 30
"""Least common multiple of ``LONG_CYCLES``."""

MIN_PROBE = 10
"""Fewest layers a probe runs: pipelines with latencies and collectives take 5-15 layers
to settle."""

MIN_PROBED_CALLS = 2 * MIN_PROBE
"""Below this many layers a probe cannot save anything over the full run."""


def probe_lengths(calls: int) -> list[int]:
    """Probe sizes for ``calls`` layers: ``n = calls (mod 6)``, at least ``MIN_PROBE`` and a
    quarter of the layers, while the probes cost at most half the full run (empty: simulate
    in full)."""
    n = calls % ALIGN
    while n < max(MIN_PROBE, calls / 4):
        n += ALIGN
    sizes: list[int] = []
    while sum(sizes) + n <= calls // 2:
        sizes.append(n)
        n += ALIGN
    return sizes


def long_probe_length(calls: int, probed: int) -> int | None:
    """The long probe after ``probed`` layers of short probes found no cycle: ``n = calls
    (mod 30)``, at least ``2 x 10 + 4`` and ``MIN_PROBE``, if ``probed + n < calls`` (else
    None: simulate in full)."""
    n = calls % LONG_ALIGN
    while n < max(MIN_PROBE, 2 * max(LONG_CYCLES) + 4):
        n += LONG_ALIGN
    return n if probed + n < calls else None


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
    short = probe_lengths(calls) if fast_forward and calls >= MIN_PROBED_CALLS else []
    probes: list[tuple[int, tuple[int, ...]]] = [(n, CYCLES) for n in short]
    long = long_probe_length(calls, sum(short)) if short else None
    if long is not None and long > short[-1]:
        probes.append((long, LONG_CYCLES))
    for n, lengths in probes:
        budget(n, True)
        probe = run(n, True)
        events += probe.events
        simulated += n
        found = steady_cycle(probe, calls, lengths)
        if found is not None:
            k, per_cycle = found
            stats = probe.stats.affine(per_cycle, (calls - n) // k)
            rec = probe.recorder
            if rec is not None:
                rec.slice(0, "agcu", f"fast-forward {calls - n} layers "
                          f"({(calls - n) // k} cycles of {k} x {per_cycle.time_s:.4g} s)",
                          probe.stats.time_s, stats.time_s)
            return KernelResult(stats, events, simulated, per_cycle.time_s / k, rec)
    budget(calls, True)
    r = run(calls, True)
    return KernelResult(r.stats, events + r.events, simulated + calls, None, r.recorder)


def steady_cycle(probe: KernelRun, calls: int,
                 lengths: tuple[int, ...] = CYCLES) -> tuple[int, RunStats] | None:
    """The shortest cycle ``k`` (layers) of a periodic probe and every total's increment over
    one cycle, or None.

    Looks inside the prefix the probe shares with any longer run (boundaries ``0 .. m``,
    ``m = n - 3``): the spans ``c[j] - c[j - k]`` for the last ``k + 2`` boundaries ``j`` must
    agree within ``PERIOD_RTOL``, their linear trend continued over the remaining cycles must
    move the kernel's time by less than ``DRIFT_RTOL``, and the totals' increments over the
    spans must agree too.
    """
    ends, snaps = probe.iteration_ends, probe.snapshots
    n = len(ends)
    m = n - 3
    if len(snaps) != n:
        return None
    for k in lengths:
        window = range(m - k - 1, m + 1)
        if window.start - k < 0:
            break
        if (calls - n) % k:
            continue
        spans = [ends[j] - ends[j - k] for j in window]
        if max(spans) - min(spans) > PERIOD_RTOL * max(spans):
            continue
        cycles = (calls - n) // k
        drift = (spans[-1] - spans[0]) / (len(spans) - 1)
        total = probe.stats.time_s + cycles * spans[-1]
        if abs(drift) * cycles * (cycles + 1) / 2 > DRIFT_RTOL * total:
            continue
        last = snaps[m].minus(snaps[m - k])
        if all(_close(last, snaps[j].minus(snaps[j - k])) for j in window):
            return k, last
    return None


def _close(a: RunStats, b: RunStats) -> bool:
    """Every total of ``a`` within ``PERIOD_RTOL`` of ``b``'s."""
    other = b.as_dict()
    return all(abs(x - other[name]) <= PERIOD_RTOL * max(abs(x), abs(other[name]))
               for name, x in a.as_dict().items())


def _repeat(rec: Recorder | None, times: int, period: float) -> Recorder | None:
    """``times`` copies of a call's records, one after another."""
    if rec is None:
        return None
    out = Recorder()
    for i in range(times):
        rec.extend_into(out, i * period)
    return out
