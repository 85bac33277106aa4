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

Each stage boundary's hand-off is reported (``HandOff``, the step's ``pipeline.hand_offs``):
its bytes, the link it crosses, one send's time on an idle link and the sends' simulated
mean, and how many a step makes (one a micro-batch). Their time is inside the step and the
bubble (a stage waiting for its activations is idle); their bytes are in the step's
``bytes_by_tier.p2p``, which counts what the binding stage's first device sends on its links
(the sender of that stage's boundary's hand-offs; none from the last stage).

The step's totals are the binding stage's (the slowest, :func:`binding_stage`): it paces the
pipeline, so it is the stage whose resources say what binds the step. The bubble splits into
the pipeline filling and draining at its pace and the lighter stages waiting for it
(:func:`bubble_shares`). A recorded step's trace holds every stage's micro-batches on the
step's timeline (:func:`pipeline_records`).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from rdu_sim.compiler.program import OFFCHIP, Program
from rdu_sim.config.hardware import SystemConfig
from rdu_sim.config.stack import StackConfig
from rdu_sim.des.environment import CountingEnvironment, Event
from rdu_sim.engine.links import link_field, topology_for
from rdu_sim.engine.records import Recorder
from rdu_sim.engine.timing import (
    RUNTIME_TRACK,
    KernelTiming,
    StepTiming,
    host_transfer_s,
    record_host,
    step_host_time,
)

Gen = Generator[Any, Any, None]


@dataclass(frozen=True)
class HandOff:
    """One stage boundary's hand-off: stage ``stage``'s first device sends each micro-batch's
    activations to stage ``stage + 1``'s first device over the hardware's ``link``."""

    stage: int  # the sending stage (0-based); the receiving one is stage + 1
    bytes: float  # one send: one micro-batch's activations
    link: str  # the system.* field of the link it crosses (engine.links.link_field)
    estimate_s: float  # one send on an idle link: latency + bytes / bandwidth
    simulated_mean_s: float  # the sends' mean, from the stage's end to the next one's arrival
    sends: int  # sends a step: one per micro-batch

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (field names are the JSON keys)."""
        return asdict(self)


@dataclass(frozen=True)
class PipelineRun:
    """When the last micro-batch left the last stage, the stages' idle share, and each
    boundary's hand-off (none when they are free: no system, or nothing to send)."""

    end_s: float
    bubble: float  # 1 - the stages' busy time over (stages x end)
    events: int
    hand_offs: tuple[HandOff, ...] = ()
    # when each stage started each micro-batch: starts[stage][micro_batch], seconds
    starts: tuple[tuple[float, ...], ...] = ()
    # each hand-off's send: (sending stage, micro-batch, sent at, arrived at), seconds
    sends: tuple[tuple[int, int, float, float], ...] = ()


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
    crossing = [0.0] * stages  # boundary s - 1 -> s: its sends' seconds, summed
    starts = [[0.0] * micro_batches for _ in range(stages)]
    sends: list[tuple[int, int, float, float]] = []

    def hand_off(s: int, i: int) -> None:
        def send(_event: Event) -> None:
            if topo is None or transfer_bytes == 0:
                arrived[s][i].succeed()
                return
            source, target = (s - 1) * stage_devices, s * stage_devices
            sent = float(env.now)

            def arrive(_e: Event) -> None:
                crossing[s] += float(env.now) - sent
                sends.append((s - 1, i, sent, float(env.now)))
                arrived[s][i].succeed()

            topo.send(source, target, transfer_bytes).add_callback(arrive)

        left[s - 1][i].add_callback(send)

    for s in range(1, stages):
        for i in range(micro_batches):
            hand_off(s, i)

    def stage(s: int) -> Gen:
        for i in range(micro_batches):
            if s > 0:
                yield arrived[s][i]
            starts[s][i] = float(env.now)
            yield env.timeout(stage_s[s])
            left[s][i].succeed()

    done = env.all_of([env.process(stage(s)) for s in range(stages)])
    done.add_callback(lambda _event: env.pause())
    env.run_until_pause()
    end = float(env.now)
    busy = micro_batches * sum(stage_s)
    bubble = 1 - busy / (stages * end) if end > 0 else 0.0
    hand_offs: list[HandOff] = []
    if topo is not None and transfer_bytes > 0:
        for s in range(1, stages):
            source, target = (s - 1) * stage_devices, s * stage_devices
            hand_offs.append(
                HandOff(
                    stage=s - 1,
                    bytes=transfer_bytes,
                    link=link_field(topo, source, target),
                    estimate_s=topo.idle_transfer_time(source, target, transfer_bytes),
                    simulated_mean_s=crossing[s] / micro_batches,
                    sends=micro_batches,
                )
            )
    return PipelineRun(
        end,
        bubble,
        env.processed,
        tuple(hand_offs),
        tuple(tuple(row) for row in starts),
        tuple(sorted(sends)),
    )


