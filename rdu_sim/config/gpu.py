"""Typed, validated description of a GPU system: one GPU and the system of GPUs.

A second kind of hardware beside SN40L (``kind: gpu`` in a hardware file). The system part
(GPUs per node, links, topology, collectives) is the same ``SystemConfig`` SN40L files use:
one model of how devices are wired, whatever the device. The shipped values and their
public sources live in hw_configs/dgx-h100.yaml, one comment per value.
"""

from typing import Literal, Self

from pydantic import Field, model_validator

from rdu_sim.config.base import StrictModel
from rdu_sim.config.hardware import HardwareBase, MemoryTierConfig
from rdu_sim.config.limits import MAX_KERNEL_SECONDS, MIN_RATE, rate_floor
from rdu_sim.config.units import BytesPerSecond, FlopsPerSecond, ShortSeconds

_MAX_FLOPS = 1e18


class GpuKernelOverheadsConfig(StrictModel):
    """What a kernel boundary costs on a GPU.

    ``launch`` and ``graph_launch`` are host CPU time: the host queues kernels ahead of the
    device, so they cost device time only where kernels are shorter than their launches
    (a CUDA graph launches a whole step at once). ``sync`` is device time at every kernel
    boundary, graph or not: the device-wide completion of one kernel and the start of the
    next.
    """

    launch: ShortSeconds = Field(
        ge=0, le=MAX_KERNEL_SECONDS, description="host CPU time to launch one kernel on a stream"
    )
    sync: ShortSeconds = Field(
        ge=0,
        le=MAX_KERNEL_SECONDS,
        description="device time at each kernel boundary: the device-wide completion of one "
        "kernel and the start of the next",
    )
    graph_launch: ShortSeconds = Field(
        ge=0, le=MAX_KERNEL_SECONDS, description="host CPU time to launch one CUDA graph (a step)"
    )


class GpuConfig(StrictModel):
    """One GPU: tensor-core and vector rates, the GEMM tile shape, HBM and kernel overheads."""

    bf16_flops: FlopsPerSecond = Field(
        ge=MIN_RATE, le=_MAX_FLOPS, description="dense BF16/FP16 tensor-core FLOP/s of one GPU"
    )
    fp8_flops: FlopsPerSecond = Field(
        ge=MIN_RATE,
        le=_MAX_FLOPS,
        description="dense FP8 tensor-core FLOP/s (GEMMs whose weights, or attention whose KV "
        "cache, are stored in fp8)",
    )
    vector_flops: FlopsPerSecond = Field(
        ge=MIN_RATE,
        le=_MAX_FLOPS,
        description="non-tensor FP32 FLOP/s (norms, softmax, activations)",
    )
    max_gemm_efficiency: float = Field(
        gt=0, le=1, description="best achievable fraction of tensor peak on a well-shaped GEMM"
    )
    mma_rows: int = Field(
        ge=1, le=4096, description="rows of the tensor-core instruction tile (padding of m or n)"
    )
    mma_cols: int = Field(
        ge=1, le=4096, description="column granularity of the tensor-core instruction tile"
    )
    sms: int = Field(
        ge=2,
        le=100_000,
        description="streaming multiprocessors: the compute a kernel shares with "
        "communication kernels running beside it (two-batch overlap), and the most thread "
        "blocks of decode attention that stream at once",
    )
    thread_block_bandwidth: BytesPerSecond = Field(
        ge=MIN_RATE,
        le=1e15,
        description="HBM bytes/s one thread block streams on its own (the loads it keeps in "
        "flight over the memory's latency): decode attention whose keys and values few "
        "blocks read is bound by it (stack.decode_attention_split)",
    )
    hbm: MemoryTierConfig
    kernel: GpuKernelOverheadsConfig

    @model_validator(mode="after")
    def _effective_rates(self) -> Self:
        """The tensor-core rates after the GEMM efficiency obey SN40L's floor (one FLOP/s):
        a denormal rate would make a step's time infinite or NaN."""
        for name in ("bf16_flops", "fp8_flops"):
            rate_floor(getattr(self, name), self.max_gemm_efficiency, f"{name} x efficiency")
        return self


class GpuHardwareConfig(HardwareBase):
    """A GPU system: one GPU type and the system built from it (``system.sockets`` GPUs)."""

    kind: Literal["gpu"] = Field(description="'gpu': this file describes a GPU system")
    gpu: GpuConfig

    @property
    def peak_flops(self) -> float:
        """Dense BF16 tensor-core FLOP/s of one GPU."""
        return self.gpu.bf16_flops

    @property
    def hbm(self) -> MemoryTierConfig:
        """One GPU's HBM."""
        return self.gpu.hbm
