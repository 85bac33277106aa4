"""One rule for the default step shape: `rdu-sim step` and `rdu-sim inspect graph` run the
same shape for the same options, a context the KV policy does not keep in full is said on
the output's face, and a context the workload cannot run exits 2 naming the option."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.scenario import load_scenario
from rdu_sim.serving.step_shape import (
    StepShapeError,
    context_note,
    decode_cache,
    default_step_shape,
)
from rdu_sim.shapes import StepShape

SNAP = "workloads/deepseek-r1-128k-snapstream.yaml"
LLAMA = "workloads/llama3.1-8b-1socket.yaml"


def _invoke(args: list[str]) -> Any:
    return CliRunner().invoke(cli, args)


def _step_json(args: list[str]) -> dict[str, Any]:
    result = _invoke(["step", *args, "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _inspect_shape(args: list[str]) -> dict[str, Any]:
    result = _invoke(["inspect", "graph", *args, "--json"])
    assert result.exit_code == 0, result.output
    shape: dict[str, Any] = json.loads(result.stdout)["shape"]
    return shape


def test_snapstream_step_at_a_context_beyond_its_slot_runs_the_slot() -> None:
    """The issue's traceback: `rdu-sim step SNAP --context 100000 --batch 4`. A sequence of
    100k tokens under SnapStream attends to its 32768-token slot: the same step as the
    default one, and `inspect graph` shows that shape too."""
    args = [SNAP, "--context", "100000", "--batch", "4"]
    long = _step_json(args)
    default = _step_json([SNAP, "--batch", "4"])
    assert (long["batch"], long["tokens"], long["context"]) == (4, 1, 32768)
    assert long["step_s"] == default["step_s"]
    assert _inspect_shape(args) == {
        "phase": "decode",
        "batch": 4,
        "tokens": 1,
        "cache_len": 32768,
    }
    for command in (["step", *args], ["inspect", "graph", *args]):
        result = _invoke(command)
        assert result.exit_code == 0, result.output
        assert "context 100,000 tokens: the snapstream slot keeps 32,768 of them" in result.stdout


@pytest.mark.parametrize(
    ("extra", "shape"),
    [
        ([], ("decode", 16, 1, 8192)),
        (["--context", "5000"], ("decode", 16, 1, 8192)),
        (["--context", "1000", "--batch", "3"], ("decode", 3, 1, 1024)),
        (["--phase", "prefill"], ("prefill", 1, 3072, 0)),
        (["--phase", "prefill", "--tokens", "700", "--context", "300"], ("prefill", 1, 700, 300)),
        # token counts as the config writes them (config.units.parse_tokens)
        (["--context", "1k", "--batch", "3"], ("decode", 3, 1, 1024)),
        (["--phase", "prefill", "--tokens", "2K", "--context", "1k"], ("prefill", 1, 2048, 1024)),
        # a decode's new tokens up to the longest sequence max_context holds
        (["--tokens", "4", "--context", "8189"], ("decode", 16, 4, 8192)),
    ],
)
def test_step_and_inspect_graph_run_one_shape(extra: list[str], shape: tuple[Any, ...]) -> None:
    """Differential: the shape `inspect graph` compiles is the one `step` times, for every
    option, and both are the rule's (Llama 8B: pow2 buckets from 1024, uniform prompts
    512..4096, so the typical prompt is 2304, a prefill run at its bucket of 3072)."""
    timing = _step_json([LLAMA, *extra])
    shown = _inspect_shape([LLAMA, *extra])
    assert (timing["phase"], timing["batch"], timing["tokens"], timing["context"]) == shape
    assert (shown["phase"], shown["batch"], shown["tokens"], shown["cache_len"]) == shape


def test_a_context_rounded_up_to_a_bucket_is_said() -> None:
    result = _invoke(["step", LLAMA, "--context", "5000"])
    assert result.exit_code == 0, result.output
    assert "context 5,000 tokens: rounded up to the decode bucket of 8,192" in result.stdout
    result = _invoke(["step", LLAMA, "--context", "8192"])
    assert "context 8,192" not in result.stdout  # the bucket itself: nothing to say


@pytest.mark.parametrize("command", [["step"], ["inspect", "graph"]])
@pytest.mark.parametrize(
    ("extra", "option", "words"),
    [
        (["--context", "200000"], "--context", "200000 tokens exceeds serving.max_context"),
        (
            ["--phase", "prefill", "--tokens", "8000", "--context", "500"],
            "--tokens",
            "prompt of 8000 tokens after 500 cached exceeds serving.max_context (8192)",
        ),
        (  # the trial's 4,096 new tokens on the default 8,192-token sequence
            ["--tokens", "4096"],
            "--tokens",
            "a decode of 4096 new tokens a slot on a sequence of 8192 tokens (its last token "
            "the first new one: 12287 in all) exceeds serving.max_context (8192)",
        ),
        (  # one past: the last of 5 new tokens on 8,189
            ["--tokens", "5", "--context", "8189"],
            "--tokens",
            "(its last token the first new one: 8193 in all) exceeds serving.max_context (8192)",
        ),
    ],
)
def test_a_step_the_workload_cannot_run_exits_2_naming_the_option(
    command: list[str], extra: list[str], option: str, words: str
) -> None:
    workload = SNAP if extra[1] == "200000" else LLAMA
    result = _invoke([*command, workload, *extra])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {workload}: {option}: ")
    assert words in result.stderr
    assert "Traceback" not in result.output


def test_decode_cache_rule() -> None:
    snap, llama = load_scenario(SNAP), load_scenario(LLAMA)
    assert decode_cache(snap) == decode_cache(snap, 32768)
    cache = decode_cache(snap, 100_000)
    assert (cache.context, cache.kept, cache.bucket) == (100_000, 32768, 32768)
    cache = decode_cache(llama, 3000)
    assert (cache.kept, cache.bucket) == (3000, 4096)
    assert decode_cache(llama).bucket == 8192
    with pytest.raises(StepShapeError) as info:
        decode_cache(llama, 8193)
    assert info.value.option == "context"
    assert context_note(llama, 4096) is None and context_note(llama, None) is None


def test_default_shape_asks_the_batch_slots_only_for_a_decode_without_batch() -> None:
    llama = load_scenario(LLAMA)

    def never() -> int:
        raise AssertionError("batch slots asked for")

    assert default_step_shape(llama, never, "decode", batch=2) == StepShape("decode", 2, 1, 8192)
    assert default_step_shape(llama, never, "prefill").phase == "prefill"
    assert default_step_shape(llama, lambda: 7, "decode") == StepShape("decode", 7, 1, 8192)
    with pytest.raises(StepShapeError, match="phase must be"):
        default_step_shape(llama, never, "verify")
    # api.default_step_shape is the same rule with the backend's batch slots
    assert api.default_step_shape(llama, "decode") == StepShape("decode", 16, 1, 8192)


def test_a_snapkv_decode_above_its_budget_says_it_takes_the_worst_case() -> None:
    """What SnapKV keeps of a sequence above its budget depends on its prompt: the step
    attends to the whole context and says so, at a given context and at the default one;
    at or below the budget it has nothing to add."""
    snapkv = load_scenario(LLAMA, ["kv.policy=snapkv", "kv.budget=2000"])
    worst = (
        "snapkv keeps min(prompt, 2,000) + generated tokens of a sequence of 6,000: the step "
        "attends to all 6,000, the worst case (a prompt within the budget)"
    )
    assert context_note(snapkv, 6000) == (
        f"context 6,000 tokens: rounded up to the decode bucket of 8,192\n{worst}"
    )
    assert decode_cache(snapkv, 6000).kept == 6000
    assert context_note(snapkv, None) == worst.replace("6,000", "8,192")
    assert (
        context_note(snapkv, 2000)
        == "context 2,000 tokens: rounded up to the decode bucket of 2,048"
    )
    result = CliRunner().invoke(
        cli,
        [
            "step",
            LLAMA,
            "--set",
            "kv.policy=snapkv",
            "--set",
            "kv.budget=2000",
            "--context",
            "6000",
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[-3:] == [
        "KV slot: snapkv: a prompt above 2,000 tokens keeps 1,968 selected + the 32-token "
        "window, then grows; 8,192 tokens a slot (the context)",
        "context 6,000 tokens: rounded up to the decode bucket of 8,192",
        worst,
    ]


def test_a_step_says_the_layout_and_a_clipped_budget() -> None:
    """`step` prints the policy's layout (`kv_layout` in its JSON): DeepSeek-R1's SnapStream
    slot part by part; a budget above the context clipped, nothing compressed."""
    snap = load_scenario(SNAP)
    assert snap.kv_policy.layout() == (
        "snapstream: 4 sinks + 30,716 selected + 2,048 ring = 32,768 tokens a slot"
    )
    clipped = ["--set", "kv.policy=snapstream", "--set", "kv.budget=100000", "--json"]
    result = CliRunner().invoke(cli, ["step", LLAMA, "--batch", "2", *clipped])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kv_layout"] == (
        "snapstream: budget 100,000 clipped to the 8,192-token context: nothing is "
        "compressed, 8,192 tokens a slot"
    )


@pytest.mark.parametrize("command", [["step"], ["inspect", "graph"]])
def test_a_token_count_not_as_the_config_writes_one_is_refused(command: list[str]) -> None:
    for value, words in [
        ("8x", "expected a token count such as 8192 or 128k, got '8x'"),
        ("-1", "expected a token count such as 8192 or 128k, got '-1'"),
        ("200M", "209715200 is not in the range 0<=x<=100000000"),
    ]:
        result = _invoke([*command, LLAMA, "--context", value])
        assert result.exit_code == 2, result.output
        assert words in result.stderr and "Traceback" not in result.output
