"""One verdict on one layout, from every command (``step``, ``inspect graph``, ``run``,
``compare``, ``check``): an explicit ``serving.batch_slots`` on hardware with DDR spills the
least-read weights there rather than be refused, even where not one slot fits beside all the
weights (no cliff there: docs/memory.md; ``compiler.placement.spill_absorbs``, asked
by ``Compiler.batch_capacity``); weights that alone outgrow HBM under ``memory.weights: hbm``
are refused, explicit slots or ``auto`` (``WeightsCapacityError``, from the capacity and
every memory plan). The newcomer trial's ``step`` ran Llama 70B at tp=2 (66.7 GiB of weights
a 64 GiB socket) with 42.8 GiB of them in DDR and no warning, while ``run`` simulated every
request and then refused it, and ``compare`` and ``inspect graph`` refused it; a layout whose
weights fit but leave no slot room, ``step`` and ``check`` ran and the others refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
LLAMA_8B = str(ROOT / "workloads" / "llama3.1-8b-1socket.yaml")
# Llama 8B's 14.96 GiB of BF16 weights: on 15.9 GiB of HBM they fit and leave no room for a
# slot (1 GiB of KV cache); on 14 GiB they alone do not fit
NO_ROOM = ["--set", "hw.socket.hbm.capacity=15.9 GiB", "--set", "serving.batch_slots=8"]
SMALL_HBM = ["--set", "hw.socket.hbm.capacity=14 GiB", "--set", "serving.batch_slots=8"]
SHORT = [
    "--set",
    "serving.requests=4",
    "--set",
    "serving.prompt_tokens={dist: fixed, value: 512}",
    "--set",
    "serving.output_tokens={dist: fixed, value: 16}",
]
COMMANDS = {
    "step": ["step", LLAMA_8B, "--batch", "4"],
    "inspect": ["inspect", "graph", LLAMA_8B],
    "run": ["run", LLAMA_8B, *SHORT],
    "compare": ["compare", LLAMA_8B, "--vary", "kv.policy=full,snapstream"],
}
SPILLED = "serving.batch_slots 8 leaves HBM room for"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_explicit_slots_with_no_room_beside_the_weights_spill_in_every_command(
    command: str,
) -> None:
    """8 explicit slots beside weights that fit HBM with no room for one slot: every command
    runs the plan that keeps the KV cache in HBM and pushes weights to DDR, and says so in
    the run's words."""
    result = CliRunner().invoke(cli, [*COMMANDS[command], *NO_ROOM])
    assert result.exit_code == 0, result.output
    assert "does not fit" not in result.output  # compare: no column refused
    if command != "inspect":  # inspect graph reports the plan, not a warning
        assert SPILLED in result.output, result.output


@pytest.mark.parametrize("slots", ["8", "auto"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_weights_alone_larger_than_hbm_are_refused_by_every_command(
    command: str, slots: str
) -> None:
    """Weights larger than HBM under ``memory.weights: hbm``: no batch, explicit or
    ``auto``; every command exits 2 with the capacity error before simulating (compare: its
    only column refused)."""
    result = CliRunner().invoke(
        cli, [*COMMANDS[command], *SMALL_HBM, "--set", f"serving.batch_slots={slots}"]
    )
    assert result.exit_code == 2, result.output
    assert "the weights alone do not fit, so not one sequence does" in result.output
    assert "serve the weights from DDR (memory.weights hot_set or streamed" in result.output


def _workload(tmp_path: Path, hbm: str) -> Path:
    """The 8B workload with 8 slots on a socket of ``hbm`` HBM, as files ``check`` reads."""
    (tmp_path / "hw.yaml").write_text(
        f"extends: {ROOT / 'hw_configs' / 'sn40l.yaml'}\nname: small\n"
        f"socket:\n  hbm:\n    capacity: {hbm}\n"
    )
    text = Path(LLAMA_8B).read_text().replace("../hw_configs/sn40l.yaml", "hw.yaml")
    workload = tmp_path / "wl.yaml"
    workload.write_text(text.replace("batch_slots: 16", "batch_slots: 8"))
    return workload


def test_check_gives_the_run_s_verdict_and_inspect_reports_capacity_zero(
    tmp_path: Path,
) -> None:
    """``check`` plans what the run plans: it passes the slots that spill, and refuses
    weights that alone outgrow HBM; ``inspect graph``'s JSON of the first says no slot fits
    beside all the weights: capacity 0, the plan's 8 slots."""
    checked = CliRunner().invoke(cli, ["check", str(_workload(tmp_path, "15.9 GiB"))])
    assert checked.exit_code == 0 and checked.output.startswith("OK"), checked.output
    refused = CliRunner().invoke(cli, ["check", str(_workload(tmp_path, "14 GiB"))])
    assert refused.exit_code == 2 and "the weights alone do not fit" in refused.output
    inspected = CliRunner().invoke(cli, ["inspect", "graph", LLAMA_8B, "--json", *NO_ROOM])
    data = json.loads(inspected.stdout)
    assert data["batch_capacity"] == 0 and data["placement"]["batch_slots"] == 8


def test_a_step_batch_beyond_the_slots_plans_for_it_and_warns() -> None:
    """``step --batch`` larger than the workload's slots runs on a memory plan for that
    batch (README: step); where that batch pushes weights to DDR it warns in the run's
    words, naming the step's ``batch`` as what set the slots (the API's name, not a CLI
    option's)."""
    result = CliRunner().invoke(cli, ["step", LLAMA_8B, "--batch", "60"])
    assert result.exit_code == 0, result.output
    assert f"{LLAMA_8B}: batch 60 leaves HBM room for" in result.output
    assert "(a smaller batch)" in result.output
    assert "the memory plan for 60 slots" in result.output


class _Refusing:
    """A backend whose capacity raises ``exc`` (the rest of the Backend is never asked)."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def batch_capacity(self, scenario: object) -> int:
        raise self.exc


def test_one_rule_says_which_refusals_the_slots_memory_plan_absorbs() -> None:
    """``spill_absorbs`` is the one verdict of the compiler's capacity and of
    ``resolve_batch_slots``: explicit slots with DDR leave "not one slot beside the weights"
    to their memory plan, never a kernel the socket cannot hold; ``auto`` and a GPU never.
    ``resolve_batch_slots`` passes every refusal a backend raises on (it turned a kernel's
    HardwareCapacityError into a capacity of 0 where the compiler raised it)."""
    from rdu_sim import api
    from rdu_sim.compiler.errors import CapacityError, HardwareCapacityError
    from rdu_sim.compiler.placement import spill_absorbs
    from rdu_sim.serving.backend import resolve_batch_slots

    hot = {"serving.batch_slots": 8, "memory.weights": "hot_set"}
    scenario = api.load(LLAMA_8B, hot)
    kernel = HardwareCapacityError.of("kernel 'decoder' has 900 stages", ("hw.socket.pcu.count",))
    assert spill_absorbs(scenario) and spill_absorbs(scenario, CapacityError("no slot"))
    assert not spill_absorbs(scenario, kernel)
    assert not spill_absorbs(api.load(LLAMA_8B, {**hot, "serving.batch_slots": "auto"}))
    gpu = api.load(LLAMA_8B, {"serving.batch_slots": 8, "hardware": "dgx-h100"})
    assert not spill_absorbs(gpu)
    with pytest.raises(HardwareCapacityError, match="900 stages"):
        resolve_batch_slots(scenario, _Refusing(kernel))  # type: ignore[arg-type]
