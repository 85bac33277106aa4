"""Simulate one kernel's calls in a fresh SimPy environment: the engine's unit of simulation.

A kernel boundary is a full synchronization (every stage has drained, every write has landed,
the links are idle), so the machine is empty between kernels and each kernel can be simulated
on its own and placed after the previous one on the step's timeline: exactly the same times
as one long environment, with a smaller event queue.

One run builds, per simulated socket, its memory channels and launcher (``SocketModel``) and
the kernel's pipeline; one ``Topology`` of P2P links spans the TP group; stages with a
collective share one port per stage across sockets. Then every socket's launcher calls the
kernel (``iterations`` layers, looped or as separate calls) and the run ends when all have
synchronized. Statistics are read from socket 0. A looped run samples socket 0's totals at
each layer boundary and may hand them to a ``Watch``, which can lower the number of layers
the run simulates while it runs (``fast_forward``'s live cycle detection).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import simpy

from rdu_sim.compiler.program import KernelProgram
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.engine.collective_port import CollectivePort, RendezvousPort, SymmetricPort
from rdu_sim.engine.counting_env import CountingEnvironment
from rdu_sim.engine.kernel_pipeline import KernelPipeline
from rdu_sim.engine.records import Recorder
from rdu_sim.engine.run_stats import RunStats
from rdu_sim.engine.socket_model import SocketModel
from rdu_sim.engine.stage_runner import LayerCount
from rdu_sim.engine.tile_work import TileWork
from rdu_sim.hw.collectives import Topology
from rdu_sim.hw.p2p_link import P2PLink


@dataclass(frozen=True)
class RunSettings:
    """Engine knobs that shape a run (see ``Engine`` for their meaning)."""

    tiles_per_stage: int = 8
    all_sockets: bool = False
    buffer_tiles: int = 2
    prefetch_tiles: int = 2
    operand_buffer_fraction: float = 0.5
    record: bool = False


@dataclass(frozen=True)
class KernelRun:
    """Result of one run: totals on socket 0, events processed, and the records if asked."""

    stats: RunStats
    events: int
    recorder: Recorder | None
    iteration_ends: tuple[float, ...] = ()  # socket 0: when each layer iteration completed
    snapshots: tuple[RunStats, ...] = ()  # socket 0's totals at each of those moments


Watch = Callable[[Sequence[float], Sequence[RunStats], int], int | None]
"""Called at each layer boundary of a looped run (socket 0), with the boundaries so far (when
each layer ended), the totals at each, and the fewest layers the run may be cut to now;
returns the number of layers to run instead (at least that many), or None to go on."""


def run_kernel(
    kernel: KernelProgram,
    hardware: HardwareConfig,
    tp: int,
    iterations: int,
    looped: bool,
    settings: RunSettings,
    works: dict[str, TileWork],
    watch: Watch | None = None,
) -> KernelRun:
    """Simulate ``iterations`` layers of ``kernel`` (one looped call, or separate calls);
    a looped run is cut short where ``watch`` says (its results are then those of a run of
    that many layers)."""
    env = CountingEnvironment()
    system, sock = hardware.system, hardware.socket
    recorder = Recorder() if settings.record else None
    topo = Topology(
        env,
        tp,
        system.sockets_per_node,
        system.intra_node_link.bandwidth,
        system.intra_node_link.latency,
        system.inter_node_link.bandwidth,
        system.inter_node_link.latency,
    )
    n_sockets = tp if settings.all_sockets else 1
    port_type = RendezvousPort if settings.all_sockets else SymmetricPort
    ports: dict[str, CollectivePort] = {
        s.name: port_type(topo, s.collective, system.collective_algorithm)
        for s in kernel.stages
        if s.collective is not None and s.collective.group > 1
    }
    sockets = [SocketModel(env, i, sock, recorder) for i in range(n_sockets)]
    pipelines = [
        KernelPipeline(
            s,
            kernel,
            works,
            ports,
            looped=looped,
            buffer_tiles=settings.buffer_tiles,
            prefetch_tiles=settings.prefetch_tiles,
            operand_buffer_fraction=settings.operand_buffer_fraction,
            collective_chunks=system.collective_chunks,
            recorder=recorder,
        )
        for s in sockets
    ]
    snapshots: list[RunStats] = []
    layers = LayerCount(iterations)
    if looped:
        first = pipelines[0]

        def boundary() -> None:
            snapshots.append(_stats(sockets[0], first, topo, float(env.now)))
            if watch is not None:
                cut = watch(first.iteration_ends, snapshots, layers.safe())
                if cut is not None:
                    layers.lower(cut)

        first.on_iteration_end = boundary
    calls = [
        s.launcher.call(p.body(layers), iterations, looped)
        for s, p in zip(sockets, pipelines, strict=True)
    ]
    finished = simpy.AllOf(env, calls)
    env.run(until=finished)
    elapsed = float(env.now)
    return KernelRun(
        _stats(sockets[0], pipelines[0], topo, elapsed),
        env.processed,
        recorder,
        tuple(pipelines[0].iteration_ends),
        tuple(snapshots),
    )


def _stats(socket: SocketModel, pipe: KernelPipeline, topo: Topology, elapsed: float) -> RunStats:
    """Socket 0's totals so far (at the end of the run, or at a layer boundary)."""
    cfg = socket.config
    pcu_s = sum(g.n_pcus * g.busy.busy_time for g in pipe.pcus.values())
    flops = sum(g.matrix_flops for g in pipe.pcus.values())
    vector = sum(g.vector_flops for g in pipe.pcus.values())
    pmu_s = 0.0
    sram = 0.0
    for stage in pipe.kernel.stages:
        runner = pipe.runners[stage.name]
        bufs = pipe.buffers[stage.name]
        moved = sum(b.bytes_written.total + b.bytes_read.total for b in bufs)
        pmus = max(stage.pmus, 1)
        port_s = moved / (2 * pmus * cfg.pmu.bandwidth) + runner.sram_time
        pmu_s += stage.pmus * min(port_s, elapsed)
        sram += runner.sram_bytes
    topo.chains.flush()  # sends computed ahead by the symmetric collectives, up to now
    links = _links(topo)
    p2p = sum(link.bytes[direction].total for link, direction, sender in links if sender == 0)
    link_busy = max((link.busy_time(direction) for link, direction, _ in links), default=0.0)
    launcher = socket.launcher
    return RunStats(
        time_s=elapsed,
        overhead_s=launcher.overhead_time,
        hbm_bytes=socket.bytes_moved("hbm"),
        ddr_bytes=socket.bytes_moved("ddr"),
        sram_bytes=sram,
        p2p_bytes=p2p,
        flops=flops,
        vector_flops=vector,
        pcu_s=pcu_s,
        pmu_s=pmu_s,
        hbm_busy_s=socket.channels["hbm"].busy.busy_time,
        ddr_busy_s=socket.channels["ddr"].busy.busy_time,
        link_busy_s=link_busy,
    )


def _links(topo: Topology) -> list[tuple[P2PLink, int, int]]:
    """(link, direction, sending socket) for every link direction the run created."""
    out: list[tuple[P2PLink, int, int]] = []
    for (a, b), link in sorted(topo.links.items()):
        out.append((link, 0, a))
        out.append((link, 1, b))
    return out
