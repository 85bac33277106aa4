"""Stage allocation: PCUs and PMUs for each stage of a fused kernel.

A fused kernel is a pipeline; it runs at the pace of its slowest stage. Each stage's work
is estimated as
- compute: PCU-seconds, `flops / (pcu_peak x gemm efficiency) + vector_flops / pcu_vector`
  (the efficiency of the stage's GEMM tile on the systolic array, see `gemm_efficiency`);
- memory: its off-chip bytes at its tiers' bandwidths.

PCUs (at most `usable_fraction x count`, at least 1 per stage):
1. balance: find the smallest stage time T, no lower than the kernel's memory time (all
   stages share HBM and DDR, so the kernel cannot beat it), such that giving every stage
   ceil(compute / T) PCUs fits the budget. No stage then starves the pipeline unless the
   budget itself is too small;
2. spread the rest in proportion to compute work (water-filling above those minimums).

PMUs (same bounds): each stage first gets enough to double-buffer its tiles (its per-tile
input, weights and output bytes, twice, over the PMU size) when they all fit, then the rest
in proportion to its estimated time max(compute, memory).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StageWork:
    """What allocation needs to know about one stage."""

    compute: float  # PCU-seconds
    memory: float  # seconds of off-chip traffic at full tier bandwidth
    buffer_bytes: float  # bytes one tile brings in and sends out (before double-buffering)


@dataclass(frozen=True)
class Allocation:
    """PCUs and PMUs per stage, in stage order."""

    pcus: tuple[int, ...]
    pmus: tuple[int, ...]


def gemm_efficiency(m: int, n: int, k: int, rows: int, cols: int) -> float:
    """Fraction of peak an output-stationary rows x cols array reaches on m x n x k.

    Padding of partial tiles at the m/n edges (the better of the two orientations) times
    k / (k + rows + cols - 2) for the skewed fill and drain.
    """

    def spatial(a: int, b: int) -> float:
        return (a * b) / (math.ceil(a / rows) * rows * math.ceil(b / cols) * cols)

    temporal = k / (k + rows + cols - 2)
    return max(spatial(m, n), spatial(n, m)) * temporal


def water_fill(weights: Sequence[float], total: int, floors: Sequence[int]) -> list[int]:
    """Integers >= floors summing to `total`, above the floors in proportion to `weights`.

    Each item gets max(floor, alpha x weight) for the alpha that spends `total`, rounded
    by largest remainder. Needs sum(floors) <= total; with all weights 0 the floors are
    returned (what is left stays unused).
    """
    if sum(floors) > total:
        raise ValueError(f"floors {sum(floors)} exceed the total {total}")
    n = len(weights)
    if n == 0 or sum(weights) <= 0:
        return list(floors)
    pinned = [False] * n
    while True:
        free_weight = sum(w for w, p in zip(weights, pinned, strict=True) if not p)
        budget = total - sum(f for f, p in zip(floors, pinned, strict=True) if p)
        if free_weight <= 0:
            shares = [float(f) for f in floors]
            break
        alpha = budget / free_weight
        newly = [i for i in range(n) if not pinned[i] and alpha * weights[i] < floors[i]]
        if not newly:
            shares = [float(floors[i]) if pinned[i] else alpha * weights[i] for i in range(n)]
            break
        for i in newly:
            pinned[i] = True
    result = [max(floors[i], math.floor(shares[i])) for i in range(n)]
    left = total - sum(result)
    order = sorted(range(n), key=lambda i: (-(shares[i] - math.floor(shares[i])), i))
    for i in order:
        if left <= 0:
            break
        if weights[i] > 0:
            result[i] += 1
            left -= 1
    return result


def _balanced_minimums(compute: Sequence[float], budget: int, floor_time: float) -> list[int]:
    """Fewest PCUs per stage so no stage is slower than the best achievable stage time."""

    def need(t: float) -> list[int]:
        return [max(1, math.ceil(c / t - 1e-9)) if t > 0 else 1 for c in compute]

    if len(compute) > budget:
        raise ValueError(f"{len(compute)} stages need at least one PCU each; only {budget} "
                         "are usable")
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


def allocate(work: Sequence[StageWork], *, pcus: int, pmus: int, pmu_bytes: float,
             memory_time: float) -> Allocation:
    """PCUs and PMUs per stage within `pcus` / `pmus` (see the module docstring)."""
    compute = [w.compute for w in work]
    pcu_floors = _balanced_minimums(compute, pcus, memory_time)
    pcu_counts = water_fill(compute, pcus, pcu_floors)

    if len(work) > pmus:
        raise ValueError(f"{len(work)} stages need at least one PMU each; only {pmus} usable")
    tiles = [max(1, math.ceil(2 * w.buffer_bytes / pmu_bytes)) for w in work]
    if sum(tiles) > pmus:  # tiles too big to double-buffer all: shrink them in proportion
        tiles = water_fill([float(t) for t in tiles], pmus, [1] * len(work))
    time = [max(w.compute / p, w.memory) for w, p in zip(work, pcu_counts, strict=True)]
    pmu_counts = water_fill(time, pmus, tiles)
    return Allocation(tuple(pcu_counts), tuple(pmu_counts))
