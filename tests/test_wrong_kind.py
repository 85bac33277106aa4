"""A command given a config file of another kind (a plan to `run`, a workload to `sweep`)
says what the file is and how that kind is used, in one error line with exit status 2, as a
name of a shipped file of another kind does; not a field-by-field list of the wrong
schema's errors (config.kinds.refuse_other_kind, shipped.locate)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
CLUSTER = ROOT / "workloads" / "clusters" / "llama3.1-8b-chat.yaml"
SWEEP = ROOT / "workloads" / "sweeps" / "llama8b-batch.yaml"
PLAN = ROOT / "workloads" / "plans" / "llama3.1-8b-chat.yaml"
HARDWARE = ROOT / "hw_configs" / "sn40l-16.yaml"
STACK = ROOT / "stacks" / "sambastack-2025.yaml"


def _error(*args: str | Path) -> str:
    """The one error line of a command that must exit 2 without a traceback."""
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 2, (result.exit_code, result.output[-1500:], result.exception)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "given", "what"),
    [
        (("run",), PLAN, "a plan spec, not a workload file: `rdu-sim plan {}` runs it"),
        (("run",), SWEEP, "a sweep spec, not a workload file: `rdu-sim sweep {}` runs it"),
        (
            ("run",),
            HARDWARE,
            "a hardware file, not a workload file: a workload names it (hardware: {})",
        ),
        (("run",), STACK, "a serving stack, not a workload file: a workload names it (stack: {})"),
        (("step",), CLUSTER, "a cluster file, not a workload file: `rdu-sim run {}` runs it"),
        (("sweep",), WORKLOAD, "a workload file, not a sweep spec: `rdu-sim run {}` runs it"),
        (("plan",), CLUSTER, "a cluster file, not a plan spec: `rdu-sim run {}` runs it"),
        (
            ("calibrate",),
            WORKLOAD,
            "a workload file, not a calibration spec: `rdu-sim run {}` runs it",
        ),
    ],
)
def test_a_command_given_another_kind_of_file_says_what_it_is_and_how_it_is_used(
    args: tuple[str, ...], given: Path, what: str
) -> None:
    assert _error(*args, given) == f"error: {given}: this is {what.format(given)}"


@pytest.mark.parametrize(
    ("args", "name", "what"),
    [
        (
            ("run",),
            "llama8b-batch",
            "no shipped workload or cluster of that name, but a sweep "
            "spec: `rdu-sim sweep llama8b-batch` runs it",
        ),
        (
            ("sweep",),
            "llama3.1-8b-1socket",
            "no shipped sweep of that name, but a workload "
            "file: `rdu-sim run llama3.1-8b-1socket` runs it",
        ),
        (
            ("step",),
            "sn40l-16",
            "no shipped workload of that name, but a hardware file: a "
            "workload names it (hardware: sn40l-16)",
        ),
    ],
)
def test_a_shipped_name_of_another_kind_says_what_it_names(
    args: tuple[str, ...], name: str, what: str
) -> None:
    assert _error(*args, name) == f"error: {name}: {what}"


def test_a_name_no_kind_ships_still_lists_the_names_that_would_work() -> None:
    line = _error("run", "no-such-workload")
    assert "file not found, and no shipped workload or cluster of that name" in line
    assert "llama3.1-8b-1socket" in line and "rdu-sim examples" in line


def test_the_cluster_loader_refuses_a_workload_as_the_others_do() -> None:
    from rdu_sim.cluster.scenario import load_cluster
    from rdu_sim.config.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        load_cluster(WORKLOAD)
    (issue,) = caught.value.issues
    assert issue.message == (
        f"this is a workload file, not a cluster file: `rdu-sim run {WORKLOAD}` runs it"
    )


def test_a_sweeps_base_that_names_no_workload_says_what_it_names(tmp_path: Path) -> None:
    sweep = tmp_path / "s.yaml"
    for base, what in (
        ("deepseek-context", "'deepseek-context' names a shipped sweep spec, not a workload)"),
        ("llama3.1-8b-1sockt", "; a bare name is a shipped workload: deepseek-r1-128k-full, "),
    ):
        sweep.write_text(f"base: {base}\naxes:\n  serving.batch_slots: [1, 2]\n")
        line = _error("sweep", sweep)
        assert line.startswith(f"error: {sweep}:1: base: base workload "), line
        assert what in line, line


def test_a_stack_is_told_by_every_field_only_a_stack_has() -> None:
    # an overlay of a stack (extends: plus its own fields) is placed by those fields: each
    # field of StackConfig that no workload or hardware file has is one of STACK_KEYS
    from rdu_sim.config.gpu import GpuHardwareConfig
    from rdu_sim.config.hardware import HardwareConfig
    from rdu_sim.config.kinds import STACK_KEYS, file_kind
    from rdu_sim.config.stack import StackConfig
    from rdu_sim.config.workload import WorkloadConfig

    others = {*WorkloadConfig.model_fields, *HardwareConfig.model_fields}
    others |= set(GpuHardwareConfig.model_fields)
    assert set(StackConfig.model_fields) - others == STACK_KEYS
    assert file_kind({"extends": "tensorrt-llm", "max_batch_slots": 64}) == "stack"
