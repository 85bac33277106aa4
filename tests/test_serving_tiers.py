"""Weights in DDR: `memory.weights` places them (all in HBM, a pinned hot set, or streamed
from DDR every step), `run` serves models larger than HBM with DDR-bound steps, says which
tier holds what, warns when batch slots push weights out of HBM, and its capacity errors
suggest only what applies to the workload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.compiler import CapacityError
from rdu_sim.compiler.placement import (
    WeightsSpilledWarning,
    batch_capacity,
    plan_memory,
    weight_inventory,
    weights_placement,
)
from rdu_sim.config import ConfigError
from rdu_sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
LLAMA_405B = ROOT / "workloads" / "llama3.1-405b-bf16-8socket.yaml"
LLAMA_8B = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
SHORT = {
    "serving.requests": 4,
    "serving.prompt_tokens": {"dist": "fixed", "value": 512},
    "serving.output_tokens": {"dist": "fixed", "value": 16},
}


def test_the_shipped_405b_bf16_workload_is_served_from_ddr_and_ddr_bound() -> None:
    """The issue's must-show: 405B BF16 on 8 sockets completes, its JSON shows weight bytes
    in DDR and a decode step bound by DDR (never faster than the DDR roofline)."""
    data = api.run(LLAMA_405B, SHORT).to_dict()
    assert data["requests_completed"] == 4
    assert data["weights_placement"] == "hot_set"
    ddr, hbm = data["memory"]["ddr"], data["memory"]["hbm"]
    scenario = load_scenario(LLAMA_405B)
    total = sum(w.bytes for w in weight_inventory(scenario))
    assert ddr["weights_bytes"] > 0 and ddr["weights_bytes"] + hbm["weights_bytes"] == total
    assert hbm["weights_bytes"] <= 0.5 * hbm["capacity_bytes"]  # the hot set's share
    assert hbm["used_bytes"] <= hbm["capacity_bytes"]
    step = data["decode_step"]
    assert step["bound"] == "ddr"
    assert step["ddr_s"] > step["hbm_s"] and step["ddr_s"] > step["compute_s"]
    assert step["ddr_s"] <= step["step_s"] < 1.2 * step["ddr_s"]
    assert data["warnings"] == []


def test_a_model_larger_than_hbm_is_refused_in_hbm_with_the_ddr_hint() -> None:
    scenario = load_scenario(LLAMA_405B, {"memory.weights": "hbm"})
    with pytest.raises(CapacityError) as info:
        batch_capacity(scenario)
    message = str(info.value)
    assert "the weights alone do not fit, so not one sequence does: " in message
    assert "memory.weights hot_set or streamed, now hbm" in message
    assert "store weights in fp8 (dtypes.weights, now bf16)" in message
    # what shrinks the KV cache or the activations cannot make room for weights that fill HBM
    for futile in ("max_context", "kv.policy", "dtypes.kv", "prefill_chunk_tokens"):
        assert futile not in message, futile


def test_capacity_hints_never_suggest_what_is_already_set() -> None:
    scenario = load_scenario(
        LLAMA_405B,
        {
            "memory.weights": "streamed",
            "dtypes.weights": "fp8",
            "kv.policy": "snapstream",
            "serving.max_context": 131072,
            "hw.socket.hbm.capacity": "256 MiB",
        },
    )
    with pytest.raises(CapacityError) as info:
        batch_capacity(scenario)
    message = str(info.value)
    assert "cannot fit even one sequence" in message
    for already in ("memory.weights hot_set", "store weights in fp8", "use kv.policy"):
        assert already not in message
    assert "mla_cache_layout" not in message  # a Llama model has no MLA cache
    assert "parallelism.tp" in message
    # SnapStream's 4,096-token slot: its budget shrinks it, a shorter context would not
    assert "lower kv.budget (now 4096)" in message and "reduce serving.max_context" not in message


def test_not_one_sequence_fitting_names_the_file_the_field_and_more_hbm() -> None:
    """The capacity error reads as every other error does (``error: FILE: FIELD: message``):
    at the field an override set when one of those it names was (with its ``(from --set)``
    note), HBM capacity among the ways out; trial Q's had no file and no field. With 'auto'
    slots, and the file's own 16 slots alike (``memory.weights: hbm``); under a hot set the
    file's slots push it to DDR instead, refused only where their KV cache alone outgrows
    HBM, at serving.batch_slots, naming the override of the HBM (not the weights')."""
    result = CliRunner().invoke(
        cli,
        [
            "run",
            str(LLAMA_8B),
            "--set",
            "hw.socket.hbm.capacity=16 GiB",
            "--set",
            "serving.batch_slots=auto",
        ],
    )
    assert result.exit_code == 2
    line = result.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith(
        f"error: {LLAMA_8B}: hw.socket.hbm.capacity: cannot fit even one sequence (a slot of "
        "max_context 8192 tokens"
    ), line
    assert line.endswith(
        "or give each socket more HBM (hw.socket.hbm.capacity, now 16 GiB) "
        "(from --set hw.socket.hbm.capacity)"
    ), line
    explicit = CliRunner().invoke(
        cli, ["run", str(LLAMA_8B), "--set", "hw.socket.hbm.capacity=16 GiB"]
    )
    assert explicit.exit_code == 2 and "cannot fit even one sequence" in explicit.output
    explicit = CliRunner().invoke(
        cli,
        [
            "run",
            str(LLAMA_8B),
            "--set",
            "hw.socket.hbm.capacity=16 GiB",
            "--set",
            "memory.weights=hot_set",
        ],
    )
    assert explicit.exit_code == 2
    said = " ".join(explicit.output.split())
    assert said.startswith(
        f"error: {LLAMA_8B}: serving.batch_slots: the KV cache of 16 slots (16 GiB"
    ), said
    assert "more than its whole HBM (16 GiB) even without the weights" in said
    # the override that made HBM too small is the cause, not the file's line of the slots
    assert said.endswith(
        "or give each socket more HBM (hw.socket.hbm.capacity, now 16 GiB) "
        "(from --set hw.socket.hbm.capacity)"
    ), said


def test_not_one_sequence_fitting_a_file_as_written_is_at_its_max_context_line(
    tmp_path: Path,
) -> None:
    """No override: the error is at the slot's size, ``serving.max_context``, on its line
    (Llama 3.1 70B's int4 weights leave 31 GiB, a slot of 128K tokens is 40 GiB); at the
    model's line when its weights alone do not fit (70B in bf16, 131 GiB)."""
    text = LLAMA_8B.read_text().replace("model: llama-3.1-8b", "model: llama-3.1-70b")
    text = text.replace("hardware: ../hw_configs/", f"hardware: {ROOT / 'hw_configs'}/")
    small = text.replace("weights: bf16", "weights: int4")
    small = small.replace("max_context: 8192", "max_context: 131072")
    workload = tmp_path / "w.yaml"
    workload.write_text(small)
    line = 1 + small.splitlines().index("  max_context: 131072")
    scenario = load_scenario(workload)
    with pytest.raises(CapacityError) as info:
        batch_capacity(scenario)
    message = str(info.value)
    assert message.startswith(f"{workload}:{line}: serving.max_context: cannot fit even one "), (
        message
    )
    assert "from --set" not in message
    assert message.endswith("or give each socket more HBM (hw.socket.hbm.capacity, now 64 GiB)")
    workload.write_text(text)
    line = 1 + text.splitlines().index("model: llama-3.1-70b")
    with pytest.raises(CapacityError) as info:
        batch_capacity(load_scenario(workload))
    message = str(info.value)
    assert message.startswith(f"{workload}:{line}: model: the weights alone do not fit, "), message
    assert "serving.max_context" not in message


def test_streamed_reads_every_weight_from_ddr_and_is_slower_than_the_hot_set() -> None:
    hot = load_scenario(LLAMA_405B)
    streamed = load_scenario(LLAMA_405B, {"memory.weights": "streamed"})
    slots = batch_capacity(hot)
    plan = plan_memory(streamed, slots)
    assert plan.tiers["hbm"].weights_bytes == 0
    assert plan.tiers["ddr"].weights_bytes == sum(w.bytes for w in weight_inventory(streamed))
    # streaming leaves all of HBM to the KV cache: more slots fit
    assert batch_capacity(streamed) > slots
    hot_step = api.step(LLAMA_405B, batch=slots, context=1024).step_s
    streamed_step = api.step(
        LLAMA_405B, {"memory.weights": "streamed"}, batch=slots, context=1024
    ).step_s
    assert streamed_step > 1.3 * hot_step


def test_a_larger_hot_set_reads_less_from_ddr_and_fits_fewer_slots() -> None:
    def plan(fraction: float) -> tuple[int, int]:
        scenario = load_scenario(LLAMA_405B, {"memory.hot_set_fraction": fraction})
        slots = batch_capacity(scenario)
        return slots, plan_memory(scenario, slots).tiers["ddr"].weights_bytes

    small_slots, small_ddr = plan(0.25)
    large_slots, large_ddr = plan(0.75)
    assert large_ddr < small_ddr and large_slots < small_slots


def test_slots_above_capacity_push_a_hot_set_out_of_hbm_with_a_warning() -> None:
    """Slots above what fits beside all the weights: under ``memory.weights: hbm`` refused
    at serving.batch_slots (it keeps every weight in HBM); under a hot set of all HBM the
    same slots push the least-read weights to DDR, with a warning."""
    scenario = load_scenario(LLAMA_8B, {"stack.batch_programs": "any"})  # memory's count
    capacity = batch_capacity(scenario)
    auto = api.run(LLAMA_8B, SHORT).summary()
    assert auto.warnings == [] and auto.memory["ddr"].weights_bytes == 0
    assert auto.weights_placement == "hbm"
    over_slots = {**SHORT, "serving.batch_slots": capacity + 4}
    with pytest.raises(CapacityError) as refused:
        api.run(LLAMA_8B, over_slots)
    assert f"serving.batch_slots: the KV cache of {capacity + 4} slots" in str(refused.value)
    hot = {"memory.weights": "hot_set", "memory.hot_set_fraction": 1.0}
    with pytest.warns(WeightsSpilledWarning) as caught:  # (a Python warning too)
        over = api.run(LLAMA_8B, {**over_slots, **hot}).summary()
    assert over.memory["ddr"].weights_bytes > 0
    (warning,) = over.warnings
    assert [str(w.message) for w in caught] == [f"{LLAMA_8B}: {warning}"]
    assert f"serving.batch_slots {capacity + 4}" in warning
    assert "of them from there" in warning
    # the placement says it too (a sweep's row showed nothing else)
    assert over.weights_placement == "hot_set_spilled"


def test_a_hot_set_pushed_out_by_slots_is_spilled_too() -> None:
    """The 405B hot set at its capacity is the setting; slots above it spill the hot set."""
    scenario = load_scenario(LLAMA_405B)
    capacity = batch_capacity(scenario)
    assert weights_placement(scenario, plan_memory(scenario, capacity)) == "hot_set"
    over = plan_memory(scenario, capacity + 8)
    assert weights_placement(scenario, over) == "hot_set_spilled"
    streamed = load_scenario(LLAMA_405B, {"memory.weights": "streamed"})
    assert weights_placement(streamed, plan_memory(streamed, capacity)) == "streamed"


def test_rdu_sim_run_json_shows_the_ddr_weights_and_the_bound() -> None:
    """The command line as a user types it: `rdu-sim run <405B workload> --json`."""
    result = CliRunner().invoke(
        cli, ["run", str(LLAMA_405B), "--json", "--set", "serving.requests=2"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["memory"]["ddr"]["weights_bytes"] > 0
    assert data["decode_step"]["bound"] == "ddr"


@pytest.mark.parametrize("placement", ["hot_set", "streamed"])
def test_a_gpu_refuses_weights_in_ddr(placement: str) -> None:
    dgx = ROOT / "hw_configs" / "dgx-h100.yaml"
    with pytest.raises(ConfigError, match=r"memory\.weights.*no DDR tier"):
        load_scenario(
            ROOT / "workloads" / "llama3.1-70b-decode.yaml",
            {"hardware": str(dgx), "memory.weights": placement},
        )
