"""What the engine returns for one simulated step: :class:`StepTiming` and :class:`KernelTiming`.

Plain frozen data, one socket's view (under symmetric tensor parallelism every socket does the
same work, so per-socket figures are the step's figures). ``to_dict`` gives a JSON-safe object
whose keys are a contract for ``rdu-sim step --json``, the serving step cache and reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rdu_sim.engine.collective_port import CollectiveTiming
from rdu_sim.engine.links import LINK_FIELDS
from rdu_sim.engine.records import Recorder, TraceRecords

if TYPE_CHECKING:
    from rdu_sim.compiler.expert_load import ExpertLoad
    from rdu_sim.compiler.program import KernelProgram, Program
    from rdu_sim.config.hardware import LinkConfig
    from rdu_sim.config.stack import HostTime, StackConfig
    from rdu_sim.config.workload import EngineConfig
    from rdu_sim.engine.fast_forward import KernelResult
    from rdu_sim.engine.step_run import KernelsRun
    from rdu_sim.shapes import StepShape

UNIT_KINDS: tuple[str, ...] = ("pcu", "pmu", "hbm", "ddr", "link", "boundaries")
"""What the SN40L engine reports busy time of (``StepTiming.busy_s``'s keys)."""

BYTE_TIERS: tuple[str, ...] = ("hbm", "ddr", "sram", "p2p")
"""Keys of ``StepTiming.bytes_by_tier``: the Program's tiers plus socket-to-socket traffic."""


@dataclass(frozen=True)
class KernelTiming:
    """One kernel of the step: all its calls, with launch and sync overheads included.

    ``period_s`` is the steady per-layer period of a looped kernel that was fast-forwarded
    (its cycle's span over the cycle's layers), else ``None``; ``simulated_iterations``
    counts the layer iterations the engine actually simulated (fewer than ``calls`` when
    identical calls or a periodic looped pipeline were advanced instead of re-simulated; never
    more: a looped run that finds no period is the full run).
    """

    name: str
    calls: int
    looped: bool
    time_s: float  # all calls, launch + execute + sync
    overhead_s: float  # launch (program + argument load) and sync part of time_s
    simulated_iterations: int
    period_s: float | None = None
    tiles: int = 0  # tiles each stage streamed per call (the compiler's choice)
    sram_bytes: float = 0.0  # PMU SRAM its stages held (``KernelProgram.sram_bytes``)

    @classmethod
    def of(
        cls, kernel: KernelProgram, result: KernelResult, tiles: int = 0, sram_bytes: float = 0.0
    ) -> KernelTiming:
        """``kernel``'s timing from its result (``fast_forward.time_kernel``)."""
        return cls(
            name=kernel.name,
            calls=kernel.calls,
            looped=kernel.looped,
            time_s=result.stats.time_s,
            overhead_s=result.stats.overhead_s,
            simulated_iterations=result.simulated_iterations,
            period_s=result.period_s,
            tiles=tiles,
            sram_bytes=sram_bytes,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {
            "name": self.name,
            "calls": self.calls,
            "looped": self.looped,
            "time_s": self.time_s,
            "overhead_s": self.overhead_s,
            "simulated_iterations": self.simulated_iterations,
            "period_s": self.period_s,
            "tiles": self.tiles,
            "sram_bytes": self.sram_bytes,
        }


@dataclass(frozen=True)
class StepTiming:
    """Timing of one Program step on one socket (symmetric TP) of the hardware model.

    Busy times are per unit kind, averaged over the socket's units where there are many:
    ``pcu`` is PCU-seconds over the socket's PCU count, ``pmu`` PMU-port-seconds over its PMU
    count, ``hbm``/``ddr`` the time at least one stream was moving bytes, ``link`` the
    busiest P2P link direction's serialisation time (summed over kernels), ``boundaries``
    the kernels' launch and sync time at their boundaries (device time doing no work; summed
    over the calls), and on a GPU ``sm`` its SMs', ``blocks`` its decode attention's thread
    blocks' and ``launch`` the host CPU's time launching the step's kernels. ``utilization`` is
    busy time over ``step_s``, each <= 1. ``events`` are SimPy events actually processed (at
    most ``engine.max_events``); ``estimated_events`` is the rough lower bound checked against
    it before simulating.
    """

    step_s: float
    phase: str
    batch: int
    tokens: int  # new tokens per slot (the prompt or chunk in prefill, 1 in decode)
    context: int  # cached tokens each slot attends to besides the new ones
    tp: int
    flops: float  # matrix FLOPs per socket
    vector_flops: float  # element-wise FLOPs per socket
    bytes_by_tier: dict[str, float]  # hbm, ddr, sram (reads + writes), p2p (bytes sent)
    kernels: tuple[KernelTiming, ...]
    busy_s: dict[str, float]
    utilization: dict[str, float]
    hbm_bandwidth_fraction: float  # achieved HBM bytes/s over peak bandwidth
    flops_fraction: float  # achieved matrix FLOP/s over the socket's peak
    events: int
    estimated_events: int
    tiles_per_stage: int
    sockets_simulated: int
    fast_forward: bool
    records: TraceRecords | None = field(default=None, compare=True, repr=False)
    # each collective stage: algorithm, bytes, hops, latency/bandwidth terms, simulated time
    collectives: tuple[CollectiveTiming, ...] = ()
    # what the serving stack's host adds to the device's step (``Scenario.stack``): its
    # serial time plus the overlapped time that outlasts the device; included in ``step_s``
    runtime_s: float = 0.0
    # the host's time on the step's critical path (the logits' trip over the host link
    # when the stack samples on the host included), and what it runs beside the device
    host_serial_s: float = 0.0
    host_overlapped_s: float = 0.0
    # of host_serial_s, the trip over the host link (``HostTime.transfer_s``)
    host_transfer_s: float = 0.0
    # devices the step's collectives span (a stage's tp x dp_attention), when more than tp
    devices: int = 0
    # whole experts: the busiest device's load, which the step waits for
    expert_balance: ExpertLoad | None = None
    # a static MoE step's expert schedule: "gather" or "all" (``Program.expert_schedule``)
    expert_schedule: str = ""
    # pipeline stages: their number, the micro-batches, each stage's time and the bubble
    pipeline: dict[str, Any] | None = None
    # busy_s["link"] by link class: each class's busiest direction's serialisation time,
    # keyed by the hardware's system.* field (``engine.links.LINK_FIELDS``); the classes the
    # step sent on (what ``report.bound`` names a link-bound step by)
    link_busy_s: dict[str, float] = field(default_factory=dict)
    # each unit's time on the step's critical path, summed over its kernels (``RunStats``):
    # "pcu" and "pmu" the busiest stage's PCUs' and PMU ports' busy time (SN40L), "link" the
    # busiest link direction's time with a transfer under way, latency included; what
    # ``report.bound`` takes the compute, pmu and link times from
    critical_s: dict[str, float] = field(default_factory=dict)
    # critical_s["link"] by link class, as link_busy_s is busy_s["link"]'s
    link_flight_s: dict[str, float] = field(default_factory=dict)

    @property
    def device_s(self) -> float:
        """The device's own time of the step (``device_time``)."""
        return device_time(self.step_s, self.runtime_s)

    @property
    def host_s(self) -> float:
        """The host's own time per step: serial and overlapped work together (what it would
        take with the device infinitely fast)."""
        return self.host_serial_s + self.host_overlapped_s

    @property
    def compute_utilization(self) -> float:
        """Share of the step the compute units were busy: SN40L's PCUs, a GPU's SMs."""
        return self.utilization.get("pcu", self.utilization.get("sm", 0.0))

    @property
    def sram_bytes(self) -> float:
        """Peak PMU SRAM of the step: its largest kernel's (``Program.sram_bytes``)."""
        return max((k.sram_bytes for k in self.kernels), default=0.0)

    def kernel(self, name: str) -> KernelTiming:
        """The timing of the kernel called ``name`` (KeyError listing valid names)."""
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel {name!r}; kernels: {[k.name for k in self.kernels]}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of everything but the trace records."""
        return {
            "step_s": self.step_s,
            "device_s": self.device_s,
            "runtime_s": self.runtime_s,
            "host_serial_s": self.host_serial_s,
            "host_overlapped_s": self.host_overlapped_s,
            "phase": self.phase,
            "batch": self.batch,
            "tokens": self.tokens,
            "context": self.context,
            "tp": self.tp,
            "flops": self.flops,
            "vector_flops": self.vector_flops,
            "bytes_by_tier": dict(self.bytes_by_tier),
            "hbm_bandwidth_fraction": self.hbm_bandwidth_fraction,
            "flops_fraction": self.flops_fraction,
            "busy_s": dict(self.busy_s),
            "utilization": dict(self.utilization),
            "kernels": [k.to_dict() for k in self.kernels],
            "events": self.events,
            "estimated_events": self.estimated_events,
            "tiles_per_stage": self.tiles_per_stage,
            "sockets_simulated": self.sockets_simulated,
            "fast_forward": self.fast_forward,
            "sram_bytes": self.sram_bytes,
            "collectives": [c.to_dict() for c in self.collectives],
            **({"devices": self.devices} if self.devices else {}),
            **(
                {"expert_balance": self.expert_balance.to_dict()}
                if self.expert_balance is not None
                else {}
            ),
            **({"expert_schedule": self.expert_schedule} if self.expert_schedule else {}),
            **({"pipeline": dict(self.pipeline)} if self.pipeline is not None else {}),
        }


def device_time(step_s: float, runtime_s: float) -> float:
    """The device's own time of a step: the step less what the serving runtime's host added
    to it (``runtime_s``: its serial time plus the overlapped time that outlasts the device)."""
    return step_s - runtime_s


def step_timing(
    program: Program,
    run: KernelsRun,
    config: EngineConfig,
    stack: StackConfig,
    *,
    step_s: float,
    events: int,
    bytes_by_tier: dict[str, float],
    busy_s: dict[str, float],
    kernels: tuple[KernelTiming, ...],
    hbm_bandwidth: float,
    peak_flops: float,
    sockets_simulated: int,
    timeline: Recorder | None,
    host_link: LinkConfig,
) -> StepTiming:
    """A simulated step's timing, for every engine: the shape is the Program's, the totals
    and collectives the kernels' (``run``), the step the device's ``step_s`` plus the
    serving stack's host time, each unit's utilization its busy time over the step, and
    the shares of peak HBM bandwidth and matrix FLOP/s are achieved rates over
    ``hbm_bandwidth`` and ``peak_flops`` (0 for an empty step). The host's time is the
    stack's rule (``HostWorkConfig.time``) around the device's step, with what the Program
    sends the host (``Program.host_bytes``) over ``host_link`` on the critical path."""
    shape = program.shape
    transfer_s = host_transfer_s(program.host_bytes, host_link)
    host = step_host_time(stack, shape, step_s, transfer_s, program.devices)
    runtime_s = host.added_s
    if timeline is not None:
        record_host(timeline, step_s, host)
    step_s += runtime_s
    total = run.total

    def per_step(value: float) -> float:
        return value / step_s if step_s > 0 else 0.0

    by_class = (
        total.intra_node_link_busy_s,
        total.inter_node_link_busy_s,
        total.inter_rack_link_busy_s,
    )
    link_busy = {name: s for name, s in zip(LINK_FIELDS, by_class, strict=True) if s > 0}
    flights = (
        total.intra_node_link_flight_s,
        total.inter_node_link_flight_s,
        total.inter_rack_link_flight_s,
    )
    link_flight = {name: s for name, s in zip(LINK_FIELDS, flights, strict=True) if s > 0}
    return StepTiming(
        step_s=step_s,
        phase=shape.phase,
        batch=shape.batch,
        tokens=shape.tokens,
        context=shape.cache_len,
        tp=program.tp,
        flops=total.flops,
        vector_flops=total.vector_flops,
        bytes_by_tier=bytes_by_tier,
        kernels=kernels,
        busy_s=busy_s,
        utilization={kind: per_step(busy) for kind, busy in busy_s.items()},
        hbm_bandwidth_fraction=per_step(total.hbm_bytes) / hbm_bandwidth,
        flops_fraction=per_step(total.flops) / peak_flops,
        events=events,
        estimated_events=run.estimated_events,
        tiles_per_stage=config.tiles_per_stage,
        sockets_simulated=sockets_simulated,
        fast_forward=config.fast_forward,
        records=timeline.freeze() if timeline is not None else None,
        collectives=run.collectives,
        runtime_s=runtime_s,
        host_serial_s=host.serial_s,
        host_overlapped_s=host.overlapped_s,
        host_transfer_s=host.transfer_s,
        devices=program.stage_devices,
        expert_balance=program.expert_balance,
        expert_schedule=program.expert_schedule,
        link_busy_s=link_busy,
        critical_s={
            "pcu": total.pcu_stage_s,
            "pmu": total.pmu_stage_s,
            "link": total.link_flight_s,
        },
        link_flight_s=link_flight,
    )


RUNTIME_TRACK = "runtime"
"""The trace track (on socket 0) of the serving stack's host work around the step."""


def record_host(timeline: Recorder, device_s: float, host: HostTime) -> None:
    """The stack's host time on the step's trace, so the trace spans the step: the work it
    runs beside the device from the step's start, and after the device (and whatever of
    that work outlasts it) its serial work: the logits' trip over the host link, then the
    stack's own. The same rule for every engine (``step_timing``)."""
    track = RUNTIME_TRACK
    if host.overlapped_s > 0:
        timeline.slice(0, track, "host work beside the device", 0.0, host.overlapped_s)
    start = device_s + host.exposed_s
    if host.transfer_s > 0:
        timeline.slice(0, track, "logits to the host", start, start + host.transfer_s)
    own = host.serial_s - host.transfer_s
    if own > 0:
        end = start + host.serial_s
        timeline.slice(0, track, "host serial work", end - own, end)


def step_host_time(
    stack: StackConfig, shape: StepShape, device_s: float, transfer_s: float, devices: int
) -> HostTime:
    """The serving stack's host time around a step of ``shape`` on ``devices`` devices: a
    slot's work for every sequence it runs (a mixed step's decode rows too), a prompt's for
    each it prefills, and on more than one device its sequences' page tables sent to the
    others."""
    prompts = shape.batch if shape.phase == "prefill" else 0
    sent = kv_pages(shape, stack.kv_page_tokens) if devices > 1 else 0
    return stack.host.time(shape.sequences, device_s, transfer_s, prompts, sent)


def kv_pages(shape: StepShape, page_tokens: int | None) -> int:
    """The KV-cache pages a step's sequences hold after it (the entries of their page
    tables): each slot's cache and new tokens, and a mixed step's decode rows', in pages of
    ``page_tokens`` (none: a static cache, no page table)."""
    if page_tokens is None:
        return 0
    pages = shape.batch * -(-(shape.cache_len + shape.tokens) // page_tokens)
    return pages + shape.decode_batch * -(-(shape.decode_cache_len + 1) // page_tokens)


def host_transfer_s(nbytes: float, link: LinkConfig) -> float:
    """Seconds to send ``nbytes`` to the host over its link (none: no time)."""
    return link.latency + nbytes / link.bandwidth if nbytes > 0 else 0.0
