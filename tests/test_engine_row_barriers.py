"""Rows finished only at their end: the data dependency of a batch-1 decode step.

With fewer rows (tokens) than tiles, a stage that reduces along the row (a norm, attention,
a GEMM fed along its reduction dimension; `StageProgram.whole_row_outputs`) finishes a row
only with its last tile of it, and its consumers can start on none of it before: a chain of
such stages runs one after another, whatever the engine's tiling. With as many rows as tiles
the tiles are rows and the chain pipelines as before. Which stages reduce is the compiler's
rule (`compiler.row_barriers`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from test_engine_programs import hardware, kernel, program, stage

from rdu_sim import api
from rdu_sim.compiler import Compiler
from rdu_sim.compiler.buffers import Edge
from rdu_sim.compiler.program import Program
from rdu_sim.compiler.row_barriers import whole_row_stages
from rdu_sim.config.workload import EngineConfig
from rdu_sim.engine import kernel_pipeline, simulate_step
from rdu_sim.shapes import StepShape

ZERO = hardware()
PCUS = 10


def compute_s(flops: float) -> float:
    pcu = ZERO.socket.pcu
    return flops / (PCUS * pcu.peak_flops * pcu.max_gemm_efficiency)


def chain(
    rows: int, first_reduces: bool = True, first: float = 1e12, second: float = 1e12
) -> Program:
    """a -> b on 10 PCUs each; `a` finishes a row only at its end when `first_reduces`."""
    a = stage("a", pcus=PCUS, flops=first, out=1e6)
    if first_reduces:
        a = dataclasses.replace(a, whole_row_outputs=rows)
    b = stage("b", pcus=PCUS, flops=second, inputs=("a",))
    return program([kernel("k", [a, b])], batch=rows)


@pytest.mark.parametrize("tiles", [8, 32])
def test_one_row_runs_a_reduction_and_its_consumer_one_after_the_other(tiles: int) -> None:
    cfg = EngineConfig(tiles_per_stage=tiles)
    serial = simulate_step(chain(1), ZERO, cfg).step_s
    assert serial == pytest.approx(2 * compute_s(1e12), rel=1e-4)
    # not reducing, or as many rows as tiles: the two stages overlap tile by tile
    streamed = simulate_step(chain(1, first_reduces=False), ZERO, cfg).step_s
    rows = simulate_step(chain(tiles), ZERO, cfg).step_s
    assert streamed == pytest.approx(compute_s(1e12), rel=1e-4)
    assert rows == pytest.approx(compute_s(1e12), rel=1e-4)


@pytest.mark.parametrize("tiles", [8, 16])
def test_a_few_rows_pipeline_row_by_row(tiles: int) -> None:
    # 4 rows: b starts on row r when a finishes it, so b ends a quarter of a call after a
    t = simulate_step(chain(4), ZERO, EngineConfig(tiles_per_stage=tiles)).step_s
    assert t == pytest.approx(1.25 * compute_s(1e12), rel=1e-4)


def test_a_slow_consumer_still_sets_the_pace_of_many_rows() -> None:
    t = simulate_step(chain(64, second=3e12), ZERO).step_s
    assert t == pytest.approx(compute_s(3e12), rel=1e-3)


def test_a_consumer_with_a_second_streaming_input_does_not_deadlock() -> None:
    # c takes a's finished row and b's streamed tiles: it holds b's tiles of the row until a
    # finishes it, so b is never blocked on c's buffer while a waits for b's upstream.
    x = stage("x", pcus=PCUS, flops=1e11, out=1e6)
    a = dataclasses.replace(
        stage("a", pcus=PCUS, flops=1e12, inputs=("x",), out=1e6), whole_row_outputs=1
    )
    b = stage("b", pcus=PCUS, flops=1e11, inputs=("x",), out=1e6)
    c = stage("c", pcus=PCUS, flops=1e11, inputs=("a", "b"))
    for looped in (False, True):
        p = program([kernel("k", [x, a, b, c], calls=3, looped=looped)])
        assert simulate_step(p, ZERO).step_s > 3 * compute_s(1e12)


def test_which_stages_reduce_along_the_row() -> None:
    # norms and attention always; a GEMM fed whole (after a norm) tiles its columns and
    # streams; fed by a streaming stage it reduces along it; elementwise stages pass through
    stages = [
        ("norm", "rmsnorm", ()),
        ("up", "gemm", ("norm",)),
        ("act", "silu_mul", ("up",)),
        ("down", "gemm", ("act",)),
        ("add", "residual", ("down",)),
        ("next", "gemm", ("add",)),
        ("attn", "flash_attention", ("next",)),
    ]
    assert whole_row_stages(stages) == {"norm", "down", "attn"}
    with pytest.raises(ValueError, match="not an earlier stage"):
        whole_row_stages([("a", "gemm", ("b",))])


def test_the_compiled_decoder_layers_reduce_where_their_rows_are_sums() -> None:
    scenario = api.load("workloads/deepseek-r1-128k-full.yaml", ["serving.batch_slots=1"])
    program_ = Compiler(scenario).program(StepShape("decode", 1, 1, 1024))
    moe = next(k for k in program_.kernels if k.name == "decoder_moe")
    reducing = {s.name for s in moe.stages if s.whole_row_outputs}
    assert reducing == {
        "attn_norm",
        "attn.q_a_norm",
        "attn.kv_norm",
        "attn.flash",
        "ffn_norm",
        "moe.topk",
        "moe.shared.down_proj",
        "moe.experts_down",
        "moe.combine",
    }
    assert all(s.whole_row_outputs == 1 for s in moe.stages if s.name in reducing)


def test_a_batch_one_moe_step_pays_its_chain_and_refining_tiles_does_not_change_it() -> None:
    path = "workloads/deepseek-r1-128k-full.yaml"
    shape = {"batch": 1, "context": 131072}
    steps = {
        tiles: api.step(path, [f"engine.tiles_per_stage={tiles}"], **shape).step_s
        for tiles in (8, 32)
    }
    assert abs(steps[32] / steps[8] - 1) < 0.02
    # the chain (attention, its all-reduce, router, top-k, the experts' loads, their
    # combine) is longer than the HBM time of the step's bytes
    detail = api.step(path, [], **shape).detail
    hbm = api.load(path).hardware.socket.hbm
    hbm_s = detail.bytes_by_tier["hbm"] / (hbm.bandwidth * hbm.efficiency)
    assert detail.step_s > 1.2 * hbm_s


def test_a_batch_one_moe_step_fast_forwards_exactly_with_its_row_barriers() -> None:
    # the row ends are per (layer, row) events: cutting a looped run short at a cycle must
    # give the step of simulating every layer
    scenario = api.load("workloads/deepseek-r1-128k-full.yaml", ["serving.batch_slots=1"])
    program_ = Compiler(scenario).program(StepShape("decode", 1, 1, 1024))
    fast = simulate_step(program_, scenario.hardware)
    full = simulate_step(program_, scenario.hardware, EngineConfig(fast_forward=False))
    moe = fast.kernel("decoder_moe")
    assert moe.period_s is not None and moe.simulated_iterations < moe.calls
    assert fast.step_s == pytest.approx(full.step_s, rel=1e-9)
    for tier in ("hbm", "ddr", "sram", "p2p"):
        assert fast.bytes_by_tier[tier] == pytest.approx(full.bytes_by_tier[tier], rel=1e-9)


@pytest.mark.parametrize("tiles", [8, 32])
def test_a_two_layer_loop_body_with_row_barriers_does_not_deadlock(tiles: int) -> None:
    # gpt-oss loops a sliding and a full layer as one body: its second layer's KV read, a
    # source, runs a layer ahead of an attention stuck behind the first layer's row barriers
    # unless every edge of the kernel holds a layer's tiles (it deadlocked with two slots)
    path, shape = "workloads/gpt-oss-120b-8socket.yaml", {"batch": 1, "context": 2048}
    fast = api.step(path, [f"engine.tiles_per_stage={tiles}"], **shape).step_s
    full = api.step(path, [f"engine.tiles_per_stage={tiles}", "engine.fast_forward=false"], **shape)
    assert fast == pytest.approx(full.step_s, rel=5e-4)


def _beside_a_row_further_down() -> Program:
    """x feeds a, which finishes its one row only at the row's end, then d; beside them b;
    c takes d and b. d hands nothing of the row on before a has finished it, so c waits
    for the row, and b's tiles wait at c (compiler.buffers.row_bypass_edges)."""
    x = stage("x", pcus=PCUS, flops=1e11, out=1e6)
    a = dataclasses.replace(
        stage("a", pcus=PCUS, flops=1e12, inputs=("x",), out=1e6), whole_row_outputs=1
    )
    d = stage("d", pcus=PCUS, flops=1e11, inputs=("a",), out=1e6)
    b = stage("b", pcus=PCUS, flops=1e11, inputs=("x",), out=1e6)
    c = stage("c", pcus=PCUS, flops=1e11, inputs=("d", "b"))
    return program([kernel("k", [x, a, d, b, c])])


