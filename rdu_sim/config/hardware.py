"""Typed, validated description of SN40L hardware: one socket and the system of sockets.

Every field has a unit (parsed once by `units`), a one-line description, and limits.
The shipped values and their sources live in hw_configs/*.yaml, one comment per value.
"""

import math
from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import Field, model_validator

from rdu_sim import human
from rdu_sim.config.base import StrictModel
from rdu_sim.config.economics import CostConfig, PowerConfig
from rdu_sim.config.errors import FieldProblem
from rdu_sim.config.limits import (
    MAX_BANDWIDTH,
    MAX_KERNEL_SECONDS,
    MAX_SOCKET_FLOPS,
    MAX_SOCKET_SRAM,
    MAX_SOCKET_SRAM_BANDWIDTH,
    MAX_TIER_BYTES,
    MIN_RATE,
    per_unit_total,
    rate_floor,
)
from rdu_sim.config.units import (
    Bytes,
    BytesPerSecond,
    Capacity,
    FlopsPerSecond,
    ShortSeconds,
)
from rdu_sim.config.wiring import Policy, Topology


class MemoryTierConfig(StrictModel):
    """An off-chip memory tier (HBM or DDR) of one socket."""

    capacity: Capacity = Field(gt=0, le=MAX_TIER_BYTES, description="bytes per socket")
    bandwidth: BytesPerSecond = Field(ge=MIN_RATE, le=MAX_BANDWIDTH, description="peak bytes/s")
    latency: ShortSeconds = Field(ge=0, le=1.0, description="first-byte latency of one request")
    efficiency: float = Field(
        gt=0, le=1, description="achievable fraction of peak bandwidth for streaming reads"
    )

    @model_validator(mode="after")
    def _effective_rate(self) -> Self:
        rate_floor(self.bandwidth, self.efficiency, "bandwidth x efficiency")
        return self


USABLE_UNITS = (
    "at least 1 / socket.usable_fraction: floor(usable_fraction x count) must leave one, as "
    "a kernel stage needs one"
)
"""The least PCU and PMU count, a rule across fields (``SocketConfig``'s check): what the
schema's descriptions of ``pcu.count`` and ``pmu.count`` say beside their minimum of 1."""


class PCUConfig(StrictModel):
    """Pattern compute units: the socket's compute."""

    count: int = Field(ge=1, le=1_000_000, description=f"PCUs per socket ({USABLE_UNITS})")
    peak_flops: FlopsPerSecond = Field(
        ge=MIN_RATE, le=1e16, description="peak BF16 FLOP/s of one PCU"
    )
    vector_flops: FlopsPerSecond = Field(
        ge=MIN_RATE, le=1e16, description="elementwise FLOP/s of one PCU in SIMD-pipeline mode"
    )
    systolic_rows: int = Field(ge=1, le=4096, description="output-stationary array rows")
    systolic_cols: int = Field(ge=1, le=4096, description="output-stationary array columns")
    max_gemm_efficiency: float = Field(
        gt=0, le=1, description="best achievable fraction of peak for a well-shaped GEMM tile"
    )

    @model_validator(mode="after")
    def _effective_rate(self) -> Self:
        rate_floor(self.peak_flops, self.max_gemm_efficiency, "peak_flops x max_gemm_efficiency")
        for name in ("peak_flops", "vector_flops"):
            rate = getattr(self, name)
            per_unit_total(name, rate, self.count, "PCU", MAX_SOCKET_FLOPS, human.flops)
        return self


class PMUConfig(StrictModel):
    """Pattern memory units: the socket's on-chip SRAM, distributed beside the PCUs."""

    count: int = Field(ge=1, le=1_000_000, description=f"PMUs per socket ({USABLE_UNITS})")
    sram: Bytes = Field(gt=0, le=2**40, description="SRAM bytes of one PMU")
    bandwidth: BytesPerSecond = Field(
        ge=MIN_RATE, le=MAX_BANDWIDTH, description="bytes/s of one PMU"
    )

    @model_validator(mode="after")
    def _socket_totals(self) -> Self:
        per_unit_total("sram", self.sram, self.count, "PMU", MAX_SOCKET_SRAM, human.size)
        per_unit_total(
            "bandwidth",
            self.bandwidth,
            self.count,
            "PMU",
            MAX_SOCKET_SRAM_BANDWIDTH,
            human.bandwidth,
        )
        return self


