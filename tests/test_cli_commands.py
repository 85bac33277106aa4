"""The `rdu-sim` group: version, registry of commands, the input-error wrapper, stubs, schema."""

from __future__ import annotations

import gc
import importlib
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

import rdu_sim
from rdu_sim.cli.errors import RduGroup, boundary_errors
from rdu_sim.cli.main import COMMANDS, SUMMARIES, cli
from rdu_sim.config import ConfigError

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = str(REPO / "workloads" / "llama3.1-8b-1socket.yaml")


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    engine = "compiled" if rdu_sim.native.compiled() else "pure Python"
    assert result.stdout == f"rdu-sim, version {rdu_sim.__version__} ({engine})\n"


def test_console_script_installed() -> None:
    script = Path(sys.executable).parent / "rdu-sim"
    assert script.exists(), f"the rdu-sim console script is not installed beside {sys.executable}"
    result = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0 and rdu_sim.__version__ in result.stdout


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in (
        "run",
        "step",
        "check",
        "schema",
        "inspect",
        "sweep",
        "plot",
        "validate",
        "kv-demo",
    ):
        assert name in COMMANDS
        assert name in result.stdout


def test_help_summary_is_each_commands_own() -> None:
    # `--help` lists SUMMARIES without importing the commands: each must be the first
    # paragraph of the command's help, shortened by click exactly as the command's would be.
    assert set(SUMMARIES) == set(COMMANDS)
    for name, module_name in COMMANDS.items():
        command = importlib.import_module(module_name).command
        stub = click.Command(name, help=SUMMARIES[name])
        for limit in (30, 45, 80, 300):
            assert stub.get_short_help_str(limit) == command.get_short_help_str(limit), name


