"""The compiler and engine on the new families: kernels per run of layers, sliding-window
caches in the memory plan and the KV policies, and the shipped GQA+MoE workloads."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.compiler import Compiler, kv_slot_bytes_per_socket
from rdu_sim.compiler.placement import kv_bytes, slot_tokens
from rdu_sim.kv import make_policy
from rdu_sim.models import get_model, layer_kinds
from rdu_sim.scenario import Scenario, build_scenario, load_scenario
from rdu_sim.shapes import StepShape

REPO = Path(__file__).resolve().parents[1]
GPT_OSS = REPO / "workloads" / "gpt-oss-120b-8socket.yaml"
QWEN = REPO / "workloads" / "qwen3-235b-a22b-16socket.yaml"


def _scenario(model: Any, **serving: Any) -> Scenario:
    return build_scenario(
        {
            "hardware": str(REPO / "hw_configs" / "sn40l-8.yaml"),
            "model": model,
            "parallelism": {"tp": 8},
            "serving": {"batch_slots": 8, "max_context": 16384, **serving},
        },
        workload_file=str(REPO / "workloads" / "x.yaml"),
    )


def _all_full(name: str) -> dict[str, Any]:
    """The preset with every layer full attention (no window), as an inline architecture."""
    data = get_model(name).model_dump()
    data["layer_types"] = ["full_attention"] * data["layers"]
    return data


def test_gpt_oss_kernels() -> None:
    scenario = load_scenario(GPT_OSS, {"serving.batch_slots": 16})
    program = Compiler(scenario).program(StepShape("decode", 16, 1, 32768))
    kernels = [(k.name, k.calls, k.looped) for k in program.kernels]
    assert kernels == [
        ("embedding", 1, False),
        ("decoder_sliding+full", 18, True),
        ("lm_head", 1, False),
    ]
    body = {s.name for s in program.kernels[1].stages}
    assert {"l0.attn.flash", "l1.attn.flash", "l0.moe.combine.allreduce"} <= body
    assert not any(name.endswith(("attn.score", "attn.softmax")) for name in body)


def test_gpt_oss_released_dtypes_reach_the_plan() -> None:
    scenario = load_scenario(GPT_OSS)
    assert (scenario.weight_dtype, scenario.expert_dtype) == ("bf16", "mxfp4")
    placement = Compiler(scenario).placement(16)
    weights = placement.tiers["hbm"].weights_bytes + placement.tiers["ddr"].weights_bytes
    # the checkpoint (60.8 GiB, gpt-oss card) over 8 sockets, the replicated norms, router
    # and embedding table counted on every socket
    assert 60.8 * 2**30 / 8 < weights < 60.8 * 2**30 / 8 + 2.0 * 2**30


def test_sliding_window_kv_in_the_plan_and_the_policy() -> None:
    """Three ways to the slot's bytes agree: the layout, the policy's per-layer slot, and
    the count written out (18 full layers of 16384 tokens, 18 rings of 127)."""
    scenario = load_scenario(GPT_OSS, {"serving.max_context": 16384})
    per_token = 2 * 1 * 64 * 2  # K and V of the one KV head on each of 8 sockets, BF16
    slot = kv_slot_bytes_per_socket(scenario, slot_tokens(scenario))
    assert slot == (18 * 16384 + 18 * 127) * per_token
    policy = make_policy(scenario.workload.kv, 16384)
    by_policy = sum(policy.layer_slot_tokens(kind.window) for kind in layer_kinds(scenario.model))
    assert slot == by_policy * per_token
    assert kv_bytes(scenario, 10) == 10 * slot


def test_windows_raise_the_batch_capacity() -> None:
    windowed = Compiler(_scenario("gpt-oss-20b")).batch_capacity()
    full = Compiler(_scenario(_all_full("gpt-oss-20b"))).batch_capacity()
    assert windowed > 1.8 * full  # half the layers hold 127 tokens instead of 16384


@pytest.mark.parametrize(
    ("kv", "kernels"),
    [
        ({"policy": "snapstream", "budget": 4096}, {"": 12}),
        ({"policy": "snapstream", "budget": 64, "recent": 32}, {"_window128": 12, "": 12}),
        ({"policy": "full"}, {}),
    ],
)
def test_selection_runs_on_the_layers_it_compresses(
    kv: dict[str, Any], kernels: dict[str, int]
) -> None:
    """A window no longer than what the policy keeps is never compressed."""
    scenario = build_scenario(
        {
            "hardware": str(REPO / "hw_configs" / "sn40l-8.yaml"),
            "model": "gpt-oss-20b",
            "parallelism": {"tp": 8},
            "kv": kv,
            "serving": {"batch_slots": 4, "max_context": 16384},
        },
        workload_file=str(REPO / "workloads" / "x.yaml"),
    )
    program = Compiler(scenario).program(StepShape("prefill", 1, 8192, 0))
    select = {k.name: k.calls for k in program.kernels if k.name.startswith("snapkv")}
    assert select == {
        f"snapkv_{kernel}{suffix}": calls
        for suffix, calls in kernels.items()
        for kernel in ("score", "topk", "compact")
    }


def test_decode_step_respects_the_hbm_roofline() -> None:
    scenario = load_scenario(GPT_OSS, {"serving.batch_slots": 64})
    cost = api.step(scenario, batch=64, context=8192)
    program = Compiler(scenario).program(StepShape("decode", 64, 1, 8192))
    hbm = scenario.hardware.socket.hbm
    assert cost.step_s >= program.bytes_by_tier()["hbm"] / hbm.bandwidth
    assert cost.step_s < 1.0


def test_looping_the_two_layer_body_pays_off() -> None:
    """The looped body pipelines layer into layer; unlooped, each call starts empty."""
    looped = api.step(load_scenario(GPT_OSS, {"serving.batch_slots": 8}), batch=8, context=4096)
    unlooped = api.step(
        load_scenario(GPT_OSS, {"serving.batch_slots": 8, "kernel_looping": False}),
        batch=8,
        context=4096,
    )
    assert looped.step_s < unlooped.step_s


def test_run_gpt_oss_on_eight_sockets() -> None:
    """The shipped GQA+MoE workload runs end to end (fewer requests, to stay quick)."""
    result = CliRunner().invoke(
        cli,
        [
            "run",
            str(GPT_OSS),
            "--json",
            "--set",
            "serving.requests=40",
            "--set",
            "serving.batch_slots=16",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["model"] == "gpt-oss-120b"
    assert data["requests_completed"] == 40
    assert data["tp"] == 8
    assert data["decode_tokens_per_s"] > 0
    assert math.isfinite(data["ttft_s"]["p50"])


def test_qwen3_235b_on_sixteen_sockets() -> None:
    scenario = load_scenario(QWEN)
    assert scenario.tp == 16 and scenario.hardware.system.sockets == 16
    compiler = Compiler(scenario)
    program = compiler.program(StepShape("decode", 8, 1, 32768))
    assert [(k.name, k.calls) for k in program.kernels] == [
        ("embedding", 1),
        ("decoder", 94),
        ("lm_head", 1),
    ]
    # 4 KV heads over 16 sockets: each socket holds one head, 4 sockets per head
    per_token = 94 * 2 * 1 * 128 * 2
    assert kv_slot_bytes_per_socket(scenario, 32768) == 32768 * per_token
    assert compiler.batch_capacity() >= 16
