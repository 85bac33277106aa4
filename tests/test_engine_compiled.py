"""Engine fidelity on compiled programs: the symmetric TP shortcut against every socket
simulated, tile refinement, and fast-forwarding a repeating layer cycle exactly (DeepSeek-R1
and Llama-3.1-8B). Monotonicity in a bandwidth is tests/test_bandwidth_anomaly.py's."""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path

import pytest

from rdu_sim import api
from rdu_sim.compiler import compile_program
from rdu_sim.compiler.program import Program
from rdu_sim.config.workload import EngineConfig
from rdu_sim.engine import simulate_step
from rdu_sim.engine.fast_forward import STATE_RTOL, find_cycle
from rdu_sim.engine.kernel_sim import KernelSim, tile_works
from rdu_sim.scenario import Scenario
from rdu_sim.shapes import StepShape

ROOT = Path(__file__).resolve().parents[1]
SNAPSTREAM = ROOT / "workloads" / "deepseek-r1-128k-snapstream.yaml"
FULL = ROOT / "workloads" / "deepseek-r1-128k-full.yaml"
LLAMA8 = ROOT / "workloads" / "llama3.1-8b-8socket.yaml"


RING = {
    "hw.system.topology": "ring",
    "hw.system.collective_algorithm": "ring",
    "hw.socket.hbm.efficiency": 0.9,
}
"""A ring of neighbour links, one way round, and HBM at 0.9 of peak (the shipped files: a
switched fabric, each collective's algorithm chosen by size, HBM at 0.95): the hardware the
ring and fast-forward tests below were measured on, pinned so that they keep testing the
pipelines they describe. The shipped hardware's own cases are marked as such."""

TWO_NODES = {**RING, "hw.system.sockets_per_node": 8}
"""sn40l-16 as two 8-socket nodes (a slower link between them): the ring the shortcut must
handle exactly (the shipped file is one 16-socket node)."""


RECORDED_LINK = {"hw.system.intra_node_link.bandwidth": "64 GB/s", "stack.batch_programs": "any"}
"""The P2P port the pipelines below were studied on (before any calibration set the shipped
link), at the batch memory holds (before SambaStack's programs rounded it to a power of two):
their cycle lengths and settling layers are properties of that wiring and batch."""


@cache
def decode_program(
    path: Path,
    efficiency: float | None = None,
    two_nodes: bool = False,
    shipped: bool = False,
    tiles: int | None = None,
    buffer_tiles: int | None = None,
) -> tuple[Scenario, Program]:
    """The workload's default decode step (all batch slots, largest bucket), compiled, on
    the ``RING`` wiring (``shipped``: the hardware file's own), with the workload's engine
    granularity (``tiles``: ``engine.tiles_per_stage``) and stage buffers (``buffer_tiles``)
    unless given."""
    overrides: dict[str, object] = dict(RECORDED_LINK) if shipped else {**RECORDED_LINK, **RING}
    if tiles is not None:
        overrides["engine.tiles_per_stage"] = tiles
    if buffer_tiles is not None:
        overrides["engine.buffer_tiles"] = buffer_tiles
    if efficiency is not None:
        overrides["hw.socket.hbm.efficiency"] = efficiency
    if two_nodes:
        overrides.update(TWO_NODES)
    scenario = api.load(path, overrides)
    policy = scenario.kv_policy
    batch = api.resolve_batch_slots(scenario, api.EngineBackend())[1]
    bucket = policy.decode_bucket(policy.slot_tokens())
    return scenario, compile_program(scenario, StepShape("decode", batch, 1, bucket))


def with_layers(program: Program, calls: int) -> Program:
    """``program`` with its looped kernels cut to ``calls`` layers (cheap full simulations)."""
    kernels = tuple(
        dataclasses.replace(k, calls=min(k.calls, calls)) if k.looped else k
        for k in program.kernels
    )
    return dataclasses.replace(program, kernels=kernels)


