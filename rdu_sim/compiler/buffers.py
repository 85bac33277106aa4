"""What a fused kernel's stages hold in PMU SRAM, and the tiles that make it fit.

PMUs hold a stage's inputs, the parameters being streamed and its intermediates (SN
§IV-B). At ``T`` tiles per call a stage holds (``stream_bytes``, the engine's buffers):

- per input edge, ``buffer_tiles`` slots of the producer's tile (its output / ``T``); an
  edge that must hold a whole layer (``whole_layer_edges``: a looped kernel's edge from one
  layer to the next, a skip connection around a longer path, the selection a stage's
  weights wait for and the other inputs that wait with it) holds ``max(buffer_tiles, T)``
  slots, the producer's whole output,
  unless it is spilled to HBM (then it stages ``buffer_tiles`` slots on chip); an edge
  joining a branch that bypasses collectives (``bypass_edges``: the shared expert beside the
  routed experts' dispatch and combine) holds ``buffer_tiles`` plus a collective chunk
  (``ceil(T / collective_chunks)`` tiles) per collective bypassed and one more, at most a
  layer, and may spill to HBM too when nothing else makes the stages fit;
- its operand window: ``min(prefetch_tiles, T)`` tiles of its off-chip reads (weight and KV
  tiles loaded ahead of the compute);
- one tile of its off-chip writes draining.

``plan_tiles`` finds the fewest tiles ``T >= engine.tiles_per_stage`` (doubling, at most
``MAX_TILES``) at which every stage's buffers fit whole PMUs within the usable budget,
after spilling whole-layer edges to HBM (largest first) while they would take more than
half of the usable PMUs (SN §V: activations spill first). When nothing fits it is a
``CapacityError`` naming the kernel, the stage and the bytes. The kernel's tiles
are then chosen among that count and its doublings that fit (``finer_plans``, up to a tile
per row: finer would cut rows) by the placement's estimated time, ties to the fewest
(``compile.choose_tiles``): finer tiles leave a GEMM more SRAM for its block of rows, so
fewer passes over its weights (below).

What else stays resident once PMUs are allocated (``residency``): a GEMM stage re-uses its
streamed operand (weights, or the KV cache in attention) for every row of its input. It
keeps the operand resident when one GEMM's share fits the SRAM its buffers leave free, and
reads it once per call; otherwise it holds a block of input rows in place of its input
slots and streams the operand once per block: ``passes`` = its input over the SRAM its
operand window and writes leave, each re-reading the operand from its tier (the classic
blocking of a GEMM under a small buffer; FlashAttention re-streams K/V per query block the
same way). The input slots are part of the block, so a stage makes at most ``T / 2``
passes at ``T`` tiles. Left out: a block shorter than the systolic array's rows keeps its
GEMM efficiency (the re-reads, not the array, dominate there).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from rdu_sim import human
from rdu_sim.compiler.errors import HardwareCapacityError
from rdu_sim.compiler.program import StageProgram, Tier

Edge = tuple[str, str, bool]
"""A pipeline edge: (producer, consumer, loop): ``loop`` edges feed the next layer."""

MAX_TILES = 4096
"""Most tiles per call the compiler cuts a kernel into (``engine.tiles_per_stage``'s bound)."""

WHOLE_EDGE_SHARE = 0.5
"""Share of a kernel's usable PMUs whole-layer edges may hold before the largest spill to
HBM: the rest streams the tiles (a compiler policy, SN §V: activations spill first)."""

OFFCHIP: tuple[Tier, ...] = ("hbm", "ddr")


def pipeline_edges(stages: Sequence[StageProgram], looped: bool) -> list[Edge]:
    """Every edge of a kernel's pipeline: each stage's inputs, and in a looped kernel every
    sink (no consumer) of a layer feeding every source (no producer) of the next."""
    consumed = {name for stage in stages for name in stage.inputs}
    sinks = [s.name for s in stages if s.name not in consumed]
    sources = [s.name for s in stages if not s.inputs] if looped else []
    edges = [(producer, stage.name, False) for stage in stages for producer in stage.inputs]
    return edges + [(sink, source, True) for sink in sinks for source in sources]


def input_bytes(stages: Sequence[StageProgram], looped: bool) -> dict[str, float]:
    """On-chip bytes arriving per call at each stage over its pipeline edges."""
    produced = {s.name: s.output_bytes for s in stages}
    arriving = dict.fromkeys(produced, 0.0)
    for producer, consumer, _ in pipeline_edges(stages, looped):
        arriving[consumer] += produced[producer]
    return arriving


def downstream(stages: Sequence[StageProgram]) -> dict[str, set[str]]:
    """Each stage's transitive consumers within a layer (the stages its output reaches)."""
    consumers: dict[str, list[str]] = {s.name: [] for s in stages}
    for stage in stages:
        for producer in stage.inputs:
            consumers[producer].append(stage.name)
    reach: dict[str, set[str]] = {}
    for stage in reversed(stages):  # topological order reversed: consumers first
        name = stage.name
        reach[name] = set(consumers[name]).union(*(reach[c] for c in consumers[name]))
    return reach


def skip_edges(
    stages: Sequence[StageProgram], reach: Mapping[str, set[str]]
) -> set[tuple[str, str]]:
    """Edges u -> v for which another, longer path from u to v exists (``reach``: the
    stages' ``downstream``)."""
    return {
        (producer, stage.name)
        for stage in stages
        for producer in stage.inputs
        if any(stage.name in reach[w] for w in reach[producer] if w != stage.name)
    }


def whole_layer_edges(stages: Sequence[StageProgram], looped: bool) -> set[Edge]:
    """Edges that hold a layer's whole output: a layer's output is the next layer's whole
    input (loop edges), a skip connection is kept whole while the long path fills (with two
    slots the producer would stall and starve the long path, and deadlock once a collective
    on it holds back a chunk), and so is the selection a stage's weights wait for (the
    routing into the experts: the consumer needs the layer's whole selection first). A stage
    whose weights wait for a selection starts a layer only once the selector has finished it,
    so it and every stage its output reaches wait for the whole layer: each of their inputs
    from outside that wait holds the layer (the dispatched tokens, the shared expert's output
    the combine joins), or its producer stalls before the selector can finish the layer, a
    deadlock. With fewer rows than tiles, a stage finishing rows only at their end
    (``whole_row_outputs``) hands over a row's tiles before any is usable, so its edges hold
    the row, and so do its consumers' other inputs, which wait with it (a few rows of
    activations), and the inputs that wait with it further down (``row_bypass_edges``)."""
    reach = downstream(stages)
    skips = skip_edges(stages, reach)
    selector = {s.name: s.selected_by for s in stages}
    gated = {s.name for s in stages if s.selected_by}
    gated |= set().union(*(reach[name] for name in gated))
    rows = {s.name for s in stages if s.whole_row_outputs > 0}
    row_fed = {s.name for s in stages if rows.intersection(s.inputs)}
    whole = {
        edge
        for edge in pipeline_edges(stages, looped)
        if edge[2]
        or (edge[0], edge[1]) in skips
        or selector[edge[1]] == edge[0]
        or (edge[1] in gated and edge[0] not in gated)
        or edge[0] in rows
        or edge[1] in row_fed
    }
    return whole | row_bypass_edges(stages, reach, whole)


def row_bypass_edges(
    stages: Sequence[StageProgram], reach: Mapping[str, set[str]], whole: set[Edge]
) -> set[Edge]:
    """Edges that hold the layer because their consumer waits for a row further up: it is
    downstream of a stage finishing rows only at their end (``whole_row_outputs``; the
    stages between take nothing of the row before it ends, so they hand nothing on before
    either), and the producer is on a branch beside the row whose stalling reaches back
    (through edges not in ``whole``: a producer on a whole edge never waits for its
    consumer) to a stage the row is computed from. With two slots the branch fills, stalls
    that stage, and the row never ends: a deadlock (MLA's head_split at batch 1:
    kv_a_proj feeds kv_norm, a row, then kv_b_proj, and beside them rope_k, both into
    kv_write and the attention). A row's direct consumers are in ``whole`` already."""
    upstream: dict[str, set[str]] = {}  # each stage and the stages it is computed from
    stalls: dict[str, set[str]] = {}  # each stage and the stages its stalling stalls
    for stage in stages:  # topological order: producers first
        name = stage.name
        upstream[name] = {name}.union(*(upstream[p] for p in stage.inputs))
        held = (stalls[p] for p in stage.inputs if (p, name, False) not in whole)
        stalls[name] = {name}.union(*held)
    rows = [s.name for s in stages if s.whole_row_outputs > 0]
    return {
        (producer, stage.name, False)
        for stage in stages
        for producer in stage.inputs
        for row in rows
        if stage.name in reach[row]
        and producer != row
        and producer not in reach[row]
        and not stalls[producer].isdisjoint(upstream[row])
    }


def bypass_edges(stages: Sequence[StageProgram]) -> dict[Edge, int]:
    """Edges joining a branch that bypasses collectives, each to how many it bypasses: an
    edge into a stage downstream of a collective from a stage that is not, on a branch
    forked from the collective's path within the layer (they share an upstream stage). A
    collective stage holds back a chunk of its output until the chunk's collective is done
    (``engine.stage_runner``), so the bypassing branch runs that far ahead of the other at
    the join: with only ``buffer_tiles`` slots it stalls, stalls the fork, and the chunk
    never fills (the branches stop overlapping, or deadlock once a chunk exceeds the slots
    on the way)."""
    reach = downstream(stages)
    upstream: dict[str, set[str]] = {}
    for stage in stages:  # topological order: producers first
        upstream[stage.name] = {stage.name}.union(*(upstream[p] for p in stage.inputs))
    collectives = [s.name for s in stages if s.collective is not None]
    bypasses: dict[Edge, int] = {}
    for stage in stages:
        for producer in stage.inputs:
            bypassed = sum(
                1
                for c in collectives
                if stage.name in reach[c]
                and producer != c
                and producer not in reach[c]
                and not upstream[c].isdisjoint(upstream[producer])
            )
            if bypassed:
                bypasses[(producer, stage.name, False)] = bypassed
    return bypasses


@dataclass(frozen=True)
class BufferRule:
    """The buffering settings the footprint and the engine's flow control follow: the
    workload's ``engine:`` ones and the system's ``collective_chunks``."""

    buffer_tiles: int
    prefetch_tiles: int
    collective_chunks: int


def edge_slots(edge: Edge, whole: bool, bypassed: int, rule: BufferRule, tiles: int) -> int:
    """Tile slots of an edge's buffer at ``tiles`` tiles per call: ``buffer_tiles``; on an
    edge bypassing collectives (``bypass_edges``) plus a chunk per collective (the chunk
    each is gathering) and one (the chunk on the links, so the next is gathered meanwhile),
    at most a layer; a layer's tiles for a whole one; two layers' for a loop edge: a sink
    early in a body of several layers (gpt-oss's ``l0.attn.kv_write``) runs up to a body
    ahead of a late source of the next body (``l1.attn.kv_read``), which a layer's slots
    would deadlock. Where an edge lives, on chip or spilled to HBM, does not change them."""
    layer = max(rule.buffer_tiles, tiles)
    if not whole:
        chunk = math.ceil(tiles / rule.collective_chunks)
        held_back = bypassed + 1 if bypassed else 0  # chunks: one gathering each, one sent
        return min(rule.buffer_tiles + held_back * chunk, layer)
    return 2 * layer if edge[2] else layer


def slots_by_edge(
    stages: Sequence[StageProgram], looped: bool, rule: BufferRule, tiles: int
) -> dict[Edge, int]:
    """Every pipeline edge's tile slots (``edge_slots``): the engine's flow control."""
    whole = whole_layer_edges(stages, looped)
    bypasses = bypass_edges(stages)
    return {
        edge: edge_slots(edge, edge in whole, bypasses.get(edge, 0), rule, tiles)
        for edge in pipeline_edges(stages, looped)
    }


@dataclass(frozen=True)
class StreamBuffers:
    """What a stage's buffers hold at a kernel's tiles, in bytes: its input slots, its
    operand window (weight/KV tiles loaded ahead) and a tile of writes draining."""

    inputs: float
    operands: float
    writes: float

    @property
    def total(self) -> float:
        return self.inputs + self.operands + self.writes


def stream_buffers(
    stage: StageProgram,
    tiles: int,
    produced: Mapping[str, float],
    inputs: Iterable[tuple[Edge, bool, int]],
    rule: BufferRule,
) -> StreamBuffers:
    """The buffers ``stage`` holds streaming ``tiles`` tiles per call, its input edges given
    as ``(edge, held whole on chip, collectives bypassed)``."""
    held = 0.0
    for edge, whole, bypassed in inputs:
        producer = edge[0]
        slots = edge_slots(edge, whole, bypassed, rule, tiles)
        held += slots * produced[producer] / tiles
    reads = sum(stage.reads.get(t, 0.0) for t in OFFCHIP)
    writes = sum(stage.writes.get(t, 0.0) for t in OFFCHIP)
    return StreamBuffers(held, min(rule.prefetch_tiles, tiles) * reads / tiles, writes / tiles)


@dataclass(frozen=True)
class TilePlan:
    """A kernel's tiles per call, the whole-layer edges spilled to HBM, its stages with the
    spilled edges' HBM traffic, and their stream buffers at those tiles."""

    tiles: int
    spilled: frozenset[Edge]
    stages: tuple[StageProgram, ...]
    stream: tuple[StreamBuffers, ...]


def _inputs(
    stages: Sequence[StageProgram], looped: bool, spilled: frozenset[Edge]
) -> dict[str, list[tuple[Edge, bool, int]]]:
    whole = whole_layer_edges(stages, looped)
    bypasses = bypass_edges(stages)
    into: dict[str, list[tuple[Edge, bool, int]]] = {s.name: [] for s in stages}
    for edge in pipeline_edges(stages, looped):
        staged = edge in whole or edge in spilled  # a layer, or buffer_tiles from HBM
        bypassed = 0 if staged else bypasses.get(edge, 0)
        into[edge[1]].append((edge, edge in whole and edge not in spilled, bypassed))
    return into


def _whole_by_size(stages: Sequence[StageProgram], looped: bool) -> list[Edge]:
    """Whole-layer edges carrying bytes, largest first (ties in pipeline order)."""
    produced = {s.name: s.output_bytes for s in stages}
    whole = whole_layer_edges(stages, looped)
    edges = [e for e in pipeline_edges(stages, looped) if e in whole and produced[e[0]] > 0]
    return sorted(edges, key=lambda e: -produced[e[0]])


def spill_edges(
    stages: Sequence[StageProgram], looped: bool, *, pmus: int, pmu_bytes: float
) -> frozenset[Edge]:
    """Whole-layer edges to spill to HBM, largest first, until the PMUs the ones kept on
    chip need (each consumer's in whole PMUs) are at most ``WHOLE_EDGE_SHARE`` of the
    usable ``pmus``."""
    produced = {s.name: s.output_bytes for s in stages}
    kept = _whole_by_size(stages, looped)

    def need() -> int:
        held: dict[str, float] = {}
        for producer, consumer, _ in kept:
            held[consumer] = held.get(consumer, 0.0) + produced[producer]
        return sum(math.ceil(b / pmu_bytes) for b in held.values())

    spilled: list[Edge] = []
    while kept and need() > WHOLE_EDGE_SHARE * pmus:
        spilled.append(kept.pop(0))
    return frozenset(spilled)


def with_spills(stages: Sequence[StageProgram], spilled: Iterable[Edge]) -> list[StageProgram]:
    """The stages with the spilled edges' HBM traffic: each producer writes its output to
    HBM once per spilled edge, each consumer reads it back."""
    produced = {s.name: s.output_bytes for s in stages}
    written: dict[str, float] = {}
    read: dict[str, float] = {}
    for producer, consumer, _ in spilled:
        written[producer] = written.get(producer, 0.0) + produced[producer]
        read[consumer] = read.get(consumer, 0.0) + produced[producer]
    out = []
    for s in stages:
        reads, writes = dict(s.reads), dict(s.writes)
        if s.name in read:
            reads["hbm"] = reads.get("hbm", 0.0) + read[s.name]
        if s.name in written:
            writes["hbm"] = writes.get("hbm", 0.0) + written[s.name]
        out.append(replace(s, reads=reads, writes=writes))
    return out


def plan_tiles(
    kernel: str,
    stages: Sequence[StageProgram],
    looped: bool,
    *,
    pmus: int,
    pmu_bytes: float,
    min_tiles: int,
    rule: BufferRule,
) -> TilePlan:
    """The fewest tiles (from ``min_tiles``, doubling) at which the stages' buffers fit
    ``pmus`` PMUs of ``pmu_bytes`` each, one PMU at least per stage, with the whole-layer
    edges ``spill_edges`` chooses staged through HBM, and the next largest too as long as
    nothing fits, then the edges bypassing collectives (module docstring). The kernel's
    tiles are this count or a doubling of it (``finer_plans``, ``compile.choose_tiles``)."""
    spilled = spill_edges(stages, looped, pmus=pmus, pmu_bytes=pmu_bytes)
    produced = {s.name: s.output_bytes for s in stages}
    whole = whole_layer_edges(stages, looped)
    bypasses = [e for e in bypass_edges(stages) if e not in whole and produced[e[0]] > 0]
    candidates = [e for e in _whole_by_size(stages, looped) if e not in spilled]
    candidates += sorted(bypasses, key=lambda e: -produced[e[0]])
    while True:
        staged = tuple(with_spills(stages, spilled))
        into = _inputs(staged, looped, spilled)
        tiles = max(1, min(min_tiles, MAX_TILES))
        while True:
            stream = tuple(stream_buffers(s, tiles, produced, into[s.name], rule) for s in staged)
            need = _pmus_needed(stream, pmu_bytes)
            if need <= pmus:
                return TilePlan(tiles, spilled, staged, stream)
            if tiles >= MAX_TILES:
                break
            tiles = min(2 * tiles, MAX_TILES)
        if not candidates:
            break
        spilled = spilled | {candidates.pop(0)}
    worst = max(range(len(staged)), key=lambda i: stream[i].total)
    raise HardwareCapacityError.of(
        f"kernel {kernel!r}: its stages' buffers need {need:,} PMUs of "
        f"{human.size(pmu_bytes, 4)} even at {tiles:,} tiles per call, more than the "
        f"{pmus:,} usable per socket; the largest is stage {staged[worst].name!r} with "
        f"{human.size(stream[worst].total, 4)} (input slots, operand window, writes); raise "
        "hw.socket.pmu.sram, lower engine.buffer_tiles or engine.prefetch_tiles, or raise "
        "parallelism.tp",
        (
            "hw.socket.pmu.sram",
            "hw.socket.pmu.count",
            "engine.buffer_tiles",
            "engine.prefetch_tiles",
            "parallelism.tp",
        ),
    )


def finer_plans(
    plan: TilePlan, looped: bool, *, pmus: int, pmu_bytes: float, most: int, rule: BufferRule
) -> Iterator[TilePlan]:
    """``plan``'s stages and spills at twice its tiles, four times, ... up to ``most`` (at
    most ``MAX_TILES``), each that fits ``pmus`` PMUs of ``pmu_bytes`` (finer tiles shrink
    every buffer but a whole layer's, so they fit where ``plan`` does): the tile counts
    the compiler weighs against ``plan``'s (``compile.choose_tiles``)."""
    produced = {s.name: s.output_bytes for s in plan.stages}
    into = _inputs(plan.stages, looped, plan.spilled)
    tiles = 2 * plan.tiles
    while tiles <= min(most, MAX_TILES):
        stream = tuple(stream_buffers(s, tiles, produced, into[s.name], rule) for s in plan.stages)
        if _pmus_needed(stream, pmu_bytes) <= pmus:
            yield TilePlan(tiles, plan.spilled, plan.stages, stream)
        tiles *= 2


def _pmus_needed(stream: Iterable[StreamBuffers], pmu_bytes: float) -> int:
    """Whole PMUs the stages' buffers take, one at least per stage."""
    return sum(max(1, math.ceil(b.total / pmu_bytes)) for b in stream)


@dataclass(frozen=True)
class Residency:
    """What a stage keeps resident across its tiles: ``passes`` over its input rows (each
    re-reading its streamed operand) and the SRAM it holds, buffers included."""

    passes: int
    sram_bytes: float


def _groups(stage: StageProgram) -> int:
    return 1 if stage.gemm is None else max(1, stage.gemm.batch)


def rows_floor(
    stage: StageProgram, buffers: StreamBuffers, operand_bytes: float, input_bytes: float
) -> float:
    """SRAM a stage needs to stream its operand once: one GEMM's whole input held in place
    of its input slots, beside its operand window (0 without a re-used operand)."""
    if stage.gemm is None or operand_bytes <= 0:
        return 0.0
    rows = input_bytes / _groups(stage)
    return max(rows, buffers.inputs) + buffers.operands + buffers.writes


def residency(
    stage: StageProgram,
    buffers: StreamBuffers,
    operand_bytes: float,
    input_bytes: float,
    sram_bytes: float,
    systolic_rows: int,
) -> Residency:
    """Passes of a stage over its input in ``sram_bytes`` of SRAM (its PMUs).

    ``operand_bytes``: the off-chip bytes per call its GEMM re-uses for every input row
    (weights, KV); ``input_bytes``: its input activations per call; both split over the
    GEMM's ``batch`` independent products. The operand stays resident in place of its
    window if it fits beside the input slots; else a block of input rows is held in place
    of the input slots, and the operand streams once per block (a stage without input
    slots, reading its input from HBM, makes a pass per ``systolic_rows`` rows). No GEMM,
    or nothing re-used: one pass.
    """
    if stage.gemm is None or operand_bytes <= 0:
        return Residency(1, buffers.total)
    groups = _groups(stage)
    operand, rows = operand_bytes / groups, input_bytes / groups
    if buffers.inputs + operand + buffers.writes <= sram_bytes:
        return Residency(1, buffers.inputs + max(operand, buffers.operands) + buffers.writes)
    room = sram_bytes - buffers.operands - buffers.writes  # for a block of input rows
    if room <= 0:  # no input slots to widen (inputs from HBM): a pass per array of rows
        return Residency(max(1, math.ceil(stage.gemm.m / systolic_rows)), buffers.total)
    passes = max(1, math.ceil(rows / room))
    return Residency(passes, max(rows / passes, buffers.inputs) + buffers.operands + buffers.writes)
