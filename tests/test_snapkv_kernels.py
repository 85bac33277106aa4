"""The SnapKV selection's kernels compiled and run: what each socket moves and exchanges
under each TP layout, the window queries the prefill stashes, what separates a compressing
prefill from full attention's, kernel boundaries, and the GPU engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rdu_sim import api
from rdu_sim.compiler import Compiler
from rdu_sim.compiler.program import KernelProgram, Program, StageProgram
from rdu_sim.config.architecture import DeepSeekArchitecture
from rdu_sim.scenario import Scenario, load_scenario
from rdu_sim.shapes import StepShape

REPO = Path(__file__).resolve().parents[1]
SNAP = REPO / "workloads" / "deepseek-r1-128k-snapstream.yaml"
FULL = REPO / "workloads" / "deepseek-r1-128k-full.yaml"
LLAMA = REPO / "workloads" / "llama3.1-8b-8socket.yaml"
SELECTION = ("snapkv_score", "snapkv_topk", "snapkv_compact")
PROMPT = 6000  # above a 4,096-token budget
SMALL = {"serving.batch_slots": 4, "kv.budget": 4096, "kv.compression_ratio": None}


def _deepseek(path: Path = SNAP, **overrides: Any) -> Scenario:
    return load_scenario(path, {**SMALL, **overrides} if path == SNAP else overrides)


def _program(scenario: Scenario, prompt: int = PROMPT) -> Program:
    return Compiler(scenario).program(StepShape("prefill", 1, prompt, 0))


def _kernels(program: Program) -> dict[str, KernelProgram]:
    return {k.name: k for k in program.kernels}


def _stage(kernel: KernelProgram, name: str) -> StageProgram:
    return next(s for s in kernel.stages if s.name == name)


def _collectives(program: Program) -> dict[str, tuple[str, float, int]]:
    return {
        s.name: (s.collective.kind, s.collective.bytes, s.collective.group)
        for k in program.kernels
        if k.name.startswith("snapkv")
        for s in k.stages
        if s.collective is not None
    }


def test_mla_sequence_split_exchanges_queries_statistics_and_scores() -> None:
    scenario = _deepseek()
    arch = scenario.model
    assert isinstance(arch, DeepSeekArchitecture)
    w, h, tp = 32, arch.heads, scenario.tp
    assert _collectives(_program(scenario)) == {
        # every socket scores its keys for every head: the absorbed queries of all heads
        "snapkv.score.query_allgather": (
            "allgather",
            w * h * (arch.kv_lora_rank + arch.qk_rope_head_dim) * 2,
            tp,
        ),
        # rows split by key: their max and sum of exponentials
        "snapkv.softmax.allreduce": ("allreduce", h * w * 2 * 4, tp),
        # every socket selects from all the prompt's scores
        "snapkv.head_sum.allgather": ("allgather", PROMPT * 4, tp),
    }


@pytest.mark.parametrize("layout", ["replicated", "head_split"])
def test_mla_heads_split_all_reduces_the_head_sum(layout: str) -> None:
    scenario = _deepseek(**{"parallelism.mla_cache_layout": layout, "serving.batch_slots": 1})
    assert _collectives(_program(scenario)) == {
        "snapkv.head_sum.allreduce": ("allreduce", PROMPT * 4, scenario.tp)
    }


def test_gqa_sums_a_group_over_the_sockets_sharing_its_kv_head() -> None:
    snap = {"kv.policy": "snapstream", "kv.budget": 4096, "serving.batch_slots": 2}
    eight = load_scenario(LLAMA, snap)  # tp 8 = kv heads: each socket holds whole groups
    assert _collectives(_program(eight)) == {}
    sixteen = load_scenario(
        LLAMA,
        {**snap, "hardware": str(REPO / "hw_configs" / "sn40l-16.yaml"), "parallelism.tp": 16},
    )
    # 8 KV heads over 16 sockets: two sockets share each, and sum their halves of its group
    assert _collectives(_program(sixteen)) == {
        "snapkv.group_sum.allreduce": ("allreduce", PROMPT * 4, 2)
    }


def test_compaction_moves_the_kept_tokens_both_ways() -> None:
    scenario = _deepseek()
    arch = scenario.model
    assert isinstance(arch, DeepSeekArchitecture)
    compact = _stage(_kernels(_program(scenario))["snapkv_compact"], "snapkv.compact")
    per_socket = 4096 * (arch.kv_lora_rank + arch.qk_rope_head_dim) * 2 / scenario.tp
    indices = (4096 - 4 - 2048) * 4 / scenario.tp  # its share of the top-K indices
    assert compact.writes == {"hbm": per_socket}
    assert compact.reads == {"hbm": per_socket + indices}


def test_the_prefill_stashes_the_window_queries_and_nothing_else_changes() -> None:
    arch = _deepseek().model
    assert isinstance(arch, DeepSeekArchitecture)
    snap = _kernels(_program(_deepseek()))
    full = _kernels(_program(_deepseek(FULL, **{"serving.batch_slots": 4})))
    assert [n for n in snap if n not in full] == list(SELECTION)
    assert [n for n in full if n not in snap] == []
    tp = 16
    stashed = {
        "attn.q_b_proj": 32 * arch.heads * arch.qk_nope_head_dim * 2 / tp,
        "attn.rope_q": 32 * arch.heads * arch.qk_rope_head_dim * 2 / tp,
    }
    for name in ("decoder_dense", "decoder_moe"):
        for s, f in zip(snap[name].stages, full[name].stages, strict=True):
            extra = s.writes.get("hbm", 0.0) - f.writes.get("hbm", 0.0)
            assert extra == stashed.get(s.name, 0.0), (name, s.name)
            assert (s.reads, s.flops, s.vector_flops) == (f.reads, f.flops, f.vector_flops)
    score = snap["snapkv_score"]
    assert _stage(score, "snapkv.q_absorb").reads["hbm"] == pytest.approx(
        sum(stashed.values()) + arch.heads * arch.qk_nope_head_dim * arch.kv_lora_rank / tp,
        rel=1e-3,  # the W_UK half of kv_b_proj, FP8 with its block scales
    )


def _step(scenario: Scenario, prompt: int = PROMPT) -> dict[str, Any]:
    timing = api.step(scenario, phase="prefill", batch=1, tokens=prompt).detail
    data: dict[str, Any] = timing.to_dict()
    return data


@pytest.mark.parametrize("looping", [True, False])
def test_a_compressing_prefill_costs_full_attention_plus_its_selection_kernels(
    looping: bool,
) -> None:
    loop = {"kernel_looping": looping}
    snap = _step(_deepseek(**loop))
    full = _step(_deepseek(FULL, **{"serving.batch_slots": 4, **loop}))
    selection = {k["name"]: k for k in snap["kernels"] if k["name"] in SELECTION}
    assert list(selection) == list(SELECTION)
    for kernel in snap["kernels"]:
        if kernel["name"] not in SELECTION:
            other = next(k for k in full["kernels"] if k["name"] == kernel["name"])
            assert kernel["time_s"] == pytest.approx(other["time_s"], rel=1e-9)
    extra = sum(k["time_s"] for k in selection.values())
    assert snap["step_s"] - full["step_s"] == pytest.approx(extra, rel=1e-9)
    hw = _deepseek().hardware.socket.kernel
    boundary = hw.program_load + hw.argument_load + hw.sync
    layers = _deepseek().model.layers
    for kernel in selection.values():  # a kernel boundary each, or one a layer unlooped
        assert kernel["calls"] == layers and kernel["looped"] == looping
        boundaries = 1 if looping else layers
        assert kernel["overhead_s"] == pytest.approx(boundaries * boundary)
        assert kernel["time_s"] > kernel["overhead_s"]


def test_the_gpu_engine_runs_the_selection_kernels() -> None:
    gpu = {
        "hardware": str(REPO / "hw_configs" / "dgx-h100.yaml"),
        "stack": "tensorrt-llm",
        "serving.batch_slots": 2,
        "kv.budget": 4096,
    }
    scenario = load_scenario(LLAMA, {**gpu, "kv.policy": "snapstream"})
    snap = _step(scenario)
    full = _step(load_scenario(LLAMA, {**gpu, "kv.policy": "full"}))
    selection = [k for k in snap["kernels"] if k["name"].split(":")[0] in SELECTION]
    # the GPU's fusion splits them: a kernel per radix pass, the score with its softmax
    names = [k["name"] for k in selection]
    assert "snapkv_score:snapkv.score" in names and "snapkv_compact:snapkv.compact" in names
    assert [n for n in names if n.startswith("snapkv_topk:snapkv.topk.")] == [
        f"snapkv_topk:snapkv.topk.{p}" for p in ("digit1", "digit2", "digit3", "digit4", "gather")
    ]
    assert all(k["time_s"] > 0 and not k["looped"] for k in selection)
    device = {k["name"]: k["time_s"] for k in full["kernels"]}
    arch, hbm = scenario.model, scenario.hardware.hbm
    stash = 32 * arch.heads * arch.head_dim * 2 / scenario.tp  # the window queries a layer
    stashing = 0.0
    for kernel in snap["kernels"]:
        if kernel["name"] == "decoder:attn.q_proj":  # q_proj with its RoPE, which stashes
            stashing = kernel["time_s"] - device[kernel["name"]]
            assert 0 < stashing <= kernel["calls"] * stash / (hbm.bandwidth * hbm.efficiency)
        elif kernel["name"] in device:
            assert kernel["time_s"] == pytest.approx(device[kernel["name"]], rel=1e-9)
    extra = sum(k["time_s"] for k in selection) + stashing
    assert snap["step_s"] - full["step_s"] == pytest.approx(extra, rel=1e-9)


def test_the_radix_passes_reread_the_candidates_on_chip() -> None:
    """On SN40L the top-K kernel holds the pooled candidates in its PMUs: only the scores
    come in from HBM and only the indices go out."""
    topk = _kernels(_program(_deepseek()))["snapkv_topk"]
    assert _stage(topk, "snapkv.pool").reads == {"hbm": PROMPT * 4}
    assert _stage(topk, "snapkv.topk.gather").writes == {"hbm": (4096 - 4 - 2048) * 4}
    passes = [s for s in topk.stages if s.op == "topk"]
    assert len(passes) == 5 and all(s.whole_row_outputs == 1 for s in passes)
    assert all(not s.reads for s in passes)
