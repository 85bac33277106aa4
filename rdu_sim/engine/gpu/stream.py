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
micro-batches' calls run in SGLang's interleaved order instead (``overlap``).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

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

    env.process(host_process())
    device = env.process(device_process())
    device.callbacks.append(lambda _event: env.pause())
    env.run_until_pause()
    return StreamRun(float(env.now), tuple(starts), host["busy"], env.processed)


def _slice(recorder: Recorder | None, track: str, name: str, start: float, end: float) -> None:
    if recorder is not None and end > start:
        recorder.slice(0, track, name, start, end)
