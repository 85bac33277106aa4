"""The systolic-array GEMM efficiency model, shared by the compiler and the engine.

The compiler estimates each stage's compute time with it when it allocates PCUs
(``rdu_sim.compiler.compile``); the engine charges each stage's matrix work with it
(``rdu_sim.engine.tile_work``); ``rdu_sim.hw`` re-exports ``gemm_efficiency`` beside
``PCUGroup``. One formula, so the compiler's plan and the engine's timing cannot drift
apart. Pure functions of plain numbers: this module imports nothing from ``rdu_sim``, so
every layer may import it (the compiler may not import ``rdu_sim.hw``).

SN40L lane and stage counts are not public. The defaults assume a 32-lane x 6-stage PCU
body: 32 * 6 MACs * 2 FLOP * 1.6 GHz = 614 GFLOP/s per PCU, and 1040 PCUs * 614 GFLOP/s =
638 TFLOP/s, the published BF16 peak [SN Table II].
"""

from __future__ import annotations

import math

DEFAULT_ARRAY_ROWS = 32
"""Systolic rows (SIMD lanes) per PCU: not public, 32 is consistent with the peak."""
DEFAULT_ARRAY_COLS = 6
"""Systolic columns (pipeline stages) per PCU: not public, see module docstring."""


def gemm_efficiency(
    m: int,
    n: int,
    k: int,
    array_rows: int = DEFAULT_ARRAY_ROWS,
    array_cols: int = DEFAULT_ARRAY_COLS,
    fill_drain_overlap: float = 0.0,
    allow_transpose: bool = True,
) -> float:
    """Fraction of peak MACs an output-stationary array achieves on an m x n x k GEMM.

    Each ``array_rows x array_cols`` output tile accumulates over ``k`` cycles
    and pays ``array_rows + array_cols - 2`` cycles of skewed fill/drain, of
    which ``fill_drain_overlap`` (0..1) is hidden by starting the next tile
    early. Partial tiles at the m/n edges waste the padded PEs. With
    ``allow_transpose`` the mapper may put n on the rows instead (it picks the
    better orientation, as a compiler would). Returns a value in (0, 1];
    exactly 1 only for aligned tiles with full overlap, and about
    ``k / (k + rows + cols - 2)`` for aligned tiles without it.
    """
    if min(m, n, k) <= 0 or min(array_rows, array_cols) <= 0:
        raise ValueError(f"gemm dims and array dims must be > 0, got {(m, n, k)}")
    if not 0.0 <= fill_drain_overlap <= 1.0:
        raise ValueError(f"fill_drain_overlap must be in [0, 1], got {fill_drain_overlap}")
    depth = (array_rows + array_cols - 2) * (1.0 - fill_drain_overlap)
    temporal = k / (k + depth)

    def spatial(rows_dim: int, cols_dim: int) -> float:
        padded_r = math.ceil(rows_dim / array_rows) * array_rows
        padded_c = math.ceil(cols_dim / array_cols) * array_cols
        return (rows_dim * cols_dim) / (padded_r * padded_c)

    space = spatial(m, n)
    if allow_transpose:
        space = max(space, spatial(n, m))
    return space * temporal


def stage_gemm_efficiency(
    m: int, n: int, k: int, array_rows: int, array_cols: int, ceiling: float
) -> float:
    """Fraction of a PCU's matrix peak a stage whose GEMM is m x n x k reaches.

    ``ceiling`` (the socket's ``max_gemm_efficiency``) is what a well-shaped GEMM reaches,
    fill/drain skew and operand delivery included, so the fill/drain is taken as hidden
    (``fill_drain_overlap=1``, not charged twice) and only the edge padding of the
    (m, n) output on the array's tiles is charged beneath it. This is the efficiency the
    compiler's stage-time estimate and the engine's tile timing both use.
    """
    return ceiling * gemm_efficiency(m, n, k, array_rows, array_cols, fill_drain_overlap=1.0)
