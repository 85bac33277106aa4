"""The Program: what the compiler hands the engine, for one static shape.

A Program describes ONE socket's work (tensor parallelism is symmetric: every socket runs the
same stages on its shard; collectives name the group). It is plain frozen data: the engine
needs nothing else to time a step, and tests can build one by hand.

Units: bytes, FLOPs, counts. No time appears here: time is the engine's job.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from rdu_sim.compiler.expert_load import ExpertLoad
from rdu_sim.kv.paged import PagedKV
from rdu_sim.shapes import AllToAllSpec, CollectiveKind, Gemm, StepShape

Tier = Literal["sram", "hbm", "ddr"]
TIERS: tuple[Tier, ...] = ("sram", "hbm", "ddr")


@dataclass(frozen=True)
class CollectiveSpec:
    """A collective a stage performs across the TP group, fused into the kernel."""

    kind: CollectiveKind
    bytes: float  # payload per socket per call (the full tensor size N of the algorithm)
    group: int  # sockets taking part
    # an all-to-all's routing (``bytes`` are then one copy of each of the device's tokens)
    exchange: AllToAllSpec | None = None


@dataclass(frozen=True)
class StageProgram:
    """One pipeline stage of a fused kernel: an operator (or a few fused) with its resources."""

    name: str  # unique within the kernel, e.g. "attn.q_a_proj"
    op: str  # operator kind, e.g. "gemm", "attention_score", "softmax", "allreduce"
    pcus: int
    pmus: int
    flops: float  # matrix FLOPs per call on this socket
    vector_flops: float  # elementwise FLOPs per call on this socket
    reads: Mapping[Tier, float]  # bytes read per call from each tier (weights, KV, spills)
    writes: Mapping[Tier, float]  # bytes written per call to each tier (KV writes, spills)
    inputs: tuple[str, ...] = ()  # producer stages in this kernel (pipeline edges)
    output_bytes: float = 0.0  # activation bytes streamed to consumers per call (on-chip)
    gemm: Gemm | None = None
    collective: CollectiveSpec | None = None
    # An earlier stage whose output selects which weights this stage reads (the router's
    # top-k for routed experts): a layer's weight loads cannot start before it has run.
    selected_by: str | None = None
    # Passes over its input rows, each re-reading its streamed operand (weights or KV) when
    # the operand does not stay resident in its SRAM (`compiler.buffers.residency`); its
    # `reads` already include them.
    passes: int = 1
    # PMU SRAM it holds: its stream buffers at the kernel's tiles plus what stays resident
    # (`compiler.buffers`); 0 for a hand-built stage.
    sram_bytes: float = 0.0
    # Rows (tokens) of the stage's output when each row is complete only once the stage has
    # consumed that row's whole input (a reduction along the row: a norm, a top-k, attention
    # over the cache, the MoE combine, a GEMM fed along its reduction dimension); 0 when the
    # output of every tile is final when the tile ends. The compiler sets it when the step has
    # fewer rows than the workload's tiles_per_stage: consumers then see such a row at once,
    # when its last tile ends, and its edges hold a layer's tiles (compiler.row_barriers,
    # compiler.buffers.whole_layer_edges).
    whole_row_outputs: int = 0


@dataclass(frozen=True)
class KernelProgram:
    """A fused kernel: a pipeline of stages, called `calls` times per step."""

    name: str  # e.g. "embedding", "decoder_dense", "decoder_moe", "snapkv_score", "lm_head"
    calls: int  # calls per step (e.g. 58 MoE layers)
    looped: bool  # with kernel looping the calls run as one call with a pipelined outer loop
    stages: tuple[StageProgram, ...]  # topologically ordered
    # The layer kernel this one was split from below `full` fusion ("": it is one): the
    # kernels of one layer run one after another, layer by layer.
    layer: str = ""
    # Tiles each stage streams per call, chosen by the compiler so the stages' buffers fit
    # their PMUs (`compiler.buffers.plan_tiles`); None (a hand-built kernel): the engine's
    # `tiles_per_stage`.
    tiles: int | None = None
    # The compiler's estimated time per call of the pipeline (`compile.kernel_time`: its
    # slowest stage, or its off-chip bytes), the pace its collectives' pieces are produced
    # at; 0 (a hand-built kernel): none known.
    pace_s: float = 0.0

    def tiles_or(self, default: int) -> int:
        """The tiles per call the engine simulates: the compiler's, else ``default``."""
        return self.tiles if self.tiles is not None else default

    @property
    def sram_bytes(self) -> float:
        """PMU SRAM the kernel holds while it runs: all its stages' (the one figure `run`,
        `step` and `inspect graph` report per kernel)."""
        return sum(stage.sram_bytes for stage in self.stages)

    def bytes_by_tier(self) -> dict[Tier, float]:
        """Bytes moved per step (all calls) per tier, reads plus writes."""
        totals: dict[Tier, float] = dict.fromkeys(TIERS, 0.0)
        for stage in self.stages:
            for tier in TIERS:
                totals[tier] += stage.reads.get(tier, 0.0) + stage.writes.get(tier, 0.0)
        return {tier: value * self.calls for tier, value in totals.items()}

    @property
    def flops(self) -> float:
        """Matrix FLOPs per step (all calls)."""
        return self.calls * sum(stage.flops for stage in self.stages)

    @property
    def collective_bytes(self) -> float:
        """Collective payload per step (all calls), per socket."""
        return self.calls * sum(s.collective.bytes for s in self.stages if s.collective)

    @property
    def offchip_bytes(self) -> float:
        """Bytes moved to and from off-chip memory per step (all calls): HBM and DDR."""
        per_tier = self.bytes_by_tier()
        return sum(per_tier[tier] for tier in OFFCHIP)


