"""The engine's must-hold properties: roofline limits, pipelines, collectives, looping,
conservation, determinism, tile refinement, symmetric TP and the exact fast-forward."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time

import pytest
from test_engine_programs import (
    deepseek_like_program,
    hardware,
    kernel,
    llama_like_program,
    program,
    stage,
)

from rdu_sim.compiler.program import CollectiveSpec, Program, StageProgram
from rdu_sim.config import HardwareConfig
from rdu_sim.config.workload import EngineConfig
from rdu_sim.engine import Engine, EventBudgetError, StepTiming, simulate_step
from rdu_sim.engine.fast_forward import (
    CYCLE_LENGTHS,
    STATE_MATCHES,
    STATE_RTOL,
    Cycle,
    find_cycle,
)
from rdu_sim.engine.kernel_sim import Boundary
from rdu_sim.engine.kernel_state import KernelState
from rdu_sim.engine.run_stats import RunStats
from rdu_sim.hw import gemm_efficiency, ring_time, tree_time
from rdu_sim.shapes import Gemm

ZERO = hardware()
DEFAULT = hardware(zero=False)
RING = {"system.topology": "ring", "system.collective_algorithm": "ring"}
"""A ring of neighbour links, one way round: what the ring formulas below describe."""


def hbm_rate(hw: HardwareConfig) -> float:
    return hw.socket.hbm.bandwidth * hw.socket.hbm.efficiency


def stage_rate(hw: HardwareConfig, pcus: int) -> float:
    return pcus * hw.socket.pcu.peak_flops * hw.socket.pcu.max_gemm_efficiency


# --- roofline limits ---------------------------------------------------------------------


@pytest.mark.parametrize("tiles", [1, 8, 32])
def test_memory_bound_stage_takes_bytes_over_hbm_bandwidth(tiles: int) -> None:
    n = 4e9
    p = program([kernel("k", [stage("load", hbm=n, vector_flops=1e3)])])
    t = simulate_step(p, ZERO, EngineConfig(tiles_per_stage=tiles))
    assert t.step_s == pytest.approx(n / hbm_rate(ZERO), rel=0.03)
    assert t.hbm_bandwidth_fraction == pytest.approx(ZERO.socket.hbm.efficiency, rel=0.03)


def test_ddr_bound_stage_and_fair_sharing_of_hbm() -> None:
    n = 1e9
    ddr = program([kernel("k", [stage("load", ddr=n)])])
    rate = ZERO.socket.ddr.bandwidth * ZERO.socket.ddr.efficiency
    assert simulate_step(ddr, ZERO).step_s == pytest.approx(n / rate, rel=0.03)
    # two independent stages share the one HBM channel: twice the bytes, twice the time
    two = program([kernel("k", [stage("a", hbm=n), stage("b", hbm=n)])])
    assert simulate_step(two, ZERO).step_s == pytest.approx(2 * n / hbm_rate(ZERO), rel=0.01)


def test_memory_bound_decode_of_a_layered_model_runs_at_hbm_bandwidth() -> None:
    p = llama_like_program(batch=1)
    t = simulate_step(p, ZERO)
    assert t.step_s == pytest.approx(p.bytes_by_tier()["hbm"] / hbm_rate(ZERO), rel=0.03)
    assert t.utilization["hbm"] > 0.97


def test_compute_bound_gemm_takes_flops_over_peak_times_efficiency() -> None:
    m = n = k = 8192
    flops = 2.0 * m * n * k
    p = program(
        [
            kernel(
                "k",
                [
                    stage(
                        "gemm",
                        pcus=1040,
                        pmus=1040,
                        flops=flops,
                        hbm=2.0 * n * k,
                        gemm=Gemm(m, n, k),
                    )
                ],
            )
        ],
        phase="prefill",
        tokens=m,
    )
    t = simulate_step(p, ZERO)
    pcu = ZERO.socket.pcu
    eff = pcu.max_gemm_efficiency * gemm_efficiency(
        m, n, k, pcu.systolic_rows, pcu.systolic_cols, fill_drain_overlap=1.0
    )
    assert t.step_s == pytest.approx(flops / (ZERO.socket.peak_flops * eff), rel=0.03)
    assert t.flops == flops
    assert t.utilization["pcu"] == pytest.approx(1.0, rel=0.03)


def test_skinny_gemm_is_less_efficient_than_a_square_one() -> None:
    # one token (a decode GEMV) fills one of the array's 6 columns
    flops = 2.0 * 4096 * 4096
    skinny = program([kernel("k", [stage("g", pcus=64, flops=flops, gemm=Gemm(1, 4096, 4096))])])
    square = program([kernel("k", [stage("g", pcus=64, flops=flops, gemm=Gemm(64, 64, 4096))])])
    assert simulate_step(skinny, ZERO).step_s > 5 * simulate_step(square, ZERO).step_s


# --- pipelines ---------------------------------------------------------------------------


def two_stage(first_flops: float, second_flops: float) -> Program:
    return program(
        [
            kernel(
                "k",
                [
                    stage("a", pcus=10, flops=first_flops, out=1e6),
                    stage("b", pcus=10, flops=second_flops, inputs=("a",)),
                ],
            )
        ]
    )


@pytest.mark.parametrize(("fa", "fb"), [(1e12, 3e12), (3e12, 1e12)])
def test_two_stage_pipeline_runs_at_the_slower_stage_rate(fa: float, fb: float) -> None:
    rate = stage_rate(ZERO, 10)
    slow, fast = max(fa, fb) / rate, min(fa, fb) / rate
    assert fast < slow
    for tiles in (8, 32):
        t = simulate_step(two_stage(fa, fb), ZERO, EngineConfig(tiles_per_stage=tiles))
        # the slower stage is busy throughout; tiles stream cut-through, so the faster one
        # adds no fill or drain of a whole tile (only the PMU ports' microseconds)
        assert slow * (1 - 1e-12) <= t.step_s <= slow * (1 + 1e-4)


def test_bigger_buffers_never_make_a_pipeline_slower() -> None:
    p = program(
        [
            kernel(
                "k",
                [
                    stage("a", pcus=10, flops=1e12, hbm=4e8, out=1e7),
                    stage("b", pcus=40, flops=1e12, hbm=1e9, inputs=("a",), out=1e7),
                    stage("c", pcus=5, flops=5e11, inputs=("a",), out=1e7),
                    stage("d", pcus=10, flops=2e12, hbm=2e8, inputs=("b", "c")),
                ],
                calls=4,
                looped=True,
            )
        ]
    )
    times = [simulate_step(p, ZERO, EngineConfig(buffer_tiles=b)).step_s for b in (1, 2, 3, 4, 8)]
    for smaller, bigger in itertools.pairwise(times):
        assert bigger <= smaller * (1 + 1e-12)


# --- collectives -------------------------------------------------------------------------


def allreduce_program(nbytes: float, p: int, kind: str = "allreduce") -> Program:
    spec = CollectiveSpec(kind, nbytes, p)  # type: ignore[arg-type]
    return program([kernel("k", [stage("ar", pcus=2, vector_flops=1.0, collective=spec)])], tp=p)


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("latency", [0.0, 1e-6])
def test_ring_allreduce_takes_2_p_minus_1_over_p_n_over_bandwidth_plus_latency(
    p: int, latency: float
) -> None:
    n = 64e6
    hw = hardware(
        **RING, **{"system.collective_chunks": 1, "system.intra_node_link.latency": latency}
    )
    bw = hw.system.intra_node_link.bandwidth
    t = simulate_step(allreduce_program(n, p), hw)
    expected = 2 * (p - 1) / p * n / bw + 2 * (p - 1) * latency
    assert t.step_s == pytest.approx(expected, rel=1e-6)
    assert t.bytes_by_tier["p2p"] == pytest.approx(2 * (p - 1) / p * n, rel=1e-12)
    # chunked: the hw closed form of the pipelined ring
    hw4 = hardware(
        **RING, **{"system.collective_chunks": 4, "system.intra_node_link.latency": latency}
    )
    t4 = simulate_step(allreduce_program(n, p), hw4)
    assert t4.step_s == pytest.approx(ring_time(p, n, bw, latency, chunks=4), rel=1e-6)


def test_allgather_reduce_scatter_and_tree() -> None:
    n, p = 32e6, 8
    hw = hardware(**RING, **{"system.collective_chunks": 1, "system.intra_node_link.latency": 1e-6})
    bw = hw.system.intra_node_link.bandwidth
    for kind, hw_kind in (("allgather", "all_gather"), ("reduce_scatter", "reduce_scatter")):
        t = simulate_step(allreduce_program(n, p, kind), hw)
        assert t.step_s == pytest.approx(ring_time(p, n, bw, 1e-6, kind=hw_kind), rel=1e-6)
    tree = hardware(
        **{
            "system.collective_chunks": 1,
            "system.intra_node_link.latency": 1e-6,
            "system.collective_algorithm": "tree",
            "system.topology": "fully_connected",
        }
    )
    assert simulate_step(allreduce_program(n, p), tree).step_s == pytest.approx(
        tree_time(p, n, bw, 1e-6), rel=1e-6
    )


def test_collective_pipelines_with_the_compute_that_feeds_it() -> None:
    n, p = 64e6, 4
    comm = 2 * (p - 1) / p * n / ZERO.system.intra_node_link.bandwidth
    compute = comm * stage_rate(ZERO, 100)  # as long as the all-reduce
    spec = CollectiveSpec("allreduce", n, p)
    fused = program([kernel("k", [stage("mm", pcus=100, flops=compute, collective=spec)])], tp=p)
    t = simulate_step(fused, ZERO)
    # chunk j's all-reduce overlaps the compute of the chunks after it: only the last
    # chunk's all-reduce (1 / collective_chunks of it) is exposed
    chunks = ZERO.system.collective_chunks
    assert t.step_s == pytest.approx(comm + comm / chunks, rel=1e-6)


# --- routed weights ---------------------------------------------------------------------


def routed_program(selected: bool, layers: int = 1) -> Program:
    """Attention (100 us of compute) -> router -> experts (100 us of HBM loads at full rate),
    the experts' weights chosen by the router when ``selected``."""
    attention_flops = 100e-6 * stage_rate(ZERO, 200)
    expert_bytes = 100e-6 * hbm_rate(ZERO)
    experts = stage("experts", pcus=50, flops=1e6, hbm=expert_bytes, inputs=("attn", "router"))
    stages = [
        stage("attn", pcus=200, flops=attention_flops, out=1e4),
        stage("router", pcus=2, vector_flops=1e3, inputs=("attn",), out=64),
        dataclasses.replace(experts, selected_by="router" if selected else None),
    ]
    return program([kernel("layer", stages, calls=layers, looped=layers > 1)])


