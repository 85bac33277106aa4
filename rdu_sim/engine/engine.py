"""The engine: time one step of a compiled Program on the SN40L hardware model.

``Engine(hardware, ...).simulate_step(program)`` (or the function ``simulate_step``) runs the
Program's kernels one after another, each a SimPy simulation of its stages streaming tiles
through PCUs, PMU buffers, the socket's HBM/DDR channels and the P2P links (see
``kernel_pipeline`` and ``stage_runner``), launched and synchronized by the AGCU. Kernels are
separated by a synchronization, so each is simulated in its own environment and placed after
the previous one; ``fast_forward`` advances identical calls (exactly) and periodic looped layers
instead of re-simulating them (``fast_forward`` module).

Symmetric TP: by default one socket is simulated, with one rotational period of each ring
collective on the links (socket 0's chain for identical hops, one node's sockets and links for a
ring over several nodes: exact, see ``hw.collectives``); ``all_sockets=True`` simulates all
``program.tp`` sockets and every link hop, and gives the same step time.

All state lives in the Engine's runs (no globals), so the same step twice gives the same
StepTiming, and engines in one process do not affect each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdu_sim.compiler.program import KernelProgram, Program
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.workload import EngineConfig
from rdu_sim.engine.budget import check_budget, estimate_events
from rdu_sim.engine.fast_forward import MIN_PROBED_CALLS, first_boundary, time_kernel
from rdu_sim.engine.kernel_run import KernelRun, RunSettings, Watch, run_kernel
from rdu_sim.engine.records import Recorder
from rdu_sim.engine.run_stats import RunStats
from rdu_sim.engine.tile_work import TileWork
from rdu_sim.engine.timing import KernelTiming, StepTiming

DEFAULT_MAX_EVENTS = 20_000_000
"""Same default as ``EngineConfig.max_events``."""


@dataclass
class _Budget:
    """Events estimated for the runs started so far in one step (per step, never global)."""

    limit: int
    spent: int = 0


class Engine:
    """Simulates Program steps on one hardware description.

    Args:
        hardware: the validated hardware (socket and system).
        tiles_per_stage: tiles each stage streams per call (simulation granularity).
        all_sockets: simulate every TP socket instead of one socket plus its links.
        record: collect trace records (``StepTiming.records``) for a Perfetto trace.
        max_events: refuse a step whose estimated events exceed this.
        fast_forward: advance identical calls and periodic looped layers exactly.
        buffer_tiles: slots of each stage buffer (2 = double buffering).
        prefetch_tiles: the fewest weight/KV tiles a stage may have loaded or loading ahead of
            its compute (2 = double buffering).
        operand_buffer_fraction: share of a stage's PMU SRAM holding streamed weight/KV tiles;
            a stage runs ahead of its compute by as many tiles as fit (not public: half, the
            other half holding its input/output tiles and intermediates).
    """

    def __init__(
        self,
        hardware: HardwareConfig,
        *,
        tiles_per_stage: int = 8,
        all_sockets: bool = False,
        record: bool = False,
        max_events: int = DEFAULT_MAX_EVENTS,
        fast_forward: bool = True,
        buffer_tiles: int = 2,
        prefetch_tiles: int = 2,
        operand_buffer_fraction: float = 0.5,
    ) -> None:
        for name, value in (
            ("tiles_per_stage", tiles_per_stage),
            ("max_events", max_events),
            ("buffer_tiles", buffer_tiles),
            ("prefetch_tiles", prefetch_tiles),
        ):
            if value < 1:
                raise ValueError(f"engine.{name} must be >= 1, got {value}")
        if not 0 <= operand_buffer_fraction <= 1:
            raise ValueError(
                f"engine.operand_buffer_fraction must be in [0, 1], got {operand_buffer_fraction}"
            )
        self.hardware = hardware
        self.settings = RunSettings(
            tiles_per_stage=tiles_per_stage,
            all_sockets=all_sockets,
            buffer_tiles=buffer_tiles,
            prefetch_tiles=prefetch_tiles,
            operand_buffer_fraction=operand_buffer_fraction,
            record=record,
        )
        self.max_events = max_events
        self.fast_forward = fast_forward

    @classmethod
    def from_config(
        cls,
        hardware: HardwareConfig,
        engine: EngineConfig,
        *,
        record: bool = False,
        fast_forward: bool = True,
    ) -> Engine:
        """An engine with a workload's ``engine:`` section (tiles, all_sockets, max_events,
        buffer_tiles, prefetch_tiles, operand_buffer_fraction)."""
        return cls(
            hardware,
            tiles_per_stage=engine.tiles_per_stage,
            all_sockets=engine.all_sockets,
            record=record,
            max_events=engine.max_events,
            fast_forward=fast_forward,
            buffer_tiles=engine.buffer_tiles,
            prefetch_tiles=engine.prefetch_tiles,
            operand_buffer_fraction=engine.operand_buffer_fraction,
        )

    def estimate_events(self, program: Program) -> int:
        """Events of the minimal simulation plan (a live run charges more layers as it goes,
        each charge checked)."""
        return sum(
            self._estimate(program, k, n, looped)
            for k in program.kernels
            for n, looped in self._plan(k)
        )

    def simulate_step(self, program: Program) -> StepTiming:
        """Simulate one step of ``program``; raises EventBudgetError before simulating if
        the estimated events exceed ``max_events``."""
        _validate(program, self.hardware)
        planned = self.estimate_events(program)
        check_budget(planned, self.max_events, f"this {program.shape.phase} step")
        budget = _Budget(self.max_events)
        timeline = Recorder() if self.settings.record else None
        total = RunStats()
        events = 0
        kernels: list[KernelTiming] = []
        for kernel in program.kernels:
            works = {
                s.name: TileWork.of(s, self.settings.tiles_per_stage, self.hardware.socket)
                for s in kernel.stages
            }

            def run(
                n: int,
                looped: bool,
                watch: Watch | None,
                kernel: KernelProgram = kernel,
                works: dict[str, TileWork] = works,
            ) -> KernelRun:
                return run_kernel(
                    kernel, self.hardware, program.tp, n, looped, self.settings, works, watch
                )

            layers_charged = [0]  # this kernel's layers charged so far (a live run adds more)

            def charge(
                n: int,
                looped: bool,
                kernel: KernelProgram = kernel,
                layers_charged: list[int] = layers_charged,
            ) -> None:
                budget.spent += self._estimate(program, kernel, n, looped)
                layers_charged[0] += n
                check_budget(
                    budget.spent,
                    budget.limit,
                    f"kernel {kernel.name!r} ({layers_charged[0]} iterations so far) in this step",
                )

            result = time_kernel(kernel, run, charge, self.fast_forward)
            if timeline is not None and result.recorder is not None:
                result.recorder.extend_into(timeline, total.time_s)
            total = total.plus(result.stats)
            events += result.events
            kernels.append(
                KernelTiming(
                    name=kernel.name,
                    calls=kernel.calls,
                    looped=kernel.looped,
                    time_s=result.stats.time_s,
                    overhead_s=result.stats.overhead_s,
                    simulated_iterations=result.simulated_iterations,
                    period_s=result.period_s,
                )
            )
        return self._timing(program, total, events, planned, tuple(kernels), timeline)

    def _plan(self, kernel: KernelProgram) -> list[tuple[int, bool]]:
        """The runs a kernel needs at least: (iterations, looped) each."""
        if not self.fast_forward:
            return [(kernel.calls, kernel.looped)]
        if not kernel.looped:
            return [(1, False)]
        if kernel.calls < MIN_PROBED_CALLS:
            return [(kernel.calls, True)]
        return [(first_boundary(kernel.calls) + 3, True)]  # a live run's first budget charge

    def _estimate(
        self, program: Program, kernel: KernelProgram, iterations: int, looped: bool
    ) -> int:
        sockets = program.tp if self.settings.all_sockets else 1
        return estimate_events(
            kernel,
            self.hardware,
            iterations=iterations,
            looped=looped,
            sockets=sockets,
            tiles=self.settings.tiles_per_stage,
        )

    def _timing(
        self,
        program: Program,
        total: RunStats,
        events: int,
        planned: int,
        kernels: tuple[KernelTiming, ...],
        timeline: Recorder | None,
    ) -> StepTiming:
        sock = self.hardware.socket
        step = total.time_s
        busy = {
            "pcu": total.pcu_s / sock.pcu.count,
            "pmu": total.pmu_s / sock.pmu.count,
            "hbm": total.hbm_busy_s,
            "ddr": total.ddr_busy_s,
            "link": total.link_busy_s,
        }
        shape = program.shape
        return StepTiming(
            step_s=step,
            phase=shape.phase,
            batch=shape.batch,
            tokens=shape.tokens,
            context=shape.cache_len,
            tp=program.tp,
            flops=total.flops,
            vector_flops=total.vector_flops,
            bytes_by_tier={
                "hbm": total.hbm_bytes,
                "ddr": total.ddr_bytes,
                "sram": total.sram_bytes,
                "p2p": total.p2p_bytes,
            },
            kernels=kernels,
            busy_s=busy,
            utilization={k: (v / step if step > 0 else 0.0) for k, v in busy.items()},
            hbm_bandwidth_fraction=(
                total.hbm_bytes / step / sock.hbm.bandwidth if step > 0 else 0.0
            ),
            flops_fraction=total.flops / step / sock.peak_flops if step > 0 else 0.0,
            events=events,
            estimated_events=planned,
            tiles_per_stage=self.settings.tiles_per_stage,
            sockets_simulated=program.tp if self.settings.all_sockets else 1,
            fast_forward=self.fast_forward,
            records=timeline.freeze() if timeline is not None else None,
        )


def simulate_step(
    program: Program,
    hardware: HardwareConfig,
    *,
    tiles_per_stage: int = 8,
    all_sockets: bool = False,
    record: bool = False,
    max_events: int = DEFAULT_MAX_EVENTS,
    fast_forward: bool = True,
    buffer_tiles: int = 2,
    prefetch_tiles: int = 2,
    operand_buffer_fraction: float = 0.5,
) -> StepTiming:
    """Simulate one step of ``program`` on ``hardware`` (see :class:`Engine`)."""
    engine = Engine(
        hardware,
        tiles_per_stage=tiles_per_stage,
        all_sockets=all_sockets,
        record=record,
        max_events=max_events,
        fast_forward=fast_forward,
        buffer_tiles=buffer_tiles,
        prefetch_tiles=prefetch_tiles,
        operand_buffer_fraction=operand_buffer_fraction,
    )
    return engine.simulate_step(program)


def _validate(program: Program, hardware: HardwareConfig) -> None:
    """Reject Programs the engine cannot run, naming the kernel/stage and the rule."""
    if program.tp < 1:
        raise ValueError(f"program.tp must be >= 1, got {program.tp}")
    sock = hardware.socket
    for kernel in program.kernels:
        if kernel.calls < 1:
            raise ValueError(f"kernel {kernel.name!r}: calls must be >= 1, got {kernel.calls}")
        if not kernel.stages:
            raise ValueError(f"kernel {kernel.name!r} has no stages")
        seen: set[str] = set()
        for stage in kernel.stages:
            where = f"kernel {kernel.name!r} stage {stage.name!r}"
            if stage.name in seen:
                raise ValueError(f"{where}: duplicate stage name")
            for producer in stage.inputs:
                if producer not in seen:
                    raise ValueError(
                        f"{where}: input {producer!r} is not an earlier stage "
                        f"(stages must be topologically ordered)"
                    )
            seen.add(stage.name)
            if stage.pcus < 0 or stage.pmus < 0:
                raise ValueError(f"{where}: pcus and pmus must be >= 0")
            if stage.pcus == 0 and (stage.flops > 0 or stage.vector_flops > 0):
                raise ValueError(f"{where}: has FLOPs but no PCUs")
            spec = stage.collective
            if spec is not None and (spec.group < 1 or program.tp % spec.group):
                raise ValueError(
                    f"{where}: collective group {spec.group} must divide program.tp = {program.tp}"
                )
        pcus = sum(s.pcus for s in kernel.stages)
        pmus = sum(s.pmus for s in kernel.stages)
        if pcus > sock.pcu.count or pmus > sock.pmu.count:
            raise ValueError(
                f"kernel {kernel.name!r} uses {pcus} PCUs and {pmus} PMUs; the "
                f"socket has {sock.pcu.count} and {sock.pmu.count}"
            )