class KernelOverheadsConfig(StrictModel):
    """What a kernel call costs besides its work: AGCU program and argument loads, the sync."""

    program_load: ShortSeconds = Field(
        ge=0, le=MAX_KERNEL_SECONDS, description="load a kernel's program"
    )
    argument_load: ShortSeconds = Field(
        ge=0, le=MAX_KERNEL_SECONDS, description="load a call's arguments"
    )
    sync: ShortSeconds = Field(
        ge=0, le=MAX_KERNEL_SECONDS, description="host/AGCU sync at a kernel boundary"
    )
    layer_loop: ShortSeconds = Field(
        default=0.0,
        ge=0,
        le=MAX_KERNEL_SECONDS,
        description="per-iteration cost of a looped kernel's outer loop (no host sync); "
        "the shipped SN40L files say 0.5 us, the default 0 makes a loop iteration free",
    )


class SocketConfig(StrictModel):
    """One SN40L socket (two dies in one package)."""

    pcu: PCUConfig
    pmu: PMUConfig
    usable_fraction: float = Field(
        gt=0, le=1, description="fraction of PCUs and PMUs a fused kernel can use"
    )
    hbm: MemoryTierConfig
    ddr: MemoryTierConfig
    # Read by no model yet: the DDR-to-HBM copy engine of the memory-tier work (issue 18)
    # will; tests/test_hardware_parameters.py lists it as the one known exception.
    ddr_to_hbm_bandwidth: BytesPerSecond = Field(
        ge=MIN_RATE, le=MAX_BANDWIDTH, description="DDR-to-HBM copy rate of one socket"
    )
    kernel: KernelOverheadsConfig

    @model_validator(mode="after")
    def _usable_units(self) -> Self:
        # Every stage needs at least one PCU and one PMU, so zero usable leaves no kernel
        # runnable.
        for unit, count, usable in (
            ("pcu", self.pcu.count, self.usable_pcus),
            ("pmu", self.pmu.count, self.usable_pmus),
        ):
            if usable < 1:
                raise ValueError(
                    f"usable_fraction x {unit}.count = {self.usable_fraction:g} x {count} "
                    f"leaves no usable {unit.upper()}: {USABLE_UNITS}"
                )
        return self

    @property
    def usable_pcus(self) -> int:
        """The PCUs a fused kernel may use: ``floor(usable_fraction x pcu.count)`` (the
        compiler's budget, and what a step's compute time alone is spread over)."""
        return math.floor(self.usable_fraction * self.pcu.count)

    @property
    def usable_pmus(self) -> int:
        """The PMUs a fused kernel may use: ``floor(usable_fraction x pmu.count)``."""
        return math.floor(self.usable_fraction * self.pmu.count)

    @property
    def peak_flops(self) -> float:
        """Socket peak BF16 FLOP/s."""
        return self.pcu.count * self.pcu.peak_flops

    @property
    def sram_bytes(self) -> int:
        """All PMUs' SRAM."""
        return self.pmu.count * self.pmu.sram


class LinkConfig(StrictModel):
    """A socket-to-socket peer-to-peer link, one direction."""

    bandwidth: BytesPerSecond = Field(
        ge=MIN_RATE, le=MAX_BANDWIDTH, description="bytes/s per direction"
    )
    latency: ShortSeconds = Field(ge=0, le=1.0, description="one hop, first byte")