def test_routed_weights_load_only_after_the_router_has_run() -> None:
    free = simulate_step(routed_program(False), ZERO)
    routed = simulate_step(routed_program(True), ZERO)
    # unrouted, the expert loads stream while attention computes: ~max(100, 100) us;
    # routed, they start once the router has its layer's output: 100 + 100 us
    assert free.step_s == pytest.approx(100e-6, rel=0.05)
    assert routed.step_s == pytest.approx(200e-6, rel=0.02)
    assert routed.bytes_by_tier == free.bytes_by_tier


@pytest.mark.parametrize("fast_forward", [True, False])
def test_routed_weights_in_a_looped_kernel_pay_the_router_every_layer(fast_forward: bool) -> None:
    # No deadlock although the experts cannot start a layer's tiles before the router has
    # finished all of its tiles (its edge into them holds a whole layer). Looped, the next
    # layer's attention starts on the experts' first output tile, so a layer costs the
    # attention plus the first expert tile's loads (1/8 of 100 us) that cannot start early.
    layers = 12
    config = EngineConfig(fast_forward=fast_forward)
    free = simulate_step(routed_program(False, layers), ZERO, config)
    routed = simulate_step(routed_program(True, layers), ZERO, config)
    assert free.step_s == pytest.approx(layers * 100e-6, rel=0.05)
    assert routed.step_s >= layers * (100e-6 + 100e-6 / 8)
    full = simulate_step(routed_program(True, layers), ZERO, EngineConfig(fast_forward=False))
    assert routed.step_s == pytest.approx(full.step_s, rel=1e-9)


