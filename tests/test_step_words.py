"""`rdu-sim step`'s words name the device and the model's own repeated parts, round expert
counts to one decimal, give the kernel table's columns a legend (SN40L's tiles and SRAM
only on SN40L), and say how the compute time comes from the PCUs' busy time."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner

from rdu_sim import human
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


def _step_json(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["step", *args, "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_the_compute_time_says_it_is_the_busiest_stage_s() -> None:
    """The bound line's compute time (745 us) is each kernel's busiest stage's PCU time,
    longer than the busy table's pcu (658 us, averaged over all 1,040 PCUs) even spread over
    the 936 a kernel may use: said where the time is given, as another resource's and as
    the bound (a prefill)."""
    for args, where in (((), "each resource alone: compute"), (("--phase", "prefill"), "")):
        data = _step_json("llama3.1-8b-1socket", *args)
        pcu, compute = data["busy_s"]["pcu"], data["bound"]["compute_s"]
        assert compute >= pcu * 1040 / 936
        note = f"the busiest stage's PCUs; all 1,040 PCUs busy {human.duration(pcu)} on average"
        said = _step("llama3.1-8b-1socket", *args)
        if where:
            assert f"{where} {human.duration(compute)} ({note})," in said
        else:
            assert data["bound"]["resource"] == "compute"
            assert (
                f"bound by compute (PCUs or SMs) ({human.duration(compute)} of the step, {note};"
                in said
            )
        assert f"pcu {human.duration(pcu)}" in said  # the busy table's figure, unscaled


def test_a_gpu_steps_kernel_table_has_no_sn40l_columns() -> None:
    """Tiles and PMU SRAM are SN40L's: a GPU step's kernel table and its legend leave them
    out (every row read 0 and 0 B) and its compute time is its SMs' busy time, no PCU note;
    the JSON keeps the keys. An SN40L step keeps both columns and their legend."""
    args = ("llama3.1-70b-decode", "--set", "hardware=dgx-h100", "--batch", "1")
    said = _step(*args)
    assert "kernel calls loop time share launch period sim ─" in said
    assert "tiles: a call's" not in said and "PMU SRAM" not in said and "PCU busy" not in said
    assert "sim: the calls or layer iterations the engine simulated" in said
    kernels = _step_json(*args)["kernels"]
    assert all(k["tiles"] == 0 and k["sram_bytes"] == 0 for k in kernels)
    said = _step("llama3.1-8b-1socket")
    assert "kernel calls loop time share launch period sim tiles SRAM ─" in said
    assert "tiles: a call's; SRAM: the PMU SRAM it holds" in said


def test_the_two_link_times_say_what_each_is() -> None:
    """The bound line's link time (21.8 ms at 128 SnapStream slots) is the busiest link
    direction's with a transfer in flight, latency included; the busy table's (20.8 ms) its
    serialisation alone: the line says both, and the table's caption says which is which."""
    data = _step_json("deepseek-r1-128k-snapstream")
    flight, wire = data["bound"]["link_s"], data["busy_s"]["link"]
    assert flight > wire > 0
    said = _step("deepseek-r1-128k-snapstream")
    assert (
        f"link {human.duration(flight)} (in flight, latency included; on the wire "
        f"{human.duration(wire)})"
    ) in said
    assert f"link {human.duration(wire)}" in said  # the busy table's
    assert "link: the busiest link direction's serialisation time (its bytes on the wire)" in said
