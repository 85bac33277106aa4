"""A stage's per-call work cut into tiles: the bytes, FLOPs and GEMM efficiency of each tile.

Tiles are the engine's simulation granularity (``engine.tiles_per_stage``), not a hardware
mapping: a stage streams its call's work as ``T`` equal tiles. Integer byte counts are split
into integers (the first ``b % T`` tiles get one byte more) so that the bytes the engine moves
add up to the Program's bytes exactly; non-integer counts are split evenly.

The GEMM efficiency is a property of the operator's shape on the PCUs' systolic arrays (what
padding its (m, n) leaves on 32 x 6 array tiles), times the socket's ``max_gemm_efficiency``,
the ceiling a well-shaped GEMM reaches (fill/drain skew and operand delivery: the skew is not
charged twice): ``rdu_sim.systolic.stage_gemm_efficiency``, the same function the compiler's
stage-time estimate uses. Computing it from the whole operator keeps the step time
independent of how finely the engine tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdu_sim.compiler.program import StageProgram, Tier
from rdu_sim.config.hardware import SocketConfig
from rdu_sim.pickled import Reduced, by_fields
from rdu_sim.systolic import stage_gemm_efficiency

MEMORY_TIERS: tuple[Tier, ...] = ("hbm", "ddr")
"""Off-chip tiers served by a shared MemoryChannel; ``sram`` is the stage's own PMUs."""


def split(value: float, tiles: int) -> tuple[float, ...]:
    """``value`` cut into ``tiles`` parts that sum back to it (exactly for integers)."""
    if value < 0:
        raise ValueError(f"cannot split a negative amount {value}")
    if float(value).is_integer() and value < 2**53:
        base, extra = divmod(int(value), tiles)
        return tuple(float(base + (1 if i < extra else 0)) for i in range(tiles))
    return (value / tiles,) * tiles


@dataclass(frozen=True)
class TileWork:
    """What each of a stage's ``tiles`` tiles does in one call (one layer iteration)."""

    tiles: int
    reads: dict[str, tuple[float, ...]]  # off-chip tier -> bytes per tile (only tiers used)
    writes: dict[str, tuple[float, ...]]
    sram: tuple[float, ...]  # on-chip bytes read + written per tile (weights kept in SRAM)
    flops: float  # matrix FLOPs per tile
    vector_flops: float  # element-wise FLOPs per tile
    output: tuple[float, ...]  # activation bytes each consumer receives per tile
    efficiency: float  # fraction of the PCUs' matrix peak this stage's GEMM reaches

    def __reduce__(self) -> Reduced:
        return by_fields(self)  # (compiled, a frozen dataclass: ``rdu_sim.pickled``)

    @classmethod
    def of(cls, stage: StageProgram, tiles: int, socket: SocketConfig) -> TileWork:
        """Cut ``stage``'s per-call work into ``tiles`` tiles."""
        if tiles < 1:
            raise ValueError(f"tiles must be >= 1, got {tiles}")
        for what, amount in (
            ("flops", stage.flops),
            ("vector_flops", stage.vector_flops),
            ("output_bytes", stage.output_bytes),
        ):
            if amount < 0:
                raise ValueError(f"stage {stage.name!r}: {what} must be >= 0, got {amount}")
        for kind, amounts in (("reads", stage.reads), ("writes", stage.writes)):
            for tier, amount in amounts.items():
                if amount < 0:
                    raise ValueError(
                        f"stage {stage.name!r}: {kind}[{tier}] must be >= 0, got {amount}"
                    )
        reads: dict[str, tuple[float, ...]] = {
            t: split(stage.reads[t], tiles) for t in MEMORY_TIERS if stage.reads.get(t, 0.0)
        }
        writes: dict[str, tuple[float, ...]] = {
            t: split(stage.writes[t], tiles) for t in MEMORY_TIERS if stage.writes.get(t, 0.0)
        }
        sram_bytes = stage.reads.get("sram", 0.0) + stage.writes.get("sram", 0.0)
        return cls(
            tiles=tiles,
            reads=reads,
            writes=writes,
            sram=split(sram_bytes, tiles),
            flops=stage.flops / tiles,
            vector_flops=stage.vector_flops / tiles,
            output=split(stage.output_bytes, tiles),
            efficiency=stage_efficiency(stage, socket),
        )


def prefetch_window(work: TileWork, buffer_bytes: float, minimum: int) -> int:
    """Tiles of streamed operands a stage may have loaded or loading ahead of its compute.

    As many tiles as fit in ``buffer_bytes`` (the part of the stage's PMU SRAM that holds
    streamed weight/KV tiles), never fewer than ``minimum`` (2 = double buffering, so a load
    always overlaps the previous tile's compute), and at most one layer's tiles (so with
    ``tiles_per_stage`` below ``minimum`` the window is the layer).
    Sizing the window in bytes, not tiles, keeps how far a stage runs ahead of its compute
    independent of ``tiles_per_stage``; capping it at one layer keeps the start of a looped
    call independent of how many layers follow (what makes fast-forwarding exact).
    """
    largest = max(
        (sum(amounts[t] for amounts in work.reads.values()) for t in range(work.tiles)), default=0.0
    )
    fit = int(buffer_bytes // largest) if largest > 0 else 0
    return max(1, min(work.tiles, max(minimum, fit)))


def stage_efficiency(stage: StageProgram, socket: SocketConfig) -> float:
    """Fraction of matrix peak the stage's GEMM reaches (max_gemm_efficiency without a shape)."""
    pcu = socket.pcu
    if stage.gemm is None:
        return pcu.max_gemm_efficiency
    g = stage.gemm
    return stage_gemm_efficiency(
        g.m, g.n, g.k, pcu.systolic_rows, pcu.systolic_cols, pcu.max_gemm_efficiency
    )
