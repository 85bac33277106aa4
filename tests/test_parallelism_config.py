"""The parallelism config (`rdu_sim.config.parallelism`): its bounds, the one error naming the
field of a combination the model or the hardware cannot map, where each part of the model
lives, and plain tensor parallelism unchanged to the byte when the new degrees are 1."""

from __future__ import annotations

import json
import re

import pytest

from rdu_sim import api
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.parallelism import ParallelismConfig, PartPlacement, part_placements

DEEPSEEK = "workloads/deepseek-r1-128k-full.yaml"
LLAMA8 = "workloads/llama3.1-8b-8socket.yaml"
UNIT = {"parallelism.ep": 1, "parallelism.dp_attention": 1, "parallelism.pp": 1}


def test_unit_degrees_give_todays_tensor_parallel_step_to_the_byte() -> None:
    for workload in (DEEPSEEK, LLAMA8):
        for phase, tokens in (("decode", None), ("prefill", 2048)):
            today = api.step(workload, phase=phase, tokens=tokens).detail.to_dict()
            unit = api.step(workload, UNIT, phase=phase, tokens=tokens).detail.to_dict()
            today.pop("provenance", None)
            unit.pop("provenance", None)
            assert json.dumps(unit, sort_keys=True) == json.dumps(today, sort_keys=True)


def test_unit_degrees_give_todays_run_to_the_byte() -> None:
    sets = {"serving.requests": 12}
    today = api.run("workloads/llama3.1-8b-1socket.yaml", sets).to_dict()
    unit = api.run("workloads/llama3.1-8b-1socket.yaml", {**sets, **UNIT}).to_dict()
    for result in (today, unit):
        result.pop("provenance", None)
    assert json.dumps(unit, sort_keys=True) == json.dumps(today, sort_keys=True)


def test_moe_experts_is_ep_one_or_every_device() -> None:
    assert ParallelismConfig(tp=16).expert_ways == 1
    assert ParallelismConfig(tp=16, moe_experts="expert").expert_ways == 16
    assert ParallelismConfig(tp=4, dp_attention=8, ep=32).exchange == "all_to_all"
    assert ParallelismConfig(tp=16, ep=16).exchange == "all_reduce"
    assert ParallelismConfig(tp=16).exchange == "none"
    assert ParallelismConfig(tp=16, ep=1, moe_experts="expert").expert_ways == 1  # ep decides


def test_where_each_part_lives() -> None:
    plain = part_placements(ParallelismConfig(tp=16))
    assert plain["attention"] == PartPlacement(tensor=16, data=1)
    assert plain["routed_experts"] == PartPlacement(tensor=16, data=1, expert=1)
    assert plain["router"] == PartPlacement(tensor=1, data=1)  # replicated, as today
    wide = part_placements(ParallelismConfig(tp=2, dp_attention=16, ep=32))
    assert wide["attention"] == PartPlacement(tensor=2, data=16)
    assert wide["shared_experts"] == PartPlacement(tensor=1, data=32)  # a token shard each
    assert wide["routed_experts"] == PartPlacement(tensor=1, data=1, expert=32)
    assert wide["routed_experts"].describe() == "32 ways by experts"


