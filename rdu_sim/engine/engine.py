"""The engine: time one step of a compiled Program on the SN40L hardware model.

``Engine(hardware, config).simulate_step(program)`` (or the function ``simulate_step``), with
``config`` the workload's ``EngineConfig``, runs the Program's kernels one after another, each
a SimPy simulation of its stages streaming tiles through PCUs, PMU buffers, the socket's
HBM/DDR channels and the P2P links (see ``kernel_pipeline`` and ``stage_runner``), launched and
synchronized by the AGCU. Kernels are separated by a synchronization, so each is simulated in
its own environment and placed after the previous one (``kernel_sim``); ``fast_forward``
advances identical calls (exactly) and periodic looped layers instead of re-simulating them
(``fast_forward`` module). The event budget ``max_events`` holds for the whole step, counted
exactly (``budget``).

Symmetric TP: by default one socket is simulated, with one rotational period of each ring
collective on the links (socket 0's chain for identical hops, one node's sockets and links for a
ring over several nodes: exact, see ``hw.collectives``); ``all_sockets`` simulates all
``program.devices`` sockets and every link hop, and gives the same step time.

All state lives in the Engine's runs (no globals), so the same step twice gives the same
StepTiming, and engines in one process do not affect each other.
"""

from __future__ import annotations

from rdu_sim.compiler.program import Program
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.stack import NO_STACK, StackConfig
from rdu_sim.config.workload import EngineConfig
from rdu_sim.engine import shared_steps
from rdu_sim.engine.budget import min_events
from rdu_sim.engine.fast_forward import fewest_layers
from rdu_sim.engine.kernel_sim import KernelSim, tile_works
from rdu_sim.engine.pipeline import pipelined_timing
from rdu_sim.engine.records import Recorder
from rdu_sim.engine.run_stats import RunStats
from rdu_sim.engine.step_run import KernelsRun, check_kernels, run_kernels
from rdu_sim.engine.tile_work import TileWork
from rdu_sim.engine.timing import KernelTiming, StepTiming, step_timing
from rdu_sim.interrupts import native


