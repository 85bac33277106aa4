"""What a GPU does with a Program's stage: its per-tile work and the rate it runs at.

A GPU runs every kernel on all its SMs, so a stage gets no units of its own (the compiler
allocates none on a GPU); what sets its speed is the tensor-core rate of its operands' type
and how well its GEMM fills the tensor-core instruction tile:

- matrix FLOPs run at the FP8 rate when the operands they stream are stored in fp8
  (weights for a projection, the KV cache for attention: ``GpuSettings``), else at the
  BF16 rate; times the GEMM efficiency ``rdu_sim.systolic.stage_gemm_efficiency`` on the
  ``mma_rows x mma_cols`` instruction tile under ``max_gemm_efficiency``, the same padding
  model SN40L's systolic arrays use (one formula, another tile);
- element-wise FLOPs run on the CUDA cores at ``vector_flops``;
- bytes come from HBM; a GPU has no DDR tier and no SRAM the compiler places into, so a
  stage reading either is refused;
- a decode step's attention reads its keys and values through thread blocks, each streaming
  one KV head's share of one sequence's context at ``thread_block_bandwidth``; the stack
  says how a context is dealt out to them (``decode_attention_split``), and at most ``sms``
  blocks stream at once (``kv_blocks_bandwidth``).

A kernel's stages are cut at its collectives into segments (``segments``): the stages after
a collective need its result, so they start a tile once the collective chunk holding it is
done, while the stages before it go on with the next tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdu_sim.compiler.fusion_levels import KV_READ
from rdu_sim.compiler.program import CollectiveSpec, KernelProgram, StageProgram
from rdu_sim.config.gpu import GpuConfig
from rdu_sim.config.parallelism import OverlapSchedule
from rdu_sim.config.stack import NO_STACK, AttentionSplit
from rdu_sim.engine.tile_work import split
from rdu_sim.systolic import stage_gemm_efficiency

ATTENTION_OPS = frozenset({"attention_score", "attention_value", "flash_attention"})
"""Products over the KV cache: they run at the KV cache's type's rate."""


@dataclass(frozen=True)
class GpuSettings:
    """How the serving stack runs a step on the GPU: the workload's choices, resolved."""

    cuda_graphs: bool = True  # one host launch per step (a graph) instead of one per kernel
    fp8_weights: bool = False  # projections run on the FP8 tensor cores (fp8 weights)
    fp8_kv: bool = False  # attention runs on the FP8 tensor cores (an fp8 KV cache)
    comm_sms: int = 0  # SMs two-batch overlap's communication kernels hold
    overlap_schedule: OverlapSchedule = "first_come"  # two-batch overlap's order of calls
    # how decode attention deals a sequence's context out to thread blocks (the stack's;
    # without one, the stack field's default)
    decode_attention_split: AttentionSplit = NO_STACK.decode_attention_split


def matrix_rate(stage: StageProgram, gpu: GpuConfig, settings: GpuSettings) -> float:
    """Tensor-core FLOP/s a stage's matrix work runs at (its operands' type)."""
    fp8 = settings.fp8_kv if stage.op in ATTENTION_OPS else settings.fp8_weights
    return gpu.fp8_flops if fp8 else gpu.bf16_flops


def peak_matrix_type(settings: GpuSettings) -> str:
    """The type of the tensor rate a step's projections run at, the one its share of peak
    FLOP/s is of: ``fp8`` (FP8 tensor cores) for fp8 weights, else ``bf16``."""
    return "fp8" if settings.fp8_weights else "bf16"


def peak_matrix_flops(gpu: GpuConfig, settings: GpuSettings) -> float:
    """The matrix peak a step's share of peak FLOP/s is of: the tensor rate of the weights'
    type (:func:`peak_matrix_type`), what the step's projections run at."""
    return gpu.fp8_flops if peak_matrix_type(settings) == "fp8" else gpu.bf16_flops


def gemm_efficiency(stage: StageProgram, gpu: GpuConfig) -> float:
    """Fraction of the tensor rate a stage's GEMM reaches (max_gemm_efficiency without one)."""
    if stage.gemm is None:
        return gpu.max_gemm_efficiency
    g = stage.gemm
    return stage_gemm_efficiency(g.m, g.n, g.k, gpu.mma_rows, gpu.mma_cols, gpu.max_gemm_efficiency)


