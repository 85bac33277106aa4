"""`rdu-sim step`'s words name the device and the model's own repeated parts, round expert
counts to one decimal, and give the kernel table's columns a legend."""

from __future__ import annotations

from click.testing import CliRunner

from rdu_sim.cli.main import cli


def _step(*args: str) -> str:
    result = CliRunner().invoke(cli, ["step", *args])
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.split())


def test_a_gqa_moe_model_names_its_own_repeated_parts_not_mla() -> None:
    said = _step("qwen3-235b-a22b-16socket")
    assert "q_a_proj" not in said
    assert (
        "work repeated on several sockets (what TP does not split: the MoE router, its 4 K/V "
        "heads over 16 sockets; docs/architecture.md)"
    ) in said
    assert "streams 82.4 of its 128 experts" in said  # one decimal, not 82.40
    assert "loop: a looped kernel, one call running its layers in an on-chip loop;" in said
    assert "sim: the calls or layer iterations the engine simulated" in said


def test_a_gpu_step_says_gpu() -> None:
    said = _step("llama3.1-70b-decode", "--set", "hardware=dgx-h100-vllm")
    assert (
        "matrix FLOPs 642 GFLOP a GPU, all its share of the model's (no work repeated on every GPU)"
    ) in said
    assert "bytes and busy units (per GPU)" in said and "per socket" not in said
