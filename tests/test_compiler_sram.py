"""SRAM is a capacity the compiler respects: stage buffers fit their PMUs, kernels are cut
finer when they would not, GEMM operands that do not stay resident are re-read, and the
SRAM a kernel holds is one figure wherever it is reported."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from rdu_sim import api
from rdu_sim.compiler import CapacityError, Compiler
from rdu_sim.compiler.buffers import (
    BufferRule,
    StreamBuffers,
    bypass_edges,
    pipeline_edges,
    plan_tiles,
    residency,
    slots_by_edge,
    spill_edges,
    whole_layer_edges,
)
from rdu_sim.compiler.program import CollectiveSpec, KernelProgram, Program, StageProgram
from rdu_sim.engine.kernel_sim import KernelSim, tile_works
from rdu_sim.shapes import Gemm

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
DEEPSEEK = ROOT / "workloads" / "deepseek-r1-128k-snapstream.yaml"
SMALL_SRAM = {"hw.socket.pmu.sram": "8 KiB"}  # 512 KiB / 64
PREFILL = {"phase": "prefill", "tokens": 4096}


@cache
def _program(path: Path, phase: str, small: bool) -> Program:
    scenario = api.load(path, SMALL_SRAM if small else None)
    shape = api.default_step_shape(scenario, phase, tokens=4096 if phase == "prefill" else None)
    return Compiler(scenario).program(shape)


def test_a_64_fold_smaller_sram_makes_a_large_prefill_slower() -> None:
    """The issue's complaint: 1 KiB PMUs changed nothing. With 64x less SRAM the decoder
    kernel is cut finer, its GEMM weights no longer stay resident across the prompt's rows
    (re-read once per block of rows) and its residual spills to HBM: more HBM traffic, a
    slower step."""
    base = api.step(LLAMA, **PREFILL).detail
    small = api.step(LLAMA, SMALL_SRAM, **PREFILL).detail
    assert small.step_s > 2 * base.step_s
    assert small.bytes_by_tier["hbm"] > 5 * base.bytes_by_tier["hbm"]
    assert small.kernel("decoder").tiles > base.kernel("decoder").tiles
    program = _program(LLAMA, "prefill", True)
    decoder = next(k for k in program.kernels if k.name == "decoder")
    gate = next(s for s in decoder.stages if s.name == "ffn.gate_proj")
    assert gate.passes > 1


@pytest.mark.parametrize("small", [False, True], ids=["shipped-sram", "sram-over-64"])
@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("path", [LLAMA, DEEPSEEK], ids=["llama", "deepseek"])
def test_every_stage_fits_its_pmus_and_every_kernel_the_socket(
    path: Path, phase: str, small: bool
) -> None:
    program = _program(path, phase, small)
    socket = api.load(path, SMALL_SRAM if small else None).hardware.socket
    usable = math.floor(socket.usable_fraction * socket.pmu.count)
    for kernel in program.kernels:
        assert kernel.tiles is not None and kernel.tiles >= 8
        assert sum(s.pmus for s in kernel.stages) <= usable
        assert kernel.sram_bytes <= usable * socket.pmu.sram
        for stage in kernel.stages:
            assert 0 <= stage.sram_bytes <= stage.pmus * socket.pmu.sram * (1 + 1e-12), stage.name
            assert stage.passes >= 1
    assert program.placement.tiers["sram"].used_bytes == math.ceil(program.sram_bytes)


DEEPSEEK_FULL = ROOT / "workloads" / "deepseek-r1-128k-full.yaml"
DP_EP16 = {  # attention data-parallel over 16 sockets, experts over 16: all-to-alls
    "parallelism.tp": 1,
    "parallelism.dp_attention": 16,
    "parallelism.ep": 16,
    "serving.batch_slots": 16,
    "serving.max_context": 8192,
    "kv.context_buckets": "pow2",
}


@pytest.mark.parametrize(
    ("path", "overrides", "kernel", "tokens"),
    [(LLAMA, {}, "decoder", 4096), (DEEPSEEK_FULL, DP_EP16, "decoder_moe", 3000)],
    ids=["llama", "deepseek-dp-ep"],
)
def test_the_compiler_sizes_input_buffers_as_the_engine_builds_them(
    path: Path, overrides: dict[str, object], kernel: str, tokens: int
) -> None:
    """Differential: each stage's input slots in the compiler's accounting equal the
    engine's stage buffers (slots x the producer's tile) wired for the same kernel, the
    shared expert's join bypassing the all-to-alls included."""
    scenario = api.load(path, overrides)
    program = Compiler(scenario).program(api.default_step_shape(scenario, "prefill", tokens=tokens))
    decoder = next(k for k in program.kernels if k.name == kernel)
    tiles = decoder.tiles or 0
    sim = KernelSim(
        decoder,
        scenario.hardware,
        program.devices,
        scenario.workload.engine,
        tile_works(decoder, tiles, scenario.hardware.socket),
        layers=2,
        looped=True,
        max_events=10**6,
    )
    produced = {s.name: s.output_bytes for s in decoder.stages}
    engine = {
        consumer: sum(
            b.capacity * produced[b.name.split("->")[0].removesuffix("@prev")] / tiles
            for b in buffers
        )
        for consumer, buffers in sim.pipelines[0].buffers.items()
    }
    settings = scenario.workload.engine
    chunks = scenario.hardware.system.collective_chunks
    rule = BufferRule(settings.buffer_tiles, settings.prefetch_tiles, chunks)
    plan = plan_tiles(
        kernel,
        decoder.stages,
        True,
        pmus=10**9,
        pmu_bytes=1.0,
        min_tiles=tiles,
        rule=rule,
    )
    assert plan.tiles == tiles
    for stage, buffers in zip(decoder.stages, plan.stream, strict=True):
        assert buffers.inputs == pytest.approx(engine[stage.name], rel=1e-12), stage.name