OFFCHIP: tuple[Tier, ...] = ("hbm", "ddr")
"""The off-chip tiers: what operational intensity divides by."""


def operational_intensity(kernels: Iterable[KernelProgram]) -> float | None:
    """Matrix FLOPs per byte of off-chip traffic of ``kernels`` together (a kernel, or a
    layer's kernels: SN40L paper, Table I); None when they move no off-chip byte."""
    group = list(kernels)
    moved = sum(k.offchip_bytes for k in group)
    return sum(k.flops for k in group) / moved if moved > 0 else None


@dataclass(frozen=True)
class TierUsage:
    """One tier of one socket: its capacity and what the compiler put there."""

    capacity_bytes: int
    weights_bytes: int = 0
    kv_bytes: int = 0
    activations_bytes: int = 0

    @property
    def used_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.activations_bytes

    @property
    def free_bytes(self) -> int:
        return self.capacity_bytes - self.used_bytes


@dataclass(frozen=True)
class TensorPlacement:
    """Where one tensor (or tensor class) lives on each socket."""

    name: str
    kind: Literal["weights", "kv", "activations"]
    tier: Tier
    bytes: int  # per socket


@dataclass(frozen=True)
class Placement:
    """Memory plan of one socket for a given number of batch slots."""

    batch_slots: int
    tiers: Mapping[Tier, TierUsage]
    tensors: tuple[TensorPlacement, ...] = field(default=())
    pipeline_stage: int = -1  # the pipeline stage whose sockets it plans (-1: no pipeline)
    # a paged KV cache's pool of pages (the stack's kv_page_tokens), which its KV bytes are;
    # None: static slots of the policy's slot each
    kv_pool: PagedKV | None = None
    # weights held whole on every socket beyond the slices the layout gives them (MLA's query
    # and value weights, `placement.whole_queries`), by name, and those extra bytes per socket
    replicas: tuple[str, ...] = ()
    replica_bytes: int = 0


@dataclass(frozen=True)
class Program:
    """Everything the engine needs to time one step of one static shape."""

    shape: StepShape
    tp: int
    kernels: tuple[KernelProgram, ...]
    placement: Placement
    # bytes a device sends its host at the step's end, before the next step can start
    # (the logits, when the serving stack samples on the host; none when it samples on
    # the device: the next step's input is already there)
    host_bytes: float = 0.0
    # Devices the step's collectives span when more than tp (one pipeline stage's tp x
    # dp_attention, under data-parallel attention): 0 is tp.
    stage_devices: int = 0
    # Two-batch overlap: the step's two micro-batches, each compiled for its share of the
    # shape, which the engine runs side by side (empty: the step runs as one batch).
    micro_batches: tuple[Program, ...] = ()
    # Whole experts paced by their busiest device: its load at this shape (None: no such
    # experts, or the expected busiest of uniform routing over E / tp experts per socket).
    expert_balance: ExpertLoad | None = None
    # Pipeline stages: each stage's Program of one micro-batch, and how many micro-batches
    # the step's batch is cut into (empty: no pipeline; ``kernels`` are then the first
    # stage's, for reports).
    pipeline: tuple[Program, ...] = ()
    pipeline_micro_batches: int = 1
    pipeline_transfer_bytes: float = 0.0  # one micro-batch's activations, stage to stage
    # A MoE step under static expert loading: its routed experts gathered after the router
    # ("gather") or every expert streamed ("all"), the compiler's choice
    # (compiler.expert_schedule); "" for any other step.
    expert_schedule: Literal["", "gather", "all"] = ""

    @property
    def devices(self) -> int:
        """Devices the step's collectives span: tp, or the stage's devices."""
        return self.stage_devices or self.tp

    def bytes_by_tier(self) -> dict[Tier, float]:
        """Bytes moved per step per tier on one socket (reads plus writes)."""
        totals: dict[Tier, float] = dict.fromkeys(TIERS, 0.0)
        for kernel in self.kernels:
            for tier, value in kernel.bytes_by_tier().items():
                totals[tier] += value
        return totals

    @property
    def flops(self) -> float:
        """Matrix FLOPs per step on one socket."""
        return sum(kernel.flops for kernel in self.kernels)

    @property
    def collective_bytes(self) -> float:
        """Collective payload per step on one socket."""
        return sum(kernel.collective_bytes for kernel in self.kernels)

    @property
    def sram_bytes(self) -> float:
        """Peak PMU SRAM of the step: its largest kernel's (kernels run one at a time)."""
        return max((kernel.sram_bytes for kernel in self.kernels), default=0.0)


def with_sram(placement: Placement, sram_bytes: float) -> Placement:
    """``placement`` with its SRAM tier holding ``sram_bytes`` of stage buffers (the running
    kernel's; SRAM holds no persistent tensor)."""
    tiers = dict(placement.tiers)
    if "sram" in tiers:
        tiers["sram"] = TierUsage(
            capacity_bytes=tiers["sram"].capacity_bytes, activations_bytes=math.ceil(sram_bytes)
        )
    return replace(placement, tiers=tiers)
