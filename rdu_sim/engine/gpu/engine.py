"""The GPU engine: time one step of a compiled Program on a GPU system.

``GpuEngine(hardware, config, settings).simulate_step(program)`` runs the Program the
compiler made for the GPU (its kernels at the workload's fusion level) through the GPU's own
execution rules, on the same engine pieces as SN40L where the physics is shared:

- each kernel's device time is a SimPy simulation of its calls on GPU 0 (``kernel``: tiles
  streamed through the SMs, one HBM ``MemoryChannel``, collectives on the NVLink
  ``Topology``, a device-wide synchronization at the kernel boundary), driven by
  ``fast_forward.time_kernel`` through the ``Simulation`` face: identical calls are simulated
  once, a looped kernel's layers until they repeat (both exact here);
- the step is then the host launching those calls into one stream and the device running
  them in order (``stream``), with or without CUDA graphs.

The result is a ``StepTiming`` like SN40L's (the serving level, reports and plots read the
same contract), with the GPU's units in ``busy_s``: ``sm`` (time the SMs computed), ``hbm``,
``link`` (busiest NVLink direction) and ``host`` (CPU time spent launching).
"""

from __future__ import annotations

from collections.abc import Sequence

from rdu_sim.compiler.program import Program
from rdu_sim.config.gpu import GpuHardwareConfig
from rdu_sim.config.stack import NO_STACK, StackConfig
from rdu_sim.config.workload import EngineConfig
from rdu_sim.des.environment import EventLimitError
from rdu_sim.engine.budget import over_budget
from rdu_sim.engine.fast_forward import KernelResult, fewest_layers
from rdu_sim.engine.gpu.kernel import GpuKernelSim
from rdu_sim.engine.gpu.stream import Call, StreamRun, execution_order, run_stream
from rdu_sim.engine.gpu.work import GpuSettings, Segment, peak_matrix_flops, segments
from rdu_sim.engine.records import Recorder
from rdu_sim.engine.step_run import KernelsRun, check_kernels, run_kernels
from rdu_sim.engine.timing import KernelTiming, StepTiming, step_timing


class GpuEngine:
    """Simulates Program steps on one GPU system; ``settings`` are the serving stack's
    choices (CUDA graphs, FP8 tensor cores); ``record`` collects trace records."""

    def __init__(
        self,
        hardware: GpuHardwareConfig,
        config: EngineConfig | None = None,
        settings: GpuSettings | None = None,
        *,
        record: bool = False,
        stack: StackConfig = NO_STACK,
    ) -> None:
        self.hardware = hardware
        self.config = config if config is not None else EngineConfig()
        self.settings = settings if settings is not None else GpuSettings()
        self.record = record
        self.stack = stack

    def segments(self, program: Program) -> list[tuple[Segment, ...]]:
        """Each kernel's stages cut at its collectives, their work per tile."""
        tiles, gpu = self.config.tiles_per_stage, self.hardware.gpu
        return [segments(k, tiles, gpu, self.settings) for k in program.kernels]

    def estimate_events(self, program: Program) -> int:
        """A lower bound of the events ``simulate_step`` processes: every simulated call
        waits at least once per tile of each segment, and every call on the stream once."""
        tiles, ff = self.config.tiles_per_stage, self.config.fast_forward
        kernels = sum(
            fewest_layers(k, ff) * tiles * len(s)
            for k, s in zip(program.kernels, self.segments(program), strict=True)
        )
        return kernels + len(execution_order(program.kernels))

    def simulate_step(self, program: Program) -> StepTiming:
        """Simulate one step of ``program``; EventBudgetError past ``engine.max_events``."""
        _validate(program, self.hardware)
        cfg = self.config
        segments = self.segments(program)

        def start(index: int, left: int, layers: int, looped: bool) -> GpuKernelSim:
            """A simulation of ``layers`` layers (or calls) of kernel ``index``, allowed
            ``left`` events."""
            return GpuKernelSim(
                program.kernels[index],
                self.hardware,
                program.tp,
                cfg,
                segments[index],
                layers=layers,
                looped=looped,
                max_events=left,
                record=self.record,
            )

        run = run_kernels(program, self.hardware.system, cfg, self.estimate_events(program), start)
        per_call = [
            r.stats.time_s / (1 if k.looped else k.calls)
            for k, r in zip(program.kernels, run.results, strict=True)
        ]
        order = execution_order(program.kernels)
        timeline = Recorder() if self.record else None
        kernel_overheads = self.hardware.gpu.kernel
        graph = kernel_overheads.graph_launch if self.settings.cuda_graphs else None
        try:
            stream = run_stream(
                [Call(i, per_call[i]) for i in order],
                kernel_overheads.launch,
                graph,
                cfg.max_events - run.events,
                timeline,
                [k.name for k in program.kernels],
            )
        except EventLimitError:
            what = f"this {program.shape.phase} step (launching its kernels)"
            raise over_budget(cfg.max_events, what) from None
        if timeline is not None:
            _place_records(timeline, run.results, order, stream.starts)
        return self._timing(program, run, stream, timeline)

    def _timing(
        self, program: Program, run: KernelsRun, stream: StreamRun, timeline: Recorder | None
    ) -> StepTiming:
        gpu, total = self.hardware.gpu, run.total
        busy = {
            "sm": total.pcu_s,
            "hbm": total.hbm_busy_s,
            "link": total.link_busy_s,
            "host": stream.host_s,
        }
        return step_timing(
            program,
            run,
            self.config,
            self.stack,
            step_s=stream.end_s,
            events=run.events + stream.events,
            bytes_by_tier={"hbm": total.hbm_bytes, "ddr": 0.0, "sram": 0.0, "p2p": total.p2p_bytes},
            busy_s=busy,
            kernels=tuple(
                KernelTiming.of(k, r) for k, r in zip(program.kernels, run.results, strict=True)
            ),
            hbm_bandwidth=gpu.hbm.bandwidth,
            peak_flops=peak_matrix_flops(gpu, self.settings),
            sockets_simulated=1,
            timeline=timeline,
        )


def _place_records(
    timeline: Recorder,
    results: Sequence[KernelResult],
    order: list[int],
    starts: tuple[float, ...],
) -> None:
    """Each kernel's simulated records at the start of its first call on the stream."""
    placed: set[int] = set()
    for kernel, start in zip(order, starts, strict=True):
        recorder = results[kernel].recorder
        if kernel not in placed and recorder is not None:
            recorder.extend_into(timeline, start)
            placed.add(kernel)


def _validate(program: Program, hardware: GpuHardwareConfig) -> None:
    """Reject Programs a GPU system cannot run, naming the kernel or stage and the rule."""
    if not 1 <= program.tp <= hardware.system.sockets:
        raise ValueError(
            f"program.tp = {program.tp}, but hardware {hardware.name!r} has "
            f"{hardware.system.sockets} GPUs"
        )
    check_kernels(program)