def _stage(name: str, reads: float, out: float, inputs: tuple[str, ...] = ()) -> StageProgram:
    return StageProgram(
        name=name,
        op="gemm",
        pcus=1,
        pmus=1,
        flops=0.0,
        vector_flops=0.0,
        reads={"hbm": reads} if reads else {},
        writes={},
        inputs=inputs,
        output_bytes=out,
    )


def test_tiles_double_until_the_buffers_fit() -> None:
    # a -> b: b holds 2 slots of a's tile (800 / T) and 2 tiles of its 1,600 B of reads.
    stages = [_stage("a", 0.0, 800.0), _stage("b", 1600.0, 0.0, ("a",))]
    rule = BufferRule(buffer_tiles=2, prefetch_tiles=2, collective_chunks=4)

    def plan(pmus: int) -> int:
        return plan_tiles(
            "k", stages, False, pmus=pmus, pmu_bytes=100.0, min_tiles=2, rule=rule
        ).tiles

    # at T tiles b needs 2*800/T + 2*1600/T = 4800/T bytes: ceil(48/T) PMUs, a needs 1
    assert plan(25) == 2  # 24 + 1
    assert plan(13) == 4  # 12 + 1
    assert plan(4) == 16  # 3 + 1
    with pytest.raises(CapacityError, match=r"kernel 'k'.*stage 'b'"):
        plan(1)


def test_whole_layer_edges_spill_largest_first() -> None:
    # s -> x -> y, s -> y: the skip edge s -> y holds s's whole output on chip
    stages = [
        _stage("s", 0.0, 1000.0),
        _stage("x", 0.0, 10.0, ("s",)),
        _stage("y", 0.0, 0.0, ("s", "x")),
    ]
    assert whole_layer_edges(stages, looped=False) == {("s", "y", False)}
    # 1000 B in 100 B PMUs: 10 PMUs, at most half of the usable ones
    assert spill_edges(stages, False, pmus=20, pmu_bytes=100.0) == frozenset()
    assert spill_edges(stages, False, pmus=19, pmu_bytes=100.0) == {("s", "y", False)}
    looped = pipeline_edges(stages, looped=True)
    assert ("y", "s", True) in looped


def _routed_join() -> list[StageProgram]:
    """A MoE layer's shape in six stages: n feeds the router r and a shared branch s1 -> s2;
    the experts g load weights selected by r (``selected_by``) and the join j combines g's
    output with the shared branch's."""
    stages = [
        _stage("n", 0.0, 1600.0),
        _stage("r", 0.0, 160.0, ("n",)),
        _stage("g", 16e6, 1600.0, ("r",)),
        _stage("s1", 0.0, 1600.0, ("n",)),
        _stage("s2", 0.0, 1600.0, ("s1",)),
        _stage("j", 0.0, 1600.0, ("g", "s2")),
    ]
    stages[2] = StageProgram(**{**stages[2].__dict__, "selected_by": "r"})
    return stages