def test_a_consumer_a_stage_below_a_row_and_beside_it_does_not_deadlock() -> None:
    # a's row (x streams into it), then d (c streams with it); b's tiles wait at c meanwhile
    t = simulate_step(_beside_a_row_further_down(), ZERO).step_s
    assert t == pytest.approx(compute_s(1e12) + compute_s(1e11), rel=1e-4)


def test_a_deadlock_names_the_stages_left_waiting_and_for_what(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # two slots on b -> c, as before the rule: the deadlock it avoids, and its report
    slots_by_edge = kernel_pipeline.slots_by_edge

    def two(*args: Any) -> dict[Edge, int]:
        return {**slots_by_edge(*args), ("b", "c", False): 2}

    monkeypatch.setattr(kernel_pipeline, "slots_by_edge", two)
    with pytest.raises(RuntimeError) as caught:
        simulate_step(_beside_a_row_further_down(), ZERO, EngineConfig(tiles_per_stage=8))
    # the cycle: c waits for d, d for a's row, a for x's tile 4, x for room beside b, b
    # for room at c
    other = "a producer's tile or row, a collective or its loads"
    assert str(caught.value) == (
        "kernel 'k': no event left before the run ended (the pipeline deadlocked; on "
        "socket 0: x (layer 0 tile 4) waits for a slot in x->b (2 full); "
        f"a (layer 0 tile 4) waits for {other}; d (layer 0 tile 0) waits for {other}; "
        "b (layer 0 tile 2) waits for a slot in b->c (2 full); "
        "c (layer 0 tile 0) waits for a tile from d->c)"
    )


DEEPSEEK_EP = "workloads/ep/deepseek-r1-sn40l-4racks-ep64.yaml"


def test_mla_layouts_at_tp_one_batch_one_differ_only_by_what_the_cache_holds() -> None:
    """At tp=1 nothing is split: replicated and sequence_split are the same step (the latent
    cache, attention absorbed), and head_split (it deadlocked at batch 1: kv_b_proj waits
    for kv_norm's row beside rope_k) is the non-absorbed form over the up-projected
    per-head cache: it reads and writes heads x (qk_nope + qk_rope + v) values a token and
    layer instead of kv_lora_rank + qk_rope, fewer attention FLOPs, a slower step."""
    shape = {"batch": 1}
    steps = {
        layout: api.step(DEEPSEEK_EP, [f"parallelism.mla_cache_layout={layout}"], **shape)
        for layout in ("replicated", "sequence_split", "head_split")
    }
    replicated, split, heads = (s.detail for s in steps.values())
    assert replicated.tp == 1
    assert replicated.step_s == split.step_s
    assert replicated.bytes_by_tier == split.bytes_by_tier
    m = api.load(DEEPSEEK_EP).model
    per_head = m.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) * 2
    latent = (m.kv_lora_rank + m.qk_rope_head_dim) * 2
    # every layer reads the cached tokens (its one decode bucket, 8,192) and writes the new one
    assert heads.context == split.context == 8192
    more = m.layers * (split.context + 1) * (per_head - latent)
    assert heads.bytes_by_tier["hbm"] - split.bytes_by_tier["hbm"] == more
    assert heads.bytes_by_tier["p2p"] == split.bytes_by_tier["p2p"]
    assert steps["head_split"].flops < steps["sequence_split"].flops
    hbm = api.load(DEEPSEEK_EP).hardware.socket.hbm
    assert heads.step_s > split.step_s + more / hbm.bandwidth
    # and without kernel looping (each layer its own call)
    unlooped = api.step(
        DEEPSEEK_EP, ["parallelism.mla_cache_layout=head_split", "kernel_looping=false"], **shape
    )
    assert unlooped.step_s > heads.step_s
