"""The GPU engine: device kernels in SimPy and the host launching them.

Exact values on hand-built kernels (a lone HBM stream, a compute-bound GEMM, a ring
all-reduce against its closed form, launches against their recurrence), rooflines and
conservation on compiled programs, fast-forward against the full simulation, and every GPU
parameter changing some result.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from test_engine_programs import kernel, program, stage

from rdu_sim.api import EngineBackend, default_step_shape
from rdu_sim.compiler import Compiler
from rdu_sim.compiler.program import CollectiveSpec
from rdu_sim.config.gpu import GpuConfig, GpuHardwareConfig
from rdu_sim.config.hardware_file import validate_hardware
from rdu_sim.config.loader import read_yaml
from rdu_sim.config.workload import EngineConfig
from rdu_sim.engine import EventBudgetError
from rdu_sim.engine.collective_port import plan_collective
from rdu_sim.engine.for_hardware import engine_for, gpu_settings
from rdu_sim.engine.gpu import GpuEngine, GpuSettings
from rdu_sim.engine.gpu.stream import execution_order
from rdu_sim.engine.gpu.work import (
    attention_blocks,
    gemm_efficiency,
    kv_blocks_bandwidth,
    matrix_rate,
)
from rdu_sim.hw.collectives import ring_time
from rdu_sim.scenario import Scenario, load_scenario
from rdu_sim.shapes import Gemm, StepShape

REPO = Path(__file__).resolve().parents[1]
DGX = REPO / "hw_configs" / "dgx-h100.yaml"
LLAMA_70B = REPO / "workloads" / "llama3.1-70b-decode.yaml"


def dgx(**edits: Any) -> GpuHardwareConfig:
    """The shipped DGX H100 with dotted-path edits (``"gpu.kernel.sync": 0.0``); an engine
    made with it and no stack adds no host time (these tests check the device's step)."""
    data, lines = read_yaml(DGX)
    for path, value in edits.items():
        node = data
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    hardware = validate_hardware(data, str(DGX), lines)
    assert isinstance(hardware, GpuHardwareConfig)
    return hardware


MOE = REPO / "workloads" / "qwen3-235b-a22b-16socket.yaml"
MOE_OVERLAP = {
    "model": "qwen3-30b-a3b",
    "parallelism": {"tp": 1, "dp_attention": 8, "ep": 8, "two_batch_overlap": True},
    "serving.batch_slots": 4,
    "serving.max_context": 4096,
}


def on_gpu(path: Path = LLAMA_70B, **overrides: Any) -> Scenario:
    return load_scenario(path, {"hardware": str(DGX), **overrides})


def hbm_rate(hw: GpuHardwareConfig) -> float:
    return hw.gpu.hbm.bandwidth * hw.gpu.hbm.efficiency


# --- hand-built kernels: exact values -----------------------------------------------------


def test_a_lone_stream_takes_latency_plus_bytes_over_bandwidth_plus_the_boundary() -> None:
    hw = dgx()
    nbytes = 64e6
    engine = GpuEngine(hw, EngineConfig(tiles_per_stage=8, prefetch_tiles=8))
    timing = engine.simulate_step(program([kernel("k", [stage("load", hbm=nbytes)])]))
    device = hw.gpu.hbm.latency + nbytes / hbm_rate(hw) + hw.gpu.kernel.sync
    graph = hw.gpu.kernel.graph_launch  # the host launches the step as one CUDA graph
    assert timing.step_s == pytest.approx(graph + device, rel=1e-12)
    assert timing.bytes_by_tier["hbm"] == nbytes
    assert timing.kernels[0].overhead_s == hw.gpu.kernel.sync


def test_an_aligned_gemm_runs_at_its_tensor_rate() -> None:
    hw = dgx(**{"gpu.kernel.sync": 0.0, "gpu.kernel.graph_launch": 0.0})
    flops = 2 * 4096 * 4096 * 4096
    gemm = stage("mm", flops=flops, gemm=Gemm(4096, 4096, 4096))
    for fp8, rate in ((False, hw.gpu.bf16_flops), (True, hw.gpu.fp8_flops)):
        engine = GpuEngine(hw, EngineConfig(), GpuSettings(fp8_weights=fp8))
        timing = engine.simulate_step(program([kernel("k", [gemm])]))
        assert timing.step_s == pytest.approx(flops / (rate * hw.gpu.max_gemm_efficiency))
        assert timing.flops == flops


def test_a_skinny_gemm_pads_to_the_instruction_tile() -> None:
    gpu = dgx().gpu
    # 4 rows: swapped onto the 8-wide side of the 64 x 8 tile, half of it used
    skinny = stage("mm", flops=1.0, gemm=Gemm(4, 4096, 4096))
    assert gemm_efficiency(skinny, gpu) == pytest.approx(gpu.max_gemm_efficiency / 2)
    attention = stage("a", flops=1.0, op="flash_attention")
    assert matrix_rate(attention, gpu, GpuSettings(fp8_weights=True)) == gpu.bf16_flops
    assert matrix_rate(attention, gpu, GpuSettings(fp8_kv=True)) == gpu.fp8_flops


@pytest.mark.parametrize(
    ("weights", "fp8"),
    [("bf16", False), ("fp8", True), ("fp8_block", True), ("int8", False), ("mxfp4", False)],
)
def test_fp8_weights_plain_or_block_scaled_run_on_the_fp8_tensor_cores(
    weights: str, fp8: bool
) -> None:
    """DeepSeek-R1 ships fp8_block weights: a GPU multiplies them at its FP8 rate, as plain
    fp8 (the block scales are applied per block of the product)."""
    settings = gpu_settings(on_gpu(**{"dtypes.weights": weights}))
    assert settings.fp8_weights is fp8
    assert settings.fp8_kv is False


def test_an_all_reduce_kernel_runs_the_chosen_algorithm_on_nvlink() -> None:
    """An all-reduce kernel alone (all pieces at once): the NCCL-like chooser's pick, whose
    estimate on idle links is the simulated time within one node; a forced ring is the
    ring's closed form."""
    idle = {"gpu.kernel.sync": 0.0, "gpu.kernel.graph_launch": 0.0}
    hw = dgx(**idle)
    nbytes, chunks = 8e6, hw.system.collective_chunks
    ar = stage("ar", op="allreduce", collective=CollectiveSpec("allreduce", nbytes, 8))
    prog = program([kernel("ar", [ar])], tp=8)
    timing = GpuEngine(hw).simulate_step(prog)
    assert ar.collective is not None
    plan = plan_collective(ar.collective, hw.system)
    (report,) = timing.collectives
    assert report.algorithm == plan.algorithm and report.policy == "auto"
    assert timing.step_s == pytest.approx(plan.chosen.time_s, rel=1e-9)
    ring = GpuEngine(dgx(**idle, **{"system.collective_algorithm": "ring"})).simulate_step(prog)
    link = hw.system.intra_node_link
    assert ring.step_s == pytest.approx(
        ring_time(8, nbytes, link.bandwidth, link.latency, chunks), rel=1e-9
    )
    assert timing.step_s <= ring.step_s
    assert ring.bytes_by_tier["p2p"] == pytest.approx(2 * 7 / 8 * nbytes)


def test_launches_follow_the_host_device_recurrence() -> None:
    """Without CUDA graphs the host launches each call (launch s of CPU); the device starts
    a call once it is launched and the previous one is done."""
    hw = dgx()
    small = kernel("small", [stage("s", hbm=1e3)], calls=5)
    big = kernel("big", [stage("b", hbm=1e8)], calls=2)
    prog = program([small, big])
    stream = GpuEngine(hw, settings=GpuSettings(cuda_graphs=False)).simulate_step(prog)
    graph = GpuEngine(hw, settings=GpuSettings(cuda_graphs=True)).simulate_step(prog)
    device = [k.time_s / k.calls for k in stream.kernels]
    launch, end = hw.gpu.kernel.launch, 0.0
    for i, k in enumerate(execution_order(prog.kernels)):
        end = max(end, (i + 1) * launch) + device[k]
    assert stream.step_s == pytest.approx(end, rel=1e-12)
    assert graph.step_s == pytest.approx(
        hw.gpu.kernel.graph_launch + sum(k.time_s for k in graph.kernels), rel=1e-12
    )
    assert stream.busy_s["launch"] == pytest.approx(7 * launch)
    # the device's time at the 7 calls' boundaries, apart from the host's launches
    assert stream.busy_s["boundaries"] == pytest.approx(7 * hw.gpu.kernel.sync, rel=1e-12)
    assert stream.step_s > graph.step_s  # the small kernels are shorter than their launches


def test_split_layers_run_layer_by_layer() -> None:
    a = kernel("decoder:a", [stage("a", hbm=1.0)], calls=3)
    b = kernel("decoder:b", [stage("b", hbm=1.0)], calls=3)
    head = kernel("lm_head", [stage("h", hbm=1.0)])
    a, b = (type(a)(k.name, k.calls, k.looped, k.stages, "decoder") for k in (a, b))
    assert execution_order([head, a, b, head]) == [0, 1, 2, 1, 2, 1, 2, 3]
    looped = kernel("decoder", [stage("a", hbm=1.0)], calls=3, looped=True)
    assert execution_order([looped]) == [0]


# --- compiled programs: rooflines, conservation, fast-forward ----------------------------

CASES = [
    ("70b-decode-partial", LLAMA_70B, {}, "decode"),
    ("70b-decode-none-b1", LLAMA_70B, {"fusion": "none", "serving.batch_slots": 1}, "decode"),
    ("70b-decode-full", LLAMA_70B, {"fusion": "full"}, "decode"),
    ("70b-prefill-partial", LLAMA_70B, {}, "prefill"),
    ("70b-prefill-none", LLAMA_70B, {"fusion": "none"}, "prefill"),
    (
        "8b-fp8-decode",
        REPO / "workloads" / "llama3.1-8b-8socket.yaml",
        {"dtypes.weights": "fp8", "dtypes.kv": "fp8", "serving.batch_slots": 64},
        "decode",
    ),
    (
        "qwen3-moe-decode",
        REPO / "workloads" / "qwen3-235b-a22b-16socket.yaml",
        {"parallelism.tp": 8, "serving.batch_slots": 16, "serving.max_context": 4096},
        "decode",
    ),
]


@pytest.mark.parametrize(("name", "path", "overrides", "phase"), CASES, ids=[c[0] for c in CASES])
def test_a_gpu_step_is_never_faster_than_its_rooflines(
    name: str, path: Path, overrides: dict[str, Any], phase: str
) -> None:
    scenario = on_gpu(path, **overrides)
    shape = default_step_shape(scenario, phase)
    prog = Compiler(scenario).program(shape)
    hw = scenario.hardware
    assert isinstance(hw, GpuHardwareConfig)
    settings = gpu_settings(scenario)
    # every kernel runs on all the SMs: the compiler gives no stage units of its own
    assert all(s.pcus == s.pmus == 0 for k in prog.kernels for s in k.stages)
    timing = engine_for(scenario).simulate_step(prog)
    # work is conserved: the device moved exactly the Program's bytes and FLOPs
    assert timing.bytes_by_tier["hbm"] == pytest.approx(prog.bytes_by_tier()["hbm"], rel=1e-9)
    assert timing.flops == pytest.approx(prog.flops, rel=1e-9)
    # HBM roofline: no faster than its bytes at the achievable bandwidth
    assert timing.step_s >= prog.bytes_by_tier()["hbm"] / hbm_rate(hw)
    # FLOP roofline: no faster than each stage's matrix and vector work at its best rate
    compute = sum(
        k.calls
        * (
            s.flops / (matrix_rate(s, hw.gpu, settings) * gemm_efficiency(s, hw.gpu))
            + s.vector_flops / hw.gpu.vector_flops
        )
        for k in prog.kernels
        for s in k.stages
    )
    assert timing.step_s >= compute
    # and every kernel boundary costs its device-wide synchronization
    calls = len(execution_order(prog.kernels))
    assert timing.step_s >= calls * hw.gpu.kernel.sync
    for share in (timing.hbm_bandwidth_fraction, *timing.utilization.values()):
        assert 0.0 <= share <= 1.0


@pytest.mark.parametrize("fusion", ["full", "partial"])
def test_fast_forward_is_the_full_simulation(fusion: str) -> None:
    shape = StepShape("decode", 16, 1, 4096)
    timings = []
    for fast in (True, False):
        scenario = on_gpu(fusion=fusion, **{"engine.fast_forward": fast})
        timings.append(engine_for(scenario).simulate_step(Compiler(scenario).program(shape)))
    fast, full = timings
    assert fast.events < full.events
    assert fast.step_s == pytest.approx(full.step_s, rel=1e-12)
    assert fast.bytes_by_tier == pytest.approx(full.bytes_by_tier, rel=1e-12)
    assert fast.flops == pytest.approx(full.flops, rel=1e-12)


def test_same_step_same_bytes_and_the_event_budget() -> None:
    scenario = on_gpu()
    shape = default_step_shape(scenario, "decode")
    prog = Compiler(scenario).program(shape)
    first, again = (engine_for(scenario).simulate_step(prog) for _ in range(2))
    assert first == again and first.to_dict() == again.to_dict()
    assert first.events >= first.estimated_events
    tight = on_gpu(**{"engine.max_events": 1000})
    with pytest.raises(EventBudgetError, match=r"engine\.max_events"):
        engine_for(tight).simulate_step(Compiler(tight).program(shape))


def test_cuda_graphs_and_fusion_order_the_small_batch_step() -> None:
    def step(**overrides: Any) -> float:
        scenario = on_gpu(**{"serving.batch_slots": 1, **overrides})
        return EngineBackend().step_cost(scenario, default_step_shape(scenario, "decode")).step_s

    assert step(cuda_graphs=False) > step(cuda_graphs=True)
    assert step(fusion="none") > step(fusion="partial") > step(fusion="full")


# --- decode attention's thread blocks ------------------------------------------------------


@pytest.mark.parametrize(
    ("heads", "keys", "split", "blocks"),
    [
        (16, 3073, "whole", 16),  # one block per slot and KV head
        (16, 3073, 512, 16 * 7),  # partitions of 512 tokens: ceil(3073 / 512)
        (16, 512, 512, 16),
        (16, 3073, "fill", 16 * 9),  # cut until the blocks fill 132 SMs: ceil(132 / 16)
        (200, 3073, "fill", 200),  # already more blocks than SMs: no cut
        (1, 2, "fill", 2),  # never less than a token a block
    ],
)
def test_attention_blocks_deal_a_context_out_as_the_stack_says(
    heads: int, keys: int, split: str | int, blocks: int
) -> None:
    assert attention_blocks(heads, keys, split, sms=132) == blocks


def _decode_s(context: int, split: str | int, tp: int = 4) -> float:
    scenario = on_gpu(
        **{
            "serving.batch_slots": 1,
            "serving.max_context": 16384,
            "parallelism.tp": tp,
            "stack.decode_attention_split": split,
        }
    )
    shape = StepShape("decode", 1, 1, context)
    return engine_for(scenario).simulate_step(Compiler(scenario).program(shape)).step_s


def test_one_block_per_kv_head_streams_the_context_at_its_own_rate() -> None:
    """Llama-3-70B at batch 1 on 4 GPUs: two KV heads a GPU, two blocks. Each added token of
    context is 512 bytes (K and V, 128 dims, bf16) a block reads at thread_block_bandwidth,
    in each of 80 layers: the step grows by exactly that, however few the bytes are for the
    HBM."""
    hw = dgx()
    added = 8192
    per_block = 80 * added * 2 * 128 * 2 / hw.gpu.thread_block_bandwidth
    whole = _decode_s(1024 + added, "whole") - _decode_s(1024, "whole")
    assert whole == pytest.approx(per_block, rel=1e-9)
    # split until the blocks fill the SMs, the same bytes take at most the HBM's time, a
    # sliver (less: the short context's small tiles leave HBM latencies exposed, which the
    # longer one's reads, arriving in order, partly fill; 72% of it at 500 ns, all at 0)
    fill = _decode_s(1024 + added, "fill") - _decode_s(1024, "fill")
    hbm_bytes = 80 * added * 2 * 128 * 2 * 2  # two KV heads a GPU
    assert 0.5 * hbm_bytes / hbm_rate(hw) < fill <= hbm_bytes / hbm_rate(hw) * (1 + 1e-9)
    assert fill < 0.2 * whole
    # a block's stream is the same on 8 GPUs (one KV head each): the growth does not halve
    eight = _decode_s(1024 + added, "whole", tp=8) - _decode_s(1024, "whole", tp=8)
    assert eight == pytest.approx(whole, rel=0.05)


@pytest.mark.parametrize("batch", [1, 8, 64])
def test_fewer_blocks_are_never_faster_and_prefill_is_not_split(batch: int) -> None:
    def step(split: str | int, phase: str) -> float:
        scenario = on_gpu(**{"serving.batch_slots": batch, "stack.decode_attention_split": split})
        if phase == "prefill":  # a chunk over a long cache: its attention reads the cache too
            shape = StepShape("prefill", 1, 512, 8192)
        else:
            shape = default_step_shape(scenario, phase)
        return engine_for(scenario).simulate_step(Compiler(scenario).program(shape)).step_s

    whole, partitions, fill = (step(split, "decode") for split in ("whole", 512, "fill"))
    assert whole >= partitions >= fill
    if batch == 1:  # one KV head a GPU: each split binds in turn
        assert whole > partitions > fill
    assert step("whole", "prefill") == step("fill", "prefill")


@pytest.mark.parametrize(
    ("split", "blocks"),
    [("whole", 8), (512, 8 * 7), ("fill", 132)],  # 4 slots x 2 KV heads; 3,073 keys; 132 SMs
)
def test_each_kv_read_streams_at_its_attentions_blocks(split: str | int, blocks: int) -> None:
    scenario = on_gpu(
        **{"serving.batch_slots": 4, "parallelism.tp": 4, "stack.decode_attention_split": split}
    )
    program = Compiler(scenario).program(StepShape("decode", 4, 1, 3072))
    gpu = dgx().gpu
    rates = [kv_blocks_bandwidth(k, gpu, gpu_settings(scenario)) for k in program.kernels]
    assert [r for r in rates if r] == [{"attn.kv_read": blocks * gpu.thread_block_bandwidth}]


def test_a_window_layer_and_a_full_layer_have_their_own_blocks() -> None:
    """gpt-oss alternates 128-token windows with full attention; fused in one kernel, each
    layer's KV read streams through its own attention's blocks: 2 KV heads a GPU, one
    512-token partition of the window, 17 of the 8,193 keys."""
    scenario = load_scenario(
        REPO / "workloads" / "gpt-oss-120b-8socket.yaml",
        {
            "hardware": str(DGX),
            "fusion": "full",
            "stack": "vllm-2024",
            "parallelism.tp": 4,
            "serving.batch_slots": 1,
        },
    )
    program = Compiler(scenario).program(StepShape("decode", 1, 1, 8192))
    gpu = dgx().gpu
    rates: dict[str, float] = {}
    for each in program.kernels:
        rates |= kv_blocks_bandwidth(each, gpu, gpu_settings(scenario))
    assert rates == {
        "l0.attn.kv_read": 2 * gpu.thread_block_bandwidth,
        "l1.attn.kv_read": 2 * 17 * gpu.thread_block_bandwidth,
    }


# --- every GPU parameter changes some result ---------------------------------------------


def _leaves(model: type[BaseModel], prefix: str) -> list[str]:
    """Dotted paths of every leaf field of ``model``."""
    out = []
    for f in model.model_fields:
        annotation = model.model_fields[f].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out += _leaves(annotation, f"{prefix}{f}.")
        else:
            out.append(f"{prefix}{f}")
    return out


# `channels` is read by neither engine: issue 17 removes it from MemoryTierConfig
UNUSED = {"gpu.hbm.channels"}


def _results(hw: GpuHardwareConfig) -> tuple[float, ...]:
    """Results a GPU parameter may move: capacity and steps in the regimes that expose each."""
    results: list[float] = []
    for path, overrides, phase in (
        (LLAMA_70B, {"serving.batch_slots": 1, "fusion": "none", "cuda_graphs": False}, "decode"),
        (LLAMA_70B, {"serving.batch_slots": 32}, "decode"),
        (LLAMA_70B, {"serving.batch_slots": 1}, "prefill"),
        (LLAMA_70B, {"dtypes.weights": "fp8", "serving.batch_slots": 1}, "prefill"),
        (MOE, MOE_OVERLAP, "prefill"),  # two-batch overlap: SMs held by the all-to-all
        # one thread block per sequence and KV head streams its whole context
        (LLAMA_70B, {"serving.batch_slots": 1, "stack": "tensorrt-llm-2024"}, "decode"),
    ):
        scenario = replace(on_gpu(path, **overrides), hardware=hw)
        backend = EngineBackend()
        results.append(backend.batch_capacity(scenario))
        shape = default_step_shape(scenario, phase, tokens=1000 if phase == "prefill" else None)
        results.append(backend.step_cost(scenario, shape).step_s)
    return tuple(results)


def test_every_gpu_parameter_changes_some_result() -> None:
    base = dgx()
    reference = _results(base)
    names = [n for n in _leaves(GpuConfig, "gpu.") if n not in UNUSED]
    assert {"gpu.kernel.graph_launch", "gpu.mma_rows", "gpu.hbm.latency"} <= set(names)
    for name in names:
        value = base.model_dump()
        node = value
        for part in name.split(".")[:-1]:
            node = node[part]
        leaf = name.split(".")[-1]
        current = node[leaf]
        node[leaf] = 3 * current if current > 0 else 1e-6
        if leaf in ("efficiency", "max_gemm_efficiency"):
            node[leaf] = current / 3
        varied = GpuHardwareConfig.model_validate(value)
        assert _results(varied) != reference, f"{name} changes no result"
    # the check can fail: what no model reads (the description) leaves every result as it was
    assert _results(base.model_copy(update={"description": "another"})) == reference


def test_recording_changes_nothing_and_shows_host_and_device() -> None:
    scenario = on_gpu(fusion="partial", cuda_graphs=False, **{"serving.batch_slots": 2})
    prog = Compiler(scenario).program(default_step_shape(scenario, "decode"))
    plain = engine_for(scenario).simulate_step(prog)
    recorded = engine_for(scenario, record=True).simulate_step(prog)
    assert recorded.step_s == plain.step_s and recorded.to_dict() == plain.to_dict()
    assert recorded.records is not None
    tracks = {s.track for s in recorded.records.slices}
    assert {"host", "kernel", "gpu/segment0"} <= tracks
    launches = [s for s in recorded.records.slices if s.track == "host"]
    assert len(launches) == len(execution_order(prog.kernels))
    assert max(s.start_s + s.dur_s for s in recorded.records.slices) <= recorded.step_s * (1 + 1e-9)