def test_selected_by_must_name_an_earlier_stage() -> None:
    bad = routed_program(True)
    stages = list(bad.kernels[0].stages)
    stages[1] = dataclasses.replace(stages[1], selected_by="experts")
    broken = dataclasses.replace(
        bad, kernels=(dataclasses.replace(bad.kernels[0], stages=tuple(stages)),)
    )
    with pytest.raises(ValueError, match="selected_by 'experts' is not an earlier stage"):
        simulate_step(broken, ZERO)


# --- kernels and looping -----------------------------------------------------------------


def layer_stages() -> list[StageProgram]:
    """A small memory-and-compute layer (norm, two GEMMs)."""
    return [
        stage("norm", pcus=4, vector_flops=1e6, hbm=1e4, out=1e5),
        stage("mm", pcus=200, flops=2e10, hbm=3e8, inputs=("norm",), out=1e5),
        stage("mm2", pcus=200, flops=2e10, hbm=3e8, inputs=("mm",), out=1e5),
    ]


def looping_pair(hw: HardwareConfig, layers: int) -> tuple[StepTiming, StepTiming]:
    looped = program([kernel("layer", layer_stages(), calls=layers, looped=True)])
    unlooped = program([kernel("layer", layer_stages(), calls=layers, looped=False)])
    return simulate_step(looped, hw), simulate_step(unlooped, hw)


