"""api.step(record=...): the engine's trace records reach the caller, and `rdu-sim step
--trace` goes through api.step rather than its own Compiler and Engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.engine import StepTiming
from rdu_sim.serving.step_cache import StepCost

LLAMA = "workloads/llama3.1-8b-1socket.yaml"
SMALL = {"serving.max_context": 2048}


def _timing(cost: StepCost) -> StepTiming:
    assert isinstance(cost.detail, StepTiming)
    return cost.detail


def test_record_reaches_the_engine_and_changes_no_number() -> None:
    plain = _timing(api.step(LLAMA, SMALL, batch=2))
    recorded = _timing(api.step(LLAMA, SMALL, batch=2, record=True))
    assert plain.records is None
    assert recorded.records is not None
    assert recorded.to_dict() == plain.to_dict()


def test_record_through_a_given_backend() -> None:
    cost = api.step(LLAMA, SMALL, batch=1, backend=api.EngineBackend(record=True), record=True)
    assert _timing(cost).records is not None
    assert (
        _timing(api.step(LLAMA, SMALL, batch=1, backend=api.EngineBackend(record=True))).records
        is not None
    )
    with pytest.raises(ValueError, match="record"):
        api.step(LLAMA, SMALL, batch=1, backend=api.EngineBackend(), record=True)


@pytest.mark.parametrize("trace", [False, True])
def test_step_command_uses_api_step(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, trace: bool
) -> None:
    calls: list[dict[str, Any]] = []
    real = api.step

    def spy(*args: Any, **kwargs: Any) -> StepCost:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "step", spy)
    path = tmp_path / "step.json"
    args = ["step", LLAMA, "--set", "serving.max_context=2048", "--batch", "2", "--json"]
    result = CliRunner().invoke(cli, args + (["--trace", str(path)] if trace else []))
    assert result.exit_code == 0, result.output
    assert len(calls) == 1
    assert calls[0]["record"] is trace and calls[0]["batch"] == 2
    data = json.loads(result.stdout)
    expected = _timing(real(LLAMA, SMALL, batch=2)).to_dict()
    assert data["step_s"] == expected["step_s"] and data["events"] == expected["events"]
    assert ("trace" in data) is trace and path.exists() is trace
    if trace:
        assert {e["ph"] for e in json.loads(path.read_text())["traceEvents"]} == {"M", "X", "C"}


@pytest.mark.parametrize(
    ("workload", "args", "options"),
    [
        (LLAMA, ["--batch", "2"], {"batch": 2}),
        (LLAMA, ["--phase", "prefill"], {"phase": "prefill"}),
        ("workloads/qwen3-235b-a22b-16socket.yaml", ["--batch", "4"], {"batch": 4}),
    ],
)
def test_the_step_json_is_the_librarys(
    workload: str, args: list[str], options: dict[str, Any]
) -> None:
    """``rdu-sim step --json`` added bound, memory, model FLOPs, layout, provenance, ...
    in the command, so ``api.step`` had none of them: one builder now
    (``report.step_report``), and the command's JSON is ``api.step_report(...).to_dict()``
    byte for byte (a MoE step's ``experts``, a default prefill's ``prompt`` included)."""
    result = CliRunner().invoke(
        cli, ["step", workload, "--set", "serving.max_context=2048", *args, "--json"]
    )
    assert result.exit_code == 0, result.output
    report = api.step_report(workload, SMALL, **options)
    library = json.dumps(report.to_dict(), sort_keys=True)
    assert result.stdout == library + "\n"
    data = report.to_dict()
    for key in ("bound", "memory", "model_flops", "model_flops_fraction", "provenance", "layout"):
        assert key in data, key
    assert ("prompt" in data) is (options.get("phase") == "prefill")
    assert ("experts" in data) is workload.startswith("workloads/qwen")
    assert report.cost == api.step(workload, SMALL, **options)
    report.to_dict()["provenance"].clear()  # a new dict each call
    assert json.dumps(report.to_dict(), sort_keys=True) == library


def test_a_paged_stacks_default_step_holds_what_its_pool_holds() -> None:
    """A paged stack's batch slots count its smallest requests (2,048 on TensorRT-LLM), so
    the default decode step took them all at 32,768 cached tokens: ~15x its pool (395 ms).
    It now runs the sequences of that context the pool holds (the pre-pool batch, 138,
    within a page), and a batch given that outgrows the pool warns."""
    from rdu_sim.compiler.placement import plan_memory

    gpu = {"hardware": "dgx-h100", "stack": "tensorrt-llm"}
    scenario = api.load("llama3.1-8b-8socket", gpu)
    shape = api.default_step_shape(scenario, "decode")
    slots = api.resolve_batch_slots(scenario, api.EngineBackend())[1]
    pool = plan_memory(scenario, slots).kv_pool
    assert pool is not None and slots == 2048
    assert (shape.batch, shape.cache_len) == (pool.pages // 512, 32768) == (137, 32768)
    assert api.default_step_shape(scenario, "decode", context=4095).batch == pool.pages // 64
    assert api.default_step_shape(scenario, "decode", context=1000).batch == 2048  # 16 pages
    from rdu_sim.serving.backend import StepOverPoolWarning

    with pytest.warns(StepOverPoolWarning, match=r"2,048 sequences of 32,768 cached tokens"):
        api.step(scenario, batch=2048)
    sn40l = api.load("llama3.1-8b-8socket")  # static slots: unchanged
    assert api.default_step_shape(sn40l, "decode").batch == 64


DEEPSEEK_H100 = "workloads/ep/deepseek-r1-h100.yaml"


def test_a_default_step_of_one_sequence_its_pool_cannot_hold_warns() -> None:
    """On one DGX-H100 node DeepSeek-R1's FP8 weights leave SGLang's pool 22 pages of 64
    tokens a GPU (MLA's latent cache whole on each), less than one 8,192-token sequence:
    the default step still runs one (at least one), and warns by the rule a batch given
    does (``serving.backend.warn_over_pool``)."""
    from rdu_sim.serving.backend import StepOverPoolWarning

    node = {"hardware": "dgx-h100", "parallelism.tp": 8, "serving.batch_slots": 1}
    scenario = api.load(DEEPSEEK_H100, node)
    with pytest.warns(StepOverPoolWarning, match=r"1 sequence of 8,192 .*\(not one such"):
        cost = api.step(scenario)
    assert cost.detail is not None and cost.detail.batch == 1


def test_a_default_step_below_the_slots_says_why() -> None:
    """256 slots, but the TP16 pool holds 65 sequences of 8,192 tokens: the console says
    the batch is the pool's, not the slots', in one line."""
    result = CliRunner().invoke(cli, ["step", DEEPSEEK_H100, "--set", "serving.batch_slots=256"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "batch 65," in lines[0]
    assert lines[1].startswith(
        "batch 65, not the workload's 256 serving.batch_slots: a sequence of 8,192 cached "
        "tokens reserves 128 KV pages of 64 tokens"
    )
    assert "pool holds 8,320" in lines[1]


def test_a_default_step_below_the_slots_says_why_in_its_json() -> None:
    """``--json`` carries the console's line as ``batch_note``; a step whose batch was
    given, or that runs every slot, has none."""
    args = ["step", DEEPSEEK_H100, "--set", "serving.batch_slots=256", "--json"]
    data = json.loads(CliRunner().invoke(cli, args).output)
    assert data["batch"] == 65
    assert data["batch_note"].startswith(
        "batch 65, not the workload's 256 serving.batch_slots: a sequence of 8,192 cached"
    )
    given = json.loads(CliRunner().invoke(cli, [*args, "--batch", "65"]).output)
    assert given["batch"] == 65 and "batch_note" not in given
    whole = json.loads(CliRunner().invoke(cli, [*args[:2], "--json"]).output)
    assert "batch_note" not in whole