def test_help_imports_no_command_and_no_config() -> None:
    # The whole process of `rdu-sim --help` loads click and the group, nothing of the
    # simulator: what keeps it under its start-up budget (docs/performance.md).
    code = (
        "import sys\n"
        "from rdu_sim.cli.main import main\n"
        "sys.argv = ['rdu-sim', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('rdu_sim', 'pydantic', 'rich',"
        " 'numpy', 'simpy', 'yaml')))\n"
        "print(loaded, file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert "Commands:" in result.stdout and "step" in result.stdout
    loaded = result.stderr.strip()
    assert loaded == (
        "['rdu_sim', 'rdu_sim.cli', 'rdu_sim.cli.errors', 'rdu_sim.cli.main', "
        "'rdu_sim.cli.whole_output', 'rdu_sim.diagnostics', 'rdu_sim.input_errors', "
        "'rdu_sim.interrupts', 'rdu_sim.native', 'rdu_sim.sim_warnings']"
    )


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_module_exposes_one_click_command(name: str) -> None:
    module = importlib.import_module(COMMANDS[name])
    assert isinstance(module.command, click.Command)
    assert module.command.name == name
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0, result.output


def test_unknown_command() -> None:
    result = CliRunner().invoke(cli, ["simulate"])
    assert result.exit_code == 2
    assert "No such command" in result.stderr


def _group_raising(error: BaseException) -> click.Group:
    @click.group(cls=RduGroup)
    def group() -> None:
        pass

    @group.command()
    def boom() -> None:
        raise error

    return group


def test_wrapper_prints_input_errors_without_traceback() -> None:
    error = ConfigError.single("w.yaml", "serving.requests", "must be >= 1", 12)
    result = CliRunner().invoke(_group_raising(error), ["boom"])
    assert result.exit_code == 2
    assert result.stderr == "error: w.yaml:12: serving.requests: must be >= 1\n"
    assert isinstance(error, boundary_errors())


def test_wrapper_lets_bugs_show_their_traceback() -> None:
    result = CliRunner().invoke(_group_raising(ZeroDivisionError("a bug")), ["boom"])
    assert isinstance(result.exception, ZeroDivisionError)
    assert result.exit_code == 1


def test_every_input_error_subclass_is_one_line_at_the_boundary() -> None:
    # InputError is the one rule: a subclass is bad input without being listed anywhere
    from rdu_sim.compiler import CapacityError

    result = CliRunner().invoke(_group_raising(CapacityError("does not fit")), ["boom"])
    assert result.exit_code == 2 and result.stderr == "error: does not fit\n"
    assert isinstance(CapacityError("does not fit"), boundary_errors())


def test_input_error_in_subprocess_has_no_traceback(tmp_path: Path) -> None:
    """Through the real entry point: an input error is one line, no traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "rdu_sim.cli.main", "run", str(tmp_path / "missing.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["run", WORKLOAD, "--set", "serving.batch_slot=4"],
        ["run", WORKLOAD, "--json", "--set", "hw.socket.hbm.bandwith=2 TB/s"],
        ["run", WORKLOAD, "--set", "parallelism.tp=3"],
        ["run", WORKLOAD, "--set", "nonsense"],
        ["step", WORKLOAD, "--set", "kv.policy=magic"],
        ["inspect", "graph", WORKLOAD, "--set", "model=gpt-5"],
    ],
)
def test_commands_taking_a_workload_exit_2_on_bad_input(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ")
    key = args[-1].split("=")[0].removeprefix("hw.")
    assert key in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["run", WORKLOAD, "--set", "serving.requests=1", "--json"],
        ["step", WORKLOAD, "--set", "serving.batch_slots=1"],
    ],
)
def test_commands_accept_good_input(args: list[str]) -> None:
    """Good input runs and exits 0."""
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.exception is None


def test_plot_needs_existing_inputs(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["plot", str(tmp_path / "none.json")])
    assert result.exit_code == 2


@pytest.mark.parametrize("kind", ["workload", "hardware"])
def test_schema_is_json_schema(kind: str) -> None:
    result = CliRunner().invoke(cli, ["schema", kind])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["type"] == "object"
    if kind == "hardware":  # one of its kinds: SN40L sockets or a GPU system, or an overlay
        kinds = [schema["$defs"][ref["$ref"].rsplit("/", 1)[1]] for ref in schema["oneOf"]]
        titles = [k["title"] for k in kinds]
        assert titles == ["HardwareConfig", "GpuHardwareConfig", "HardwareOverlay"]
        assert all(k["additionalProperties"] is False for k in kinds[:2])
        assert kinds[2]["required"] == ["extends"]
    else:
        assert schema["additionalProperties"] is False


def test_schema_accepts_shipped_files_and_flags_typos() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    runner = CliRunner()
    schemas = {
        kind: json.loads(runner.invoke(cli, ["schema", kind]).stdout)
        for kind in ("workload", "hardware")
    }
    for kind, folder in (("workload", "workloads"), ("hardware", "hw_configs")):
        for path in sorted((REPO / folder).glob("*.yaml")):
            data = yaml.safe_load(path.read_text())
            jsonschema.validate(data, schemas[kind])
            if "extends" in data:  # an overlay: its fields are checked merged, by the loader
                continue
            section = "serving" if kind == "workload" else "gpu" if "gpu" in data else "socket"
            data[section]["typo_field"] = 1
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(data, schemas[kind])


def test_schema_validates_shipped_sweeps_plans_clusters_and_unit_strings() -> None:
    """`rdu-sim schema sweep` (and plan, cluster) accept every shipped file of their kind; a
    quantity with an unknown unit fails the hardware schema's pattern, as the loader would."""
    jsonschema = pytest.importorskip("jsonschema")
    runner = CliRunner()
    for kind, folder in (
        ("sweep", "workloads/sweeps"),
        ("plan", "workloads/plans"),
        ("cluster", "workloads/clusters"),
    ):
        schema = json.loads(runner.invoke(cli, ["schema", kind]).stdout)
        files = sorted((REPO / folder).glob("*.yaml"))
        assert files, folder
        for path in files:
            jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    hardware = json.loads(runner.invoke(cli, ["schema", "hardware"]).stdout)
    data = yaml.safe_load((REPO / "hw_configs" / "sn40l.yaml").read_text())
    data["socket"]["hbm"]["bandwidth"] = "1.8 TX/s"
    with pytest.raises(jsonschema.ValidationError, match="does not match"):
        jsonschema.validate(data, hardware)
    data["socket"]["hbm"]["bandwidth"] = "1.8e12"  # a bare number in a string: bytes/s
    jsonschema.validate(data, hardware)


def test_schema_rejects_unknown_kind() -> None:
    result = CliRunner().invoke(cli, ["schema", "nonsense"])
    assert result.exit_code == 2


@pytest.mark.parametrize("kind", ["workload", "hardware", "cluster", "plan", "sweep"])
def test_every_field_of_every_schema_says_what_it_is(kind: str) -> None:
    """Walk the schema: each property of the root and of every section has a description
    (an editor's hover text), directly or from the section it refers to."""
    schema = json.loads(CliRunner().invoke(cli, ["schema", kind]).stdout)
    owners = [("<root>", schema), *schema.get("$defs", {}).items()]
    missing = [
        f"{owner}.{name}"
        for owner, node in owners
        for name, field in node.get("properties", {}).items()
        if not str(field.get("description", "")).strip()
    ]
    assert missing == []


def test_a_command_freezes_its_imports_only_while_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The objects a command's import made are kept out of the garbage collector's passes
    while the command runs (``cli.main._import_frozen``), and are collectable again after it,
    so a process that calls the CLI many times keeps no garbage for good."""
    seen: list[int] = []

    @click.command("probe")
    def probe() -> None:
        seen.append(gc.get_freeze_count())

    module = type(sys)("rdu_sim_probe_cmd")
    module.command = probe  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rdu_sim_probe_cmd", module)
    monkeypatch.setitem(COMMANDS, "probe", "rdu_sim_probe_cmd")
    assert gc.get_freeze_count() == 0
    result = CliRunner().invoke(cli, ["probe"])
    assert result.exit_code == 0, result.output
    assert seen and seen[0] > 0
    assert gc.get_freeze_count() == 0


def test_a_command_looked_up_outside_a_run_freezes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Listing or completing commands imports them outside ``invoke``: nothing is frozen then
    (it would stay frozen for good, no invocation ending to unfreeze it)."""
    module = type(sys)("rdu_sim_probe_lookup")
    module.command = click.Command("lookup")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rdu_sim_probe_lookup", module)
    monkeypatch.setitem(COMMANDS, "lookup", "rdu_sim_probe_lookup")
    assert gc.get_freeze_count() == 0
    with click.Context(cli) as ctx:
        assert cli.get_command(ctx, "lookup") is module.command  # type: ignore[attr-defined]
    assert gc.get_freeze_count() == 0


def test_the_console_script_ends_with_everything_frozen() -> None:
    """``main`` is the process's last work: it freezes what is left, so the interpreter's
    collections at exit pass over none of it (docs/performance.md, the step command)."""
    code = (
        "import gc, sys\n"
        "from rdu_sim.cli.main import main\n"
        "sys.argv = ['rdu-sim', '--version']\n"
        "before = gc.get_freeze_count()\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(before, gc.get_freeze_count() > 1000)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 True"


def test_a_stop_wrapped_while_a_class_is_built_ends_as_a_stop() -> None:
    """A signal landing while an import builds a class reached the command wrapped: Python
    3.11 turns what a descriptor's __set_name__ raises into a RuntimeError (CI caught one in
    pydantic's GpuConfig and printed its traceback). It ends as the stop it is: one line,
    status 130. A RuntimeError of any other cause is still a bug's traceback."""
    import signal

    from rdu_sim.interrupts import Interrupted

    class Landing:
        def __set_name__(self, owner: type, name: str) -> None:
            raise Interrupted(signal.SIGINT)

    try:
        type("Built", (), {"field": Landing()})
    except BaseException as exc:  # the wrapping this Python does, if any
        raised: BaseException = exc
    result = CliRunner().invoke(_group_raising(raised), ["boom"])
    assert result.exit_code == 130
    assert result.stderr.startswith("interrupted (SIGINT)") and "Traceback" not in result.stderr
    bug = CliRunner().invoke(_group_raising(RuntimeError("a bug")), ["boom"])
    assert isinstance(bug.exception, RuntimeError)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["step", "llama3.1-8b-1socket", "--batch", "0"],
            "error: Invalid value for '--batch': 0 is not in the range 1<=x<=1000000 "
            "(see 'rdu-sim step --help')",
        ),
        (["run"], "error: Missing argument 'WORKLOAD' (see 'rdu-sim run --help')"),
        (["nope"], "error: No such command 'nope' (see 'rdu-sim --help')"),
    ],
)
def test_click_usage_errors_are_the_house_error_line(args: list[str], line: str) -> None:
    """Click printed a usage line, a hint and "Error: ..." (capital E) where every other
    error is one `error: ...` line; still exit 2."""
    result = CliRunner().invoke(cli, args, prog_name="rdu-sim")
    assert result.exit_code == 2
    assert result.stderr == line + "\n"