def test_kernel_looping_is_never_slower_and_unlooped_pays_launch_and_sync_per_layer() -> None:
    hw = hardware(zero=False, **{"socket.kernel.layer_loop": 0.0})
    k = hw.socket.kernel
    per_call = k.program_load + k.argument_load + k.sync
    layers = 6
    on, off = looping_pair(hw, layers)
    assert on.step_s <= off.step_s
    # off pays L launches and syncs, on pays one; looping also overlaps the layers' fill/drain
    assert off.kernels[0].overhead_s == pytest.approx(layers * per_call)
    assert on.kernels[0].overhead_s == pytest.approx(per_call)
    assert off.step_s - on.step_s >= (layers - 1) * per_call - 1e-12
    # off is exactly L identical calls
    single = simulate_step(program([kernel("layer", layer_stages())]), hw)
    assert off.step_s == pytest.approx(layers * single.step_s, rel=1e-12)
    # with free launches looping still gains the overlap of one layer's drain with the next
    on0, off0 = looping_pair(ZERO, layers)
    assert on0.step_s < off0.step_s
    # the default per-iteration loop cost does not change the verdict
    on_d, off_d = looping_pair(DEFAULT, layers)
    assert on_d.step_s < off_d.step_s


def test_kernel_launch_overheads_add_to_a_single_call() -> None:
    p = program([kernel("k", [stage("s", hbm=1e8)])])
    k = DEFAULT.socket.kernel
    zero_lat = hardware(zero=False, **{"socket.hbm.latency": 0.0})
    t = simulate_step(p, zero_lat)
    assert t.step_s == pytest.approx(
        1e8 / hbm_rate(DEFAULT) + k.program_load + k.argument_load + k.sync, rel=1e-9
    )


# --- conservation, determinism, refinement, symmetry -------------------------------------


