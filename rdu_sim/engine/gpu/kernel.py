"""One GPU kernel's calls simulated on the device: SMs, HBM and NVLink, in SimPy.

The device side of a kernel call (the host side, launches, is ``stream``). A call streams
``tiles_per_stage`` tiles, as a kernel's thread blocks sweep its work in waves:

- every segment of the kernel (stages between collectives, ``work.segments``) is a process
  that takes tile after tile: it issues the tile's HBM reads ``prefetch_tiles`` tiles ahead
  (the asynchronous copy pipeline of a Hopper kernel), queues the tile's work of each of its
  stages on the SMs, and the tile ends when that work and its reads are done (compute
  streams over the operands as they land, as in SN40L's stages); writes land asynchronously;
- a segment's reads arrive in the order its tiles use them: each one's latency overlaps
  the earlier ones, its bytes move once the segment's previous read is done
  (``MemoryChannel.read``'s ``after``). Shared fairly, the prefetches issued together
  would all end together, the next ones would be issued only then and wait a whole
  latency on an idle HBM; the faster the compute, the more the issues bunch up, so more
  tensor-core FLOP/s made a memory-bound kernel slower;
- the SMs are one FIFO compute server (``hw.PCUGroup``) shared by the segments: matrix work
  at the stage's tensor rate and GEMM efficiency, element-wise work at the vector rate;
- HBM is one ``hw.MemoryChannel`` shared by the segments' reads and all writes, fair to
  the byte;
- a decode step's KV reads also pass through their attention's thread blocks, a channel of
  their own at the rate the blocks streaming at once reach (``work.kv_blocks_bandwidth``):
  few blocks over long contexts are slower than the HBM;
- a segment that ends in a collective starts the collective of each chunk of its output on
  the NVLink ``Topology`` when the chunk's tiles are done, with the algorithm the NCCL-like
  chooser picks for the tensor and the wiring (``collective_port.plan_collective``: on an
  NVSwitch, one-shot, two-shot or a ring; the symmetric shortcut for the GPU group, as for
  SN40L sockets); the next segment starts a tile when the chunk holding it is reduced;
- the call ends when every tile, write and collective is done; then the device-wide
  synchronization of the kernel boundary (``gpu.kernel.sync``) before anything else runs.

A looped kernel (``fusion: full`` with kernel looping: a persistent kernel over the layers)
pays the same device-wide barrier between layers: a GPU has no pipelined outer loop, so its
layers do not overlap; what looping saves on a GPU is host launches (``stream``).

This is the engine's ``Simulation`` face (``fast_forward.time_kernel`` drives it): run to
the next layer boundary, cut, finish. Every layer of a looped GPU kernel starts from an
empty device, so its boundary log is periodic from the first layer and a cut is exact.
Statistics are GPU 0's (symmetric tensor parallelism).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from typing import Any

from simpy.core import EmptySchedule

from rdu_sim.compiler.program import KernelProgram
from rdu_sim.config.gpu import GpuHardwareConfig
from rdu_sim.config.workload import EngineConfig
from rdu_sim.des.environment import CountingEnvironment, Event, EventLimitError
from rdu_sim.engine.collective_port import SymmetricPort, plan_collective
from rdu_sim.engine.gpu.work import Segment
from rdu_sim.engine.kernel_sim import Boundary, KernelRun
from rdu_sim.engine.links import link_busy_fields, link_totals, topology_for
from rdu_sim.engine.records import Recorder
from rdu_sim.engine.run_stats import RunStats
from rdu_sim.engine.stage_runner import chunk_boundaries
from rdu_sim.hw.memory_channel import MemoryChannel
from rdu_sim.hw.pcu_group import PCUGroup

Gen = Generator[Any, Any, None]
TRACK = "gpu"


class GpuKernelSim:
    """``layers`` calls (or layers of one looped call) of ``kernel`` on GPU 0 of ``tp``."""

    def __init__(
        self,
        kernel: KernelProgram,
        hardware: GpuHardwareConfig,
        tp: int,
        config: EngineConfig,
        segments: tuple[Segment, ...],
        *,
        layers: int,
        looped: bool,
        max_events: int,
        record: bool = False,
    ) -> None:
        self.kernel = kernel
        self.looped = looped
        self.segments = segments
        self.env = env = CountingEnvironment(limit=max_events)
        gpu, system = hardware.gpu, hardware.system
        self.recorder = Recorder() if record else None
        self.tiles = config.tiles_per_stage
        self.prefetch = max(1, min(config.prefetch_tiles, self.tiles))
        self.n_chunks = system.collective_chunks
        self.chunks = chunk_boundaries(self.tiles, self.n_chunks)
        self.sync = gpu.kernel.sync
        self.hbm = MemoryChannel(
            env, gpu.hbm.bandwidth, gpu.hbm.latency, gpu.hbm.efficiency, name="gpu0.hbm"
        )
        fastest = max(gpu.bf16_flops, gpu.fp8_flops)
        self.sms = PCUGroup(env, 1, fastest, gpu.vector_flops, name="gpu0.sms")
        self.topology = topology_for(env, tp, system)
        self.kv_blocks = {  # each decode KV read's attention's thread blocks, which it passes
            stage.name: MemoryChannel(env, stage.kv_blocks_bandwidth, name=f"gpu0.{stage.name}")
            for seg in segments
            for stage in seg.stages
            if stage.kv_blocks_bandwidth is not None
        }
        self.ports = {  # the algorithm chosen for each collective's tensor and wiring
            i: SymmetricPort(self.topology, seg.collective, plan_collective(seg.collective, system))
            for i, seg in enumerate(segments)
            if seg.collective is not None
        }
        self.n = layers
        self.done = 0
        self.overhead_s = 0.0
        self.boundaries: list[Boundary] = []
        # env.start: SimPy's process events under SimPy's keys, without its Python bookkeeping
        self._process = env.start(self._run())
        self._process.add_callback(lambda _event: env.pause())

    @property
    def safe(self) -> int:
        """The fewest layers the run may be cut to now: a layer boundary is a device-wide
        barrier, so every layer not yet begun can be dropped."""
        return max(self.done, 1)

    marks_per_layer = 1
    """The cycle rule compares the layer boundaries (``fast_forward.Simulation``)."""

    @property
    def marks(self) -> list[Boundary]:
        """The instants the cycle rule compares: the layer boundaries."""
        return self.boundaries

    def run_to_mark(self) -> Boundary | None:
        """Simulate up to the next mark (layer boundary); None when the run has ended."""
        return self.run_to_boundary()

    def run_to_boundary(self) -> Boundary | None:
        """Simulate up to the next layer boundary; None when the run has ended."""
        seen = len(self.boundaries)
        while not self._process.processed:
            self._advance()
            if len(self.boundaries) > seen:
                return self.boundaries[-1]
        return None

    def cut(self, layers: int) -> None:
        """Run ``layers`` layers instead (``safe <= layers <= n``)."""
        if not self.safe <= layers <= self.n:
            raise ValueError(
                f"cannot cut a run of {self.n} layers to {layers} (at least {self.safe})"
            )
        self.n = layers

    def finish(self) -> KernelRun:
        """Simulate to the end of the run (the last boundary's synchronization)."""
        while not self._process.processed:
            self._advance()
        return KernelRun(self._stats(), self.env.processed, self.recorder, tuple(self.boundaries))

    def collective_spans(self) -> dict[str, tuple[float, ...]]:
        """Per collective stage, each simulated call's time (first piece out to last done)."""
        return {
            self.segments[i].stages[-1].name: tuple(
                end - start for start, end in port.spans.values()
            )
            for i, port in self.ports.items()
        }

    def _advance(self) -> None:
        try:
            self.env.run_until_pause()
        except EventLimitError:
            where = f"after {self.done} of {self.n} layers" if self.looped else f"x {self.n}"
            raise EventLimitError(f"kernel {self.kernel.name!r} {where}") from None
        except EmptySchedule:
            raise RuntimeError(
                f"kernel {self.kernel.name!r}: no event left before the run ended"
            ) from None

    def _run(self) -> Gen:
        env = self.env
        while self.done < self.n:
            start = float(env.now)
            yield from self._call()
            if self.sync > 0:
                yield env.timeout(self.sync)
            self.overhead_s += self.sync
            if self.recorder is not None:
                name = f"{self.kernel.name} L{self.done}" if self.looped else self.kernel.name
                self.recorder.slice(0, "kernel", name, start, float(env.now))
            self.done += 1
            if self.looped:
                self.boundaries.append(Boundary(float(env.now), self._stats()))
                env.pause()
                # stop before the next layer begins: a cut when the run resumes may end it
                yield env.timeout(0)

    def _call(self) -> Gen:
        """One call (one layer) of the kernel: every segment streaming its tiles."""
        env = self.env
        upstream: list[Event] | None = None
        processes = []
        for index, segment in enumerate(self.segments):
            ready = [env.event() for _ in range(self.tiles)] if index in self.ports else None
            processes.append(env.start(self._segment(index, segment, upstream, ready)))
            upstream = ready
        yield env.all_of(processes)

    def _segment(
        self,
        index: int,
        segment: Segment,
        upstream: list[Event] | None,
        ready: list[Event] | None,
    ) -> Gen:
        env, tiles = self.env, self.tiles
        last: dict[str | None, Event] = {}  # the latest read of the HBM (None), of each KV
        loads = deque(self._load(segment, t, last) for t in range(self.prefetch))
        writes: list[Event] = []
        collectives: list[Event] = []
        pending: list[int] = []
        for t in range(tiles):
            if upstream is not None:
                yield upstream[t]
            start = float(env.now)
            work: Event | None = None  # the tile's last work on the SMs
            for stage in segment.stages:
                if stage.matrix_flops > 0:
                    work = self.sms.compute(stage.matrix_flops, stage.efficiency)
                if stage.vector_flops > 0:
                    work = self.sms.vector(stage.vector_flops)
            tile_loads = loads.popleft()
            if t + self.prefetch < tiles:
                loads.append(self._load(segment, t + self.prefetch, last))
            if work is not None:
                yield work
            for load in tile_loads:  # noqa: UP028 (SimPy sends values back: a list iterator cannot)
                yield load
            # a collective stage writes its result once its chunk is reduced (``_collective``)
            local = segment.stages[:-1] if ready is not None else segment.stages
            for stage in local:
                if stage.writes[t]:
                    writes.append(self.hbm.write(stage.writes[t]))
            if self.recorder is not None:  # every tile, one ready at once too (zero length)
                args = self._tile_args(index, segment, t)
                track = f"{TRACK}/segment{index}"
                self.recorder.slice(0, track, f"t{t}", start, float(env.now), args)
            if ready is not None:
                pending.append(t)
                if self.chunks[t]:
                    collectives.append(self._collective(index, segment, pending, ready, t, writes))
                    pending = []
        for event in collectives:  # first: their results' writes join ``writes`` when done
            yield event
        for event in writes:
            yield event

    def _tile_args(
        self, index: int, segment: Segment, t: int
    ) -> tuple[tuple[str, str | float], ...]:
        """What tile ``t`` of segment ``index`` did, for its trace slice: its stages, FLOPs,
        HBM bytes read and written (a collective stage's result written once reduced), and
        at a collective chunk's last tile the bytes GPU 0 sends on its links for the chunk
        (``CollectivePort.sent_bytes``): summed over the trace, the step's totals."""
        stages = segment.stages
        args: list[tuple[str, str | float]] = [
            ("stages", ", ".join(stage.name for stage in stages)),
            ("tile", t),
            ("matrix_flops", sum(stage.matrix_flops for stage in stages)),
            ("vector_flops", sum(stage.vector_flops for stage in stages)),
            ("hbm_read_bytes", sum(stage.reads[t] for stage in stages)),
            ("hbm_write_bytes", sum(stage.writes[t] for stage in stages)),
        ]
        spec = segment.collective
        if spec is not None and index in self.ports and self.chunks[t]:
            nbytes = spec.bytes * self.chunks[t] / self.n_chunks
            args.append(("p2p_sent_bytes", self.ports[index].sent_bytes(0, nbytes, self.chunks[t])))
        return tuple(args)

    def _load(self, segment: Segment, t: int, last: dict[str | None, Event]) -> list[Event]:
        """Tile ``t``'s reads from HBM; a decode step's KV reads also through their
        attention's thread blocks, which stream them at their own rate. Each read moves its
        bytes after the segment's previous read of the same channel (``last``: None for the
        HBM, a stage's name for its thread blocks; updated): the segment's reads in order."""
        loads: list[Event] = []
        nbytes = sum(stage.reads[t] for stage in segment.stages)
        if nbytes:
            read = last[None] = self.hbm.read(nbytes, after=last.get(None))
            loads.append(read)
        for stage in segment.stages:
            if stage.kv_blocks_bandwidth is not None and stage.reads[t]:
                read = self.kv_blocks[stage.name].read(stage.reads[t], after=last.get(stage.name))
                loads.append(read)
                last[stage.name] = read
        return loads

    def _collective(
        self,
        index: int,
        segment: Segment,
        tiles: list[int],
        ready: list[Event],
        t: int,
        writes: list[Event],
    ) -> Event:
        """Start the collective of the chunk(s) ending at tile ``t``; when it is done its
        tiles are ready for the next segment and the collective stage writes them."""
        spec = segment.collective
        assert spec is not None
        chunks = self.chunks[t]
        nbytes = spec.bytes * chunks / self.n_chunks
        done = self.ports[index].start(0, t, nbytes, chunks, self.done)
        stage = segment.stages[-1]
        waiting = list(tiles)

        def release(_event: Event) -> None:
            for i in waiting:
                ready[i].succeed()
                if stage.writes[i]:
                    writes.append(self.hbm.write(stage.writes[i]))

        if done.triggered:
            release(done)
        else:
            done.add_callback(release)
        return done

    def _stats(self) -> RunStats:
        """GPU 0's totals now (at a layer boundary, or at the end of the run)."""
        sent, busiest, flight = link_totals(self.topology)
        return RunStats(
            time_s=float(self.env.now),
            overhead_s=self.overhead_s,
            hbm_bytes=self.hbm.reads.total + self.hbm.writes.total,
            p2p_bytes=sent,
            flops=self.sms.matrix_flops,
            vector_flops=self.sms.vector_flops,
            pcu_s=self.sms.busy.busy_time,
            hbm_busy_s=self.hbm.busy.busy_time,
            **link_busy_fields(busiest, flight),
            blocks_busy_s=sum(channel.busy.busy_time for channel in self.kv_blocks.values()),
        )
