"""One kernel's calls simulated in their own SimPy environment: the engine's unit of simulation.

A kernel boundary is a full synchronization (every stage has drained, every write has landed,
the links are idle), so the machine is empty between kernels and each kernel can be simulated
on its own and placed after the previous one on the step's timeline: exactly the same times
as one long environment, with a smaller event queue.

A :class:`KernelSim` owns its environment, its hardware (per simulated socket the memory
channels and launcher, ``SocketModel``; one ``Topology`` of P2P links spanning the TP group;
one collective port per collective stage across sockets), the kernel's pipelines, the
``LayerCount`` its stages share, and the boundary log: socket 0's totals each time a layer of
a looped call ends, and the mark log the fast-forward's cycle rule compares (the totals and
state at ``MARKS_PER_LAYER`` evenly spaced tile ends of a reference stage in every layer).
It can be run to the next layer boundary or mark, cut to fewer layers
(``LayerCount.lower``: a cut run is then exactly a run of that many layers) and finished.
The run stops right after the callback in which the boundary (or mark) happened
(``CountingEnvironment.pause``): the totals are taken at the instant itself, and the only
process that moved on since (the sink that ended the layer or tile, up to its next wait)
took no decision a cut to ``safe`` or more layers would change.
Statistics are socket 0's. The event budget is enforced by the environment, exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from simpy.core import EmptySchedule

from rdu_sim.compiler.program import KernelProgram
from rdu_sim.config.hardware import HardwareConfig, SocketConfig
from rdu_sim.config.workload import EngineConfig
from rdu_sim.des.environment import CountingEnvironment, EventLimitError
from rdu_sim.engine.collective_port import (
    CollectivePort,
    RendezvousPort,
    SymmetricPort,
    plan_stages,
)
from rdu_sim.engine.kernel_pipeline import KernelPipeline
from rdu_sim.engine.kernel_state import KernelState, StateBuilder
from rdu_sim.engine.links import link_busy_fields, link_totals, topology_for
from rdu_sim.engine.records import Recorder
from rdu_sim.engine.run_stats import RunStats
from rdu_sim.engine.socket_model import SocketModel
from rdu_sim.engine.stage_runner import LayerCount
from rdu_sim.engine.tile_work import TileWork
from rdu_sim.pickled import Reduced, by_fields

MARKS_PER_LAYER: tuple[int, ...] = (2,)
"""Marks per layer the cycle rule compares (the first that divides the tiles; else the layer
boundaries): evenly spaced tile ends of one reference stage, the layer's last tile among
them. The rule compares a mark's state with the mark's a cycle earlier and its span with the
span one mark before, so with two marks a layer a one-layer cycle can be seen at the end of
layer 1 (counted from 0) rather than at the end of layer 2, while the stages are a layer less
far ahead: one layer fewer is simulated (``fast_forward.fewest_layers``). Each mark costs one
state (``_state``), like a boundary, so more marks cost more on steps that never repeat;
four a layer cut no prefill step shorter (CHANGELOG.md, issue 23 part 3)."""


@dataclass(frozen=True)
class Boundary:
    """The end of a layer of a looped call on socket 0: when, the totals so far, and the
    state that decides the run's future (``kernel_state``)."""

    end_s: float
    totals: RunStats
    state: KernelState = field(default_factory=KernelState)

    def __reduce__(self) -> Reduced:
        return by_fields(self)  # (compiled, a frozen dataclass: ``rdu_sim.pickled``)


@dataclass(frozen=True)
class KernelRun:
    """A finished simulation: totals on socket 0, events processed, records if asked, and
    the boundary log (looped calls)."""

    stats: RunStats
    events: int
    recorder: Recorder | None
    boundaries: tuple[Boundary, ...] = ()

    def __reduce__(self) -> Reduced:
        return by_fields(self)  # (compiled, a frozen dataclass: ``rdu_sim.pickled``)


def tile_works(kernel: KernelProgram, tiles: int, socket: SocketConfig) -> dict[str, TileWork]:
    """Each stage's per-call work cut into ``tiles`` tiles, by stage name."""
    return {s.name: TileWork.of(s, tiles, socket) for s in kernel.stages}