def mixed_program() -> Program:
    layer = [
        stage("norm", pcus=4, vector_flops=3e6, hbm=20480, sram=65536, out=65536),
        stage(
            "kv",
            pcus=64,
            flops=1e9,
            hbm=33554432,
            hbm_write=8192,
            ddr=16777216,
            inputs=("norm",),
            out=65536,
            gemm=Gemm(8, 4096, 4096),
        ),
        stage(
            "ar",
            pcus=2,
            vector_flops=1e5,
            inputs=("kv",),
            out=65536,
            collective=CollectiveSpec("allreduce", 65536, 4),
        ),
    ]
    return program(
        [
            kernel("embed", [stage("e", pcus=1, hbm=65536, out=65536)]),
            kernel("layer", layer, calls=20, looped=True),
            kernel("head", [stage("h", pcus=100, flops=1e10, hbm=1e8 + 3, ddr=12345)], calls=3),
        ],
        tp=4,
        batch=8,
    )


@pytest.mark.parametrize("fast_forward", [True, False])
def test_conservation_bytes_equal_the_program_and_no_unit_is_over_busy(fast_forward: bool) -> None:
    p = mixed_program()
    t = simulate_step(p, DEFAULT, EngineConfig(fast_forward=fast_forward))
    expected = p.bytes_by_tier()
    for tier in ("hbm", "ddr", "sram"):
        assert t.bytes_by_tier[tier] == expected[tier]
    # socket 0's link bytes are what the chosen algorithms send through its port
    sent = sum(c.bytes_per_link * c.calls_per_step for c in t.collectives)
    assert t.collectives and t.bytes_by_tier["p2p"] == pytest.approx(sent, rel=1e-12)
    ring = simulate_step(p, hardware(zero=False, **RING), EngineConfig(fast_forward=fast_forward))
    assert ring.bytes_by_tier["p2p"] == pytest.approx(p.collective_bytes * 2 * 3 / 4, rel=1e-12)
    assert t.flops == pytest.approx(p.flops, rel=1e-12)
    for kind, busy in t.busy_s.items():
        assert 0.0 <= busy <= t.step_s * (1 + 1e-9), kind
        assert 0.0 <= t.utilization[kind] <= 1.0 + 1e-9, kind
    assert sum(k.time_s for k in t.kernels) == pytest.approx(t.step_s, rel=1e-12)


def test_same_step_twice_gives_identical_timing() -> None:
    p = mixed_program()
    a = simulate_step(p, DEFAULT, record=True)
    b = simulate_step(p, DEFAULT, record=True)
    assert a == b
    assert a.records is not None and a.records == b.records
    engine = Engine(DEFAULT, EngineConfig(all_sockets=True))
    assert engine.simulate_step(p) == engine.simulate_step(p)


@pytest.mark.parametrize("tp", [1, 4])
@pytest.mark.parametrize("looped", [True, False])
def test_refining_tiles_changes_step_time_by_less_than_two_percent(tp: int, looped: bool) -> None:
    p = llama_like_program(tp=tp, batch=8, looped=looped)
    coarse = simulate_step(p, DEFAULT, EngineConfig(tiles_per_stage=8))
    fine = simulate_step(p, DEFAULT, EngineConfig(tiles_per_stage=32))
    assert abs(fine.step_s / coarse.step_s - 1) < 0.02


def test_symmetric_tp_shortcut_equals_simulating_all_sockets() -> None:
    p = llama_like_program(tp=4, batch=8, layers=8)
    one = simulate_step(p, DEFAULT)
    every = simulate_step(p, DEFAULT, EngineConfig(all_sockets=True))
    assert one.sockets_simulated == 1 and every.sockets_simulated == 4
    assert every.step_s == pytest.approx(one.step_s, rel=1e-12)
    assert every.bytes_by_tier == pytest.approx(one.bytes_by_tier, rel=1e-12)
    assert every.events > 3 * one.events


