"""Fusion levels: one operator per kernel (none), GPU stacks' fusions (partial), a layer per
kernel (full); the same work at every level, more off-chip traffic the less is fused."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdu_sim.api import inspect_graph
from rdu_sim.compiler import Compiler, plan_memory
from rdu_sim.compiler.fusion import fusion_level, layer_graphs
from rdu_sim.compiler.fusion_levels import resolve_level
from rdu_sim.compiler.program import KernelProgram, Program, operational_intensity
from rdu_sim.graph import operators
from rdu_sim.scenario import Scenario, load_scenario
from rdu_sim.shapes import StepShape

REPO = Path(__file__).resolve().parents[1]
LLAMA = REPO / "workloads" / "llama3.1-8b-8socket.yaml"
DEEPSEEK = REPO / "workloads" / "deepseek-r1-128k-snapstream.yaml"
LEVELS = ("none", "partial", "full")
SHAPES = (StepShape("decode", 8, 1, 4096), StepShape("prefill", 1, 2048, 0))


def scenario(path: Path, fusion: str, **overrides: object) -> Scenario:
    return load_scenario(path, {"fusion": fusion, **overrides})


def layer_kernels(program: Program, layer: str) -> list[KernelProgram]:
    """The kernels of one layer kernel (its split parts below full fusion)."""
    return [k for k in program.kernels if (k.layer or k.name) == layer]


def offchip(kernels: list[KernelProgram]) -> float:
    total = sum(v for k in kernels for t, v in k.bytes_by_tier().items() if t in ("hbm", "ddr"))
    assert total == pytest.approx(sum(k.offchip_bytes for k in kernels), rel=1e-12)
    return total


def intensity(kernels: list[KernelProgram]) -> float:
    """FLOPs per off-chip byte of a layer (all its calls), by hand."""
    value = sum(k.flops for k in kernels) / offchip(kernels)
    assert operational_intensity(kernels) == pytest.approx(value, rel=1e-12)
    return value


@pytest.mark.parametrize("path", [LLAMA, DEEPSEEK], ids=["llama", "deepseek"])
@pytest.mark.parametrize("shape", SHAPES, ids=["decode", "prefill"])
def test_none_is_one_kernel_per_operator(path: Path, shape: StepShape) -> None:
    s = scenario(path, "none")
    compiler = Compiler(s)
    program = compiler.program(shape)
    whole, replicate = compiler.queries(shape, compiler.plan_slots(shape))  # MLA's: its plan's
    for group, sharded in layer_graphs(s, shape, whole_queries=whole, replicate_queries=replicate):
        # the unfused, sharded layer: attention not fused, collectives spliced in
        ops = [n for n in operators(sharded) if n.kind != "kv_read"]
        kernels = layer_kernels(program, group.name)
        assert [k.name for k in kernels] == [f"{group.name}:{n.name}" for n in ops]
        for kernel, node in zip(kernels, ops, strict=True):
            work = [st for st in kernel.stages if st.op != "kv_read"]
            assert [st.name for st in work] == [node.name]
            assert kernel.calls == group.count and not kernel.looped


@pytest.mark.parametrize("path", [LLAMA, DEEPSEEK], ids=["llama", "deepseek"])
@pytest.mark.parametrize("shape", SHAPES, ids=["decode", "prefill"])
def test_less_fusion_lowers_intensity_and_keeps_the_work(path: Path, shape: StepShape) -> None:
    programs = {level: Compiler(scenario(path, level)).program(shape) for level in LEVELS}
    full = programs["full"]
    for layer in (k.name for k in full.kernels if k.name.startswith("decoder")):
        kernels = {level: layer_kernels(p, layer) for level, p in programs.items()}
        # FLOPs and weight reads are the same whatever the fusion
        flops = {level: sum(k.flops for k in ks) for level, ks in kernels.items()}
        assert flops["none"] == pytest.approx(flops["full"], rel=1e-12)
        assert flops["partial"] == pytest.approx(flops["full"], rel=1e-12)
        # intermediates crossing kernel boundaries go to HBM and back: more bytes, lower OI
        assert offchip(kernels["none"]) > offchip(kernels["partial"]) > offchip(kernels["full"])
        assert (
            intensity(kernels["none"]) < intensity(kernels["partial"]) < intensity(kernels["full"])
        )


def test_partial_makes_the_gpu_stacks_kernels() -> None:
    program = Compiler(scenario(LLAMA, "partial")).program(SHAPES[0])
    stages = {k.name: [s.name for s in k.stages] for k in layer_kernels(program, "decoder")}
    assert stages == {
        "decoder:attn_norm": ["attn_norm"],
        "decoder:attn.q_proj": [  # merged projections with RoPE and the cache write
            "attn.q_proj",
            "attn.k_proj",
            "attn.v_proj",
            "attn.rope_q",
            "attn.rope_k",
            "attn.kv_write",
        ],
        "decoder:attn.flash": ["attn.kv_read", "attn.flash"],  # flash attention
        "decoder:attn.o_proj": ["attn.o_proj"],
        "decoder:attn.o_proj.allreduce": ["attn.o_proj.allreduce"],
        "decoder:attn.residual": ["attn.residual", "ffn_norm"],  # fused add-norm
        "decoder:ffn.gate_proj": ["ffn.gate_proj", "ffn.up_proj", "ffn.silu_mul"],
        "decoder:ffn.down_proj": ["ffn.down_proj"],
        "decoder:ffn.down_proj.allreduce": ["ffn.down_proj.allreduce"],
        "decoder:ffn.residual": ["ffn.residual"],
    }


def test_unfused_attention_writes_its_scores_and_reads_the_cache_in_parts() -> None:
    shape = SHAPES[0]
    none = Compiler(scenario(LLAMA, "none")).program(shape)
    full = Compiler(scenario(LLAMA, "full")).program(shape)
    kernels = {k.name: k for k in none.kernels}
    score, value = kernels["decoder:attn.score"], kernels["decoder:attn.value"]
    softmax = kernels["decoder:attn.softmax"]
    # the FP32 scores leave the chip and the softmax reads them back
    assert score.bytes_by_tier()["hbm"] > 0 and softmax.bytes_by_tier()["hbm"] > 0
    # the score reads the keys, the value the values: the cache is read once in total
    kv = [st.reads["hbm"] for k in (score, value) for st in k.stages if st.op == "kv_read"]
    assert len(kv) == 2 and kv[0] == pytest.approx(kv[1])
    full_kv = sum(st.reads["hbm"] for k in full.kernels for st in k.stages if st.op == "kv_read")
    assert sum(kv) == pytest.approx(full_kv)  # per call


def test_looping_only_on_full_and_auto_by_hardware() -> None:
    s = scenario(LLAMA, "full")
    assert any(k.looped for k in Compiler(s).program(SHAPES[0]).kernels)
    for level in ("none", "partial"):
        assert not any(
            k.looped for k in Compiler(scenario(LLAMA, level)).program(SHAPES[0]).kernels
        )
    assert fusion_level(scenario(LLAMA, "auto")) == "full"
    gpu = scenario(LLAMA, "auto", hardware=str(REPO / "hw_configs" / "dgx-h100.yaml"))
    assert fusion_level(gpu) == "partial"
    assert resolve_level("auto", gpu=True) == "partial"
    with pytest.raises(ValueError, match="unknown fusion level"):
        resolve_level("some", gpu=False)


def test_memory_plan_does_not_depend_on_fusion() -> None:
    plans = [plan_memory(scenario(DEEPSEEK, level), 4) for level in LEVELS]
    assert plans[0].tiers == plans[1].tiers == plans[2].tiers
    tensors = [sorted(p.tensors, key=lambda t: (t.name, t.tier)) for p in plans]
    assert tensors[0] == tensors[1] == tensors[2]


def test_inspect_graph_reports_intensity_per_kernel_and_per_layer() -> None:
    results = {
        level: inspect_graph(scenario(LLAMA, level), phase="prefill", tokens=2048)
        for level in LEVELS
    }
    layer = {
        level: next(x for x in r["layers"] if x["name"] == "decoder")
        for level, r in results.items()
    }
    assert [results[level]["fusion"] for level in LEVELS] == list(LEVELS)
    assert layer["none"]["kernels"] > layer["partial"]["kernels"] > layer["full"]["kernels"] == 1
    values = [layer[level]["operational_intensity"] for level in LEVELS]
    assert values[0] < values[1] < values[2]
    assert layer["full"]["flops_per_call"] == pytest.approx(layer["none"]["flops_per_call"])
    for record in results["none"]["kernels"]:
        moved = record["offchip_bytes_per_step"]
        if record["operational_intensity"] is None:
            assert moved == 0
        else:
            assert record["operational_intensity"] == pytest.approx(
                record["flops_per_step"] / moved
            )
    # the DOT graph is the whole layer at every level
    names = {n["name"] for n in results["partial"]["graph"]["nodes"]}
    assert {"attn.flash", "ffn.down_proj", "attn.o_proj.allreduce"} <= names