class KernelSim:
    """``layers`` layers of ``kernel`` (one looped call, or separate calls) on ``tp``
    sockets, its stages' work cut as ``works`` (``tile_works``), stopping with
    :class:`EventLimitError` rather than process more than ``max_events`` events."""

    def __init__(
        self,
        kernel: KernelProgram,
        hardware: HardwareConfig,
        tp: int,
        config: EngineConfig,
        works: dict[str, TileWork],
        *,
        layers: int,
        looped: bool,
        max_events: int,
        record: bool = False,
    ) -> None:
        self.kernel = kernel
        self.looped = looped
        self.env = env = CountingEnvironment(limit=max_events)
        system, sock = hardware.system, hardware.socket
        self.recorder = Recorder() if record else None
        self.topology = topology_for(env, tp, system)
        port_type = RendezvousPort if config.all_sockets else SymmetricPort
        plans = plan_stages(kernel, system)
        self.ports: dict[str, CollectivePort] = {
            s.name: port_type(self.topology, s.collective, plans[s.name])
            for s in kernel.stages
            if s.collective is not None and s.collective.group > 1
        }
        ports = self.ports
        n_sockets = tp if config.all_sockets else 1
        self.sockets = [SocketModel(env, i, sock, self.recorder) for i in range(n_sockets)]
        self.pipelines = [
            KernelPipeline(
                s,
                kernel,
                works,
                ports,
                looped=looped,
                buffer_tiles=config.buffer_tiles,
                prefetch_tiles=config.prefetch_tiles,
                operand_buffer_fraction=config.operand_buffer_fraction,
                collective_chunks=system.collective_chunks,
                recorder=self.recorder,
            )
            for s in self.sockets
        ]
        # What ``_stats`` and ``_state`` read at every mark, gathered once here: the pipelines
        # are complete, and these are their own objects (dicts and lists they keep).
        pipe = self.pipelines[0]
        self._pcu_groups = list(pipe.pcus.values())  # socket 0's, in stage order
        self._stage_ports = [
            (stage.pmus, max(stage.pmus, 1), pipe.runners[stage.name], pipe.buffers[stage.name])
            for stage in kernel.stages
        ]
        self._state_parts = [
            (
                list(socket.channels.values()),
                [(r, p.pcus.get(n), p.buffers[n]) for n, r in p.runners.items()],
            )
            for socket, p in zip(self.sockets, self.pipelines, strict=True)
        ]
        self.layers = LayerCount(layers)
        self.boundaries: list[Boundary] = []
        self.marks: list[Boundary] = []
        self.marks_per_layer = 1
        if looped:
            self.pipelines[0].on_iteration_end = self._boundary
            self._watch_tiles(next(iter(works.values())).tiles)
        calls = [
            s.launcher.call(p.body(self.layers), layers, looped)
            for s, p in zip(self.sockets, self.pipelines, strict=True)
        ]
        self._finished = env.all_of(calls)
        self._finished.add_callback(lambda _event: env.pause())

    @property
    def events(self) -> int:
        """SimPy events processed so far."""
        return self.env.processed

    @property
    def safe(self) -> int:
        """The fewest layers the run may be cut to now (``LayerCount.safe``)."""
        return self.layers.safe()

    def run_to_boundary(self) -> Boundary | None:
        """Simulate up to the next layer boundary and return it, or None when the run
        has ended (no boundary left)."""
        return self._run_to_next(self.boundaries)

    def run_to_mark(self) -> Boundary | None:
        """Simulate up to the next mark (``MARKS_PER_LAYER``) and return it, or None when
        the run has ended."""
        return self._run_to_next(self.marks)

    def _run_to_next(self, log: list[Boundary]) -> Boundary | None:
        """Simulate until ``log`` grows, returning its new entry (None: the run ended)."""
        seen = len(log)
        while not self._finished.processed:
            self._advance()
            if len(log) > seen:
                return log[-1]
        return None

    def cut(self, layers: int) -> None:
        """Run ``layers`` layers instead (at least ``safe``): from now on the run is exactly
        a run of that many layers from the start."""
        self.layers.lower(layers)

    def finish(self) -> KernelRun:
        """Simulate to the end of the run (the last synchronization)."""
        while not self._finished.processed:
            self._advance()
        stats = self._stats()
        return KernelRun(stats, self.env.processed, self.recorder, tuple(self.boundaries))

    def collective_spans(self) -> dict[str, tuple[float, ...]]:
        """Per collective stage, each simulated call's time (first piece out to last done)."""
        return {
            name: tuple(end - start for start, end in port.spans.values())
            for name, port in self.ports.items()
        }

    def _advance(self) -> None:
        try:
            self.env.run_until_pause()
        except EventLimitError:
            n, name = self.layers.n, self.kernel.name
            where = f"after {len(self.boundaries)} of {n} layers" if self.looped else f"x {n}"
            raise EventLimitError(f"kernel {name!r} {where}") from None
        except EmptySchedule:
            stalled = "; ".join(self.pipelines[0].stalled())
            raise RuntimeError(
                f"kernel {self.kernel.name!r}: no event left before the run ended "
                f"(the pipeline deadlocked; on socket 0: {stalled})"
            ) from None

    def _boundary(self) -> None:
        """Socket 0 ended a layer: log it and stop the run here (``run_to_boundary``)."""
        layer = len(self.boundaries)
        self.boundaries.append(Boundary(float(self.env.now), self._stats(), self._state(layer)))
        self.env.pause()

    def _watch_tiles(self, tiles: int) -> None:
        """Mark ``MARKS_PER_LAYER`` evenly spaced tile ends per layer of the reference
        stage: socket 0's last sink (in program order) without a collective. Without one,
        or with too few tiles, the layer boundaries are the marks."""
        pipe = self.pipelines[0]
        refs = [pipe.runners[name] for name in pipe.sinks if pipe.runners[name].port is None]
        per_layer = next((m for m in MARKS_PER_LAYER if tiles % m == 0), 1)
        if not refs or per_layer == 1:
            self.marks = self.boundaries
            return
        self.marks_per_layer = per_layer
        refs[-1].on_tile = partial(self._mark, tiles // per_layer)

    def _mark(self, every: int, layer: int, tile: int) -> None:
        """The reference stage finished ``tile`` of ``layer``: at every ``every``-th tile, log
        a mark there (the state as at a boundary, positions counted past ``layer``) and stop
        the run (``run_to_mark``)."""
        if (tile + 1) % every:
            return
        self.marks.append(Boundary(float(self.env.now), self._stats(), self._state(layer)))
        self.env.pause()

    def _state(self, layer: int) -> KernelState:
        """What decides the run's future at the end of ``layer`` (``kernel_state``), over
        every simulated socket, its memory tiers, stages, buffers and PCUs, and the links."""
        into = StateBuilder(float(self.env.now))
        into.pending(self.env.scheduled_times())
        for channels, stages in self._state_parts:
            for channel in channels:
                into.durations(channel.streams_left_s())
            for runner, group, buffers in stages:
                runner.state(into, layer)
                if group is not None:
                    into.ahead(group.free_at)
                for buffer in buffers:
                    into.count(*buffer.occupancy())
                    into.ahead(*buffer.ports_free_at())
        for link, direction, _ in self.topology.directions():
            into.ahead(link.free_at[direction])
        into.pending(self.topology.chains.pending_sends())
        return into.build()

    def _stats(self) -> RunStats:
        """Socket 0's totals now (at a layer boundary, or at the end of the run)."""
        elapsed = float(self.env.now)
        socket, topo = self.sockets[0], self.topology
        bandwidth = socket.config.pmu.bandwidth
        # One pass over the PCU groups, in the order (and so with the float sums) of four.
        pcu_s = 0.0
        pcu_stage_s = 0.0
        flops = 0.0
        vector = 0.0
        for g in self._pcu_groups:
            busy = g.busy.busy_time
            pcu_s += g.n_pcus * busy
            pcu_stage_s = max(pcu_stage_s, busy)
            flops += g.matrix_flops
            vector += g.vector_flops
        pmu_s = 0.0
        pmu_stage_s = 0.0
        sram = 0.0
        for stage_pmus, pmus, runner, bufs in self._stage_ports:
            moved = 0.0
            for b in bufs:
                moved += b.bytes_moved()
            port_s = min(moved / (2 * pmus * bandwidth) + runner.sram_time, elapsed)
            pmu_s += stage_pmus * port_s
            pmu_stage_s = max(pmu_stage_s, port_s)
            sram += runner.sram_bytes
        p2p, link_busy, link_flight = link_totals(topo)
        return RunStats(
            time_s=elapsed,
            overhead_s=socket.launcher.overhead_time,
            hbm_bytes=socket.bytes_moved("hbm"),
            ddr_bytes=socket.bytes_moved("ddr"),
            sram_bytes=sram,
            p2p_bytes=p2p,
            flops=flops,
            vector_flops=vector,
            pcu_s=pcu_s,
            pmu_s=pmu_s,
            pcu_stage_s=pcu_stage_s,
            pmu_stage_s=pmu_stage_s,
            hbm_busy_s=socket.channels["hbm"].busy.busy_time,
            ddr_busy_s=socket.channels["ddr"].busy.busy_time,
            **link_busy_fields(link_busy, link_flight),
        )