def _one_layer(name: str, stages: list[StageProgram]) -> KernelSim:
    """A kernel of ``stages`` set to run one 16-tile layer on Llama 8B's socket (unlooped)."""
    scenario = api.load(LLAMA)
    kernel = KernelProgram(name, calls=1, looped=False, stages=tuple(stages), tiles=16)
    return KernelSim(
        kernel,
        scenario.hardware,
        1,
        scenario.workload.engine,
        tile_works(kernel, 16, scenario.hardware.socket),
        layers=1,
        looped=False,
        max_events=10**6,
    )


def test_the_inputs_that_wait_for_a_routing_hold_the_layer() -> None:
    """Expert weights selected by the router load only once it has finished the layer, so
    the stages downstream of them wait for the whole layer: their inputs from outside that
    wait (the shared branch's s2 -> j) hold the layer, or s2 stalls on two slots, n behind
    it, and the router never finishes (a deadlock)."""
    stages = _routed_join()
    assert whole_layer_edges(stages, looped=False) == {("r", "g", False), ("s2", "j", False)}
    # and in the engine: 16 tiles of the layer, two slots on every other edge, runs
    sim = _one_layer("moe", stages)
    slots = {b.name: b.capacity for b in sim.pipelines[0].buffers["j"]}
    assert slots == {"g->j": 2, "s2->j": 16}
    run = sim.finish()
    # the expert loads start after the router's layer: at least the whole read after it
    hbm = api.load(LLAMA).hardware.socket.hbm
    assert run.stats.time_s >= 16e6 / hbm.bandwidth
    assert run.stats.hbm_bytes == pytest.approx(16e6, rel=1e-12)


def _row_beside(fork_is_a_row: bool = False) -> list[StageProgram]:
    """MLA's head_split shape at batch 1 in five stages: f (kv_a_proj) feeds n (kv_norm),
    which finishes its one row only at the row's end, then u (kv_b_proj); beside them b
    (rope_k); the join j (the attention) takes u and b."""
    stages = [
        _stage("f", 0.0, 1600.0),
        _stage("n", 0.0, 1600.0, ("f",)),
        _stage("u", 0.0, 1600.0, ("n",)),
        _stage("b", 0.0, 1600.0, ("f",)),
        _stage("j", 0.0, 0.0, ("u", "b")),
    ]
    rows = {"n", "f"} if fork_is_a_row else {"n"}
    return [replace(s, whole_row_outputs=1) if s.name in rows else s for s in stages]


def test_a_branch_beside_a_row_holds_the_layer_where_it_joins_further_down() -> None:
    """u takes nothing of n's row before it ends, so j waits for the row too: b's tiles
    must wait at j, or b stalls on two slots, f behind it, and n never gets the rest of its
    row (head_split at batch 1 deadlocked so: kv_a_proj -> kv_norm -> kv_b_proj beside
    kv_a_proj -> rope_k). When f is itself a row, its edges hold the layer already, so
    b's stalling reaches nothing of n's and b -> j keeps two slots."""
    stages = _row_beside()
    assert whole_layer_edges(stages, looped=False) == {("n", "u", False), ("b", "j", False)}
    rows_first = _row_beside(fork_is_a_row=True)
    assert whole_layer_edges(rows_first, looped=False) == {
        ("f", "n", False),
        ("f", "b", False),
        ("n", "u", False),
    }
    # and in the engine: 16 tiles of the layer, both shapes run (the first deadlocked)
    for shape in (stages, rows_first):
        sim = _one_layer("row", shape)
        slots = {b.name: b.capacity for b in sim.pipelines[0].buffers["j"]}
        assert slots == {"u->j": 2, "b->j": 16 if shape is stages else 2}
        assert sim.finish().stats.time_s > 0


def _exchange() -> list[StageProgram]:
    """Expert parallelism's shape: n feeds a dispatch d (an all-to-all), the experts e and
    their combine x (another), and beside them a shared branch s1 -> s2; the join j adds
    s2 to x; k, a source of its own, feeds j too."""
    alltoall = CollectiveSpec("alltoall", 1600.0, 16)
    stages = [
        _stage("n", 0.0, 1600.0),
        _stage("d", 0.0, 1600.0, ("n",)),
        _stage("e", 0.0, 1600.0, ("d",)),
        _stage("x", 0.0, 1600.0, ("e",)),
        _stage("s1", 0.0, 1600.0, ("n",)),
        _stage("s2", 0.0, 1600.0, ("s1",)),
        _stage("k", 0.0, 1600.0),
        _stage("j", 0.0, 1600.0, ("x", "s2", "k")),
    ]
    return [replace(s, collective=alltoall) if s.name in ("d", "x") else s for s in stages]


