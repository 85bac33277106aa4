"""One verdict on one layout, from every command (``step``, ``inspect graph``, ``run``,
``compare``, ``check``). Under ``memory.weights: hbm``, which keeps every weight in HBM,
slots that leave the weights less HBM than they need are refused, explicit or ``auto``:
weights that alone outgrow HBM (``WeightsCapacityError``), not one slot beside them, or an
explicit batch beyond what fits (the plan's ``SlotsCapacityError``). No cliff: a layout
whose weights fit with no room for its slots, and one whose weights are 70 MiB larger than
HBM, are both refused (the first was planned with half the weights in DDR, the second
refused "because hbm keeps all of them in HBM"). Under a hot set an explicit
``serving.batch_slots`` on hardware with DDR pushes the least-read weights there rather than
be refused, even where not one slot fits beside the hot set (docs/memory.md;
``compiler.placement.spill_absorbs``, asked by ``Compiler.batch_capacity`` and
``resolve_batch_slots``)."""

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
HOT_SET = ["--set", "memory.weights=hot_set", "--set", "memory.hot_set_fraction=1.0"]
"""A hot set of all HBM: every weight pinned where the slots leave room, the rest in DDR."""
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
def test_explicit_slots_with_no_room_beside_a_hot_set_spill_in_every_command(
    command: str,
) -> None:
    """8 explicit slots beside a hot set of weights that fit HBM with no room for one slot:
    every command runs the plan that keeps the KV cache in HBM and pushes weights to DDR,
    and says so in the run's words."""
    result = CliRunner().invoke(cli, [*COMMANDS[command], *NO_ROOM, *HOT_SET])
    assert result.exit_code == 0, result.output
    assert "does not fit" not in result.output  # compare: no column refused
    if command != "inspect":  # inspect graph reports the plan, not a warning
        assert SPILLED in result.output, result.output


@pytest.mark.parametrize("hbm", ["15.9 GiB", "14.97 GiB", "14.9 GiB", "14 GiB"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_under_hbm_slots_without_room_for_the_weights_are_refused_by_every_command(
    command: str, hbm: str
) -> None:
    """The same 8 slots under ``memory.weights: hbm``: refused by every command (compare:
    every column), with a way out named, whether the weights fit with room for no slot
    (15.9 GiB), fit with no room at all (14.97 GiB: the plan kept 6.9 GiB of them in HBM
    and 8.05 GiB in DDR), or alone outgrow HBM (14.9 GiB, 14 GiB): one kind of answer on
    either side of the weights' size, not a run on one side and a refusal on the other."""
    sets = ["--set", "serving.batch_slots=8", "--set", f"hw.socket.hbm.capacity={hbm}"]
    result = CliRunner().invoke(cli, [*COMMANDS[command], *sets])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "(memory.weights hot_set or streamed, now hbm)" in result.output
    assert "leaves HBM room for" not in result.output


def test_the_reviewed_step_has_no_cliff_at_the_weights_size() -> None:
    """The review's pair: ``step --batch 4`` of 8 slots at 14.97 GiB ran with a warning
    (6.907 GiB of the weights in HBM, 8.05 GiB in DDR) and at 14.9 GiB was refused because
    ``hbm`` keeps every weight in HBM. Now both are refused: the first at the slots (the
    shortfall, fewer slots or a hot set), the second at the weights alone."""
    step = ["step", LLAMA_8B, "--batch", "4", "--set", "serving.batch_slots=8"]
    slots = CliRunner().invoke(cli, [*step, "--set", "hw.socket.hbm.capacity=14.97 GiB"])
    assert slots.exit_code == 2, slots.output
    assert f"error: {LLAMA_8B}: serving.batch_slots: the KV cache of 8 slots" in slots.output
    assert (
        "leave 6.907 GiB of the 14.97 GiB HBM per socket for llama-3.1-8b weights that need "
        "14.96 GiB (tp=1, bf16), 8.05 GiB short, and memory.weights hbm keeps every weight in "
        "HBM; "
    ) in " ".join(slots.output.split())
    alone = CliRunner().invoke(cli, [*step, "--set", "hw.socket.hbm.capacity=14.9 GiB"])
    assert alone.exit_code == 2, alone.output
    assert "the weights alone do not fit" in alone.output
    assert "memory.weights hbm keeps all of them in HBM, 58.91 MiB more than it holds" in (
        " ".join(alone.output.split())
    )


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


def _workload(tmp_path: Path, hbm: str, weights: str = "hbm") -> Path:
    """The 8B workload with 8 slots on a socket of ``hbm`` HBM, its ``memory.weights`` as
    given (a hot set of all HBM for ``hot_set``), as files ``check`` reads."""
    (tmp_path / "hw.yaml").write_text(
        f"extends: {ROOT / 'hw_configs' / 'sn40l.yaml'}\nname: small\n"
        f"socket:\n  hbm:\n    capacity: {hbm}\n"
    )
    text = Path(LLAMA_8B).read_text().replace("../hw_configs/sn40l.yaml", "hw.yaml")
    text = text.replace("batch_slots: 16", "batch_slots: 8")
    if weights == "hot_set":
        text += "memory: {weights: hot_set, hot_set_fraction: 1.0}\n"
    workload = tmp_path / f"wl-{weights}.yaml"
    workload.write_text(text)
    return workload


def test_check_gives_the_run_s_verdict_and_inspect_reports_capacity_zero(
    tmp_path: Path,
) -> None:
    """``check`` plans what the run plans: it passes the slots that spill a hot set, and
    refuses the same slots under ``hbm`` and weights that alone outgrow HBM; ``inspect
    graph``'s JSON of the first says no slot fits beside the hot set: capacity 0, the plan's
    8 slots."""
    checked = CliRunner().invoke(cli, ["check", str(_workload(tmp_path, "15.9 GiB", "hot_set"))])
    assert checked.exit_code == 0 and checked.output.startswith("OK"), checked.output
    refused = CliRunner().invoke(cli, ["check", str(_workload(tmp_path, "15.9 GiB"))])
    assert refused.exit_code == 2 and "memory.weights hot_set or streamed" in refused.output
    refused = CliRunner().invoke(cli, ["check", str(_workload(tmp_path, "14 GiB"))])
    assert refused.exit_code == 2 and "the weights alone do not fit" in refused.output
    inspected = CliRunner().invoke(
        cli, ["inspect", "graph", LLAMA_8B, "--json", *NO_ROOM, *HOT_SET]
    )
    data = json.loads(inspected.stdout)
    assert data["batch_capacity"] == 0 and data["placement"]["batch_slots"] == 8


def test_a_step_batch_beyond_the_slots_plans_for_it() -> None:
    """``step --batch`` larger than the workload's slots runs on a memory plan for that
    batch (README: step): under ``hbm``, where that batch leaves the weights no room, it is
    refused naming ``--batch``; under a hot set it pushes weights to DDR and warns in the
    run's words, naming the step's ``batch`` as what set the slots (the API's name, not a
    CLI option's)."""
    refused = CliRunner().invoke(cli, ["step", LLAMA_8B, "--batch", "60"])
    assert refused.exit_code == 2, refused.output
    words = " ".join(refused.output.split())
    assert f"error: {LLAMA_8B}: --batch: the KV cache of 60 slots" in words
    assert "; lower --batch (at most 48 fit beside the weights" in words
    result = CliRunner().invoke(cli, ["step", LLAMA_8B, "--batch", "60", *HOT_SET])
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