def test_symmetric_shortcut_matches_all_sockets_on_a_ring_over_two_nodes() -> None:
    # tp=16 over 2 nodes of 8: 14 intra-node hops and 2 slower inter-node hops per ring. The
    # shortcut simulates one node's sockets and links (the ring's rotational period): exact.
    scenario, program = decode_program(SNAPSTREAM, two_nodes=True)
    hw = scenario.hardware
    assert program.tp == 16 and hw.system.sockets_per_node == 8
    assert hw.system.inter_node_link != hw.system.intra_node_link
    small = with_layers(program, 4)
    one = simulate_step(small, hw)
    every = simulate_step(small, hw, EngineConfig(all_sockets=True))
    assert every.sockets_simulated == 16 and one.sockets_simulated == 1
    assert one.step_s == pytest.approx(every.step_s, rel=1e-9)
    assert one.bytes_by_tier == pytest.approx(every.bytes_by_tier, rel=1e-9)
    assert one.events < every.events / 4


@pytest.mark.parametrize("path", [SNAPSTREAM, LLAMA8], ids=["deepseek-r1-snapstream", "llama-8b"])
def test_refining_tiles_on_a_compiled_decode_step_changes_it_by_less_than_two_percent(
    path: Path,
) -> None:
    # Collective chunks are a system parameter: refining the tiles must not change how the
    # collectives pipeline (nor, with the exact ring shortcut, which link limits them). The
    # tiles are the compiler's (engine.tiles_per_stage the fewest it may choose).
    scenario, coarse_program = decode_program(path, shipped=True, tiles=8)
    _, fine_program = decode_program(path, shipped=True, tiles=32)
    assert {k.tiles for k in fine_program.kernels} == {32}
    assert min(k.tiles or 0 for k in coarse_program.kernels) == 8
    coarse = simulate_step(coarse_program, scenario.hardware)
    fine = simulate_step(fine_program, scenario.hardware)
    assert abs(fine.step_s / coarse.step_s - 1) < 0.02


def full_attention_program() -> tuple[Scenario, Program]:
    """DeepSeek-R1 full attention, decode of 40 at 128k, on a ring over two 8-socket nodes,
    streaming only the routed experts (~184 of 256), whose loads wait for the router."""
    scenario = api.load(FULL, {**RECORDED_LINK, **TWO_NODES, "moe_expert_loading": "routed"})
    return scenario, compile_program(scenario, StepShape("decode", 40, 1, 131072))


def test_symmetric_shortcut_matches_all_sockets_with_full_attention() -> None:
    scenario, program = full_attention_program()
    small = with_layers(program, 4)
    one = simulate_step(small, scenario.hardware)
    every = simulate_step(small, scenario.hardware, EngineConfig(all_sockets=True))
    assert one.step_s == pytest.approx(every.step_s, rel=1e-9)
    assert one.bytes_by_tier == pytest.approx(every.bytes_by_tier, rel=1e-9)


def test_routed_full_attention_step_fast_forwards_exactly() -> None:
    # Routed experts wait for the router every layer (their addresses come from it), which
    # makes the MoE layer periodic from the start on the ring over two nodes: its state at
    # the first mark of layer 2 is its state a layer earlier, and so is the state at the mark
    # before, so the live run stops after 5 layers (6 when only boundaries were compared).
    # (Before the routing dependency this pipeline drifted into a 10-layer cycle.)
    scenario, program = full_attention_program()
    fast = simulate_step(program, scenario.hardware)
    moe = fast.kernel("decoder_moe")
    assert moe.simulated_iterations == 5 and moe.period_s is not None
    full = simulate_step(program, scenario.hardware, EngineConfig(fast_forward=False))
    assert fast.step_s == pytest.approx(full.step_s, rel=1e-9)
    for tier in ("hbm", "ddr", "sram", "p2p"):
        assert fast.bytes_by_tier[tier] == pytest.approx(full.bytes_by_tier[tier], rel=1e-12)
    assert fast.events < full.events * 0.5


