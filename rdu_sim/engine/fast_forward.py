"""Time all of a kernel's calls while simulating as few of them as is exact.

* Unlooped calls are separated by a synchronization, so every call starts from an empty
  machine and takes exactly as long as the first: one call is simulated and counted ``calls``
  times (records are repeated on the timeline). This is not an approximation.
* A looped kernel is one pipelined call over ``L`` layers, simulated once (``KernelSim``) and
  cut short once it is periodic, by a plain loop over its marks: instants at the same places
  in every layer, ``marks_per_layer`` a layer (the tile ends of one reference stage that
  split a layer evenly, its last tile among them: ``kernel_sim.MARKS_PER_LAYER``; the layer
  boundaries when there is no such stage). At each mark ``find_cycle`` (pure) looks at the
  mark log for a cycle; on a cycle of ``k`` layers the run is cut to the fewest layers
  ``n >= safe`` with ``L - n`` a multiple of ``k`` and finished, and ``extrapolate`` (pure)
  adds the skipped ``(L - n) / k`` cycles. A mark inside a layer is an instant like a
  boundary: the state there decides the run's future just as completely. With two marks a
  layer a one-layer cycle is seen at the end of layer 1 (its two marks' states equal layer
  0's) rather than at the end of layer 2, while the stages are a layer less far ahead, so
  ``safe`` (and the layers simulated) is one lower on the shipped steps (DeepSeek-R1's
  prefill MoE layer: 4 of 58 rather than 5).

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

  The cycle rule (``find_cycle``) compares states, not only times: each mark carries the
  state that decides the run's future, measured from the mark (``kernel_state``: every
  pending event, every memory stream's bytes left, every buffer, PCU group and link, every
  stage's position; not the past, such as when a stage started its last layer, which no
  later event reads). A cycle of ``k`` layers (the shortest of ``CYCLE_LENGTHS``) is
  accepted at mark ``m`` when the state at each of the last ``STATE_MATCHES`` marks ``j``
  equals the state at the mark ``k`` layers earlier (counts equal, times within
  ``STATE_RTOL`` of the cycle's span: float rounding) and so do the spans and every total's
  increment: the deterministic simulation then repeats those ``k`` layers until it is cut,
  so the skipped cycles are known exactly, not estimated. A pipeline that settles (fluid
  sharing of HBM converges geometrically) is accepted once it has settled to rounding; one
  that never repeats its state (a quasi-periodic pattern, or a slow drift) is simulated in full. No
  settling length is assumed: the shipped prefill steps and the Llama decode steps repeat
  from their second layer, the full-attention DeepSeek-R1 decode step's MoE layers settle
  into a 7-layer cycle by their 17th (23 of 58 simulated), and the SnapStream decode step's
  into a 1-layer cycle only by their 39th (41 of 58; CHANGELOG.md, issue 23 part 5a, has
  how such steps wander before they settle). The time-like totals (time, busy times)
  extrapolate as ``S(L) = S(n) + (L - n) / k * dS``; the work totals (``WORK_TOTALS``: bytes
  per tier, FLOPs) as ``W(L) = W(n) * L / n``: every layer of a looped kernel does the same
  work. A run that finds no cycle simulates all ``L`` layers once: it *is* the full run.
  Kernels of fewer than ``MIN_FAST_FORWARD_LAYERS`` layers are simulated in full.
* ``fast_forward=False`` always simulates every layer and call (the reference).

``events`` counts what was really simulated; records are those of the run, with an ``agcu``
slice marking the fast-forwarded layers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from rdu_sim.compiler.program import KernelProgram
from rdu_sim.engine.kernel_sim import MARKS_PER_LAYER, Boundary, KernelRun
from rdu_sim.engine.records import Recorder
from rdu_sim.engine.run_stats import OBSERVED, RunStats
from rdu_sim.pickled import Reduced, by_fields

STATE_RTOL = 1e-9
"""Two marks' states match when every time in them (and the cycle's spans, and every total's
increment over the cycle) agrees within this fraction of the cycle's span: float rounding,
which is ~1e-14 on the shipped steps (at most ~3e-13); physics moves states by far more (the
full-attention step's slipping streams: 5e-4 a layer). A settling transient is accepted once
within it: the shipped settling steps then end up to 1.7e-10 off the full simulation
(CHANGELOG.md, issue 23 part 5a, measured 1e-11 too)."""

STATE_MATCHES = 2
"""Consecutive marks whose state must equal the state one cycle earlier. One would do for a
complete state; the second guards against a part of the state the rule does not see (the
state holds sorted sets of times, not which process each belongs to)."""

CYCLE_LENGTHS = tuple(range(1, 13))
"""Cycle lengths (layers) ``find_cycle`` looks for, shortest first: every length to 12. Stages
whose paces stand in a ratio ``p / q`` repeat after ``q`` layers: stages that take turns
running ahead make 2 or 3, collectives on a ring over two nodes 5 or 10, and the
full-attention DeepSeek-R1 decode step's MoE layers 7. A length that is not there costs a
count comparison a mark; a cycle that is there but not looked for costs a full run."""

WORK_TOTALS = ("hbm_bytes", "ddr_bytes", "sram_bytes", "p2p_bytes", "flops", "vector_flops")
"""``RunStats`` fields that are work (the same in every layer of a looped kernel): scaled by
layers when fast-forwarding, not extrapolated from boundary increments."""

MIN_FAST_FORWARD_LAYERS = 8
"""Looped kernels of fewer layers are simulated in full (a cut keeps at least
``fewest_layers`` layers, 3 with two marks a layer, and the shipped steps keep 4 or more:
too little to skip)."""


class Simulation(Protocol):
    """A kernel simulation ``time_kernel`` drives (``KernelSim``): run to the next layer
    boundary, cut to fewer layers, finish."""

    @property
    def boundaries(self) -> Sequence[Boundary]:
        """The layer boundaries so far (looped calls)."""

    @property
    def marks(self) -> Sequence[Boundary]:
        """The instants the cycle rule compares so far: ``marks_per_layer`` a layer, at the
        same places in every layer (the boundaries, or tile ends of one stage)."""

    @property
    def marks_per_layer(self) -> int:
        """Marks in each layer."""

    @property
    def safe(self) -> int:
        """The fewest layers the run may be cut to now."""

    def run_to_mark(self) -> Boundary | None:
        """Simulate to the next mark; None when the run has ended."""

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

    def __reduce__(self) -> Reduced:
        return by_fields(self)  # (compiled, a frozen dataclass: ``rdu_sim.pickled``)


@dataclass(frozen=True)
class KernelResult:
    """All calls of one kernel: totals, what was simulated, and its records (local time)."""

    stats: RunStats
    events: int
    simulated_iterations: int
    period_s: float | None
    recorder: Recorder | None

    def __reduce__(self) -> Reduced:
        return by_fields(self)  # (compiled, a frozen dataclass: ``rdu_sim.pickled``)


def fewest_layers(kernel: KernelProgram, fast_forward: bool) -> int:
    """The fewest layers (or calls) ``time_kernel`` simulates of ``kernel``: a one-layer
    cycle is seen at the earliest at mark ``p + STATE_MATCHES - 1`` (``p`` marks a layer:
    ``STATE_MATCHES`` marks matching the marks a layer earlier), in layer
    ``1 + (STATE_MATCHES - 1) // p``, and a cut there keeps at least that layer + 2."""
    calls = kernel.calls
    if not fast_forward:
        return calls
    if not kernel.looped:
        return 1
    if calls < MIN_FAST_FORWARD_LAYERS:
        return calls
    per_layer = max(MARKS_PER_LAYER, default=1)
    return min(calls, 1 + (STATE_MATCHES - 1) // per_layer + 2)


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
    while cycle is None and sim.run_to_mark() is not None:
        cycle = find_cycle(sim.marks, calls, sim.safe, per_layer=sim.marks_per_layer)
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
        _mark_fast_forward(r.recorder, kernel.name, calls, cycle, r.stats.time_s, stats.time_s)
    return KernelResult(stats, r.events, n, cycle.increment.time_s / k, r.recorder)


def _mark_fast_forward(
    rec: Recorder, kernel: str, calls: int, cycle: Cycle, start_s: float, end_s: float
) -> None:
    """An ``agcu`` slice over the fast-forwarded layers on every socket the run recorded
    (all sockets advance together), with the layers simulated and skipped: a trace's work
    over the simulated layers times ``calls / simulated_layers`` is the step's, as
    ``extrapolate`` scales the work totals."""
    n, k = cycle.layers, cycle.length
    name = (
        f"fast-forward {calls - n} layers ({(calls - n) // k} cycles of {k} x "
        f"{cycle.increment.time_s:.4g} s)"
    )
    args: tuple[tuple[str, str | float], ...] = (
        ("kernel", kernel),
        ("calls", calls),
        ("simulated_layers", n),
        ("skipped_layers", calls - n),
    )
    for socket in sorted({s.socket for s in rec.slices}):
        rec.slice(socket, "agcu", name, start_s, end_s, args)


def find_cycle(
    boundaries: Sequence[Boundary],
    calls: int,
    safe: int,
    lengths: tuple[int, ...] = CYCLE_LENGTHS,
    per_layer: int = 1,
) -> Cycle | None:
    """The shortest cycle of ``lengths`` layers the marks ``0 .. m`` (``per_layer`` a
    layer, at the same places in every layer: the layer boundaries when 1) of a looped run
    of ``calls`` layers end in, or None. The run is to be cut to ``n = safe + (calls - safe)
    % k`` layers (skipping ``(calls - n) / k`` cycles).

    A cycle of ``k`` layers, ``lag = k * per_layer`` marks: for each of the last
    ``STATE_MATCHES`` marks ``j``, the state at ``j`` equals the state at ``j - lag``
    (``KernelState.matches``), and the span ``c[j] - c[j - lag]`` and every total's increment
    over it equal the last mark's, all within ``STATE_RTOL`` of the span.
    """
    m = len(boundaries) - 1
    ends = [b.end_s for b in boundaries]
    for k in lengths:
        lag = k * per_layer
        window = range(m - STATE_MATCHES + 1, m + 1)
        if window.start - lag < 0:
            break
        n = safe + (calls - safe) % k
        if n >= calls:
            continue
        span = ends[m] - ends[m - lag]
        tolerance = STATE_RTOL * span
        if not all(
            abs((ends[j] - ends[j - lag]) - span) <= tolerance
            and boundaries[j].state.matches(boundaries[j - lag].state, tolerance)
            for j in window
        ):
            continue
        last = boundaries[m].totals.minus(boundaries[m - lag].totals)
        if all(
            _close(last, boundaries[j].totals.minus(boundaries[j - lag].totals)) for j in window
        ):
            return Cycle(k, last, n)
    return None


def extrapolate(run: RunStats, cycle: Cycle, calls: int) -> RunStats:
    """The totals of all ``calls`` layers from a run cut to ``cycle.layers``: the time-like
    totals grow by the cycle's increment per skipped cycle, the work totals by layers."""
    n = cycle.layers
    exact = {name: getattr(run, name) * cycle.length / n for name in WORK_TOTALS}
    return run.affine(replace(cycle.increment, **exact), (calls - n) // cycle.length)


def _close(a: RunStats, b: RunStats) -> bool:
    """Every total of ``a`` within ``STATE_RTOL`` of ``b``'s, but those that only observe the
    run (``run_stats.OBSERVED``)."""
    other = b.as_dict()
    return all(
        abs(x - other[name]) <= STATE_RTOL * max(abs(x), abs(other[name]))
        for name, x in a.as_dict().items()
        if name not in OBSERVED
    )


def _repeat(rec: Recorder | None, times: int, period: float) -> Recorder | None:
    """``times`` copies of a call's records, one after another."""
    if rec is None:
        return None
    out = Recorder()
    for i in range(times):
        rec.extend_into(out, i * period)
    return out
