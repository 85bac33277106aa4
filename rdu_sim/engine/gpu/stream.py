"""The host side of a GPU step: launching its kernels into one stream, in SimPy.

Two processes share a queue. The host launches the step's kernel calls in order: each costs
it ``gpu.kernel.launch`` of CPU time, or, with CUDA graphs, the whole step is launched at
once for ``gpu.kernel.graph_launch``. The device takes the calls in order and runs each for
its device time (``kernel``: its work and its boundary synchronization), starting a call only
when the host has launched it and the previous call is done. So the host runs ahead of the
device, and its launches cost device time only where kernels are shorter than their
launches: the step is then host-bound, which CUDA graphs avoid.

Calls are in execution order: the kernels one fusion level splits a layer into run layer by
layer (``KernelProgram.layer``), a looped kernel is one call. With two-batch overlap two
micro-batches' calls run on two streams, one's all-to-alls on the network beside the other's
kernels on the SMs: first come, first served (``run_first_come``, the default), or in
SGLang's fixed stage order (``overlap.run_stage_order``; ``parallelism.overlap_schedule``).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import simpy

from rdu_sim.compiler.program import KernelProgram
from rdu_sim.des.environment import CountingEnvironment
from rdu_sim.engine.records import Recorder

Gen = Generator[Any, Any, None]


@dataclass(frozen=True)
class Call:
    """One kernel call on the stream: which kernel, and how long the device takes for it."""

    kernel: int  # index in the Program
    device_s: float


@dataclass(frozen=True)
class StreamRun:
    """The step on the stream: when it ended, each call's device start, and the host's time."""

    end_s: float
    starts: tuple[float, ...]  # per call, in order
    host_s: float  # CPU time spent launching
    events: int


def execution_order(kernels: Sequence[KernelProgram]) -> list[int]:
    """The Program's kernel indices, one per call, in the order a step executes them: the
    kernels split from one layer kernel alternate layer by layer; a looped kernel is one
    call."""
    order: list[int] = []
    i = 0
    while i < len(kernels):
        kernel = kernels[i]
        block = [i]
        while (
            kernel.layer
            and i + len(block) < len(kernels)
            and kernels[i + len(block)].layer == kernel.layer
            and kernels[i + len(block)].calls == kernel.calls
        ):
            block.append(i + len(block))
        calls = 1 if kernel.looped else kernel.calls
        for _ in range(calls):
            order.extend(block)
        i += len(block)
    return order


def run_stream(
    calls: Sequence[Call],
    launch_s: float,
    graph_launch_s: float | None,
    max_events: int,
    recorder: Recorder | None = None,
    names: Sequence[str] = (),
) -> StreamRun:
    """Simulate the host launching ``calls`` (``graph_launch_s`` not None: as one CUDA graph)
    and the device running them in order."""
    env = CountingEnvironment(limit=max_events)
    launched = [env.event() for _ in calls]
    starts: list[float] = []
    host = {"busy": 0.0}

    def host_process() -> Gen:
        if graph_launch_s is not None:
            yield env.timeout(graph_launch_s)
            host["busy"] += graph_launch_s
            _slice(recorder, "host", "graph launch", 0.0, float(env.now))
            for event in launched:
                event.succeed()
            return
        for i, event in enumerate(launched):
            start = float(env.now)
            yield env.timeout(launch_s)
            host["busy"] += launch_s
            name = f"launch {names[calls[i].kernel]}" if names else "launch"
            _slice(recorder, "host", name, start, float(env.now))
            event.succeed()

    def device_process() -> Gen:
        for call, event in zip(calls, launched, strict=True):
            yield event
            starts.append(float(env.now))
            yield env.timeout(call.device_s)

    # env.start: SimPy's process events under SimPy's keys, without its Python bookkeeping
    env.start(host_process())
    device = env.start(device_process())
    device.add_callback(lambda _event: env.pause())
    env.run_until_pause()
    return StreamRun(float(env.now), tuple(starts), host["busy"], env.processed)


def _slice(recorder: Recorder | None, track: str, name: str, start: float, end: float) -> None:
    if recorder is not None and end > start:
        recorder.slice(0, track, name, start, end)


def run_first_come(
    streams: Sequence[Sequence[Call]],
    communicates: Sequence[bool],
    launch_s: float,
    graph_launch_s: float | None,
    compute_scale: float,
    max_events: int,
) -> StreamRun:
    """Two micro-batches' calls on two streams of one device, as two-batch overlap runs
    them: the host launches the calls one stream position at a time (each ``launch_s``; with
    ``graph_launch_s`` not None, all at once as one CUDA graph);
    a call starts once launched, its stream's previous call done and its resource free: the
    SMs for a computing call, the network for a communicating one (``communicates``, by
    kernel index: an all-to-all), so one stream's communication runs beside the other's
    computation. A computing call takes ``compute_scale`` times its time alone (the SMs the
    communication kernels hold); ``starts`` are in launch order.

    A resource serves its calls in the order they became ready (first come, first served),
    so the order depends on the times: a slower call can reorder the rest into a shorter step
    (Graham's list-scheduling anomalies; ``overlap.run_stage_order`` is the monotone
    alternative)."""
    env = CountingEnvironment(limit=max_events)
    order = [
        (s, i)
        for i in range(max(len(calls) for calls in streams))
        for s, calls in enumerate(streams)
        if i < len(calls)
    ]
    launched = {key: env.event() for key in order}
    units = {kind: simpy.Resource(env, capacity=1) for kind in (False, True)}  # type: ignore[arg-type]
    starts: dict[tuple[int, int], float] = {}

    def host() -> Gen:
        if graph_launch_s is not None:
            yield env.timeout(graph_launch_s)
        for key in order:
            if graph_launch_s is None:
                yield env.timeout(launch_s)
            launched[key].succeed()

    def stream(s: int) -> Gen:
        for i, call in enumerate(streams[s]):
            yield launched[(s, i)]
            comm = communicates[call.kernel]
            with units[comm].request() as turn:
                yield turn
                starts[(s, i)] = float(env.now)
                yield env.timeout(call.device_s if comm else call.device_s * compute_scale)

    env.process(host())
    done = env.all_of([env.process(stream(s)) for s in range(len(streams))])
    done.add_callback(lambda _event: env.pause())
    env.run_until_pause()
    host_s = graph_launch_s if graph_launch_s is not None else launch_s * len(order)
    return StreamRun(float(env.now), tuple(starts[key] for key in order), host_s, env.processed)