def stage_prefix(stage: int) -> str:
    """The prefix a pipelined step's kernels carry to name their stage (``s1/decoder``)."""
    return f"s{stage}/"


def stage_kernels(timing: StepTiming, stage: int) -> tuple[KernelTiming, ...]:
    """The kernels of a pipelined step's stage ``stage``: one micro-batch's, as every
    stage's are in ``timing.kernels`` (:func:`pipelined_timing`)."""
    prefix = stage_prefix(stage)
    return tuple(k for k in timing.kernels if k.name.startswith(prefix))


def binding_stage(stage_s: Sequence[float]) -> int:
    """The stage that paces the pipeline: the slowest (the longest micro-batch time), ties to
    the first. In steady state every stage waits for it once per micro-batch."""
    return max(range(len(stage_s)), key=lambda s: stage_s[s])


def bubble_shares(
    stage_s: Sequence[float], micro_batches: int, end_s: float
) -> tuple[float, float]:
    """The pipeline's bubble (its stages' idle share of ``stages x end_s``) as two shares that
    add up to it: ``(fill_drain, imbalance)``. ``fill_drain`` is the binding stage's idle
    time, ``end_s - m T`` (``T`` its micro-batch time: what it waits while the pipeline fills
    before it and drains after it, hand-offs included), counted on every stage; ``imbalance``
    is the rest, ``m (p T - sum(t)) / (p end_s)``: the lighter stages waiting each micro-batch
    for the binding one. Equal stages with free hand-offs have no imbalance and a fill and
    drain of ``(p - 1) / (m + p - 1)``."""
    if end_s <= 0:
        return 0.0, 0.0
    stages, slowest = len(stage_s), max(stage_s)
    fill_drain = (end_s - micro_batches * slowest) / end_s
    imbalance = micro_batches * (stages * slowest - sum(stage_s)) / (stages * end_s)
    return fill_drain, imbalance


def weight_reads_s(stage: Program, timing: StepTiming) -> float:
    """Seconds of one micro-batch of ``stage`` its weights' reads take: the off-chip bytes
    its operators holding weights read (``Placement.tensors``, by kernel and operator name;
    routed experts left out, whose reads depend on the tokens routed) at the rate its memory
    channels moved bytes in ``timing`` (busy time over bytes, per tier). Every micro-batch
    reads them again: the part of a stage's time that does not shrink with the micro-batch."""
    weights = {t.name for t in stage.placement.tensors if t.kind == "weights"}
    read = dict.fromkeys(OFFCHIP, 0.0)
    for kernel in stage.kernels:
        for op in kernel.stages:
            if op.selected_by is None and f"{kernel.layer or kernel.name}/{op.name}" in weights:
                for tier in OFFCHIP:
                    read[tier] += op.reads.get(tier, 0.0) * kernel.calls
    seconds = 0.0
    for tier, nbytes in read.items():
        moved = timing.bytes_by_tier.get(tier, 0.0)
        if nbytes > 0 and moved > 0:
            seconds += min(nbytes, moved) * timing.busy_s.get(tier, 0.0) / moved
    return seconds


