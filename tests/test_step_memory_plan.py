"""The memory plan `rdu-sim step` runs on: the workload's slots (or the step's batch when
larger), as a served step of that batch runs; the step says where the weights live when any
are in DDR, and a plan that cannot hold its KV cache says the whole sum, weights included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli

LLAMA_1S = "llama3.1-8b-1socket"


def _step(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["step", LLAMA_1S, "--batch", "8", *args])
    return result.exit_code, " ".join(result.output.split())


def test_a_step_whose_weights_spill_says_where_they_live() -> None:
    """24 GiB of HBM hold the workload's 16 slots' KV and part of a hot set of half HBM: the
    step of batch 8 runs on that plan, and says so, with the weights' split, and warns as a
    run does."""
    hbm, hot = ["--set", "hw.socket.hbm.capacity=24GiB"], ["--set", "memory.weights=hot_set"]
    result = CliRunner().invoke(cli, ["step", LLAMA_1S, "--batch", "8", *hbm, *hot, "--json"])
    assert result.exit_code == 0
    memory = json.loads(result.stdout)["memory"]
    assert memory["plan_slots"] == 16
    assert memory["weights_ddr_bytes"] > 0 and memory["weights_hbm_bytes"] > 0
    # and warns as a run of those slots does (the run's words, on standard error)
    assert "warning: " in result.stderr and "serving.batch_slots 16 leaves HBM room" in (
        result.stderr
    )
    code, out = _step(*hbm, *hot)
    assert code == 0
    assert "GiB in DDR: the memory plan for the workload's 16 slots, serving.batch_slots" in out


def test_a_step_whose_weights_fit_says_nothing_of_them() -> None:
    code, out = _step()
    assert code == 0 and "weights:" not in out


def test_a_plan_that_cannot_hold_its_kv_counts_the_weights_too() -> None:
    """At 16 GiB the 16 slots' KV cache alone fills HBM: the error adds the weights to the
    sum."""
    code, out = _step("--set", "hw.socket.hbm.capacity=16GiB")
    assert code == 2
    assert (
        "the KV cache of 16 slots (16 GiB: a slot of max_context 8192 tokens, kv.policy full) "
        "and activations (64.26 MiB), which must be in HBM, need 16.06 GiB per socket, more "
        "than its whole HBM (16 GiB) even without the weights (14.96 GiB, which memory.weights "
        "hbm keeps in HBM too: 31.02 GiB in all); "
    ) in out
    code, out = _step("--set", "hw.socket.hbm.capacity=16GiB", "--set", "memory.weights=hot_set")
    assert code == 2 and "(14.96 GiB, which may spill to DDR: 31.02 GiB in all); " in out


def test_too_many_slots_for_a_run_names_the_workload_and_its_field(tmp_path: Path) -> None:
    """A run whose batch slots' KV cache alone exceeds HBM is the workload's
    serving.batch_slots: its file and line, or the override that gave it."""
    from rdu_sim import api
    from rdu_sim.compiler.errors import CapacityError

    workload = Path(__file__).resolve().parents[1] / "workloads" / "llama3.1-8b-1socket.yaml"
    with pytest.raises(CapacityError) as info:
        api.run(api.load(workload, ["serving.batch_slots=200", "serving.requests=2"]))
    assert str(info.value).startswith(
        f"{workload}: serving.batch_slots: the KV cache of 200 slots (200 GiB: a slot of "
    )
    assert str(info.value).endswith("(from overrides: serving.batch_slots)")
    text = workload.read_text()
    assert "  batch_slots: 16\n" in text
    mine = tmp_path / "big.yaml"
    mine.write_text(
        text.replace("  batch_slots: 16\n", "  batch_slots: 200\n").replace(
            "../hw_configs/sn40l.yaml", "sn40l"
        )
    )
    line = mine.read_text().splitlines().index("  batch_slots: 200") + 1
    with pytest.raises(CapacityError) as info:
        api.run(api.load(mine, ["serving.requests=2"]))
    assert str(info.value).startswith(f"{mine}:{line}: serving.batch_slots: the KV cache of 200")