def test_a_branch_bypassing_collectives_holds_their_chunks_at_the_join() -> None:
    """The shared branch joins after two all-to-alls, each holding back the chunk it
    gathers, and a third chunk is on the links: s2 -> j holds ``buffer_tiles`` + 3 chunks
    of ``ceil(T / collective_chunks)`` tiles, at most a layer. Every other edge keeps two
    slots: the chain through the collectives, and k, which shares no stage with them (its
    stalling holds nothing of theirs back)."""
    stages = _exchange()
    assert bypass_edges(stages) == {("s2", "j", False): 2}
    assert whole_layer_edges(stages, looped=False) == set()
    rule = BufferRule(buffer_tiles=2, prefetch_tiles=2, collective_chunks=4)
    assert slots_by_edge(stages, False, rule, 64)[("s2", "j", False)] == 2 + 3 * 16
    assert slots_by_edge(stages, False, rule, 30)[("s2", "j", False)] == 2 + 3 * 8
    assert slots_by_edge(stages, False, rule, 8)[("s2", "j", False)] == 8  # a layer
    others = {e: n for e, n in slots_by_edge(stages, False, rule, 64).items() if e[0] != "s2"}
    assert set(others.values()) == {2}
    # the compiler holds them on chip: j's input slots, 64 tiles of 25 B
    plan = plan_tiles("k", stages, False, pmus=10**6, pmu_bytes=1e6, min_tiles=64, rule=rule)
    j = next(i for i, s in enumerate(plan.stages) if s.name == "j")
    assert plan.stream[j].inputs == pytest.approx((2 + 2 + 50) * 25.0, rel=1e-12)


def test_residency_passes_by_hand() -> None:
    gemm = StageProgram(
        name="g",
        op="gemm",
        pcus=1,
        pmus=1,
        flops=1.0,
        vector_flops=0.0,
        reads={"hbm": 1000.0},
        writes={},
        gemm=Gemm(m=4096, n=64, k=64, batch=1),
    )
    buffers = StreamBuffers(inputs=100.0, operands=200.0, writes=0.0)
    # operand (1000 B) fits beside the input slots: resident, one pass
    assert residency(gemm, buffers, 1000.0, 5000.0, 1100.0, 32).passes == 1
    # it does not: rows of the 5000 B input held in 800 B beside the window: 7 passes
    held = residency(gemm, buffers, 1000.0, 5000.0, 1000.0, 32)
    assert held.passes == 7 and held.sram_bytes == pytest.approx(5000 / 7 + 200)
    # no input slots and no room: a pass per 32 rows of the array (4096 / 32 = 128)
    empty = StreamBuffers(inputs=0.0, operands=1000.0, writes=0.0)
    assert residency(gemm, empty, 2000.0, 5e9, 1000.0, 32).passes == 128
    # two independent GEMMs (batch 2): each re-uses half the operand over half the rows
    batched = StageProgram(**{**gemm.__dict__, "gemm": Gemm(4096, 64, 64, 2)})
    assert residency(batched, buffers, 2000.0, 10000.0, 1000.0, 32).passes == 7


def test_sram_is_one_figure_in_step_inspect_and_run() -> None:
    step = api.step(LLAMA).detail
    inspect = api.inspect_graph(LLAMA)
    assert [k["sram_bytes"] for k in inspect["kernels"]] == [k.sram_bytes for k in step.kernels]
    assert [k["tiles"] for k in inspect["kernels"]] == [k.tiles for k in step.kernels]
    run = api.run(LLAMA, {"serving.requests": 4})
    peak = max(run.cache.cost(shape).detail.sram_bytes for shape in run.cache.shapes)
    sram = run.summary().memory["sram"]
    assert sram.used_bytes == math.ceil(peak) > 0
    assert sram.used_bytes <= sram.capacity_bytes


def test_a_kernel_that_cannot_fit_is_refused_naming_it() -> None:
    with pytest.raises(CapacityError, match=r"kernel '.*': its stages' buffers need .* PMUs"):
        api.step(LLAMA, {"hw.socket.pmu.sram": "64 B"}, **PREFILL)