def micro_batch_estimate(
    stage_s: Sequence[float], weights_s: Sequence[float], micro_batches: int, parts: int
) -> float:
    """A pipeline's device time at ``parts`` micro-batches estimated from one run at
    ``micro_batches`` whose micro-batch takes ``stage_s`` on each stage, ``weights_s`` of
    it reading the stage's weights: a stage's micro-batch takes its weights' reads plus its
    share of the rest (which scales with the sequences), and micro-batches flow through
    stages as ``sum(t) + (parts - 1) max(t)`` (hand-offs left out)."""
    times = [w + (t - w) * micro_batches / parts for t, w in zip(stage_s, weights_s, strict=True)]
    return sum(times) + (parts - 1) * max(times)


def fewer_micro_batches(
    stage_s: Sequence[float], weights_s: Sequence[float], micro_batches: int
) -> dict[str, float] | None:
    """The fewest-time count of micro-batches below ``micro_batches`` by
    :func:`micro_batch_estimate`, when it beats the same estimate at ``micro_batches``
    (``micro_batches``, ``device_s`` and ``now_s``, both estimates); None otherwise."""
    now = micro_batch_estimate(stage_s, weights_s, micro_batches, micro_batches)
    best = min(
        range(1, micro_batches),
        key=lambda k: micro_batch_estimate(stage_s, weights_s, micro_batches, k),
        default=None,
    )
    if best is None:
        return None
    estimate = micro_batch_estimate(stage_s, weights_s, micro_batches, best)
    if not estimate < now:
        return None
    return {"micro_batches": best, "device_s": estimate, "now_s": now}


PIPELINE_TRACK = "pipeline"
"""The trace track (on each stage's first socket) of its micro-batches, idle gaps and sends."""


def pipeline_records(
    stages: Sequence[StepTiming], run: PipelineRun, stage_devices: int
) -> Recorder:
    """Every stage's trace on the step's timeline: each stage's one-micro-batch records
    (without its own host track) placed at each micro-batch's start on that stage, its
    sockets after the earlier stages' (stage ``s``'s socket ``k`` is ``s x stage_devices +
    k``); on each stage's first socket a ``pipeline`` track of its micro-batches, its idle
    gaps (fill, waiting for the stage before, drain) and its hand-offs to the next stage."""
    timeline = Recorder()
    end = run.end_s
    for s, timing in enumerate(stages):
        assert timing.records is not None
        base = s * stage_devices
        for at in run.starts[s]:
            timeline.slices.extend(
                replace(x, socket=x.socket + base, start_s=x.start_s + at)
                for x in timing.records.slices
                if x.track != RUNTIME_TRACK
            )
            timeline.counters.extend(
                replace(c, socket=c.socket + base, time_s=c.time_s + at)
                for c in timing.records.counters
            )
        idle_from = 0.0
        for i, at in enumerate(run.starts[s]):
            if at > idle_from:
                what = "idle: the pipeline filling" if i == 0 else "idle: waiting for stage "
                if i > 0:
                    what += f"{s - 1}'s micro-batch {i}"
                timeline.slice(base, PIPELINE_TRACK, what, idle_from, at)
            idle_from = at + timing.device_s
            timeline.slice(
                base,
                PIPELINE_TRACK,
                f"stage {s} micro-batch {i}",
                at,
                idle_from,
                (("stage", s), ("micro_batch", i)),
            )
        if end > idle_from:
            timeline.slice(base, PIPELINE_TRACK, "idle: the pipeline draining", idle_from, end)
    for stage, i, sent, arrived in run.sends:
        timeline.slice(
            stage * stage_devices,
            "hand-off",
            f"micro-batch {i} to stage {stage + 1}",
            sent,
            arrived,
            (("stage", stage), ("micro_batch", i)),
        )
    return timeline


