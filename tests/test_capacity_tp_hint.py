"""A capacity error suggests more tp only where it shrinks what overflows: a GQA cache
splits by KV head, so past its KV heads each device holds a copy (Qwen3's 4 KV heads at
tp=16), while the weights and an unsplit cache do shrink."""

from __future__ import annotations

from click.testing import CliRunner

from rdu_sim.cli.main import cli


def _error(*args: str) -> str:
    result = CliRunner().invoke(cli, ["run", *args])
    assert result.exit_code == 2, result.output
    return " ".join(result.output.split())


def test_no_more_tp_when_the_kv_heads_are_split_as_far_as_they_go() -> None:
    said = _error("qwen3-235b-a22b-16socket", "--set", "serving.batch_slots=64")
    assert "the KV cache of 64 slots (94 GiB: a slot of max_context 32768 tokens" in said
    assert "parallelism.tp" not in said
    assert said.endswith(
        "reduce serving.max_context (now 32768), use kv.policy snapstream (now full) or "
        "store the KV cache in fp8 (dtypes.kv, now bf16) (from --set serving.batch_slots)"
    )


def test_more_tp_while_the_kv_heads_are_not_yet_split() -> None:
    said = _error("llama3.1-8b-1socket", "--set", "serving.batch_slots=4096")
    assert "or raise parallelism.tp on more sockets (hw.system.sockets, now 1," in said
