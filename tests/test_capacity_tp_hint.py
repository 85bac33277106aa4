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
        "reduce serving.max_context (now 32768), use kv.policy snapstream (now full), "
        "store the KV cache in fp8 (dtypes.kv, now bf16) or give each socket more HBM "
        "(hw.socket.hbm.capacity, now 64 GiB) (from --set serving.batch_slots)"
    )


def test_more_tp_while_the_kv_heads_are_not_yet_split() -> None:
    said = _error("llama3.1-8b-1socket", "--set", "serving.batch_slots=4096")
    assert ", raise parallelism.tp on more sockets (hw.system.sockets, now 1," in said


def test_a_fixed_slot_below_the_context_is_shrunk_by_its_budget_alone() -> None:
    """SnapStream's and StreamingLLM's slot is their budget, below the context: a shorter
    context (until below the budget) or a switch to SnapStream at that budget keeps the slot
    as it is, so only the budget is offered; before, "reduce serving.max_context (now
    131072)" stood beside "lower kv.budget (now 32768)"."""
    said = _error("deepseek-r1-128k-snapstream", "--set", "serving.batch_slots=4096")
    assert "a slot of 32768 tokens, kv.budget 32768 of kv.policy snapstream" in said
    assert "lower kv.budget (now 32768), store the KV cache in fp8" in said
    assert "max_context" not in said.split("lower serving.batch_slots")[1]
    said = _error(
        "llama3.1-8b-1socket",
        *("--set", "kv.policy=streamingllm", "--set", "serving.max_context=32768"),
        *("--set", "serving.batch_slots=1024"),
    )
    assert "lower kv.budget (now 2052), store the KV cache in fp8" in said
    assert "kv.policy snapstream" not in said and "reduce serving.max_context" not in said
