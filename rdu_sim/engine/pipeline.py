"""A step through pipeline stages: micro-batches following each other stage by stage, each
stage's activations handed to the next over the link between their devices, in SimPy.

Each stage's device time for one micro-batch comes from simulating its Program
(``Program.pipeline``, ``compiler.stages``); here the stages are servers that take the
micro-batches in order: micro-batch ``i`` enters stage ``s`` when it has left stage ``s - 1``
and its activations have crossed to stage ``s``'s devices (a transfer on the ``Topology`` of
the replica's devices, queued on its link as every transfer is), and when stage ``s`` has
finished micro-batch ``i - 1``. The step ends when the last micro-batch leaves the last stage.
With equal stages of ``t`` and free transfers that is ``(m + p - 1) t``: the pipeline's
bubble, ``(p - 1) / (m + p - 1)`` of the stages' time idle (tests check it).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rdu_sim.compiler.program import Program
from rdu_sim.config.hardware import SystemConfig
from rdu_sim.config.stack import StackConfig
from rdu_sim.des.environment import CountingEnvironment, Event
from rdu_sim.engine.links import topology_for
from rdu_sim.engine.timing import StepTiming, host_transfer_s, step_host_time

Gen = Generator[Any, Any, None]


@dataclass(frozen=True)
class PipelineRun:
    """When the last micro-batch left the last stage, and the stages' idle share."""

    end_s: float
    bubble: float  # 1 - the stages' busy time over (stages x end)
    events: int


def run_pipeline(
    stage_s: Sequence[float],
    micro_batches: int,
    transfer_bytes: float,
    system: SystemConfig | None,
    stage_devices: int,
    max_events: int,
) -> PipelineRun:
    """``micro_batches`` micro-batches through stages taking ``stage_s`` each (module
    docstring); ``transfer_bytes`` cross from stage ``s``'s first device to stage ``s + 1``'s
    on ``system``'s links (None: free hand-offs), stages ``stage_devices`` devices apart."""
    env = CountingEnvironment(limit=max_events)
    stages = len(stage_s)
    topo = None
    if system is not None and stages > 1:
        topo = topology_for(env, stages * stage_devices, system)
    left = [[env.event() for _ in range(micro_batches)] for _ in range(stages)]
    # micro-batch i's activations at stage s: once it left stage s - 1 and crossed over
    arrived = [[env.event() for _ in range(micro_batches)] for _ in range(stages)]

    def hand_off(s: int, i: int) -> None:
        def send(_event: Event) -> None:
            if topo is None or transfer_bytes == 0:
                arrived[s][i].succeed()
                return
            source, target = (s - 1) * stage_devices, s * stage_devices
            topo.send(source, target, transfer_bytes).add_callback(
                lambda _e: _succeed(arrived[s][i])
            )

        left[s - 1][i].add_callback(send)

    for s in range(1, stages):
        for i in range(micro_batches):
            hand_off(s, i)

    def stage(s: int) -> Gen:
        for i in range(micro_batches):
            if s > 0:
                yield arrived[s][i]
            yield env.timeout(stage_s[s])
            left[s][i].succeed()

    done = env.all_of([env.process(stage(s)) for s in range(stages)])
    done.add_callback(lambda _event: env.pause())
    env.run_until_pause()
    end = float(env.now)
    busy = micro_batches * sum(stage_s)
    bubble = 1 - busy / (stages * end) if end > 0 else 0.0
    return PipelineRun(end, bubble, env.processed)


def _succeed(event: Event) -> None:
    event.succeed()


def pipelined_timing(
    program: Program,
    stages: Sequence[StepTiming],
    system: SystemConfig,
    stack: StackConfig,
    max_events: int,
) -> StepTiming:
    """A pipelined step's timing from its stages' (each one micro-batch, device time only):
    the step is the pipeline's end plus the stack's host time once; the totals are the first
    stage's devices' over the step's micro-batches, each kernel named by its stage
    (``s1/decoder``); ``pipeline`` says the stages' times and the bubble."""
    parts = program.pipeline_micro_batches
    run = run_pipeline(
        [timing.device_s for timing in stages],
        parts,
        program.pipeline_transfer_bytes,
        system,
        program.devices,
        max_events,
    )
    transfer = host_transfer_s(program.pipeline[-1].host_bytes, system.host_link)
    devices = program.devices * len(program.pipeline)  # every stage's devices
    hosted = step_host_time(stack, program.shape, run.end_s, transfer, devices)
    host = hosted.added_s
    step = run.end_s + host
    first = stages[0]
    busy = {unit: value * parts for unit, value in first.busy_s.items()}
    return replace(
        first,
        step_s=step,
        runtime_s=host,
        host_serial_s=hosted.serial_s,
        host_overlapped_s=hosted.overlapped_s,
        batch=program.shape.batch,
        flops=first.flops * parts,
        vector_flops=first.vector_flops * parts,
        bytes_by_tier={tier: value * parts for tier, value in first.bytes_by_tier.items()},
        busy_s=busy,
        utilization={unit: value / step for unit, value in busy.items()},
        hbm_bandwidth_fraction=first.hbm_bandwidth_fraction * parts * first.step_s / step,
        flops_fraction=first.flops_fraction * parts * first.step_s / step,
        kernels=tuple(
            replace(kernel, name=f"s{index}/{kernel.name}")
            for index, timing in enumerate(stages)
            for kernel in timing.kernels
        ),
        events=sum(t.events for t in stages) + run.events,
        estimated_events=sum(t.estimated_events for t in stages),
        collectives=tuple(c for t in stages for c in t.collectives),
        pipeline={
            "stages": len(stages),
            "micro_batches": parts,
            "stage_s": [t.device_s for t in stages],
            "bubble": run.bubble,
        },
    )
