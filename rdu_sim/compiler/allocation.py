"""Stage allocation: PCUs and PMUs for each stage of a fused kernel.

A fused kernel is a pipeline; it runs at the pace of its slowest stage. Each stage's work
is estimated as
- compute: PCU-seconds, `flops / (pcu_peak x gemm efficiency) + vector_flops / pcu_vector`
  (the efficiency of the stage's GEMM on the systolic array,
  `rdu_sim.systolic.stage_gemm_efficiency`, the one the engine charges; `compile._work`);
- memory: its off-chip bytes at its tiers' bandwidths.

PCUs (at most `usable_fraction x count`, at least 1 per stage):
1. balance: find the smallest stage time T, no lower than the kernel's memory time (all
   stages share HBM and DDR, so the kernel cannot beat it), such that giving every stage
   ceil(compute / T) PCUs fits the budget. No stage then starves the pipeline unless the
   budget itself is too small;
2. spread the rest. With at least a tile's worth of rows the stages work side by side and
   the kernel runs at its slowest stage's pace: the rest goes in proportion to compute
   work, which equalises the stage times. With fewer rows than tiles (`chain_rows`: a
   batch-1 decode step) the reductions along a row hold each consumer until its producer
   has finished the row (`compiler.row_barriers`), so a row crosses the stages along a path
   (`row_path.RowGraph`, built from the fused graph's edges and those barriers): a stage
   after a held row adds its time, one streaming beside its producer overlaps it, and
   parallel branches (the shared expert beside the router) count once. R rows take about
   path(t) / R + (1 - 1/R) max(t_i), the first row along the longest path, the others behind
   it at the slowest stage's pace (a pipeline's fill and steady state). Along a plain chain
   the path is the sum, smallest with p_i in proportion to sqrt(c_i) (a Lagrange
   condition): a stage with 100 times the work gets 10 times the PCUs, not 100, since its
   time adds to the others'. In general the time is the largest of sums of c_i / p_i, convex
   in p; `path_spread` minimises it by Frank-Wolfe on its dual: for w_i, the weight of the
   time's terms through stage i, min over p of sum w_i c_i / p_i is at p_i = max(floor_i,
   a sqrt(w_i c_i)) (`shares`), and each step moves w toward the term that is largest there.
   On a series-parallel graph this is the familiar optimum (series members split by
   sqrt(c), parallel ones in proportion to c). The compiler estimates three spreads above
   floors that keep each stage within the kernel's memory time (one PCU each when that does
   not fit): the full pipeline's, the chain's square-root one and the path's, and keeps the
   one estimated fastest (`chain_time`). The estimate counts compute only: the engine's
   weight loads, which a routed expert issues only after the router, are not in it.

PMUs (same bounds) hold a stage's buffers, and its producers stream their outputs into
them at the PMUs' bandwidth shared by its input edges. Each stage first gets the PMUs its
buffers need at the kernel's tiles (`sram_bytes`, from `compiler.buffers`: a hard floor,
the compiler has chosen the tiles so these fit) and, above that, enough to take its input
streams within the balanced stage time T of step 1 and to hold a GEMM's whole input so its
operand streams once (`resident_bytes`; soft floors: when the soft floors
exceed the budget they shrink in proportion, never below the hard ones); the rest go in
proportion to the bytes each stage moves (on-chip in, off-chip in and out).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rdu_sim.compiler.row_path import RowGraph

PATH_ITERATIONS = 400
"""Frank-Wolfe steps of `path_spread` at most (each a longest path over the stages)."""
PATH_TOLERANCE = 1e-4
"""`path_spread` stops when its path is within this fraction of the dual's lower bound on
the optimum, or after `PATH_ITERATIONS` steps, whichever comes first (on random row graphs of
500 PCUs the cap came first in 66 of 150, the path then up to 0.3% above the optimum)."""


@dataclass(frozen=True)
class StageWork:
    """What allocation needs to know about one stage."""

    compute: float  # PCU-seconds
    sram_bytes: float = 0.0  # SRAM its buffers hold at the kernel's tiles (compiler.buffers)
    resident_bytes: float = 0.0  # SRAM to keep its input rows and stream its operand once
    stream_in: float = 0.0  # on-chip input bytes per call, times the input edges sharing them
    moved: float = 0.0  # all bytes the stage moves per call (on-chip in, off-chip in and out)


@dataclass(frozen=True)
class Allocation:
    """PCUs and PMUs per stage, in stage order."""

    pcus: tuple[int, ...]
    pmus: tuple[int, ...]


def water_fill(weights: Sequence[float], total: int, floors: Sequence[int]) -> list[int]:
    """Integers >= floors summing to `total`, above the floors in proportion to `weights`.

    Each item gets max(floor, alpha x weight) for the alpha that spends `total` (`shares`),
    rounded by largest remainder. Needs sum(floors) <= total; with all weights 0 the floors
    are returned (what is left stays unused).
    """
    exact = shares(weights, total, floors)
    n = len(weights)
    result = [max(floors[i], math.floor(exact[i])) for i in range(n)]
    left = total - sum(result)
    order = sorted(range(n), key=lambda i: (-(exact[i] - math.floor(exact[i])), i))
    for i in order:
        if left <= 0:
            break
        if weights[i] > 0:
            result[i] += 1
            left -= 1
    return result


def shares(weights: Sequence[float], total: float, floors: Sequence[float]) -> list[float]:
    """max(floor_i, alpha x weight_i) for the alpha that spends `total` (`water_fill` before
    rounding): the floors, when all weights are 0."""
    if sum(floors) > total:
        raise ValueError(f"floors {sum(floors)} exceed the total {total}")
    n = len(weights)
    if n == 0 or max(weights) <= 0:
        return [float(f) for f in floors]
    top = max(weights)
    weights = [w / top for w in weights]  # the largest is 1: no overflow from tiny weights
    pinned = [False] * n
    while True:
        free_weight = sum(w for w, p in zip(weights, pinned, strict=True) if not p)
        budget = total - sum(f for f, p in zip(floors, pinned, strict=True) if p)
        if free_weight <= 0:
            return [float(f) for f in floors]
        alpha = budget / free_weight
        newly = [i for i in range(n) if not pinned[i] and alpha * weights[i] < floors[i]]
        if not newly:
            return [float(floors[i]) if pinned[i] else alpha * weights[i] for i in range(n)]
        for i in newly:
            pinned[i] = True


def _balanced_minimums(compute: Sequence[float], budget: int, floor_time: float) -> list[int]:
    """Fewest PCUs per stage so no stage is slower than the best achievable stage time."""

    def need(t: float) -> list[int]:
        return [max(1, math.ceil(c / t - 1e-9)) if t > 0 else 1 for c in compute]

    if len(compute) > budget:
        raise ValueError(
            f"{len(compute)} stages need at least one PCU each; only {budget} are usable"
        )
    largest = max(compute, default=0.0)
    if largest <= 0:
        return [1] * len(compute)
    low = max(floor_time, largest / budget)
    if sum(need(low)) <= budget:
        return need(low)
    high = largest  # one PCU each suffices at this stage time
    for _ in range(100):
        mid = (low + high) / 2
        if sum(need(mid)) <= budget:
            high = mid
        else:
            low = mid
    return need(high)


def chain_time(
    compute: Sequence[float], counts: Sequence[int], rows: int, graph: RowGraph | None = None
) -> float:
    """Estimated time of ``rows`` rows crossing the stages (module docstring): the first
    row along ``graph``'s longest path (`row_path`; None: a chain, the stages' times
    added), the others behind it at the slowest stage's pace. Compute only: a stage's
    weights stream into its PMUs ahead of the row (the engine's prefetch), so along the
    path it waits for its PCUs, not its bytes."""
    times = [c / p for c, p in zip(compute, counts, strict=True)]
    if not times:
        return 0.0
    first = sum(times) if graph is None else graph.path(times)
    return first / rows + (1.0 - 1.0 / rows) * max(times)


def _chain_floors(compute: Sequence[float], budget: int, memory_time: float) -> list[int]:
    """Fewest PCUs per stage for a chain: none slower than the kernel's memory time when
    that fits the budget (no stage need be faster), else one each (``_balanced_minimums``
    has already refused more stages than PCUs)."""
    if memory_time > 0:
        floors = [max(1, math.ceil(c / memory_time - 1e-9)) for c in compute]
        if sum(floors) <= budget:
            return floors
    return [1] * len(compute)


def _chain_spread(
    compute: Sequence[float],
    budget: int,
    floors: Sequence[int],
    rows: int,
    pipeline: list[int],
    graph: RowGraph | None,
) -> list[int]:
    """Of the full pipeline's spread, the square-root spread above ``floors`` (the chain's
    optimum) and the spread that minimises ``graph``'s longest path (`path_spread`), the
    one estimated fastest for ``rows`` rows (``chain_time``; ties to the earlier)."""
    candidates = [pipeline, water_fill([math.sqrt(c) for c in compute], budget, floors)]
    if graph is not None:
        exact = path_spread(compute, graph, budget, floors, rows)
        candidates.append(water_fill(exact, budget, floors))
    return min(candidates, key=lambda counts: chain_time(compute, counts, rows, graph))


def path_spread(
    compute: Sequence[float], graph: RowGraph, budget: int, floors: Sequence[int], rows: int = 1
) -> list[float]:
    """PCUs (fractional, >= ``floors``, summing to ``budget``) that minimise ``chain_time``
    of ``rows`` rows along ``graph`` (module docstring: Frank-Wolfe on the dual)."""
    n = len(compute)
    if n == 0 or max(compute) <= 0:
        return [float(f) for f in floors]
    weights = [1.0] * n  # the first spread is the chain's; the first step replaces it
    best: list[float] = []
    best_time = math.inf
    for k in range(PATH_ITERATIONS):
        pcus = shares(
            [math.sqrt(w * c) for w, c in zip(weights, compute, strict=True)], budget, floors
        )
        times = [c / p for c, p in zip(compute, pcus, strict=True)]
        length, on = graph.longest(times)
        slowest = max(range(n), key=times.__getitem__)
        time = length / rows + (1.0 - 1.0 / rows) * times[slowest]
        if time < best_time:
            best, best_time = pcus, time
        if k > 0:  # weights now a mix of the time's terms: the dual bounds the optimum below
            bound = sum(w * t for w, t in zip(weights, times, strict=True))
            if best_time <= bound * (1 + PATH_TOLERANCE):
                break
        # the term of the time at these PCUs: the longest path's stages, the slowest stage
        term = [(1.0 / rows if o else 0.0) for o in on]
        term[slowest] += 1.0 - 1.0 / rows
        step = 2.0 / (k + 2)
        weights = [(1 - step) * w + step * d for w, d in zip(weights, term, strict=True)]
    return best


def allocate(
    work: Sequence[StageWork],
    *,
    pcus: int,
    pmus: int,
    pmu_bytes: float,
    pmu_bandwidth: float,
    memory_time: float,
    chain_rows: int | None = None,
    graph: RowGraph | None = None,
) -> Allocation:
    """PCUs and PMUs per stage within `pcus` / `pmus` (see the module docstring).

    ``chain_rows``: the step's rows when they are fewer than the kernel's tiles (the stages
    then work in sequence along each row), else None.
    """
    compute = [w.compute for w in work]
    pcu_counts = water_fill(compute, pcus, _balanced_minimums(compute, pcus, memory_time))
    if chain_rows is not None:
        floors = _chain_floors(compute, pcus, memory_time)
        pcu_counts = _chain_spread(compute, pcus, floors, chain_rows, pcu_counts, graph)

    if len(work) > pmus:
        raise ValueError(f"{len(work)} stages need at least one PMU each; only {pmus} usable")
    stage_time = max([memory_time, *(w.compute / p for w, p in zip(work, pcu_counts, strict=True))])
    hard = [max(1, math.ceil(w.sram_bytes / pmu_bytes)) for w in work]
    if sum(hard) > pmus:
        raise ValueError(f"the stages' buffers need {sum(hard)} PMUs; only {pmus} usable")
    floors = []
    for w, least in zip(work, hard, strict=True):
        streams = math.ceil(w.stream_in / (stage_time * pmu_bandwidth)) if stage_time > 0 else 1
        floors.append(max(least, streams, math.ceil(w.resident_bytes / pmu_bytes)))
    if sum(floors) > pmus:  # the soft floors do not all fit: shrink them in proportion
        floors = water_fill([float(f) for f in floors], pmus, hard)
    pmu_counts = water_fill([w.moved for w in work], pmus, floors)
    return Allocation(tuple(pcu_counts), tuple(pmu_counts))