class Engine:
    """Simulates Program steps on one hardware description with one ``EngineConfig`` (the
    workload's ``engine:`` section: the one home of the engine's settings and defaults);
    ``record`` collects trace records (``StepTiming.records``) for a Perfetto trace."""

    def __init__(
        self,
        hardware: HardwareConfig,
        config: EngineConfig | None = None,
        *,
        record: bool = False,
        stack: StackConfig = NO_STACK,
    ) -> None:
        self.hardware = hardware
        self.config = config if config is not None else EngineConfig()
        self.record = record
        self.stack = stack

    def estimate_events(self, program: Program) -> int:
        """A lower bound of the events ``simulate_step`` processes (``budget.min_events``)."""
        return self._least_events(program, self._works(program))

    def _works(self, program: Program) -> list[dict[str, TileWork]]:
        """Each kernel's stages' work per tile."""
        tiles, socket = self.config.tiles_per_stage, self.hardware.socket
        return [tile_works(k, k.tiles_or(tiles), socket) for k in program.kernels]

    def _least_events(self, program: Program, works: list[dict[str, TileWork]]) -> int:
        cfg = self.config
        sockets = program.devices if cfg.all_sockets else 1
        return sum(
            min_events(k, w, layers=fewest_layers(k, cfg.fast_forward), sockets=sockets)
            for k, w in zip(program.kernels, works, strict=True)
        )

    @native  # the compiled core runs here: a signal is raised after it (rdu_sim.interrupts)
    def simulate_step(self, program: Program) -> StepTiming:
        """Simulate one step of ``program``. Raises EventBudgetError before simulating when
        even the lower bound of its events exceeds ``max_events``, or as soon as the events
        processed would. Inside ``shared_steps.sharing`` (a sweep's points) an unrecorded
        step whose inputs equal an earlier one's is that step's result. A pipelined program
        times each stage's micro-batch, then the pipeline (``engine.pipeline``)."""
        if program.pipeline:
            stages = [self.simulate_step(stage) for stage in program.pipeline]
            left = self.config.max_events - sum(t.events for t in stages)
            return pipelined_timing(program, stages, self.hardware.system, self.stack, left)
        if self.record or not shared_steps.active():
            return self._timing(program, *self._device_run(program))
        device = shared_steps.device_key(program, self.hardware, self.config)

        def simulate() -> StepTiming:
            run = shared_steps.shared_device(device, lambda: self._device_run(program))
            return self._timing(program, *run)

        return shared_steps.shared_step(shared_steps.with_stack(device, self.stack), simulate)

    def _device_run(
        self, program: Program
    ) -> tuple[KernelsRun, tuple[KernelTiming, ...], Recorder | None]:
        """The step on the device: its kernels simulated one after another, each kernel's
        timing and (recording) the trace; what :meth:`_timing` adds the stack's host to."""
        _validate(program, self.hardware)
        works = self._works(program)
        least = self._least_events(program, works)

        def start(index: int, left: int, layers: int, looped: bool) -> KernelSim:
            """A simulation of ``layers`` layers of kernel ``index``, allowed ``left`` events."""
            return KernelSim(
                program.kernels[index],
                self.hardware,
                program.devices,
                self.config,
                works[index],
                layers=layers,
                looped=looped,
                max_events=left,
                record=self.record,
            )

        run = run_kernels(program, self.hardware.system, self.config, least, start)
        timeline = Recorder() if self.record else None
        elapsed = RunStats()
        for result in run.results:  # one kernel after another
            if timeline is not None and result.recorder is not None:
                result.recorder.extend_into(timeline, elapsed.time_s)
            elapsed = elapsed.plus(result.stats)
        kernels = tuple(
            KernelTiming.of(k, r, work[k.stages[0].name].tiles, k.sram_bytes)
            for k, r, work in zip(program.kernels, run.results, works, strict=True)
        )
        return run, kernels, timeline

    def _timing(
        self,
        program: Program,
        run: KernelsRun,
        kernels: tuple[KernelTiming, ...],
        timeline: Recorder | None,
    ) -> StepTiming:
        sock, total = self.hardware.socket, run.total
        busy = {
            "pcu": total.pcu_s / sock.pcu.count,
            "pmu": total.pmu_s / sock.pmu.count,
            "hbm": total.hbm_busy_s,
            "ddr": total.ddr_busy_s,
            "link": total.link_busy_s,
            "boundaries": total.overhead_s,
        }
        return step_timing(
            program,
            run,
            self.config,
            self.stack,
            step_s=total.time_s,
            events=run.events,
            bytes_by_tier={
                "hbm": total.hbm_bytes,
                "ddr": total.ddr_bytes,
                "sram": total.sram_bytes,
                "p2p": total.p2p_bytes,
            },
            busy_s=busy,
            kernels=kernels,
            hbm_bandwidth=sock.hbm.bandwidth,
            peak_flops=sock.peak_flops,
            sockets_simulated=program.devices if self.config.all_sockets else 1,
            timeline=timeline,
            host_link=self.hardware.system.host_link,
        )


def simulate_step(
    program: Program,
    hardware: HardwareConfig,
    config: EngineConfig | None = None,
    *,
    record: bool = False,
) -> StepTiming:
    """Simulate one step of ``program`` on ``hardware`` (see :class:`Engine`)."""
    return Engine(hardware, config, record=record).simulate_step(program)


def _validate(program: Program, hardware: HardwareConfig) -> None:
    """Reject Programs the engine cannot run, naming the kernel/stage and the rule: what no
    engine runs (``check_kernels``), then SN40L's stage order and PCU/PMU budget."""
    if program.tp < 1:
        raise ValueError(f"program.tp must be >= 1, got {program.tp}")
    check_kernels(program)
    sock = hardware.socket
    for kernel in program.kernels:
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
            if stage.selected_by is not None and stage.selected_by not in seen:
                raise ValueError(
                    f"{where}: selected_by {stage.selected_by!r} is not an earlier stage"
                )
            seen.add(stage.name)
            if stage.pcus < 0 or stage.pmus < 0:
                raise ValueError(f"{where}: pcus and pmus must be >= 0")
            if stage.pcus == 0 and (stage.flops > 0 or stage.vector_flops > 0):
                raise ValueError(f"{where}: has FLOPs but no PCUs")
        pcus = sum(s.pcus for s in kernel.stages)
        pmus = sum(s.pmus for s in kernel.stages)
        if pcus > sock.pcu.count or pmus > sock.pmu.count:
            raise ValueError(
                f"kernel {kernel.name!r} uses {pcus} PCUs and {pmus} PMUs; the "
                f"socket has {sock.pcu.count} and {sock.pmu.count}"
            )