# --- fast-forward and the event budget ---------------------------------------------------


@pytest.mark.parametrize("hw", [ZERO, DEFAULT], ids=["zero-overheads", "default"])
def test_fast_forward_matches_the_full_simulation(hw: HardwareConfig) -> None:
    p = deepseek_like_program(tp=16, batch=32)
    fast = simulate_step(p, hw, EngineConfig(fast_forward=True))
    full = simulate_step(p, hw, EngineConfig(fast_forward=False))
    moe = fast.kernel("decoder_moe")
    assert moe.simulated_iterations < moe.calls and moe.period_s is not None
    assert full.kernel("decoder_moe").simulated_iterations == moe.calls
    assert fast.step_s == pytest.approx(full.step_s, rel=0.005)
    assert fast.step_s == pytest.approx(full.step_s, rel=1e-9)  # exact for a periodic pipeline
    assert fast.bytes_by_tier == pytest.approx(full.bytes_by_tier, rel=1e-12)
    assert fast.busy_s == pytest.approx(full.busy_s, rel=1e-9)
    assert fast.events < full.events / 2


def synthetic_boundaries(
    periods: list[float], lateness: list[float] | None = None
) -> list[Boundary]:
    """Layer boundaries that follow ``periods`` (totals grow with time); their state is the
    layer's span and, if given, how far a prefetched stream lags behind at each boundary."""
    ends = list(itertools.accumulate(periods))
    lags = lateness if lateness is not None else [0.0] * len(periods)
    return [
        Boundary(
            e,
            RunStats(time_s=e, hbm_bytes=1e9 * (i + 1)),
            KernelState((1,), (period, lag)),
        )
        for i, (e, period, lag) in enumerate(zip(ends, periods, lags, strict=True))
    ]


def steady_cycle(
    periods: list[float], calls: int, lengths: tuple[int, ...] = (1, 2, 3, 6)
) -> Cycle | None:
    """The cycle rule applied to a run of ``n = len(periods)`` layers at boundary ``n - 3``
    (the last one it shares with every longer run), cutting at ``n``."""
    log = synthetic_boundaries(periods)
    return find_cycle(log[: len(log) - 2], calls, len(log), lengths)


def test_cycle_detection_finds_multi_layer_cycles_and_rejects_drift() -> None:
    calls = 58
    steady = [1.0e-3] * 16
    found = steady_cycle(steady, calls)
    assert found is not None and found.length == 1
    assert found.increment.time_s == pytest.approx(1e-3) and found.increment.hbm_bytes == 1e9
    # stages taking turns: a 3-layer cycle after a settling start
    three = [1.3e-3, 0.9e-3, 1.1e-3] + [0.7e-3, 0.9e-3, 0.85e-3] * 4 + [0.7e-3]
    found = steady_cycle(three, calls)
    assert found is not None and found.length == 3
    assert found.increment.time_s == pytest.approx(2.45e-3)
    # a period that keeps growing is not fast-forwarded, even by small steps
    drifting = [1e-3 * (1 + 2e-4 * i) for i in range(16)]
    assert steady_cycle(drifting, calls) is None
    # nor one still settling
    settling = [1e-3 * (1 + 0.05 * 0.9**i) for i in range(16)]
    assert steady_cycle(settling, calls) is None
    # two stages taking turns: a period alternating by 2% is a 2-layer cycle
    swinging = [1e-3 * (1 + 0.01 * (-1) ** i) for i in range(16)]
    found = steady_cycle(swinging, calls)
    assert found is not None and found.length == 2


def test_ten_layer_cycles_need_the_long_cycle_lengths() -> None:
    # a 10-layer cycle after a settling start: only CYCLE_LENGTHS (what the live run tries) has it
    cycle = [
        1.0e-3,
        1.01e-3,
        1.02e-3,
        1.005e-3,
        0.99e-3,
        0.98e-3,
        1.0e-3,
        1.01e-3,
        0.995e-3,
        0.99e-3,
    ]
    ten = [1.2e-3, 1.1e-3, 1.05e-3, *(cycle * 3)[:25]]
    assert steady_cycle(ten, 58) is None
    found = steady_cycle(ten, 58, CYCLE_LENGTHS)
    assert found is not None and found.length == 10
    assert found.increment.time_s == pytest.approx(sum(cycle))