def pipelined_timing(
    program: Program,
    stages: Sequence[StepTiming],
    system: SystemConfig,
    stack: StackConfig,
    max_events: int,
) -> StepTiming:
    """A pipelined step's timing from its stages' (each one micro-batch, device time only):
    the step is the pipeline's end plus the stack's host time once; the totals are the
    binding (slowest) stage's devices' over the step's micro-batches (``p2p`` with that
    stage's first device's hand-offs to the next stage), each kernel named by its stage
    (``s1/decoder``); ``pipeline`` says the stages' times, which binds, the bubble (and its
    fill and drain and imbalance shares, :func:`bubble_shares`) and each boundary's
    hand-off. Recorded stages give a trace of every stage's micro-batches
    (:func:`pipeline_records`)."""
    parts = program.pipeline_micro_batches
    stage_s = [timing.device_s for timing in stages]
    run = run_pipeline(
        stage_s,
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
    binding = binding_stage(stage_s)
    fill_drain, imbalance = bubble_shares(stage_s, parts, run.end_s)
    bound = stages[binding]
    busy = {unit: value * parts for unit, value in bound.busy_s.items()}
    bytes_by_tier = {tier: value * parts for tier, value in bound.bytes_by_tier.items()}
    if binding < len(run.hand_offs):  # its first device sends that boundary's
        sent = run.hand_offs[binding]
        bytes_by_tier["p2p"] += sent.bytes * sent.sends
    decode = {}
    if program.shape.phase == "decode" and parts > 1:  # each micro-batch re-reads the weights
        weights_s = [weight_reads_s(p, t) for p, t in zip(program.pipeline, stages, strict=True)]
        decode = {
            "weights_read_s": weights_s,
            "fewer_micro_batches": fewer_micro_batches(stage_s, weights_s, parts),
        }
    records = None
    if all(timing.records is not None for timing in stages):
        timeline = pipeline_records(stages, run, program.devices)
        record_host(timeline, run.end_s, hosted)
        records = timeline.freeze()
    return replace(
        bound,
        step_s=step,
        runtime_s=host,
        host_serial_s=hosted.serial_s,
        host_overlapped_s=hosted.overlapped_s,
        host_transfer_s=hosted.transfer_s,
        batch=program.shape.batch,
        expert_schedule=program.expert_schedule,
        flops=bound.flops * parts,
        vector_flops=bound.vector_flops * parts,
        bytes_by_tier=bytes_by_tier,
        busy_s=busy,
        link_busy_s={name: value * parts for name, value in bound.link_busy_s.items()},
        critical_s={unit: value * parts for unit, value in bound.critical_s.items()},
        link_flight_s={name: value * parts for name, value in bound.link_flight_s.items()},
        utilization={unit: value / step for unit, value in busy.items()},
        hbm_bandwidth_fraction=bound.hbm_bandwidth_fraction * parts * bound.step_s / step,
        flops_fraction=bound.flops_fraction * parts * bound.step_s / step,
        kernels=tuple(
            replace(kernel, name=f"{stage_prefix(index)}{kernel.name}")
            for index, timing in enumerate(stages)
            for kernel in timing.kernels
        ),
        events=sum(t.events for t in stages) + run.events,
        estimated_events=sum(t.estimated_events for t in stages),
        collectives=tuple(c for t in stages for c in t.collectives),
        records=records,
        pipeline={
            "stages": len(stages),
            "micro_batches": parts,
            "stage_s": stage_s,
            "binding_stage": binding,
            "bubble": run.bubble,
            "fill_drain": fill_drain,
            "imbalance": imbalance,
            "hand_offs": [hand_off.to_dict() for hand_off in run.hand_offs],
            **decode,
        },
    )