@pytest.mark.parametrize(
    ("sets", "field", "message"),
    [
        ({"parallelism.ep": 8}, "parallelism.ep", r"^must be 1 .* or tp x dp_attention = 16"),
        ({"parallelism.dp_attention": 2}, "parallelism", r"32 sockets, more than the 16"),
        (
            {"parallelism.tp": 2, "parallelism.dp_attention": 8},
            "parallelism.ep",
            r"expert-parallel across them \(ep = tp x dp_attention = 16\)",
        ),
        ({"parallelism.pp": 4096}, "parallelism.pp", r"^must be at most 256, got 4,096 "),
        (
            {"parallelism.tp": 4096, "parallelism.dp_attention": 4096},
            "parallelism",
            r"16777216 devices, more than a replica's 4096",
        ),
        ({"parallelism.micro_batches": 4}, "parallelism.micro_batches", r"needs pp > 1"),
    ],
)
def test_a_combination_that_cannot_map_is_one_error_naming_its_field(
    sets: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        api.load(DEEPSEEK, sets)
    (issue,) = caught.value.issues
    assert issue.field == field
    assert re.search(message, issue.message), issue.message
    assert not issue.message.startswith(field)  # the field is said once, in its column


def test_a_rule_across_fields_names_its_field_in_python_too() -> None:
    """Built in Python, the model's own error still says which field (FieldProblem's str)."""
    with pytest.raises(ValueError, match=r"ep must be 1 .* got 8"):
        ParallelismConfig(tp=16, ep=8)


def test_whole_experts_need_a_model_with_experts_and_a_divisor() -> None:
    with pytest.raises(ConfigError, match="has no routed experts") as caught:
        api.load(LLAMA8, {"parallelism.ep": 8})
    assert caught.value.issues[0].field == "parallelism.ep"
    with pytest.raises(ConfigError, match=r"parallelism\.moe_experts.*does not divide"):
        api.load(DEEPSEEK, {"model": "mixtral-8x7b", "parallelism.moe_experts": "expert"})


def test_dense_model_with_data_parallel_attention_is_accepted() -> None:
    scenario = api.load(LLAMA8, {"parallelism.tp": 2, "parallelism.dp_attention": 4})
    assert scenario.workload.parallelism.devices == 8


def test_inspect_reports_where_each_part_lives() -> None:
    sets = {"hardware": "sn40l-4racks", "parallelism.tp": 4, "parallelism.dp_attention": 16}
    record = api.inspect_graph(DEEPSEEK, {**sets, "parallelism.ep": 64, "serving.batch_slots": 4})
    assert record["parallelism"]["devices"] == 64
    assert record["parallelism"]["exchange"] == "all_to_all"
    parts = record["parallelism"]["parts"]
    assert parts["attention"] == "4 ways by slices, 16 ways by batches"
    assert parts["routed_experts"] == "64 ways by experts"
    assert "parallelism" not in api.inspect_graph(DEEPSEEK)  # plain TP: as before


def test_a_lone_run_of_attention_ranks_is_refused_at_the_fields_line_or_override() -> None:
    """A lone run serves one server, not a replica's ranks: refused at
    parallelism.dp_attention's line in the workload file (it had none), or naming the --set
    that gave it."""
    ep64 = "workloads/ep/deepseek-r1-sn40l-4racks-ep64.yaml"
    with open(ep64) as file:
        (line,) = [n for n, text in enumerate(file, 1) if text.startswith("  dp_attention:")]
    with pytest.raises(
        ConfigError, match=r"a lone run, or a sweep's point, serves one server"
    ) as caught:
        api.run(ep64)
    (issue,) = caught.value.issues
    assert (issue.file, issue.field, issue.line) == (ep64, "parallelism.dp_attention", line)
    sets = {"parallelism.tp": 1, "parallelism.dp_attention": 8, "parallelism.ep": 8}
    with pytest.raises(ConfigError) as caught:
        api.run(DEEPSEEK, sets)
    (issue,) = caught.value.issues
    assert (issue.field, issue.line) == ("parallelism.dp_attention", None)
    assert issue.message.startswith("a replica of 8 attention ranks serves")
    assert issue.message.endswith("(from overrides: parallelism.dp_attention)")


def test_one_micro_batch_without_a_pipeline_is_the_default_and_accepted() -> None:
    """micro_batches: 1 with pp 1 is what pp 1 runs (it was refused with 'needs pp > 1');
    above 1 it still needs a pipeline."""
    assert ParallelismConfig(tp=16, micro_batches=1).pipeline_micro_batches == 1
    assert api.load(DEEPSEEK, {"parallelism.micro_batches": 1}).workload.parallelism.pp == 1
    with pytest.raises(ValueError, match=r"2 needs pp > 1"):
        ParallelismConfig(tp=16, micro_batches=2)