def test_the_shipped_full_attention_step_repeats_in_a_seven_layer_cycle() -> None:
    # The shipped full-attention decode step (calibrated link, SambaStack's 32 slots): its MoE
    # layers settle into a 7-layer cycle by their 17th; looked for (CYCLE_LENGTHS), it is cut
    # at 23 of 58 layers and ends within rounding of the full simulation. Without 7 among the
    # lengths it found no cycle and simulated all 58.
    fast = api.step(FULL).detail
    full = api.step(FULL, {"engine.fast_forward": False}).detail
    moe = fast.kernels[[k.name for k in fast.kernels].index("decoder_moe")]
    assert moe.simulated_iterations == 23 and moe.period_s is not None
    assert fast.step_s == pytest.approx(full.step_s, rel=1e-9)
    assert fast.bytes_by_tier == pytest.approx(full.bytes_by_tier, rel=1e-12)
    assert fast.busy_s == pytest.approx(full.busy_s, rel=1e-9)
    assert fast.events < full.events * 0.5
    scenario = api.load(FULL)
    batch = api.resolve_batch_slots(scenario, api.EngineBackend())[1]
    policy = scenario.kv_policy
    shape = StepShape("decode", batch, 1, policy.decode_bucket(policy.slot_tokens()))
    program = compile_program(scenario, shape)
    kernel = next(k for k in program.kernels if k.name == "decoder_moe")
    live = KernelSim(
        kernel,
        scenario.hardware,
        program.tp,
        EngineConfig(),
        tile_works(kernel, kernel.tiles_or(0), scenario.hardware.socket),
        layers=kernel.calls,
        looped=True,
        max_events=10**8,
    )
    found = []
    while live.run_to_mark() is not None:
        marks = (live.marks, kernel.calls, live.safe)
        old = find_cycle(*marks, lengths=(1, 2, 3, 5, 6, 10), per_layer=live.marks_per_layer)
        assert old is None  # the lengths before 7 was among them: never a cycle
        found.append(find_cycle(*marks, per_layer=live.marks_per_layer))
    assert next(c.length for c in found if c is not None) == 7


def test_a_late_settling_pipeline_is_cut_only_once_its_state_repeats() -> None:
    # The shipped full-attention decode step: its layer boundaries repeat to 1e-6 from layer
    # ~12, but memory streams prefetched ahead of their tiles fall ~190 kB further behind
    # every layer until they reach a tile at layer 28 and the period changes (twice); its
    # state repeats only from boundary ~40. Cut there, the step is the full simulation's
    # (a rule comparing boundaries cut it at layer 15 and was 1.0e-3 off).
    scenario, program = decode_program(FULL, shipped=True)
    fast = simulate_step(program, scenario.hardware)
    full = simulate_step(program, scenario.hardware, EngineConfig(fast_forward=False))
    moe = fast.kernel("decoder_moe")
    assert moe.simulated_iterations == 42 and moe.period_s is not None
    assert full.kernel("decoder_moe").simulated_iterations == 58
    assert fast.step_s == pytest.approx(full.step_s, rel=1e-12)
    assert fast.bytes_by_tier == pytest.approx(full.bytes_by_tier, rel=1e-12)
    assert fast.busy_s == pytest.approx(full.busy_s, rel=1e-12)
    assert fast.flops == pytest.approx(full.flops, rel=1e-12)
    assert fast.events < full.events * 0.8


def test_a_live_run_cut_short_is_exactly_a_run_of_that_many_layers() -> None:
    # Lowering the layer count mid-run (at the fewest layers LayerCount allows) changes
    # nothing already decided: boundaries, totals and events equal a fresh run's, bit for bit.
    scenario, program = decode_program(FULL, two_nodes=True)
    kernel = next(k for k in program.kernels if k.name == "decoder_moe")

    def sim(layers: int) -> KernelSim:
        return KernelSim(
            kernel,
            scenario.hardware,
            program.tp,
            EngineConfig(),
            tile_works(kernel, kernel.tiles_or(0), scenario.hardware.socket),
            layers=layers,
            looped=True,
            max_events=10**8,
        )

    live = sim(kernel.calls)
    cycle = None
    while cycle is None and live.run_to_boundary() is not None:
        cycle = find_cycle(live.boundaries, kernel.calls, live.safe)
    assert cycle is not None
    k, n = cycle.length, cycle.layers
    assert n < kernel.calls and (kernel.calls - n) % k == 0
    live.cut(n)
    cut = live.finish()
    fresh = sim(n).finish()
    assert cut.boundaries == fresh.boundaries  # every boundary's time and totals
    assert cut.stats == fresh.stats and cut.events == fresh.events


