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
from dataclasses import replace

from rdu_sim.compiler.program import KernelProgram, Program
from rdu_sim.config.gpu import GpuHardwareConfig
from rdu_sim.config.stack import NO_STACK, StackConfig
from rdu_sim.config.workload import EngineConfig
from rdu_sim.des.environment import EventLimitError
from rdu_sim.engine import shared_steps
from rdu_sim.engine.budget import over_budget
from rdu_sim.engine.fast_forward import KernelResult, fewest_layers
from rdu_sim.engine.gpu.kernel import GpuKernelSim
from rdu_sim.engine.gpu.overlap import exchanges, kernel_role, run_stage_order
from rdu_sim.engine.gpu.stream import (
    Call,
    StreamRun,
    execution_order,
    run_first_come,
    run_stream,
)
from rdu_sim.engine.gpu.work import GpuSettings, Segment, peak_matrix_flops, segments
from rdu_sim.engine.pipeline import pipelined_timing
from rdu_sim.engine.records import Recorder, TraceSlice
from rdu_sim.engine.step_run import KernelsRun, check_kernels, run_kernels
from rdu_sim.engine.timing import KernelTiming, StepTiming, step_timing
from rdu_sim.interrupts import native

DeviceRun = tuple[KernelsRun, StreamRun, tuple[KernelTiming, ...], Recorder | None]
"""A step's run on the GPUs: its kernels, its stream, each kernel's timing, the trace."""


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
        decode = program.shape.phase == "decode"
        return [segments(k, tiles, gpu, self.settings, decode=decode) for k in program.kernels]

    def estimate_events(
        self, program: Program, segments: list[tuple[Segment, ...]] | None = None
    ) -> int:
        """A lower bound of the events ``simulate_step`` processes: every simulated call
        waits at least once per tile of each segment, and every call on the stream once
        (``segments``: `segments` of ``program``, when the caller has them)."""
        tiles, ff = self.config.tiles_per_stage, self.config.fast_forward
        cut = self.segments(program) if segments is None else segments
        kernels = sum(
            fewest_layers(k, ff) * tiles * len(s) for k, s in zip(program.kernels, cut, strict=True)
        )
        return kernels + len(execution_order(program.kernels))

    @native  # the compiled core runs here: a signal is raised after it (rdu_sim.interrupts)
    def simulate_step(self, program: Program) -> StepTiming:
        """Simulate one step of ``program``; EventBudgetError past ``engine.max_events``.
        A program with micro-batches runs them side by side (``_overlapped``). Inside
        ``shared_steps.sharing`` an unrecorded step whose inputs equal an earlier one's is
        that step's result."""
        if program.pipeline:
            stages = [self.simulate_step(stage) for stage in program.pipeline]
            left = self.config.max_events - sum(t.events for t in stages)
            return pipelined_timing(program, stages, self.hardware.system, self.stack, left)
        if self.record or not shared_steps.active():
            return self._timing(program, *self._device_run(program))
        device = shared_steps.device_key(program, self.hardware, self.config, self.settings)

        def simulate() -> StepTiming:
            run = shared_steps.shared_device(device, lambda: self._device_run(program))
            return self._timing(program, *run)

        return shared_steps.shared_step(shared_steps.with_stack(device, self.stack), simulate)

    def _device_run(self, program: Program) -> DeviceRun:
        """The step on the GPUs: its kernels simulated, their calls launched into the stream
        (or two, under two-batch overlap), each kernel's timing and (recording) the trace;
        what :meth:`_timing` adds the stack's host to."""
        _validate(program, self.hardware)
        if program.micro_batches:
            return self._overlapped(program)
        cfg = self.config
        run = self._run_kernels(program, cfg.max_events)
        order = execution_order(program.kernels)
        per_call = _per_call(program, run)
        timeline = Recorder() if self.record else None
        kernel_overheads = self.hardware.gpu.kernel
        try:
            stream = run_stream(
                [Call(i, per_call[i]) for i in order],
                kernel_overheads.launch,
                self._graph_launch(),
                cfg.max_events - run.events,
                timeline,
                [k.name for k in program.kernels],
            )
        except EventLimitError:
            what = f"this {program.shape.phase} step (launching its kernels)"
            raise over_budget(cfg.max_events, what) from None
        if timeline is not None:
            _place_records(timeline, program.kernels, run.results, order, stream.starts)
        kernels = tuple(
            KernelTiming.of(k, r) for k, r in zip(program.kernels, run.results, strict=True)
        )
        return run, stream, kernels, timeline

    def _overlapped(self, program: Program) -> DeviceRun:
        """Two-batch overlap: each micro-batch's kernels simulated alone, then both
        micro-batches' calls on two streams, the all-to-all kernels on the network beside the
        other micro-batch's kernels on the SMs, which run on the SMs the communication
        kernels leave them (``parallelism.comm_sms``); first come, first served
        (``stream.run_first_come``) or in SGLang's interleaved stage order
        (``overlap.run_stage_order``), as ``parallelism.overlap_schedule`` says."""
        cfg, gpu = self.config, self.hardware.gpu
        runs: list[KernelsRun] = []
        for micro in program.micro_batches:
            runs.append(self._run_kernels(micro, cfg.max_events - sum(r.events for r in runs)))
        offsets = [0]
        for micro in program.micro_batches[:-1]:
            offsets.append(offsets[-1] + len(micro.kernels))
        streams = [
            [Call(offset + i, _per_call(micro, run)[i]) for i in execution_order(micro.kernels)]
            for micro, run, offset in zip(program.micro_batches, runs, offsets, strict=True)
        ]
        both = [kernel for micro in program.micro_batches for kernel in micro.kernels]
        held = self.settings.comm_sms  # fewer than the SMs (the scenario checks it)
        timing = (
            gpu.kernel.launch,
            self._graph_launch(),
            gpu.sms / (gpu.sms - held),
            cfg.max_events - sum(r.events for r in runs),
        )
        try:
            if self.settings.overlap_schedule == "stage_order":
                roles = [kernel_role(kernel) for kernel in both]
                stream = run_stage_order(streams, roles, program.shape.phase == "decode", *timing)
            else:
                stream = run_first_come(streams, [exchanges(k) for k in both], *timing)
        except EventLimitError:
            what = f"this {program.shape.phase} step (overlapping its micro-batches)"
            raise over_budget(cfg.max_events, what) from None
        run = KernelsRun(
            tuple(result for r in runs for result in r.results),
            tuple(c for r in runs for c in r.collectives),
            sum(r.events for r in runs),
            sum(r.estimated_events for r in runs),
        )
        kernels = tuple(
            replace(KernelTiming.of(k, r), name=f"mb{m}/{k.name}")
            for m, (micro, micro_run) in enumerate(zip(program.micro_batches, runs, strict=True))
            for k, r in zip(micro.kernels, micro_run.results, strict=True)
        )
        return run, stream, kernels, None

    def _graph_launch(self) -> float | None:
        """The host's launch of a step as one CUDA graph, or None (a launch per kernel)."""
        return self.hardware.gpu.kernel.graph_launch if self.settings.cuda_graphs else None

    def _run_kernels(self, program: Program, max_events: int) -> KernelsRun:
        """Every kernel of ``program`` simulated on GPU 0, within ``max_events`` events."""
        cfg = self.config.model_copy(update={"max_events": max_events})
        segments = self.segments(program)

        def start(index: int, left: int, layers: int, looped: bool) -> GpuKernelSim:
            """A simulation of ``layers`` layers (or calls) of kernel ``index``, allowed
            ``left`` events."""
            return GpuKernelSim(
                program.kernels[index],
                self.hardware,
                program.devices,
                cfg,
                segments[index],
                layers=layers,
                looped=looped,
                max_events=left,
                record=self.record,
            )

        estimate = self.estimate_events(program, segments)
        return run_kernels(program, self.hardware.system, cfg, estimate, start)

    def _timing(
        self,
        program: Program,
        run: KernelsRun,
        stream: StreamRun,
        kernels: tuple[KernelTiming, ...],
        timeline: Recorder | None,
    ) -> StepTiming:
        gpu, total = self.hardware.gpu, run.total
        busy = {
            "sm": total.pcu_s,
            "hbm": total.hbm_busy_s,
            "link": total.link_busy_s,
            "blocks": total.blocks_busy_s,
            "boundaries": total.overhead_s,
            "launch": stream.host_s,
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
            kernels=kernels,
            hbm_bandwidth=gpu.hbm.bandwidth,
            peak_flops=peak_matrix_flops(gpu, self.settings),
            sockets_simulated=1,
            timeline=timeline,
            host_link=self.hardware.system.host_link,
        )


