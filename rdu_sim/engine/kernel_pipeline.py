"""A fused kernel on one socket: its stages wired by stage buffers, and its launcher body.

Wiring: every pipeline edge (``StageProgram.inputs``) is a cut-through ``StreamEdge`` over a
``StageBuffer`` in the consumer's PMUs of ``buffer_tiles`` slots (skip connections, loop
edges, the selection a stage's weights wait for and the inputs that wait with it, such as
the shared expert's output at the routed experts' combine, and the edges around a row
finished only at its end, ``StageProgram.whole_row_outputs``, hold a whole layer's tiles;
a branch bypassing collectives, such as the shared expert beside expert parallelism's
all-to-alls, holds their chunks at its join: ``compiler.buffers``, the rule the compiler
sizes the SRAM by); a consumer with several
inputs splits its PMUs' bandwidth among them, and a stage given no PMUs still gets one PMU's
bandwidth so its operands can land. Each stage with PCUs has its own ``PCUGroup``; all
stages share the socket's memory channels. A stage streams weight/KV tiles as far ahead of
its compute as ``operand_buffer_fraction`` of its PMUs' SRAM holds (at least
``prefetch_tiles``, see ``tile_work.prefetch_window``).

Kernel looping: in a looped kernel every sink stage (no consumer) of layer ``l`` feeds every
source stage (no producer) of layer ``l + 1`` through a loop buffer of two layers' tiles (the
activation handed between layers, and room for a sink early in a body of several layers to
run a body ahead of a late source), so the next layer starts as
soon as the previous layer's first output tile exists and the stages run one continuous
pipelined outer loop; the next layer's weight loads start as soon as each stage has a free
weight slot. Without looping each call starts from an empty pipeline.

The body handed to ``hw.KernelLauncher.call`` is per iteration: looped, iteration 0 starts
every stage for all iterations and each iteration returns when all sinks have emitted its
last tile (so the launcher's per-iteration accounting sees the layer period), the last
iteration when every stage process (and its outstanding writes) has ended; unlooped, each
call starts the stages for one iteration and returns when they have all ended.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from rdu_sim.compiler.buffers import BufferRule, Edge, pipeline_edges, slots_by_edge
from rdu_sim.compiler.program import KernelProgram
from rdu_sim.config.hardware import SocketConfig
from rdu_sim.des.environment import Event
from rdu_sim.engine.collective_port import CollectivePort
from rdu_sim.engine.records import Recorder
from rdu_sim.engine.socket_model import SocketModel
from rdu_sim.engine.stage_runner import LayerCount, StageRunner
from rdu_sim.engine.stream_edge import StreamEdge
from rdu_sim.engine.tile_work import TileWork, prefetch_window
from rdu_sim.hw.pcu_group import PCUGroup
from rdu_sim.hw.stage_buffer import StageBuffer

Body = Callable[[int], Generator[Event, Any, Any]]


class KernelPipeline:
    """The stages of ``kernel`` on ``socket``, ready to run ``iterations`` layers per call."""

    def __init__(
        self,
        socket: SocketModel,
        kernel: KernelProgram,
        works: dict[str, TileWork],
        ports: dict[str, CollectivePort],
        *,
        looped: bool,
        buffer_tiles: int,
        prefetch_tiles: int,
        operand_buffer_fraction: float,
        collective_chunks: int,
        recorder: Recorder | None,
    ) -> None:
        env, cfg = socket.env, socket.config
        self.env = env
        self.socket = socket
        self.kernel = kernel
        self.looped = looped
        self.recorder = recorder
        layer_loop = cfg.kernel.layer_loop if looped else 0.0
        self.runners: dict[str, StageRunner] = {}
        self.pcus: dict[str, PCUGroup] = {}
        self.buffers: dict[str, list[StageBuffer]] = {}  # consumer -> its input buffers
        self.edge_buffers: dict[Edge, StageBuffer] = {}
        for stage in kernel.stages:
            group = None
            if stage.pcus > 0:
                group = PCUGroup(
                    env,
                    stage.pcus,
                    cfg.pcu.peak_flops,
                    cfg.pcu.vector_flops,
                    name=f"s{socket.index}.{stage.name}",
                )
                self.pcus[stage.name] = group
            window = prefetch_window(
                works[stage.name],
                operand_buffer_fraction * stage.pmus * cfg.pmu.sram,
                prefetch_tiles,
            )
            self.runners[stage.name] = StageRunner(
                socket,
                stage,
                works[stage.name],
                group,
                _pmu_bandwidth(cfg, stage.pmus),
                window,
                layer_loop,
                ports.get(stage.name),
                collective_chunks,
                recorder,
            )
            self.buffers[stage.name] = []
        tiles = next(iter(works.values())).tiles
        for stage in kernel.stages:
            runner = self.runners[stage.name]
            if stage.selected_by is not None:
                runner.selected_by = self.runners[stage.selected_by]
            if 0 < stage.whole_row_outputs < tiles:
                runner.whole_rows = stage.whole_row_outputs
        consumed = {name for stage in kernel.stages for name in stage.inputs}
        self.sinks = [s.name for s in kernel.stages if s.name not in consumed]
        edges = pipeline_edges(kernel.stages, looped)
        # A whole-layer edge (a loop edge, a skip connection, the selection a stage's
        # weights wait for, a row finished only at its end and its consumer's other
        # inputs) holds a layer's tiles, an edge bypassing collectives their chunks: the
        # one rule, in compiler.buffers.
        rule = BufferRule(buffer_tiles, prefetch_tiles, collective_chunks)
        slots_of = slots_by_edge(kernel.stages, looped, rule, tiles)
        fan_in = dict.fromkeys(self.runners, 0)
        for _, consumer, _ in edges:
            fan_in[consumer] += 1
        pmus = {stage.name: stage.pmus for stage in kernel.stages}
        for edge in edges:
            producer, consumer, loop = edge
            bandwidth = _pmu_bandwidth(cfg, pmus[consumer]) / fan_in[consumer]
            name = f"{producer}{'@prev' if loop else ''}->{consumer}"
            row = self.runners[producer].whole_rows > 0
            buffer = StageBuffer(env, slots_of[edge], bandwidth, name=name)
            stream = StreamEdge(buffer, whole_rows=row)
            self.edge_buffers[edge] = buffer
            self.buffers[consumer].append(stream.buffer)
            runner_out = self.runners[producer]
            (runner_out.loop_outputs if loop else runner_out.outputs).append(stream)
            runner_in = self.runners[consumer]
            (runner_in.loop_inputs if loop else runner_in.inputs).append(stream)
        for sink in self.sinks:
            self.runners[sink].on_iteration = self._sink_done
        self._left: list[int] = []
        self._done: list[Event] = []
        self._procs: dict[str, Event] = {}  # stage -> its process (the latest call's)
        # called when all sinks have emitted an iteration's last tile (the layer boundary)
        self.on_iteration_end: Callable[[], None] | None = None

    def _sink_done(self, iteration: int) -> None:
        self._left[iteration] -= 1
        if self._left[iteration] == 0:
            if self.on_iteration_end is not None:
                self.on_iteration_end()
            self._done[iteration].succeed()

    def _start(self, layers: LayerCount) -> Event:
        self._left = [len(self.sinks)] * layers.n
        self._done = [self.env.event() for _ in range(layers.n)]
        self._procs = {name: self.env.start(r.run(layers)) for name, r in self.runners.items()}
        return self.env.all_of(list(self._procs.values()))

    def stalled(self) -> list[str]:
        """What each stage still running waits for, one line a stage: the edges it waits to
        take a tile from (empty) or to hand one into (full), else something off the edges
        (a producer's tile or row, a collective, its loads). For the engine's deadlock
        error: stages left waiting when no event is left wait for each other."""
        waits: dict[str, list[str]] = {}
        for (producer, consumer, _), buffer in self.edge_buffers.items():
            _, _, _, producers, consumers = buffer.occupancy()
            if consumers:
                waits.setdefault(consumer, []).append(f"a tile from {buffer.name}")
            if producers:
                full = f"a slot in {buffer.name} ({buffer.capacity} full)"
                waits.setdefault(producer, []).append(full)
        other = ["a producer's tile or row, a collective or its loads"]
        lines = []
        for name, runner in self.runners.items():
            proc = self._procs.get(name)
            if proc is None or proc.triggered:
                continue
            layer, tile = divmod(runner.position, runner.work.tiles)
            what = " and ".join(waits.get(name, other))
            lines.append(f"{name} (layer {layer} tile {tile}) waits for {what}")
        return lines

    def body(self, layers: LayerCount) -> Body:
        """The launcher body for ``layers.n`` layer iterations (see the module docstring)."""
        env, rec, socket = self.env, self.recorder, self.socket
        launcher = socket.launcher
        everything: list[Event] = []

        def looped(i: int) -> Generator[Event, Any, None]:
            start = float(env.now)
            if i >= layers.n:  # cut by a live fast-forward: the launcher's loop runs on empty
                return
            if i == 0:
                _overhead_slice(rec, socket.index, "launch", start, launcher.launch_time)
                everything.append(self._start(layers))
            yield self._done[i] if i + 1 < layers.n else everything[0]
            if rec is not None:
                args = (("kernel", self.kernel.name), ("layer", i), ("calls", self.kernel.calls))
                name = f"{self.kernel.name} layer {i}"
                rec.slice(socket.index, "kernel", name, start, float(env.now), args)
            if i + 1 == layers.n:
                _overhead_slice(
                    rec, socket.index, "sync", float(env.now) + launcher.sync, launcher.sync
                )

        def unlooped(i: int) -> Generator[Event, Any, None]:
            start = float(env.now)
            _overhead_slice(rec, socket.index, "launch", start, launcher.launch_time)
            yield self._start(LayerCount(1))
            if rec is not None:
                args = (("kernel", self.kernel.name),)
                rec.slice(socket.index, "kernel", self.kernel.name, start, float(env.now), args)
            _overhead_slice(
                rec, socket.index, "sync", float(env.now) + launcher.sync, launcher.sync
            )

        return looped if self.looped else unlooped


def _pmu_bandwidth(cfg: SocketConfig, pmus: int) -> float:
    return max(pmus, 1) * cfg.pmu.bandwidth


def _overhead_slice(
    rec: Recorder | None, socket: int, name: str, end: float, duration: float
) -> None:
    if rec is not None and duration > 0:
        rec.slice(socket, "agcu", name, end - duration, end)