def test_a_pipeline_without_a_cycle_is_simulated_once_in_full() -> None:
    # A SnapStream step of 100 slots on the shipped wiring (two-shot collectives): its MoE
    # layers' state never repeats in 58 layers (the default batch's does: a pipeline's cycle
    # is a property of its step). The live run is the full run: no probe.
    scenario = api.load(SNAPSTREAM, {**RECORDED_LINK, "serving.batch_slots": 100})
    program = compile_program(scenario, StepShape("decode", 100, 1, 32768))
    fast = simulate_step(program, scenario.hardware)
    full = simulate_step(program, scenario.hardware, EngineConfig(fast_forward=False))
    moe = fast.kernel("decoder_moe")
    assert moe.simulated_iterations == moe.calls == 58 and moe.period_s is None
    assert fast.step_s == full.step_s and fast.bytes_by_tier == full.bytes_by_tier
    assert fast.events == full.events


def test_bidirectional_ring_shortcut_matches_all_sockets_and_halves_link_time() -> None:
    # Both directions of every neighbour link: the mirrored ring's shortcut is exact too,
    # and the SnapStream step's link-bound attention combine gets faster.
    bidi = {**RECORDED_LINK, **RING, "hw.system.collective_algorithm": "bidirectional_ring"}
    scenario = api.load(SNAPSTREAM, bidi)
    batch = api.resolve_batch_slots(scenario, api.EngineBackend())[1]
    program = compile_program(scenario, StepShape("decode", batch, 1, 32768))
    small = with_layers(program, 4)
    one = simulate_step(small, scenario.hardware)
    every = simulate_step(small, scenario.hardware, EngineConfig(all_sockets=True))
    assert one.step_s == pytest.approx(every.step_s, rel=1e-9)
    assert one.bytes_by_tier == pytest.approx(every.bytes_by_tier, rel=1e-9)
    ring_scenario, ring_program = decode_program(SNAPSTREAM)
    ring_step = simulate_step(with_layers(ring_program, 4), ring_scenario.hardware)
    assert one.bytes_by_tier["p2p"] == pytest.approx(ring_step.bytes_by_tier["p2p"], rel=1e-9)
    assert one.busy_s["link"] < 0.6 * ring_step.busy_s["link"]
    assert one.step_s <= ring_step.step_s


@pytest.mark.parametrize(
    "overrides",
    [
        RING,
        {**RING, "hw.system.collective_algorithm": "bidirectional_ring"},
        {**RING, "engine.tiles_per_stage": 16},
        {},
    ],
    ids=["ring", "bidirectional-ring", "ring-16-tiles", "shipped"],
)
@pytest.mark.parametrize("path", [FULL, SNAPSTREAM], ids=["full", "snapstream"])
def test_fast_forward_keeps_the_work_totals_exact(path: Path, overrides: dict[str, object]) -> None:
    # Work (bytes per tier, FLOPs) is the same in every layer: a fast-forwarded step moves
    # exactly the full simulation's bytes (boundary increments would miss ~1e-4: a layer's
    # prefetch lands before or after a boundary by a varying amount).
    scenario = api.load(path, overrides)
    program = compile_program(scenario, api.default_step_shape(scenario, "decode"))
    tiles = scenario.workload.engine.tiles_per_stage
    fast = simulate_step(program, scenario.hardware, EngineConfig(tiles_per_stage=tiles))
    full = simulate_step(
        program, scenario.hardware, EngineConfig(tiles_per_stage=tiles, fast_forward=False)
    )
    assert fast.events <= full.events  # (the shipped SnapStream step has no cycle)
    for tier in ("hbm", "ddr", "sram", "p2p"):
        assert fast.bytes_by_tier[tier] == pytest.approx(full.bytes_by_tier[tier], rel=1e-12)
    assert fast.flops == pytest.approx(full.flops, rel=1e-12)
    # A run is cut only once its whole state repeats (fast_forward, kernel_state): the
    # skipped cycles are then those the full simulation runs, to float rounding (busy times
    # summed over ~10^5 events differ by up to ~3e-11; STATE_RTOL is 1e-9).
    assert fast.step_s == pytest.approx(full.step_s, rel=STATE_RTOL)
    assert fast.busy_s == pytest.approx(full.busy_s, rel=STATE_RTOL)