def _per_call(program: Program, run: KernelsRun) -> list[float]:
    """Each kernel's device time per call (a looped kernel: its one call)."""
    return [
        r.stats.time_s / (1 if k.looped else k.calls)
        for k, r in zip(program.kernels, run.results, strict=True)
    ]


def _place_records(
    timeline: Recorder,
    kernels: Sequence[KernelProgram],
    results: Sequence[KernelResult],
    order: list[int],
    starts: tuple[float, ...],
) -> None:
    """Each kernel call's simulated records at that call's own start on the stream. An
    unlooped kernel's recording holds its calls one after another, each ending with its
    ``kernel`` slice (``GpuKernelSim._run``; ``fast_forward`` repeats one call's records),
    so a call's records are those up to its ``kernel`` slice, shifted from where that slice
    was recorded to where the stream started the call. A looped kernel is one call: its
    layers (and a fast-forward's ``agcu`` slice) go together. (The GPU records no
    counters.)"""
    calls = {
        index: _calls(result.recorder.slices, kernels[index].looped)
        for index, result in enumerate(results)
        if result.recorder is not None and result.recorder.slices
    }
    seen = dict.fromkeys(calls, 0)
    for index, start in zip(order, starts, strict=True):
        if index not in calls:
            continue
        own = calls[index][seen[index]]
        seen[index] += 1
        anchor = next((s.start_s for s in own if s.track == "kernel"), own[0].start_s)
        timeline.slices.extend(replace(s, start_s=s.start_s - anchor + start) for s in own)


def _calls(slices: Sequence[TraceSlice], looped: bool) -> list[list[TraceSlice]]:
    """A kernel's recorded slices cut into its calls, each ending with its ``kernel``
    slice (a looped kernel's: one call)."""
    if looped:
        return [list(slices)]
    out: list[list[TraceSlice]] = [[]]
    for s in slices:
        out[-1].append(s)
        if s.track == "kernel":
            out.append([])
    if not out[-1]:
        out.pop()
    return out


def _validate(program: Program, hardware: GpuHardwareConfig) -> None:
    """Reject Programs a GPU system cannot run, naming the kernel or stage and the rule."""
    if not 1 <= program.devices <= hardware.system.sockets:
        raise ValueError(
            f"program.devices = {program.devices}, but hardware {hardware.name!r} has "
            f"{hardware.system.sockets} GPUs"
        )
    check_kernels(program)
