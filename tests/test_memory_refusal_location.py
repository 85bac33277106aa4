"""A memory plan that cannot hold the workload's own batch slots names the workload's file
and ``serving.batch_slots`` the same way under every command that plans memory (run, run
--step, step, inspect graph, check: ``compiler.errors.at_slots``), once; a step's larger
``--batch`` is named as that option."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.compiler.errors import SlotsCapacityError, at_slots

WORKLOADS = Path(__file__).resolve().parents[1] / "workloads"
LLAMA = WORKLOADS / "llama3.1-8b-1socket.yaml"
PROBLEM = (
    "the KV cache of 100 slots (100 GiB: a slot of max_context 8192 tokens, kv.policy full) "
    "and activations (64.26 MiB)"
)


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
    assert said.startswith(f"error: {LLAMA}: --batch: the KV cache of 1,000 slots")
    said = _said("inspect", "graph", str(LLAMA), "--batch", "1000")
    assert said.startswith(f"error: {LLAMA}: --batch: the KV cache of 1,000 slots")


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


def _cluster(tmp_path: Path, workload: Path, serve: dict[str, object]) -> Path:
    """A cluster of two pools running ``workload``: ``small`` at 4 slots, ``serve`` with
    ``serve``'s set."""
    pools = {
        "small": {"workload": str(workload), "replicas": 1, "set": {"serving.batch_slots": 4}},
        "serve": {"workload": str(workload), "replicas": 1, "set": serve},
    }
    traffic = {"rate": 1, "requests": 4, "prompt_tokens": 100, "output_tokens": 10, "seed": 1}
    slo = {"ttft": "1 s", "tpot": "50 ms"}
    data = {"name": "c", "pools": pools, "traffic": traffic, "slo": slo}
    cluster = tmp_path / "c.yaml"
    cluster.write_text(yaml.safe_dump(data))
    return cluster


def test_check_refuses_a_clusters_pool_as_its_run_does(tmp_path: Path) -> None:
    """``check`` passed a cluster whose pool's workload holds more slots than HBM (only a
    workload file went through the run's memory plan); its run refused it. Both now plan
    every pool as the run does (``api_cluster.plan_cluster``) and say the same words,
    naming the workload's field and the pool; a pool whose ``set`` gives the slots is named
    by it, and a cluster whose pools fit passes."""
    mine, line = _big(tmp_path)
    cluster = _cluster(tmp_path, mine, {})
    run, check = _said("run", str(cluster)), _said("check", str(cluster))
    assert run.startswith(f"error: {mine}:{line}: serving.batch_slots: {PROBLEM}")
    assert run.endswith(f"(pool 'serve' of {cluster})")
    assert check == f"{run} error: 1 of 1 file(s) failed the check"  # the run's words
    cluster = _cluster(tmp_path, LLAMA, {"serving.batch_slots": 100})
    said = _said("check", str(cluster))
    assert said.startswith(f"error: {LLAMA}: serving.batch_slots: {PROBLEM}")
    assert f"(from pools.serve.set: serving.batch_slots) (pool 'serve' of {cluster})" in said
    cluster = _cluster(tmp_path, mine, {"serving.batch_slots": 8})
    result = CliRunner().invoke(cli, ["check", str(cluster)])
    assert result.exit_code == 0, result.output
    assert "2 sockets (serve: 1 replica of tp=1, small: 1 replica of tp=1), 4 requests" in (
        result.output
    )