def test_fast_forward_falls_back_to_full_simulation_when_not_periodic() -> None:
    # three layers, too few to probe: simulated in full either way
    p = program([kernel("layer", layer_stages(), calls=3, looped=True)])
    t = simulate_step(p, DEFAULT)
    assert t.kernels[0].simulated_iterations == 3 and t.kernels[0].period_s is None


def test_a_step_over_the_event_budget_is_refused_before_simulating() -> None:
    p = deepseek_like_program(tp=16, batch=32)
    engine = Engine(DEFAULT, EngineConfig(tiles_per_stage=64, max_events=5000))
    assert engine.estimate_events(p) > 5000
    start = time.perf_counter()
    with pytest.raises(EventBudgetError, match=r"engine\.tiles_per_stage") as err:
        engine.simulate_step(p)
    assert "engine.max_events" in str(err.value)
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize("all_sockets", [False, True])
@pytest.mark.parametrize(
    ("algorithm", "topology"),
    [("ring", "ring"), ("bidirectional_ring", "ring"), ("tree", "fully_connected")],
)
def test_early_estimate_is_a_lower_bound_of_the_events_processed(
    all_sockets: bool, algorithm: str, topology: str
) -> None:
    # The early check may refuse only a step that cannot fit: its estimate is a lower
    # bound (the work items of every tile), rough but within a few times a full run's.
    system = DEFAULT.system.model_copy(
        update={"collective_algorithm": algorithm, "topology": topology}
    )
    hw = DEFAULT.model_copy(update={"system": system})
    for p in (mixed_program(), llama_like_program(tp=4, layers=24)):
        for fast_forward, tiles in itertools.product((True, False), (1, 8)):
            config = EngineConfig(
                fast_forward=fast_forward, all_sockets=all_sockets, tiles_per_stage=tiles
            )
            t = simulate_step(p, hw, config)
            assert 0 < t.estimated_events <= t.events
            if tiles == 8 and not fast_forward:
                assert t.events < 4 * t.estimated_events


def test_the_event_budget_is_exact_across_the_kernels_of_a_step() -> None:
    # No estimate decides: a budget of exactly the step's events gives the same timing, one
    # event less stops the run in its last kernel, and a small one in the looped kernel.
    p = mixed_program()
    t = simulate_step(p, DEFAULT)
    assert simulate_step(p, DEFAULT, EngineConfig(max_events=t.events)) == t
    with pytest.raises(EventBudgetError, match=r"kernel 'head'.*engine\.max_events = "):
        simulate_step(p, DEFAULT, EngineConfig(max_events=t.events - 1))
    assert t.estimated_events < 1000 < t.events
    with pytest.raises(EventBudgetError, match=r"kernel 'layer' after \d+ of \d+ layers") as err:
        simulate_step(p, DEFAULT, EngineConfig(max_events=1000))
    assert "engine.tiles_per_stage" in str(err.value)


def test_deepseek_sized_decode_step_simulates_in_a_fraction_of_a_second() -> None:
    p = deepseek_like_program(tp=16, batch=32)
    start = time.process_time()
    t = simulate_step(p, DEFAULT)
    cpu = time.process_time() - start
    assert t.events < 60_000
    assert cpu < 1.0  # about 0.15 s on an idle core; loose for loaded CI machines


# --- output contract ---------------------------------------------------------------------


