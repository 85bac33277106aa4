"""One verdict on one layout: an explicit ``serving.batch_slots`` on hardware with DDR spills
the least-read weights there rather than be refused, even where not one slot fits beside all
the weights, or the weights alone outgrow HBM under ``memory.weights: hbm`` (no cliff where
they stop fitting: docs/memory.md); ``auto`` runs the capacity, so none is refused. ``step``,
``inspect graph``, ``run``, ``compare`` and ``check`` ask the one rule
(``compiler.placement.slots_spill_weights``, through ``Compiler.batch_capacity``). The
newcomer trial's ``step`` ran Llama 70B at tp=2 (66.7 GiB of weights a 64 GiB socket) while
``run`` simulated every request and then refused it, and ``compare`` and ``inspect graph``
refused it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
LLAMA_8B = str(ROOT / "workloads" / "llama3.1-8b-1socket.yaml")
# Llama 8B's 14.96 GiB of BF16 weights on a socket of 14 GiB of HBM: they alone do not fit
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
def test_explicit_slots_beside_weights_larger_than_hbm_spill_in_every_command(
    command: str,
) -> None:
    """8 explicit slots, weights larger than HBM: every command runs the plan that puts
    the KV cache in HBM and most weights in DDR, and says so in the run's words (all the
    weights, more than HBM holds; the bytes in DDR are every weight HBM does not hold)."""
    result = CliRunner().invoke(cli, [*COMMANDS[command], *SMALL_HBM])
    assert result.exit_code == 0, result.output
    if command != "inspect":  # inspect graph reports the plan, not a warning
        assert SPILLED in result.output, result.output
        assert "of weights instead of all the weights (14.96 GiB, more than the whole HBM" in (
            result.output
        )


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_auto_slots_beside_weights_larger_than_hbm_are_refused_by_every_command(
    command: str,
) -> None:
    """The same layout with ``auto`` slots: not one slot, so no batch; every command exits 2
    with the capacity error (compare: its only column refused)."""
    result = CliRunner().invoke(
        cli, [*COMMANDS[command], *SMALL_HBM, "--set", "serving.batch_slots=auto"]
    )
    assert result.exit_code == 2, result.output
    assert "the weights alone do not fit, so not one sequence does" in result.output


def test_check_and_inspect_report_capacity_zero(tmp_path: Path) -> None:
    """``check`` of such a file passes it (it plans what the run plans), and ``inspect
    graph``'s JSON says no slot fits beside all the weights: capacity 0, the plan's 8 slots."""
    (tmp_path / "hw.yaml").write_text(
        f"extends: {ROOT / 'hw_configs' / 'sn40l.yaml'}\nname: small\n"
        "socket:\n  hbm:\n    capacity: 14 GiB\n"
    )
    text = Path(LLAMA_8B).read_text().replace("../hw_configs/sn40l.yaml", "hw.yaml")
    workload = tmp_path / "wl.yaml"
    workload.write_text(text.replace("batch_slots: 16", "batch_slots: 8"))
    checked = CliRunner().invoke(cli, ["check", str(workload)])
    assert checked.exit_code == 0 and checked.output.startswith("OK"), checked.output
    inspected = CliRunner().invoke(cli, ["inspect", "graph", LLAMA_8B, "--json", *SMALL_HBM])
    data = json.loads(inspected.output)
    assert data["batch_capacity"] == 0 and data["placement"]["batch_slots"] == 8


def test_a_step_batch_beyond_the_slots_plans_for_it_and_warns() -> None:
    """``step --batch`` larger than the workload's slots runs on a memory plan for that
    batch (README: step); where that batch pushes weights to DDR it warns in the run's
    words, naming ``--batch`` as what set the slots."""
    result = CliRunner().invoke(cli, ["step", LLAMA_8B, "--batch", "60"])
    assert result.exit_code == 0, result.output
    assert "--batch 60 leaves HBM room for" in result.output
    assert "(a smaller --batch)" in result.output
    assert "the memory plan for 60 slots" in result.output
