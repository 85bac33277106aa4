"""One pipeline stage on one socket: the SimPy process that streams its tiles (a generator
started by ``CountingEnvironment.start``, resumed as SimPy's ``Process`` would resume it).

For each tile, in order (a call of a looped kernel runs ``iterations x tiles`` of them):

1. take the tile from every input edge (blocks while a producer has not started it). Edges
   stream cut-through (``StreamEdge``): a producer hands a tile over when it starts it, with
   the event of its finishing it, so consumers work on the tile concurrently and a chain of
   stages runs at the pace of its slowest member instead of paying a whole tile per stage.
   Except across a row: a producer that finishes a row of its output only at the row's end
   (``StageProgram.whole_row_outputs``: a reduction along the row, with fewer rows than
   tiles, as in batch-1 decode) hands its tiles with the row's end, and the consumer starts
   computing none of them before (there is nothing of the row to compute on): a chain of
   such stages runs one after another, the data dependency of one token through a layer;
2. hand the output tile to every consumer's edge (blocks while a consumer's buffer is full:
   the slots stay held until the consumer has finished the tile, so capacity 2 is double
   buffering and a slow consumer back-pressures its producers);
3. its share of the stage's weight/KV bytes streams in from HBM/DDR. Loads are issued up to
   ``prefetch`` tiles ahead into the stage's PMUs (the tiles that fit its operand buffer, at
   least double buffering): a load's slot frees when its tile ends, so loads overlap compute
   and input waits, and in a looped kernel the next layer's first loads overlap this layer's
   last tiles. Outstanding loads share the channel fairly with each other and every other
   stage's. A stage whose weights are selected by another stage's output (routed experts:
   ``StageProgram.selected_by``) issues a layer's loads only when that stage has finished
   the layer, since their addresses are not known before: such loads never cross the
   routing point, and the inputs that wait with them hold the layer
   (``compiler.buffers.whole_layer_edges``), so the selector can always finish it;
4. compute on the stage's ``PCUGroup``: matrix FLOPs at the stage's GEMM efficiency, then
   element-wise FLOPs at the vector rate, while the tile's operands and inputs stream in and
   SRAM-resident bytes stream through the stage's PMUs: the tile ends when its compute, its
   loads, its SRAM streaming and its producers' tiles have all ended, so a tile costs the
   longest of them and the engine's tile granularity adds no artificial serialization;
5. release the input slots, issue the next load and the tile's KV writes (asynchronous: they
   only have to land before the call ends).

A stage with a ``CollectiveSpec`` does not push tiles directly: its output is cut into
``collective_chunks`` chunks (chunk boundaries at tile boundaries, independent of
``tiles_per_stage``); when the tiles of a chunk are computed the chunk's collective starts on
the links and the stage computes on, while a small chained process pushes the chunk's tiles
downstream once the collective is done (as SN40L fuses and pipelines the all-reduce with the
compute that feeds it). Per tile this costs a handful of SimPy events and no extra process.
A collective stage's consumers therefore wait for a whole chunk: the pipeline edges that
bypass it hold a whole layer (a residual around an all-reduce) or the chunks it holds back
(the shared expert beside expert parallelism's all-to-alls: ``compiler.buffers``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from typing import Any

from rdu_sim.compiler.program import StageProgram
from rdu_sim.des.environment import Event
from rdu_sim.engine.collective_port import CollectivePort
from rdu_sim.engine.kernel_state import StateBuilder
from rdu_sim.engine.records import Recorder
from rdu_sim.engine.socket_model import SocketModel
from rdu_sim.engine.stream_edge import StreamEdge
from rdu_sim.engine.tile_work import TileWork
from rdu_sim.hw.pcu_group import PCUGroup

Gen = Generator[Event, Any, None]


class LayerCount:
    """How many layers a call's stages run, shared by every stage of the run (all sockets).

    Fixed for the whole run unless a live fast-forward lowers it (``fast_forward``). The
    stages read ``n`` only where the number of layers matters: whether to go on to the next
    tile, whether to issue the load of a tile ``prefetch`` tiles ahead, and whether a layer's
    outputs also feed the next layer (and the launcher: which event a layer's body waits
    for). ``started`` and ``loaded`` are the highest layer any stage has started a tile of and
    issued a load for; a run whose ``n`` is lowered to at least ``safe()`` has taken no
    decision that a run of ``n`` layers from the start would have taken differently, so it
    follows that run exactly from then on.
    """

    __slots__ = ("loaded", "n", "started")

    def __init__(self, n: int) -> None:
        self.n = n
        self.started = -1
        self.loaded = 0 if n > 0 else -1  # a stage's first loads (layer 0) start at once

    def safe(self) -> int:
        """The fewest layers ``n`` may be lowered to now."""
        return max(self.loaded + 1, self.started + 2)

    def lower(self, n: int) -> None:
        """Run ``n`` layers instead of ``self.n`` (``safe() <= n <= self.n``)."""
        if not self.safe() <= n <= self.n:
            raise ValueError(
                f"cannot cut a run of {self.n} layers to {n} (at least {self.safe()} now)"
            )
        self.n = n


def chunk_boundaries(tiles: int, chunks: int) -> tuple[int, ...]:
    """Chunks completed at each tile: ``floor((t+1) C / T) - floor(t C / T)``; sums to C."""
    return tuple((t + 1) * chunks // tiles - t * chunks // tiles for t in range(tiles))


class StageRunner:
    """Streams one stage's tiles on one socket; wired to buffers by the kernel pipeline."""

    on_tile: Callable[[int, int], None] | None = None
    """Called with ``(layer, tile)`` each time this stage (without a collective) has finished
    a tile: the fast-forward's cycle rule marks tile ends of one reference stage
    (``kernel_sim.KernelSim``)."""

    def __init__(
        self,
        socket: SocketModel,
        stage: StageProgram,
        work: TileWork,
        pcus: PCUGroup | None,
        pmu_bandwidth: float,
        prefetch: int,
        layer_loop: float,
        port: CollectivePort | None,
        collective_chunks: int,
        recorder: Recorder | None,
    ) -> None:
        self.env = socket.env
        self.socket = socket
        self.stage = stage
        self.work = work
        self.pcus = pcus
        self.pmu_bandwidth = pmu_bandwidth  # bytes/s of all the stage's PMUs
        self.prefetch = max(1, prefetch)
        self.layer_loop = layer_loop
        self.port = port
        self.n_chunks = collective_chunks
        self.chunks = chunk_boundaries(work.tiles, collective_chunks) if port else ()
        self.recorder = recorder
        self.track = f"stage/{stage.name}"
        self.inputs: list[StreamEdge] = []  # from producers in the same iteration
        self.outputs: list[StreamEdge] = []  # to consumers in the same iteration
        self.loop_inputs: list[StreamEdge] = []  # from the previous layer (looped kernels)
        self.loop_outputs: list[StreamEdge] = []  # to the next layer (looped kernels)
        self.on_iteration: Callable[[int], None] | None = None  # set on sinks
        # the stage whose output selects this stage's weights (set by the kernel pipeline)
        self.selected_by: StageRunner | None = None
        # Rows of output this stage finishes only at the end of each row, when fewer than its
        # tiles (0: every tile's output is final when the tile ends). Set by the pipeline.
        self.whole_rows = 0
        self._row_ends: dict[tuple[int, int], Event] = {}  # (layer, row) -> its end
        self._layers_done = 0  # layers whose last tile this stage has finished
        self._layers_begun = 0  # layers whose first tile has had its inputs
        self.position = 0  # the tile being worked on, counted over all layers
        self._layer_gates: dict[int, Event] = {}  # layer -> fires when it is done
        self.sram_time = 0.0  # seconds the PMUs spent streaming SRAM-resident bytes
        self.sram_bytes = 0.0  # SRAM-resident bytes streamed so far
        self._key = 0  # collective chunks started (same sequence on every socket)
        self._last_emit: Event | None = None
        self._layers = LayerCount(1)  # set by run()
        self._out_edges: tuple[list[StreamEdge], list[StreamEdge]] = ([], [])  # by run()

    def run(self, layers: LayerCount) -> Gen:
        """The process body: ``layers.n`` layer iterations of ``tiles`` tiles each (``layers.n``
        is read at every tile: a live fast-forward may lower it while the stages run)."""
        env, work, tiles = self.env, self.work, self.work.tiles
        pcus, sram, recorder = self.pcus, work.sram, self.recorder
        if pcus is None and (work.flops > 0 or work.vector_flops > 0):
            raise ValueError(f"stage {self.stage.name!r} has FLOPs but no PCUs")
        matrix = pcus is not None and work.flops > 0
        vector = pcus is not None and work.vector_flops > 0
        self._layers = layers
        loads: deque[list[Event]] = deque(
            self._load(i) for i in range(min(self.prefetch, layers.n * tiles))
        )
        writes: list[Event] = []
        pending: list[int] = []  # tiles of the collective chunk being accumulated
        # Edge lists built once (this loop runs once per tile of every stage).
        ins_first, ins_later = self.inputs, self.inputs + self.loop_inputs
        rows_first = any(edge.whole_rows for edge in ins_first)  # an input to wait a row for
        rows_later = any(edge.whole_rows for edge in ins_later)
        outs_last, outs_other = self._out_edges = (self.outputs, self.outputs + self.loop_outputs)
        port, whole_rows, prefetch = self.port, self.whole_rows, self.prefetch
        write, tile_writes = self.socket.write, tuple(work.writes.items())
        i = 0
        while i < layers.n * tiles:
            self.position = i
            it, t = divmod(i, tiles)
            if t == 0:
                if it > layers.started:
                    layers.started = it
                if it > 0 and self.layer_loop > 0:
                    yield env.timeout(self.layer_loop)
            ins = ins_first if it == 0 else ins_later
            upstream: list[Event] = []
            for edge in ins:  # StageBuffer.get's steps, without its generator
                buffer = edge.buffer
                tile = buffer.take()
                if not isinstance(tile, tuple):  # wait until the producer hands one over
                    tile = yield tile
                yield env.timeout(buffer.read(tile))
                buffer.read_done(tile[1])
                upstream.append(tile[2])
            if rows_first if it == 0 else rows_later:
                for edge, ready in zip(ins, upstream, strict=True):
                    # the row exists only once its producer has finished it
                    if edge.whole_rows and (ready.callbacks is not None or not ready.ok):
                        yield ready
            if t == 0:  # the layer's first tile has its inputs
                self._layers_begun = it + 1
            done: Event | None = None
            if port is None:
                outs = outs_last if it + 1 == layers.n else outs_other
                if outs:
                    done = self._row_end(it, t) if whole_rows else env.event()
                    for edge in outs:  # a free slot is taken without a generator
                        if edge.buffer.offer(work.output[t], done) is None:
                            yield from edge.buffer.wait_to_put(work.output[t], done)
            # Compute the tile while its operands and inputs stream in; it ends when all have.
            # An event already processed (``callbacks`` None) and ok is not yielded: a SimPy
            # process would get its value straight back without scheduling anything, so
            # skipping the round trip keeps the order of events exactly.
            start = float(env._now)
            last: Event | None = None
            if matrix:
                last = pcus.compute(work.flops, work.efficiency)  # type: ignore[union-attr]
            if vector:
                last = pcus.vector(work.vector_flops)  # type: ignore[union-attr]
            if sram[t] > 0:
                dt = sram[t] / self.pmu_bandwidth
                self.sram_time += dt
                self.sram_bytes += sram[t]
                yield env.timeout(dt)
            if last is not None and (last.callbacks is not None or not last.ok):
                yield last
            for ev in loads.popleft():
                if ev.callbacks is not None or not ev.ok:
                    yield ev
            for ev in upstream:
                if ev.callbacks is not None or not ev.ok:
                    yield ev
            if recorder is not None:  # every tile, one ready at once too (zero length)
                recorder.slice(
                    self.socket.index,
                    self.track,
                    f"{self.stage.name} layer {it} tile {t}",
                    start,
                    float(env.now),
                    self._tile_args(it, t),
                )
            if done is not None:
                if not whole_rows:
                    done.succeed()
                elif self._ends_row(t):
                    self._row_ends.pop((it, self._row_of(t)), None)
                    done.succeed()
            for edge in ins:
                edge.buffer.release()
            ahead = i + prefetch
            if ahead < layers.n * tiles:
                loads.append(self._load(ahead))
                if ahead // tiles > layers.loaded:
                    layers.loaded = ahead // tiles
            for tier, amounts in tile_writes:
                writes.append(write(tier, amounts[t]))
            if port is None:
                if t + 1 == tiles:
                    self._layer_done(it)
                if self.on_tile is not None:
                    self.on_tile(it, t)
            else:
                pending.append(t)
                if self.chunks[t]:
                    self._start_chunk(it, tuple(pending), self.chunks[t])
                    pending = []
            i += 1
        for ev in writes:
            if ev.callbacks is not None or not ev.ok:
                yield ev
        if self._last_emit is not None:
            yield self._last_emit

    def _row_of(self, t: int) -> int:
        """The row tile ``t`` belongs to (with ``whole_rows`` rows cut into the tiles)."""
        return t * self.whole_rows // self.work.tiles if self.whole_rows else t

    def _ends_row(self, t: int) -> bool:
        """Whether tile ``t`` is the last of its row."""
        return t + 1 == self.work.tiles or self._row_of(t + 1) != self._row_of(t)

    def _row_end(self, it: int, t: int) -> Event:
        """The event of this stage finishing the row of tile ``t`` in layer ``it``."""
        key = (it, self._row_of(t))
        event = self._row_ends.get(key)
        if event is None:
            event = self._row_ends[key] = self.env.event()
        return event

    def _outs(self, it: int) -> list[StreamEdge]:
        """Edges tile outputs of iteration ``it`` go to (the next layer's too, if any)."""
        outs_last, outs_other = self._out_edges
        return outs_last if it + 1 == self._layers.n else outs_other

    def _layer_done(self, it: int) -> None:
        """This stage has finished the last tile of layer ``it``."""
        self._layers_done = it + 1
        gate = self._layer_gates.pop(it, None)
        if gate is not None:
            gate.succeed()
        if self.on_iteration is not None:
            self.on_iteration(it)

    def state(self, into: StateBuilder, layer: int) -> None:
        """What decides this stage's future at the end of ``layer`` (``kernel_state``): its
        position and the layers it has started and finished, counted past that layer, the
        layer gates others wait on and the rows it has begun but not finished
        (``row_barriers``). Not when it started or finished a layer: history, which nothing
        reads, so the stage keeps only their counts (CHANGELOG.md, issue 23 part 5a)."""
        past = layer + 1
        into.count(
            self.position - past * self.work.tiles,
            self._layers_begun - past,
            self._layers_done - past,
            len(self._layer_gates),
            len(self._row_ends),
        )

    def layer_gate(self, it: int) -> Event | None:
        """An event that fires when this stage finishes layer ``it`` (None: it has)."""
        if it < self._layers_done:
            return None
        gate = self._layer_gates.get(it)
        if gate is None:
            gate = self._layer_gates[it] = self.env.event()
        return gate

    def _load(self, i: int) -> list[Event]:
        """Issue the operand loads of tile ``i`` (counted over all layers). A stage whose
        weights are selected by another stage's output (``selected_by``: routed experts)
        issues a layer's loads only once that stage has finished the layer: the addresses
        are not known before."""
        t, reads = i % self.work.tiles, self.work.reads.items()
        gate = self.selected_by.layer_gate(i // self.work.tiles) if self.selected_by else None
        if gate is None:
            read, issued = self.socket.read, []
            for tier, amounts in reads:  # a loop, not a comprehension: no frame (per tile)
                issued.append(read(tier, amounts[t]))
            return issued
        loads = [self.env.event() for _ in reads]

        def issue(_event: Event) -> None:
            for (tier, amounts), load in zip(reads, loads, strict=True):
                _relay(self.socket.read(tier, amounts[t]), load)

        gate.add_callback(issue)
        return loads

    def _tile_args(self, it: int, t: int) -> tuple[tuple[str, str | float], ...]:
        """What tile ``t`` of layer ``it`` did, for its trace slice: operator, FLOPs, bytes
        per tier (read and written off-chip, on-chip SRAM)."""
        work = self.work
        args: list[tuple[str, str | float]] = [
            ("stage", self.stage.name),
            ("op", self.stage.op),
            ("layer", it),
            ("tile", t),
            ("matrix_flops", work.flops),
            ("vector_flops", work.vector_flops),
            ("sram_bytes", work.sram[t]),
        ]
        args += [(f"{tier}_read_bytes", amounts[t]) for tier, amounts in work.reads.items()]
        args += [(f"{tier}_write_bytes", amounts[t]) for tier, amounts in work.writes.items()]
        if self.port is not None and self.chunks[t]:  # the tile that starts a chunk
            args.append(("p2p_sent_bytes", self._chunk_sent(self.chunks[t])))
        return tuple(args)

    def _chunk_sent(self, chunks: int) -> float:
        """The bytes this socket sends on its links for a collective chunk of ``chunks``
        pieces (``CollectivePort.sent_bytes``): the step's ``p2p`` bytes, for the trace."""
        assert self.port is not None and self.stage.collective is not None
        nbytes = self.stage.collective.bytes * chunks / self.n_chunks
        return self.port.sent_bytes(self.socket.index, nbytes, chunks)

    def _push(self, it: int, tiles: tuple[int, ...], done: Event) -> Gen:
        """Hand finished tiles (a collective chunk's) to the consumers."""
        outs = self._outs(it)
        for t in tiles:
            for edge in outs:
                if edge.buffer.offer(self.work.output[t], done) is None:
                    yield from edge.buffer.wait_to_put(self.work.output[t], done)
            if t + 1 == self.work.tiles:
                self._layer_done(it)

    def _start_chunk(self, it: int, tiles: tuple[int, ...], chunks: int) -> None:
        assert self.port is not None and self.stage.collective is not None
        nbytes = self.stage.collective.bytes * chunks / self.n_chunks
        done = self.port.start(self.socket.index, self._key, nbytes, chunks, it)
        self._key += 1
        rec = self.recorder
        if rec is not None and nbytes > 0:  # the bytes it sends on the links, until done
            idx, now, sent = self.socket.index, float(self.env.now), self._chunk_sent(chunks)
            rec.in_flight(idx, "p2p", now, sent)
            done.add_callback(lambda _ev: rec.in_flight(idx, "p2p", float(self.env.now), -sent))
        self._last_emit = self.env.start(self._emit(self._last_emit, done, it, tiles))

    def _emit(self, prev: Event | None, done: Event, it: int, tiles: tuple[int, ...]) -> Gen:
        if prev is not None:
            yield prev
        yield done
        yield from self._push(it, tiles, done)


def _relay(source: Event, target: Event) -> None:
    """Succeed ``target`` when ``source`` fires."""

    def fire(_event: Event) -> None:
        target.succeed()

    source.add_callback(fire)