class SystemConfig(StrictModel):
    """Sockets, how they are grouped into nodes, and how they talk."""

    sockets: int = Field(ge=1, le=4096, description="sockets in the system")
    sockets_per_node: int = Field(ge=1, le=4096, description="sockets sharing one node")
    intra_node_link: LinkConfig
    inter_node_link: LinkConfig
    host_link: LinkConfig = Field(
        description="a device's link to its host (PCIe): what the device sends the host "
        "on a step's critical path crosses it (the logits, when the stack samples on the "
        "host)"
    )
    nodes_per_rack: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="nodes one rack holds, its nodes joined by inter_node_link and racks by "
        "inter_rack_link; none: no rack level (one network joins every node)",
    )
    inter_rack_link: LinkConfig | None = Field(
        default=None,
        description="a device's share of the network between racks, one direction (needs "
        "nodes_per_rack)",
    )
    network_via_intra_node_port: bool = Field(
        default=False,
        description="true: what a device sends to another node or rack leaves through its "
        "intra_node_link port too, then its network port (two ports in series: it queues "
        "behind the device's in-node traffic and runs at the slower port's rate), as when one "
        "I/O unit carries all of a device's traffic; false: the network port is the device's "
        "own (a GPU with its own NIC). Read by the switched topology (the others give each "
        "pair its own link). The shipped SN40L files say true, the GPU files false (the "
        "default)",
    )
    topology: Topology = Field(
        default="ring",
        description="how sockets are wired: 'ring' (each socket to its two neighbours), "
        "'switched' (one port per socket into a non-blocking switch: the port is shared by "
        "everything the socket sends) or 'fully_connected' (a link per pair); full duplex. "
        "Every shipped file (SN40L and GPU) says 'switched': the default 'ring' is no shipped "
        "machine's (a ring gives a socket two links where a switch gives it one port)",
    )
    collective_algorithm: Policy = Field(
        default="auto",
        description="'auto' chooses per collective from what the topology allows by an "
        "NCCL-like cost estimate (hops x latency + bytes / bandwidth); a name forces it: "
        "'ring' (one way round), 'bidirectional_ring' (half each way), 'one_shot' (every "
        "socket sends to every other), 'two_shot' (one-shot reduce-scatter then all-gather), "
        "'tree' (binary-tree all-reduce), 'hierarchical' (all-reduce inside each node, then "
        "across nodes on each socket's rail); the direct forms need topology switched or "
        "fully_connected, the tree fully_connected, beyond 2 sockets per group, the "
        "hierarchical one a group of whole nodes. Every shipped file says 'auto' (the "
        "default)",
    )
    collective_chunks: int = Field(
        default=4,
        ge=1,
        le=1024,
        description="chunks a collective is split into to pipeline it with its producer "
        "(every shipped file: 4, the default)",
    )

    @model_validator(mode="after")
    def _nodes_divide(self) -> Self:
        if self.sockets > self.sockets_per_node and self.sockets % self.sockets_per_node:
            raise ValueError(
                f"sockets ({self.sockets}) must be a multiple of sockets_per_node "
                f"({self.sockets_per_node})"
            )
        if (self.nodes_per_rack is None) != (self.inter_rack_link is None):
            raise ValueError(
                "nodes_per_rack and inter_rack_link go together: a rack level needs both "
                "(omit both for one network joining every node)"
            )
        rack = self.sockets_per_rack
        if rack is not None and self.sockets > rack and self.sockets % rack:
            raise ValueError(
                f"sockets ({self.sockets}) must be a multiple of a rack's sockets "
                f"(sockets_per_node x nodes_per_rack = {rack})"
            )
        return self

    @property
    def network_through_node_port(self) -> bool:
        """Whether a send to another node (or rack) crosses the sender's in-node port before
        its network port: the switched wiring with ``network_via_intra_node_port`` (a ring
        or a link per pair has no shared port). The one statement of the rule: the links
        (``hw.collectives.Topology``) and the estimates (``hw.collective_choice.Wiring``)
        are handed this value."""
        return self.topology == "switched" and self.network_via_intra_node_port

    @property
    def sockets_per_rack(self) -> int | None:
        """Sockets (or GPUs) of one rack; None without a rack level."""
        if self.nodes_per_rack is None:
            return None
        return self.sockets_per_node * self.nodes_per_rack


class HardwareBase(StrictModel):
    """What every kind of hardware file holds besides its device: the system of devices,
    what it draws and costs, and the serving stack a workload runs unless it names one."""

    name: str = Field(min_length=1, max_length=200, description="the name reports show")
    description: str = Field(default="", description="what the file describes (free text)")
    system: SystemConfig
    power: PowerConfig | None = Field(
        default=None,
        description="draw while serving, an average or a maximum (power.figure; none: energy "
        "not reported)",
    )
    cost: CostConfig = Field(default_factory=CostConfig, description="prices of time and energy")
    default_stack: str = Field(
        default="none",
        min_length=1,
        description="the serving stack a workload that names none runs: a shipped stack's "
        "name, a stack file relative to this file, or 'none' (the device alone: no host time)",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_runtime(cls, data: Any) -> Any:
        """A hardware file's ``runtime:`` (where a stack's fields once were) is refused at
        that field and its line (a ``FieldProblem``), with where they went."""
        if isinstance(data, Mapping) and "runtime" in data:
            raise FieldProblem(
                "runtime",
                "belongs to a serving stack, not to the hardware: move its fields to a stack "
                "file (the shipped ones are in stacks/, `rdu-sim examples`) and name it with "
                "`stack:` in the workload or `default_stack:` here (docs/calibration.md)",
            )
        return data


class HardwareConfig(HardwareBase):
    """A complete hardware description: one socket type and the system built from it."""

    # The default kind (a file without `kind:` is SN40L); left out of dumps so an SN40L
    # configuration hashes and round-trips as it did before GPUs (rdu_sim.config.hardware_file).
    kind: Literal["rdu"] = Field(
        default="rdu", exclude=True, description="'rdu' (the default): SN40L sockets"
    )
    socket: SocketConfig

    @property
    def peak_flops(self) -> float:
        """Peak BF16 FLOP/s of one socket."""
        return self.socket.peak_flops

    @property
    def hbm(self) -> MemoryTierConfig:
        """One socket's HBM."""
        return self.socket.hbm
