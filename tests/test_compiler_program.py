"""compile_program: kernels, looping, SnapKV selection kernel, caching, inspect output."""

from __future__ import annotations

import json

import pytest

from rdu_sim import api
from rdu_sim.compiler import Compiler, compile_program, to_dot
from rdu_sim.compiler.fusion import kernel_graphs
from rdu_sim.compiler.program import KernelProgram, Program
from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.graph import graph_problems
from rdu_sim.models import decode_flops_per_token
from rdu_sim.scenario import load_scenario
from rdu_sim.shapes import StepShape

SNAP = "workloads/deepseek-r1-128k-snapstream.yaml"
FULL = "workloads/deepseek-r1-128k-full.yaml"


def _names(program: object) -> list[tuple[str, int, bool]]:
    return [(k.name, k.calls, k.looped) for k in program.kernels]  # type: ignore[attr-defined]


def test_deepseek_kernels_and_looping() -> None:
    scenario = load_scenario(SNAP)
    program = compile_program(scenario, StepShape("decode", 4, 1, 32768))
    assert _names(program) == [
        ("embedding", 1, False),
        ("decoder_dense", 3, True),
        ("decoder_moe", 58, True),
        ("lm_head", 1, False),
    ]
    unlooped = load_scenario(SNAP, overrides={"kernel_looping": False})
    program = compile_program(unlooped, StepShape("decode", 4, 1, 32768))
    assert not any(k.looped for k in program.kernels)


SELECTION = ("snapkv_score", "snapkv_topk", "snapkv_compact")


def _selection(program: Program) -> list[KernelProgram]:
    return [k for k in program.kernels if k.name.startswith("snapkv")]


def test_snapkv_kernels_only_when_the_prompt_is_compressed() -> None:
    scenario = load_scenario(SNAP)
    compiler = Compiler(scenario)
    long = compiler.program(StepShape("prefill", 1, 40000, 0))
    select = _selection(long)
    assert [k.name for k in select] == list(SELECTION)
    assert all(k.calls == scenario.model.layers and k.looped for k in select)
    assert select[0].flops > 0
    assert _names(long)[-1][0] == "lm_head"
    for shape in (
        StepShape("prefill", 1, 32768, 0),  # at the budget: kept whole
        StepShape("prefill", 1, 1000, 0),  # under it
        StepShape("prefill", 1, 40000, 0, select=False),  # a non-final chunk
        StepShape("decode", 4, 1, 32768),
    ):
        assert _selection(compiler.program(shape)) == []
    chunk = compiler.program(StepShape("prefill", 1, 8192, 40000 - 8192))  # final chunk
    assert [k.name for k in _selection(chunk)] == list(SELECTION)
    full = Compiler(load_scenario(FULL)).program(StepShape("prefill", 1, 40000, 0))
    assert _selection(full) == []
    unlooped = Compiler(load_scenario(SNAP, overrides={"kernel_looping": False}))
    assert not any(
        k.looped for k in _selection(unlooped.program(StepShape("prefill", 1, 40000, 0)))
    )


def test_selection_cost_grows_with_the_prompt() -> None:
    compiler = Compiler(load_scenario(SNAP))

    def select_flops(prompt: int) -> float:
        program = compiler.program(StepShape("prefill", 1, prompt, 0))
        return sum(k.flops for k in _selection(program))

    assert select_flops(80000) > 1.9 * select_flops(40000)


def test_decode_program_flops_add_up_over_sockets() -> None:
    """Per-socket FLOPs x tp = the model's decode FLOPs plus the replicated projections."""
    scenario = load_scenario(SNAP)
    arch = scenario.model
    assert isinstance(arch, DeepSeekArchitecture)
    program = compile_program(scenario, StepShape("decode", 1, 1, 1000))
    replicated = (
        2
        * arch.layers
        * arch.hidden_size
        * (arch.q_lora_rank + arch.kv_lora_rank + arch.qk_rope_head_dim)
        + 2 * arch.moe_layers * arch.hidden_size * arch.routed_experts
    )
    expected = decode_flops_per_token(arch, 1001) + (scenario.tp - 1) * replicated
    assert scenario.tp * program.flops == pytest.approx(expected, rel=1e-12)


def test_stage_traffic_goes_to_the_right_tiers() -> None:
    program = compile_program(load_scenario(SNAP), StepShape("decode", 8, 1, 32768))
    layer = next(k for k in program.kernels if k.name == "decoder_moe")
    stages = {s.name: s for s in layer.stages}
    assert stages["attn.kv_read"].reads["hbm"] > 0  # KV from its tier
    assert stages["attn.kv_write"].writes["hbm"] > 0
    assert stages["attn_norm"].reads["hbm"] > 0  # the layer input crosses the kernel boundary
    assert stages["ffn.residual"].writes["hbm"] > 0  # and the output
    assert stages["attn.q_b_proj"].output_bytes > 0 and not stages["attn.q_b_proj"].writes
    assert stages["attn.flash"].collective is None
    assert stages["attn.flash.reduce_scatter"].collective is not None
    names = [s.name for s in layer.stages]
    for stage in layer.stages:  # topologically ordered
        assert all(names.index(p) < names.index(stage.name) for p in stage.inputs)
    for kernel in kernel_graphs(load_scenario(SNAP), StepShape("decode", 8, 1, 32768)):
        assert graph_problems(kernel.graph) == []


def test_compiler_caches_per_instance_and_is_deterministic() -> None:
    scenario = load_scenario("workloads/llama3.1-8b-8socket.yaml")
    shape = StepShape("decode", 16, 1, 8192)
    first = Compiler(scenario)
    assert first.program(shape) is first.program(shape)
    assert Compiler(scenario).program(shape) == first.program(shape)
    assert first.placement() is first.placement()


def test_inspect_graph_reports_kernels_stages_and_placement() -> None:
    result = api.inspect_graph(load_scenario(SNAP), phase="decode")
    json.dumps(result)  # JSON-ready
    assert result["shape"]["cache_len"] == 32768
    assert [k["name"] for k in result["kernels"]] == [
        "embedding",
        "decoder_dense",
        "decoder_moe",
        "lm_head",
    ]
    for kernel in result["kernels"]:
        assert {"name", "calls", "looped", "stages"} <= set(kernel)
        for stage in kernel["stages"]:
            assert {"op", "name", "pcus", "pmus", "flops"} <= set(stage)
            assert set(stage["bytes"]) == {"sram", "hbm", "ddr"}
    hbm = result["placement"]["tiers"]["hbm"]
    assert {
        "capacity_bytes",
        "weights_bytes",
        "kv_bytes",
        "activations_bytes",
        "used_bytes",
        "free_bytes",
    } <= set(hbm)
    assert hbm["used_bytes"] <= hbm["capacity_bytes"]
    dot = to_dot(result)
    assert dot.startswith("digraph") and '"moe.router"' in dot and "allreduce" in dot

    prefill = api.inspect_graph(load_scenario(SNAP), phase="prefill", batch=1, tokens=50000)
    names = [k["name"] for k in prefill["kernels"]]
    assert [n for n in names if n.startswith("snapkv")] == list(SELECTION)
