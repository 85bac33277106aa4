"""A step's kernels simulated one after another, the same way for every engine.

Both engines (SN40L's dataflow engine, ``engine.gpu``) check the step's event budget before
simulating, then time each kernel with ``fast_forward.time_kernel`` on a simulation of their
own, each allowed the events the kernels before it left, and report each collective stage as
its last simulation measured it. What differs between them is only the simulation a kernel
runs on (``start``) and what they do with the kernels' totals afterwards (SN40L: one after
another; a GPU: calls launched into a stream); the step's result is then assembled by
``timing.step_timing`` from the :class:`KernelsRun`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from rdu_sim.compiler.program import Program
from rdu_sim.config.hardware import SystemConfig
from rdu_sim.config.workload import EngineConfig
from rdu_sim.des.environment import EventLimitError
from rdu_sim.engine.budget import check_budget, over_budget, warn_if_slow
from rdu_sim.engine.collective_port import CollectiveTiming, collective_timings
from rdu_sim.engine.fast_forward import KernelResult, Simulation, time_kernel
from rdu_sim.engine.run_stats import RunStats


class KernelSimulation(Simulation, Protocol):
    """A kernel's simulation as ``run_kernels`` drives it: ``fast_forward``'s face, and the
    time each simulated call of each collective stage took."""

    def collective_spans(self) -> Mapping[str, Sequence[float]]:
        """Per collective stage, each simulated call's time (first piece out to last done)."""


StartKernel = Callable[[int, int, int, bool], KernelSimulation]
"""A new simulation of the program's kernel ``index``, allowed ``left`` events, of ``layers``
layers, looped or as separate calls: ``start(index, left, layers, looped)``."""


@dataclass(frozen=True)
class KernelsRun:
    """Every kernel of a step timed: each kernel's result (program order), each collective
    stage's report, the events processed and the lower bound checked before simulating."""

    results: tuple[KernelResult, ...]
    collectives: tuple[CollectiveTiming, ...]
    events: int
    estimated_events: int

    @property
    def total(self) -> RunStats:
        """The kernels' totals summed."""
        total = RunStats()
        for result in self.results:
            total = total.plus(result.stats)
        return total


def run_kernels(
    program: Program,
    system: SystemConfig,
    config: EngineConfig,
    least_events: int,
    start: StartKernel,
) -> KernelsRun:
    """Time every kernel of ``program`` in order, on simulations made by ``start``.
    EventBudgetError before simulating when ``least_events`` (the engine's lower bound)
    exceeds ``engine.max_events``, or as soon as the events processed would."""
    what = f"this {program.shape.phase} step"
    check_budget(least_events, config.max_events, what)
    tiles = max((k.tiles_or(config.tiles_per_stage) for k in program.kernels), default=0)
    warn_if_slow(least_events, what, tiles, config.tiles_per_stage)
    results: list[KernelResult] = []
    collectives: list[CollectiveTiming] = []
    events = 0
    for index, kernel in enumerate(program.kernels):
        sims: list[KernelSimulation] = []

        def begin(
            layers: int,
            looped: bool,
            index: int = index,
            left: int = config.max_events - events,
            sims: list[KernelSimulation] = sims,
        ) -> KernelSimulation:
            sims.append(start(index, left, layers, looped))
            return sims[-1]

        try:
            result = time_kernel(kernel, begin, config.fast_forward)
        except EventLimitError as where:
            raise over_budget(config.max_events, f"{what} ({where})") from None
        spans = sims[-1].collective_spans() if sims else {}
        collectives += collective_timings(kernel, spans, system)
        events += result.events
        results.append(result)
    return KernelsRun(tuple(results), tuple(collectives), events, least_events)


def check_kernels(program: Program) -> None:
    """Reject what no engine can run: a kernel without calls or stages, a collective group
    that does not divide ``program.devices`` (naming the kernel or stage and the rule)."""
    for kernel in program.kernels:
        if kernel.calls < 1:
            raise ValueError(f"kernel {kernel.name!r}: calls must be >= 1, got {kernel.calls}")
        if not kernel.stages:
            raise ValueError(f"kernel {kernel.name!r} has no stages")
        for stage in kernel.stages:
            spec = stage.collective
            if spec is not None and (spec.group < 1 or program.devices % spec.group):
                raise ValueError(
                    f"kernel {kernel.name!r} stage {stage.name!r}: collective group "
                    f"{spec.group} must divide program.devices = {program.devices}"
                )
