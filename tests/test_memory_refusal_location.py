"""A memory plan that cannot hold the workload's own batch slots names the workload's file
and ``serving.batch_slots`` the same way under every command that plans memory (run, run
--step, step, inspect graph, check: ``compiler.errors.at_slots``), once; a step's larger
``--batch`` is named as that option."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.compiler.errors import SlotsCapacityError, at_slots

WORKLOADS = Path(__file__).resolve().parents[1] / "workloads"
LLAMA = WORKLOADS / "llama3.1-8b-1socket.yaml"
PROBLEM = "the KV cache of 100 slots (100 GiB) and activations (64.26 MiB)"


def _said(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


def _big(tmp_path: Path) -> tuple[Path, int]:
    """The workload with 100 batch slots (100 GiB of KV cache, 64 GiB of HBM), and their
    line."""
    text = LLAMA.read_text().replace("../hw_configs/sn40l.yaml", "sn40l")
    line = text.splitlines().index("  batch_slots: 16") + 1
    mine = tmp_path / "big.yaml"
    mine.write_text(text.replace("  batch_slots: 16\n", "  batch_slots: 100\n"))
    return mine, line


@pytest.mark.parametrize(
    "command",
    [["run"], ["run", "--step"], ["step"], ["inspect", "graph"], ["check"]],
    ids=["run", "run-step", "step", "inspect-graph", "check"],
)
def test_every_command_names_the_file_line_and_field(command: list[str], tmp_path: Path) -> None:
    mine, line = _big(tmp_path)
    said = _said(*command, str(mine))
    assert said.startswith(f"error: {mine}:{line}: serving.batch_slots: {PROBLEM}")
    assert said.count(str(mine)) == 1  # located once, not by the compiler and again by run


@pytest.mark.parametrize(
    "command",
    [["run"], ["run", "--step"], ["step"], ["inspect", "graph"]],
    ids=["run", "run-step", "step", "inspect-graph"],
)
def test_every_command_names_the_flag(command: list[str]) -> None:
    said = _said(*command, str(LLAMA), "--set", "serving.batch_slots=100")
    assert said.startswith(f"error: {LLAMA}: serving.batch_slots: {PROBLEM}")
    assert said.endswith("(from --set serving.batch_slots)")


def test_a_step_batch_beyond_the_workloads_slots_is_the_option() -> None:
    said = _said("step", str(LLAMA), "--batch", "1000")
    assert said.startswith(f"error: {LLAMA}: --batch: the KV cache of 1000 slots")
    said = _said("inspect", "graph", str(LLAMA), "--batch", "1000")
    assert said.startswith(f"error: {LLAMA}: --batch: the KV cache of 1000 slots")


def test_the_api_step_names_the_override() -> None:
    with pytest.raises(SlotsCapacityError) as caught:
        api.step(LLAMA, {"serving.batch_slots": 100})
    said = str(caught.value)
    assert said.startswith(f"{LLAMA}: serving.batch_slots: {PROBLEM}")
    assert said.endswith("(from overrides: serving.batch_slots)")
    assert caught.value.field == "serving.batch_slots"


def test_located_once() -> None:
    """A refusal already located, or already naming its file, is kept as it is."""
    scenario = api.load(LLAMA)
    line = LLAMA.read_text().splitlines().index("  batch_slots: 16") + 1
    located = at_slots(scenario, 16, SlotsCapacityError("too big"))
    assert str(located) == f"{LLAMA}:{line}: serving.batch_slots: too big"
    assert at_slots(scenario, 16, located) is located
    named = SlotsCapacityError(f"{LLAMA}: too big")
    assert at_slots(scenario, 16, named) is named
    other = SlotsCapacityError("too big")
    assert at_slots(scenario, 17, other) is other  # not the workload's slots