@dataclass(frozen=True)
class GpuTileWork:
    """What each of a stage's tiles does in one call, on one GPU."""

    name: str
    matrix_flops: float  # per tile
    efficiency: float  # of the GPU's fastest matrix rate (type scale x GEMM efficiency)
    vector_flops: float  # per tile
    reads: tuple[float, ...]  # HBM bytes per tile
    writes: tuple[float, ...]
    collective: CollectiveSpec | None
    # a decode step's KV read: the bytes/s its attention's thread blocks stream together
    # (its reads pass through them as well as through the HBM); None for any other stage
    kv_blocks_bandwidth: float | None = None

    @classmethod
    def of(
        cls,
        stage: StageProgram,
        tiles: int,
        gpu: GpuConfig,
        settings: GpuSettings,
        kv_blocks_bandwidth: float | None = None,
    ) -> GpuTileWork:
        """Cut ``stage``'s per-call work into ``tiles`` tiles (bytes exactly, by ``split``)."""
        if tiles < 1:
            raise ValueError(f"tiles must be >= 1, got {tiles}")
        for kind, amounts in (("reads", stage.reads), ("writes", stage.writes)):
            for tier, amount in amounts.items():
                if amount and tier != "hbm":
                    raise ValueError(
                        f"stage {stage.name!r} {kind} {amount:.6g} bytes of {tier}: a GPU "
                        "has HBM only (no DDR tier, no SRAM the compiler places into)"
                    )
        fastest = max(gpu.bf16_flops, gpu.fp8_flops)
        scale = matrix_rate(stage, gpu, settings) / fastest
        return cls(
            name=stage.name,
            matrix_flops=stage.flops / tiles,
            efficiency=scale * gemm_efficiency(stage, gpu),
            vector_flops=stage.vector_flops / tiles,
            reads=split(stage.reads.get("hbm", 0.0), tiles),
            writes=split(stage.writes.get("hbm", 0.0), tiles),
            collective=stage.collective,
            kv_blocks_bandwidth=kv_blocks_bandwidth,
        )


def attention_blocks(heads: int, keys: int, split: AttentionSplit, sms: int) -> int:
    """Thread blocks a decode attention over ``heads`` (slots x KV heads on this GPU) of
    ``keys`` cached tokens runs: one per head and share of its context (``split``)."""
    if split == "whole":
        return heads
    if split == "fill":  # the context cut until the blocks fill the SMs, a token at least
        return heads * min(keys, max(1, -(-sms // heads)))
    return heads * -(-keys // split)


def kv_blocks_bandwidth(
    kernel: KernelProgram, gpu: GpuConfig, settings: GpuSettings
) -> dict[str, float]:
    """Each KV read of a decode step's ``kernel`` (by stage name) -> the bytes/s the thread
    blocks of the attention reading it stream together: one block's ``thread_block_bandwidth``
    times the blocks streaming at once (at most ``sms``), counted from that attention's own
    heads and keys (a window layer's and a full layer's differ)."""
    kv_reads = {stage.name for stage in kernel.stages if stage.op == KV_READ}
    rates: dict[str, float] = {}
    for stage in kernel.stages:
        if stage.op not in ATTENTION_OPS or stage.gemm is None:
            continue
        g = stage.gemm
        keys = g.k if stage.op == "attention_value" else g.n
        blocks = attention_blocks(g.batch, keys, settings.decode_attention_split, gpu.sms)
        for name in kv_reads.intersection(stage.inputs):
            rates.setdefault(name, min(blocks, gpu.sms) * gpu.thread_block_bandwidth)
    return rates


@dataclass(frozen=True)
class Segment:
    """Stages that run tile by tile in order, ending (or not) in a collective stage."""

    stages: tuple[GpuTileWork, ...]

    @property
    def collective(self) -> CollectiveSpec | None:
        """The collective the segment ends with (across more than one GPU), if any."""
        spec = self.stages[-1].collective if self.stages else None
        return spec if spec is not None and spec.group > 1 else None


def segments(
    kernel: KernelProgram,
    tiles: int,
    gpu: GpuConfig,
    settings: GpuSettings,
    *,
    decode: bool = False,
) -> tuple[Segment, ...]:
    """The kernel's stages (topological order) cut after each collective stage; in a
    ``decode`` step, each KV read streams through its attention's thread blocks."""
    blocks = kv_blocks_bandwidth(kernel, gpu, settings) if decode else {}
    out: list[Segment] = []
    current: list[GpuTileWork] = []
    for stage in kernel.stages:
        work = GpuTileWork.of(stage, tiles, gpu, settings, blocks.get(stage.name))
        current.append(work)
        if work.collective is not None and work.collective.group > 1:
            out.append(Segment(tuple(current)))
            current = []
    if current or not out:
        out.append(Segment(tuple(current)))
    return tuple(out)