def test_step_timing_to_dict_is_json_with_the_contract_keys() -> None:
    t = simulate_step(mixed_program(), DEFAULT)
    d = json.loads(json.dumps(t.to_dict()))
    for key in (
        "step_s",
        "phase",
        "batch",
        "context",
        "flops",
        "bytes_by_tier",
        "hbm_bandwidth_fraction",
        "events",
        "kernels",
    ):
        assert key in d
    assert set(d["bytes_by_tier"]) == {"hbm", "ddr", "sram", "p2p"}
    assert [k["name"] for k in d["kernels"]] == ["embed", "layer", "head"]
    assert all(k["time_s"] > 0 for k in d["kernels"])
    assert math.isclose(sum(k["time_s"] for k in d["kernels"]), d["step_s"], rel_tol=1e-12)
    assert d["phase"] == "decode" and d["batch"] == 8


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ([stage("a", inputs=("b",)), stage("b")], "topologically"),
        ([stage("a"), stage("a")], "duplicate"),
        ([stage("a", pcus=0, flops=1.0)], "no PCUs"),
        ([stage("a", pcus=600), stage("b", pcus=600)], "PCUs"),
    ],
)
def test_invalid_programs_are_rejected_with_the_stage_named(
    stages: list[StageProgram], message: str
) -> None:
    p = program([kernel("k", stages)])
    with pytest.raises(ValueError, match=message):
        simulate_step(p, ZERO)


def _live(
    periods: list[float], calls: int = 58, lateness: list[float] | None = None
) -> tuple[int, int, float] | None:
    """Look for a cycle at each boundary of ``periods`` in turn, as the live run's loop does
    (safe cut = boundary + 3); (boundary it cut at, layers kept, cycle) or None."""
    log = synthetic_boundaries(periods, lateness)
    for m in range(len(log)):
        found = find_cycle(log[: m + 1], calls, m + 3)
        if found is not None:
            assert (calls - found.layers) % found.length == 0 and found.layers >= m + 3
            return m, found.layers, found.increment.time_s
    return None


def test_live_cycle_accepts_periodic_and_rejects_drifting_or_settling_pipelines() -> None:
    """The production path (the rule at every boundary), not only steady_cycle: boundary
    by boundary, from the first at which a state can repeat twice (boundaries 1 and 2 equal
    to 0 and 1)."""
    found = _live([1.0e-3] * 40)
    assert found is not None and found[0] == STATE_MATCHES and found[2] == pytest.approx(1e-3)
    three = _live([1.3e-3, 0.9e-3, 1.1e-3] + [0.7e-3, 0.9e-3, 0.85e-3] * 12)
    assert three is not None and three[2] == pytest.approx(2.45e-3)
    # drifting: never a cycle, however small the trend
    assert _live([1e-3 * (1 + 1e-6 * i) for i in range(58)]) is None
    # settling: accepted once the swings are float rounding (a few 1e-9), not before
    late = _live([1e-3 * (1 + 0.05 * 0.7**i) for i in range(58)])
    assert late is not None and late[0] > 40
    assert 0.05 * 0.7 ** (late[0] - 2) < 10 * STATE_RTOL < 0.05 * 0.7 ** (late[0] - 6)
    assert late[2] == pytest.approx(1e-3, rel=1e-8)
    # a damped swing that has not died down to rounding within the run: simulated in full
    assert _live([1e-3 * (1 + 0.01 * (-0.8) ** i) for i in range(58)]) is None


def test_live_cycle_needs_the_whole_state_to_repeat() -> None:
    # The shipped full-attention decode step's failure: every boundary on time, while a
    # prefetched stream falls a little further behind each layer (until it reaches a tile
    # and the period changes). Boundaries alone would call this periodic from the start.
    steady = [1.0e-3] * 58
    slipping = [2e-7 * i for i in range(58)]
    assert _live(steady, lateness=slipping) is None
    # once the stream stops slipping (it has caught a tile), the state repeats
    caught = [2e-7 * min(i, 30) for i in range(58)]
    found = _live(steady, lateness=caught)
    assert found is not None and found[0] == 30 + STATE_MATCHES
