"""What a step reports of its work beside its time (`compiler.step_work`): the model's own
FLOPs next to a socket's (which hold the work repeated on several sockets), and the routed
experts each MoE layer streams."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rdu_sim import api, human
from rdu_sim.cli.main import cli
from rdu_sim.models import decode_flops_per_token

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "workloads"
LLAMA8 = str(WORKLOADS / "llama3.1-8b-8socket.yaml")
DEEPSEEK = str(WORKLOADS / "deepseek-r1-128k-full.yaml")
QWEN = str(WORKLOADS / "qwen3-235b-a22b-16socket.yaml")
MTP = str(WORKLOADS / "speculative" / "deepseek-r1-16socket-mtp.yaml")


def _step(*args: str) -> tuple[dict[str, Any], str]:
    """The step's JSON, and its console text (a wide terminal: one line a sentence)."""
    runner = CliRunner()
    result = runner.invoke(cli, ["step", *args, "--json"])
    assert result.exit_code == 0, result.output
    text = runner.invoke(cli, ["step", *args], env={"COLUMNS": "400"})
    assert text.exit_code == 0, text.output
    return json.loads(result.stdout), text.stdout


def _line(text: str, start: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(start))


def test_a_split_model_has_no_repeated_work() -> None:
    """Llama 3.1 8B on 8 sockets splits every product (8 KV heads on 8 sockets): a socket's
    FLOPs are the model's own over 8, which are the hand count, and the model FLOP/s share
    is the matrix FLOP/s share."""
    data, text = _step(LLAMA8, "--batch", "4")
    arch = api.load(LLAMA8).model
    assert data["model_flops"] == 4 * decode_flops_per_token(arch, data["context"] + 1)
    assert data["model_flops"] == pytest.approx(8 * data["flops"], rel=1e-12)
    assert data["model_flops_fraction"] == pytest.approx(data["flops_fraction"], rel=1e-12)
    assert "no work repeated on every socket" in _line(text, "matrix FLOPs")
    assert "experts" not in data


def test_deepseek_prefill_repeats_work_on_every_socket() -> None:
    """MLA's down-projections and the router run whole on each of the 16 sockets: a socket
    multiplies more than its share of the model. The model's own FLOPs are the model's,
    whatever the split: the same on 8 sockets (the weights streamed from DDR to fit), where
    a socket's repeated work is a smaller part. No simulated time moves for the report."""
    args = ("--phase", "prefill", "--tokens", "1024")
    sixteen, text = _step(DEEPSEEK, *args)
    eight, _ = _step(
        DEEPSEEK, *args, "--set", "parallelism.tp=8", "--set", "memory.weights=streamed"
    )
    assert sixteen["model_flops"] == eight["model_flops"]
    share16 = sixteen["model_flops"] / 16 / sixteen["flops"]
    share8 = eight["model_flops"] / 8 / eight["flops"]
    assert share16 < share8 < 1
    assert sixteen["model_flops_fraction"] == pytest.approx(
        sixteen["flops_fraction"] * share16, rel=1e-12
    )
    line = _line(text, "matrix FLOPs")
    assert "work repeated on several sockets (what TP does not split" in line
    assert f"({share16 * 100:.1f}%)" in line
    assert sixteen["step_s"] == api.step(DEEPSEEK, phase="prefill", tokens=1024).step_s


def test_routed_loading_says_the_expected_distinct_experts() -> None:
    """Qwen3-235B at batch 4 under routed loading: each MoE layer streams the experts 4
    tokens x 8 touch under uniform routing, 128 (1 - (1 - 8/128)^4) = 29.1 of 128."""
    data, text = _step(QWEN, "--batch", "4")
    expected = 128 * (1 - (1 - 8 / 128) ** 4)
    assert data["experts"]["loading"] == "routed"
    ((routing),) = data["experts"]["routings"]
    assert routing["tokens"] == 4 and routing["count"] == 1
    assert routing["expected_distinct"] == pytest.approx(expected, rel=1e-12)
    assert routing["streamed"] == routing["expected_distinct"]
    line = _line(text, "routed experts")
    assert "streams 29.1 of its 128 experts" in line and "4 tokens x 8" in line


@pytest.mark.parametrize(
    ("batch", "loading", "streamed", "words"),
    [
        (4, "static", 32, "gathers the worst case of expert slots after the router, 32 of 256"),
        (64, "all", 256, "streams every expert, prefetched: all 256"),
    ],
)
def test_static_loading_says_the_slots_and_the_expected_experts(
    batch: int, loading: str, streamed: int, words: str
) -> None:
    """DeepSeek-R1 under static loading: at batch 4 the gather of min(256, 4 x 8) = 32 slots
    where uniform routing touches 256 (1 - (1 - 8/256)^4) = 30.53; at batch 64 every
    expert (the compiler's choice, ``expert_schedule``)."""
    data, text = _step(MTP, "--set", "speculation=null", "--batch", str(batch))
    assert data["experts"]["loading"] == loading
    assert data["expert_schedule"] == ("gather" if loading == "static" else "all")
    ((routing),) = data["experts"]["routings"]
    assert routing["streamed"] == streamed
    expected = 256 * (1 - (1 - 8 / 256) ** (batch))
    assert routing["expected_distinct"] == pytest.approx(expected, rel=1e-12)
    line = _line(text, "routed experts (static loading)")
    assert words in line and f"{expected:,.1f}".removesuffix(".0") in line


def test_inspect_graph_says_the_same() -> None:
    """`inspect graph --json` carries the step's experts and model FLOPs too."""
    graph = api.inspect_graph(QWEN, batch=4)
    data, _ = _step(QWEN, "--batch", "4")
    assert graph["experts"] == data["experts"]
    assert graph["totals"]["model_flops"] == data["model_flops"]
    assert api.inspect_graph(LLAMA8, batch=4)["experts"] is None


def test_whole_experts_say_a_device_streams_its_own() -> None:
    """Qwen3-235B's experts whole over the 16 sockets (8 each): the layer-wide count stands,
    and the line says a device streams its own among them; a socket's FLOPs then hold the
    busiest socket's extra share too."""
    data, text = _step(QWEN, "--batch", "4", "--set", "parallelism.moe_experts=expert")
    assert data["experts"]["whole_over_devices"] == 16
    line = _line(text, "routed experts")
    assert "streams 29.1 of its 128 experts" in line
    assert line.endswith(
        "whole experts over 16 devices, 8 each: a device streams its own among them"
    )
    assert "the busiest device's extra share of whole experts" in _line(text, "matrix FLOPs")


def test_experts_paced_by_the_busiest_device_say_its_reads() -> None:
    """DeepSeek-V3 over 72 H100s, every rank's tokens exchanged all-to-all: one rank's rows
    do not say what a layer streams, so no ``experts``; the line gives the busiest device's
    reads and pairs from ``expert_balance``."""
    ep72 = str(WORKLOADS / "ep" / "deepseek-v3-h100-ep72-decode.yaml")
    data, text = _step(ep72)
    assert "experts" not in data
    balance = data["expert_balance"]
    line = _line(text, "routed experts (whole, paced by the busiest device)")
    assert f"it reads {human.number(balance['busiest_experts_read'])} experts a MoE layer" in line
    assert f"({human.ratio(balance['imbalance'])}; expert_balance)" in line
