"""SIGINT and SIGTERM stop a command cleanly (``rdu_sim.interrupts``): one line saying what
was kept, exit 128 + the signal, no traceback, no abort, every finished point kept, a rerun
resumes.

The commands run as ``rdu-sim`` runs (a subprocess in a session of its own, signalled as a
terminal signals: the whole process group; or, for SIGTERM, the command alone), with the
compiled core when the install has one (CI's ``pip install -e ".[dev]"``): before the fix a
signal landing in the compiled serving loop aborted it ("fatal: out of memory", SIGABRT),
mypyc taking the KeyboardInterrupt that CPython's big-integer multiplication raised from
its signal check for an allocation failure.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import create_model

from rdu_sim import interrupts
from rdu_sim.cli.main import NOT_STARTED
from rdu_sim.cli.run_cmd import NOTHING_WRITTEN
from rdu_sim.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
RESPONDS_S = 10.0  # a stopped command has ended by then (it takes well under a second)


def start(*args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rdu_sim.cli.entry", *map(str, args)],  # as rdu-sim starts
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's job
    )


def stop(proc: subprocess.Popen[str], signum: int, group: bool = True) -> tuple[int, str]:
    """Signal the command (its process group when ``group``); its status and stderr."""
    assert proc.poll() is None, proc.communicate()[1]
    if group:
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)
    start = time.monotonic()
    try:
        _, stderr = proc.communicate(timeout=RESPONDS_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"still running {RESPONDS_S} s after {signum}") from None
    assert time.monotonic() - start < RESPONDS_S
    return proc.returncode, stderr


def wait_for_workers(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> None:
    """Return once the command has spawned its pool (a child process), so the stop lands
    while its workers measure whatever the machine's speed; fails if it ends first."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    if not children.exists():  # a kernel without the children list: the import's time
        time.sleep(1.0)
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        if children.read_text().split():
            time.sleep(0.2)  # the workers are importing: the stop lands mid-measurement
            return
        time.sleep(0.02)
    raise AssertionError(f"no worker spawned within {timeout_s} s")


def interrupt_line(status: int, stderr: str, signum: int) -> str:
    """The command ended by the signal with one line saying so and nothing else of note
    (no traceback, no abort, no "Aborted!"); that line."""
    assert status == 128 + signum, stderr
    lines = [line for line in stderr.splitlines() if not line.startswith("rdu-sim: ")]
    for bad in ("Traceback", "fatal", "Aborted", "Error", "Exception"):
        assert bad not in stderr, stderr
    stopped = [line for line in lines if line.startswith("interrupted")]
    assert len(stopped) == 1 and lines[-1] == stopped[0], stderr
    assert stopped[0].startswith(f"interrupted ({signal.Signals(signum).name})")
    return stopped[0]


@pytest.mark.parametrize(
    ("after_s", "signum"),
    [(0.5, signal.SIGINT), (1.5, signal.SIGTERM), (3.0, signal.SIGINT)],
)
def test_a_run_stops_at_any_moment(after_s: float, signum: int) -> None:
    # A million requests: ~10 s and more; stopped while it imports, compiles or serves.
    proc = start("run", "llama3.1-8b-1socket", "--set", "serving.requests=1000000")
    time.sleep(after_s)
    line = interrupt_line(*stop(proc, signum), signum)
    assert line.split(": ", 1)[1] in (NOT_STARTED, NOTHING_WRITTEN)


def test_validate_stops_its_pool_too() -> None:
    # The figures suite runs its measurements in a pool of two spawned workers: they must
    # not print tracebacks (they start with the signals blocked) nor outlive the stop.
    proc = start("validate", "--quick")
    wait_for_workers(proc)
    line = interrupt_line(*stop(proc, signal.SIGTERM), signal.SIGTERM)
    assert line.endswith("the suite had not finished: nothing was printed")


SPEC = """
name: stop
set: {serving.requests: 12000}
axes:
  serving.batch_slots: [1, 2, 4, 8]
  serving.seed: [0, 1, 2, 3]
metrics: [decode_tokens_per_s]
"""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "stop.yaml"
    path.write_text(f"base: {BASE}\n" + textwrap.dedent(SPEC).lstrip("\n"))
    return path


def rows(db: Path) -> int:
    """Complete rows in the database (0 before it exists); it must be intact."""
    if not db.exists():
        return 0
    with sqlite3.connect(db, timeout=5) as conn:
        try:
            found = conn.execute("SELECT status, metrics FROM results").fetchall()
        except sqlite3.OperationalError:  # not created yet
            return 0
    assert all(status == "done" and metrics for status, metrics in found), found
    return len(found)


def wait_for_rows(proc: subprocess.Popen[str], db: Path, count: int) -> None:
    deadline = time.monotonic() + 60
    while rows(db) < count:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the sweep made no progress"
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("workers", "after_rows", "signum", "group"),
    [
        (1, 1, signal.SIGINT, True),
        (1, 5, signal.SIGTERM, False),
        (2, 1, signal.SIGINT, True),
        (2, 4, signal.SIGTERM, True),
        (2, 2, signal.SIGTERM, False),  # the sweep alone: it stops its workers itself
    ],
)
def test_a_sweep_stops_keeping_every_finished_point_and_resumes(
    spec: Path, tmp_path: Path, workers: int, after_rows: int, signum: int, group: bool
) -> None:
    db = tmp_path / "stop.sqlite"
    proc = start("sweep", spec, "--db", db, "--workers", str(workers), "--no-progress")
    wait_for_rows(proc, db, after_rows)
    line = interrupt_line(*stop(proc, signum, group), signum)
    saved = rows(db)
    assert after_rows <= saved < 16, line
    assert line.endswith(
        f"{saved} of 16 points are saved in {db} ({saved} finished now); run the same "
        "command again to resume"
    )
    again = run_sweep(spec, db=db, workers=1, evaluator=quick)  # resumes after the saved
    assert (again.already_done, again.ran, again.failed) == (saved, 16 - saved, 0)
    assert rows(db) == 16


def quick(point: object) -> dict[str, float]:
    """A stand-in evaluator for the rerun: what it runs, not what it computes, is tested."""
    return {"decode_tokens_per_s": 1.0}


@pytest.mark.slow
def test_a_dask_sweep_stops_keeping_every_finished_point(spec: Path, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    db = tmp_path / "stop.sqlite"
    proc = start("sweep", spec, "--db", db, "--cluster", "local", "--workers", "2", "--no-progress")
    wait_for_rows(proc, db, 2)
    line = interrupt_line(*stop(proc, signal.SIGINT), signal.SIGINT)
    saved = rows(db)
    assert 2 <= saved < 16 and line.startswith(f"interrupted (SIGINT): {saved} of 16 points")


def test_a_plan_stops_and_says_what_it_kept(tmp_path: Path) -> None:
    db = tmp_path / "plan.sqlite"
    proc = start("plan", "llama3.1-8b-chat", "--db", db)
    wait_for_rows(proc, db, 2)
    line = interrupt_line(*stop(proc, signal.SIGINT), signal.SIGINT)
    with sqlite3.connect(db) as conn:
        saved = conn.execute("SELECT count(*) FROM results").fetchone()[0]
    assert line == (
        f"interrupted (SIGINT): {saved} evaluations are saved in {db}; run the same command "
        "again to resume"
    )


# --- the mechanism, in this process ---------------------------------------------------------


def test_a_signal_outside_native_code_is_raised_where_it_lands() -> None:
    with interrupts.handling(), pytest.raises(interrupts.Interrupted) as stopped:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # a blocking wait is cut short
    assert (stopped.value.signum, stopped.value.status) == (signal.SIGTERM, 143)
    assert str(stopped.value) == "interrupted (SIGTERM)"


def test_a_signal_inside_native_code_is_raised_in_python_code_after_it() -> None:
    """Inside a native region the handler only queues the signal (it may run inside C code
    that must not fail); the helper thread raises it at the main thread's next bytecode."""
    handlers: list[object] = []

    @interrupts.native
    def compiled_core() -> None:
        handlers.append(signal.getsignal(signal.SIGINT))
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # Python code: the exception arrives in here
            pass

    with interrupts.handling(), pytest.raises(interrupts.Interrupted) as stopped:
        compiled_core()
    assert stopped.value.signum == signal.SIGINT
    assert handlers and getattr(handlers[0], "__name__", None) == "put"  # SimpleQueue.put


class _Tagged:
    """A tagged union whose tag is a Python callable, as the workload's model field: the
    signal handler raises inside it, where pydantic-core catches it (a failed lookup), warns
    and serializes on."""

    @staticmethod
    def model() -> Any:
        from pydantic import BaseModel, Discriminator, Tag

        def tag(value: Any) -> str:
            os.kill(os.getpid(), signal.SIGINT)
            return "name" if isinstance(value, str) else "model"

        class Architecture(BaseModel):
            layers: int = 1

        union = Annotated[
            Annotated[str, Tag("name")] | Annotated[Architecture, Tag("model")],
            Discriminator(tag),
        ]
        return create_model("Workload", model=(union, ...))


def test_a_stop_a_library_swallowed_is_raised_between_two_points(
    spec: Path, tmp_path: Path
) -> None:
    """A SIGINT landing in pydantic's serialization of a tagged union was lost: the sweep
    ran every point and exited 0 (CI, once). It is raised after the point it landed in."""
    workload = _Tagged.model()
    done: list[str] = []

    def evaluate(point: Any) -> dict[str, float]:
        done.append(point.key)
        if len(done) == 3:
            with pytest.warns(UserWarning, match="failed to get discriminator value"):
                workload.model_construct(model="llama-3.1-8b").model_dump()
            assert interrupts.received() == signal.SIGINT  # received, and swallowed
        return {"decode_tokens_per_s": 1.0}

    db = tmp_path / "lost.sqlite"
    with interrupts.handling(), pytest.raises(interrupts.Interrupted) as stopped:
        run_sweep(spec, db=db, workers=1, evaluator=evaluate)
    assert stopped.value.signum == signal.SIGINT and len(done) == 3
    assert rows(db) == 3 and "3 of 16 points are saved" in stopped.value.kept
    again = run_sweep(spec, db=db, workers=1, evaluator=quick)
    assert (again.already_done, again.ran) == (3, 13)


def test_what_an_executor_hands_over_after_a_stop_is_all_recorded() -> None:
    """An executor that caught the stop yields what its workers finished, then raises it
    again: every one is recorded. raise_lost took the stop as lost after the first one and
    threw it back in, and the rest were dropped."""
    from rdu_sim.sweep.run import _record_each

    def executor() -> Any:
        yield "a"
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # a pool's wait, cut short
        except interrupts.Interrupted:
            with interrupts.winding_down():
                yield from ("drained-1", "drained-2", "drained-3")
            raise

    recorded: list[str] = []
    with interrupts.handling(), pytest.raises(interrupts.Interrupted):
        _record_each(executor(), recorded.append)
    assert recorded == ["a", "drained-1", "drained-2", "drained-3"]


def test_a_signal_the_process_started_ignoring_stays_ignored() -> None:
    """A background job of a script starts with SIGINT ignored: the simulator leaves it so
    (a Ctrl-C meant for the terminal's foreground job does not stop it) and handles SIGTERM."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts.handling():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)  # ignored by the system: nothing is raised
            time.sleep(0.05)
            assert interrupts.received() is None
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # as it was before
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_deferred_section_finishes_before_the_signal_is_raised() -> None:
    done: list[str] = []
    with interrupts.handling(), pytest.raises(interrupts.Interrupted):
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            done.append("written")
        done.append("not reached")
    assert done == ["written"]


def test_what_a_stop_kept_is_said_once() -> None:
    with (
        pytest.raises(interrupts.Interrupted) as stopped,
        interrupts.kept_on_stop("outer"),
        interrupts.kept_on_stop("inner"),
    ):
        raise interrupts.Interrupted(signal.SIGINT)
    assert str(stopped.value) == "interrupted (SIGINT): inner"


def test_a_sigterm_after_a_sigint_is_the_same_stop_not_a_terminate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pool worker (``once``) ends at once on a second SIGTERM (``Process.terminate``), but a
    SIGTERM after a SIGINT is the group's signal delivered after the parent's: ending there
    could leave the pool's result queue locked (a 2-worker sweep then never shut down)."""
    exits: list[int] = []
    monkeypatch.setattr(interrupts.os, "_exit", exits.append)
    state = interrupts._state
    monkeypatch.setattr(state, "once", True)
    monkeypatch.setattr(state, "received", None)
    assert interrupts._counts(signal.SIGINT) is True
    assert interrupts._counts(signal.SIGTERM) is False and exits == []
    monkeypatch.setattr(state, "received", None)
    assert interrupts._counts(signal.SIGTERM) is True
    interrupts._counts(signal.SIGTERM)
    assert exits == [128 + signal.SIGTERM]


def test_commands_that_write_at_the_end_say_nothing_was_written_and_check_says_how_far() -> None:
    """step, compare and plot write their output once they finish: a stop says so (the
    README's promise of one line saying what was kept). check prints each file's line as it
    goes: a stop says how many it checked."""
    from click.testing import CliRunner

    import rdu_sim.cli.check_cmd as check_cmd
    from rdu_sim import api
    from rdu_sim.cli import compare_cmd, plot_cmd, step_cmd
    from rdu_sim.cli.main import cli

    def stopped(*_args: object, **_kwargs: object) -> None:
        raise interrupts.Interrupted(signal.SIGINT)

    runner = CliRunner()
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(api, "step", stopped)
        out = runner.invoke(cli, ["step", "llama3.1-8b-1socket"])
        assert out.exit_code == 130
        assert f"interrupted (SIGINT): {step_cmd.STOPPED}" in out.output
        assert "Traceback" not in out.output
        mp.setattr(compare_cmd, "compare", stopped)
        mp.setattr(api, "load", stopped)  # what plot reads first
        for args, module in (
            (["compare", "llama3.1-8b-1socket", "--hardware", "sn40l-8"], compare_cmd),
            (["plot", "memory", "llama3.1-8b-1socket", "-o", "never.png"], plot_cmd),
        ):
            out = runner.invoke(cli, args)
            assert out.exit_code == 130, out.output
            assert f"interrupted (SIGINT): {module.STOPPED}" in out.output
        calls: list[Path] = []
        real = check_cmd.check_file

        def second_stops(path: Path, *rest: Any) -> str:
            calls.append(path)
            if len(calls) == 2:
                stopped()
            return real(path, *rest)

        mp.setattr(check_cmd, "check_file", second_stops)
        out = runner.invoke(cli, ["check", "sn40l", "sn40l-8", "sn40l-16"])
        assert out.exit_code == 130
        assert "OK  sn40l:" in out.output
        assert "interrupted (SIGINT): 1 of 3 files checked (above), the rest not" in out.output
    finally:
        mp.undo()


def session_processes(session: int) -> list[int]:
    """Processes of this host in ``session`` (Linux's /proc: the stat file's 6th field)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_a_sweep_killed_outright_leaves_no_workers_behind(tmp_path: Path) -> None:
    """SIGKILL gives the sweep no chance to stop its pool: its workers, which hold their
    signals while idle, waited for tasks forever (and the forkserver with them). They now
    leave once the process that started their pool no longer runs."""
    spec = tmp_path / "slow.yaml"  # points that wait rather than compute
    spec.write_text(
        f"base: {BASE}\naxes: {{serving.batch_slots: [1, 2, 3, 4, 5, 6, 7, 8]}}\n"
        "metrics: [decode_tokens_per_s]\nevaluator: {name: synthetic, options: {sleep_s: 0.5}}\n"
    )
    db = tmp_path / "killed.sqlite"
    proc = start("sweep", spec, "--db", db, "--workers", "2", "--no-progress")
    wait_for_rows(proc, db, 1)  # the pool is up: its workers have run points
    assert len(session_processes(proc.pid)) >= 3  # the sweep, its forkserver, a worker
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    deadline = time.monotonic() + 30
    while session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = session_processes(proc.pid)
    for pid in left:  # not to leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert left == []


def test_a_run_says_what_it_kept_wherever_the_stop_lands(tmp_path: Path) -> None:
    """A stop between run's stages (checking --out, refusing an overwrite) says nothing was
    written, as one while it simulates does; one once the report is printed says so, and
    which --out files were written whole (each file is written whole or not at all)."""
    from click.testing import CliRunner

    from rdu_sim.cli import run_cmd
    from rdu_sim.cli.main import cli

    def stopped(*_args: object, **_kwargs: object) -> None:
        raise interrupts.Interrupted(signal.SIGINT)

    runner = CliRunner()
    small = ["--set", "serving.requests=4"]
    cluster = str(ROOT / "workloads" / "clusters" / "deepseek-r1-h100-chat.yaml")
    for target, args in (
        ("_check_out", ["run", "llama3.1-8b-1socket", *small]),
        ("refuse_overwrite", ["run", "llama3.1-8b-1socket", *small, "--out", str(tmp_path)]),
        ("_check_out", ["run", cluster]),
    ):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(run_cmd, target, stopped)
            out = runner.invoke(cli, args)
        assert out.exit_code == 130, out.output
        assert out.output.strip().endswith(f"interrupted (SIGINT): {NOTHING_WRITTEN}"), target

    # stopped between --out and --trace, an older trace beside: the line names exactly what
    # this run wrote, what it did not, and that the trace there is not this run's
    out_dir, trace = tmp_path / "out", tmp_path / "tr.json"
    trace.write_text("{}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("rdu_sim.report.serving_trace.write_serving_trace", stopped)
        out = runner.invoke(
            cli,
            ["run", "llama3.1-8b-1socket", *small, "--out", str(out_dir), "--trace", str(trace)],
        )
    assert out.exit_code == 130, out.output
    *report, last = out.output.strip().splitlines()
    assert any("llama3.1-8b-1socket" in line for line in report)  # the report, printed
    written = ", ".join(str(out_dir / n) for n in ("result.json", "requests.csv", "timeseries.csv"))
    assert last == (
        f"interrupted (SIGINT): the report was printed; written whole: {written}; not "
        f"written: {trace} (an older copy from before this run is there)"
    )
    assert trace.read_text() == "{}"

    # stopped inside --out, after its first file: the three are written as one set, so none
    # is (result.json was written whole to its temporary file, removed), and the line says so
    def requests_stop(path: Path, *args: Any, **kwargs: Any) -> None:
        if path.name == "requests.csv":
            stopped()

    fresh = tmp_path / "fresh"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("rdu_sim.report.files.write_columns", requests_stop)
        out = runner.invoke(cli, ["run", "llama3.1-8b-1socket", *small, "--out", str(fresh)])
    assert out.output.strip().splitlines()[-1] == (
        f"interrupted (SIGINT): the report was printed; not written: {fresh / 'result.json'}, "
        f"{fresh / 'requests.csv'}, {fresh / 'timeseries.csv'}"
    )
    assert list(fresh.iterdir()) == []  # no temporary file left either
    # over an older run's set: all three are the older run's still, and said to be
    older = {name: (out_dir / name).read_bytes() for name in ("result.json", "requests.csv")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("rdu_sim.report.files.write_columns", requests_stop)
        out = runner.invoke(cli, ["run", "llama3.1-8b-1socket", *small, "--out", str(out_dir)])
    there = " (an older copy from before this run is there)"
    assert out.output.strip().splitlines()[-1] == (
        "interrupted (SIGINT): the report was printed; not written: "
        + ", ".join(
            f"{out_dir / n}{there}" for n in ("result.json", "requests.csv", "timeseries.csv")
        )
    )
    assert {name: (out_dir / name).read_bytes() for name in older} == older


def _console_script() -> tuple[str, str]:
    """The module and function pyproject's [project.scripts] names for `rdu-sim`."""
    import tomllib

    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = target["rdu-sim"].partition(":")
    return module, function


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_console_script_imports_click_is_one_line(signum: int) -> None:
    """Ctrl-C in the first tenth of a second (while `import click` ran) printed a
    KeyboardInterrupt traceback: the console script's entry point holds the signals before
    the command's heavy imports and ends with the one line, 128 + the signal."""
    module, function = _console_script()
    code = textwrap.dedent(
        f"""
        import builtins, os, sys
        real = builtins.__import__
        def importing(name, *args, **kwargs):
            if name == "click" and "click" not in sys.modules:
                os.kill(os.getpid(), {int(signum)})
            return real(name, *args, **kwargs)
        builtins.__import__ = importing
        sys.argv = ["rdu-sim", "check", {str(BASE)!r}]
        from {module} import {function} as entry
        sys.exit(entry())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    name = signal.Signals(signum).name
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr == f"interrupted ({name}): {NOT_STARTED}\n"
    assert done.returncode == 128 + signum and done.stdout == ""


def test_a_stopped_rerun_says_to_resume_without_rerun(spec: Path, tmp_path: Path) -> None:
    """After `sweep --rerun` is stopped, "run the same command again to resume" was wrong:
    the same command (with --rerun) starts over. The stop says to run it without."""
    db = tmp_path / "rerun.sqlite"
    run_sweep(spec, db=db, workers=1, evaluator=quick)
    done: list[str] = []

    def evaluate(point: Any) -> dict[str, float]:
        done.append(point.key)
        if len(done) == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return {"decode_tokens_per_s": 1.0}

    with interrupts.handling(), pytest.raises(interrupts.Interrupted) as stopped:
        run_sweep(spec, db=db, workers=1, evaluator=evaluate, rerun=True)
    assert "run the same command without --rerun to resume" in stopped.value.kept
    assert "run the same command again to resume" not in stopped.value.kept
    with interrupts.handling(), pytest.raises(interrupts.Interrupted) as plain:
        done.clear()
        run_sweep(spec, db=tmp_path / "plain.sqlite", workers=1, evaluator=evaluate)
    assert plain.value.kept.endswith("run the same command again to resume")


def test_a_stop_outside_the_points_runs_still_says_what_was_kept(
    spec: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C 2-3 s into a sweep (while it resolved its points and read its traces, before
    the first run) or as it ended (rebuilding its view) printed only "interrupted (SIGINT)":
    the kept words were added only around the points' runs."""
    from rdu_sim.plan import search
    from rdu_sim.sweep import run as run_module

    def stop(*args: object, **kwargs: object) -> None:
        raise interrupts.Interrupted(signal.SIGINT)

    db = tmp_path / "early.sqlite"
    with monkeypatch.context() as patched:
        patched.setattr(run_module, "check_traces", stop)
        with pytest.raises(interrupts.Interrupted) as early:
            run_sweep(spec, db=db, workers=1, evaluator=quick)
    assert early.value.kept == "nothing was run or written yet"
    with monkeypatch.context() as patched:
        patched.setattr(run_module, "_refresh_view", stop)
        with pytest.raises(interrupts.Interrupted) as late:
            run_sweep(spec, db=db, workers=1, evaluator=quick)
    assert late.value.kept == (
        f"the points finished so far are saved in {db}; run the same command again to resume"
    )
    assert rows(db) == 16
    monkeypatch.setattr(search, "load_plan", stop)
    with pytest.raises(interrupts.Interrupted) as planned:
        search.run_plan("llama3.1-8b-chat", db=tmp_path / "plan.sqlite")
    assert planned.value.kept == "nothing was run or written yet"


# the arguments each command needs to be parsed (what it then does is stopped at once)
_ARGS = {
    "run": ["run", "llama3.1-8b-1socket"],
    "step": ["step", "llama3.1-8b-1socket"],
    "check": ["check", "sn40l"],
    "schema": ["schema", "workload"],
    "inspect": ["inspect", "graph", "llama3.1-8b-1socket"],
    "sweep": ["sweep", "llama8b-batch"],
    "plan": ["plan", "x.yaml"],
    "plot": ["plot", "memory", "llama3.1-8b-1socket"],
    "validate": ["validate", "--quick"],
    "calibrate": ["calibrate", "x.yaml"],
    "compare": ["compare", "llama3.1-8b-1socket"],
    "kv-demo": ["kv-demo"],
    "examples": ["examples"],
}


@pytest.mark.parametrize("name", sorted(_ARGS))
def test_every_command_s_stop_says_what_was_kept(name: str) -> None:
    """A stop in a command that says nothing itself (inspect graph, kv-demo, schema,
    validate --quick early, plan while its spec loads: a bare "interrupted (SIGINT)")
    says what was kept, the README's one line, for every command."""
    import importlib

    import click
    from click.testing import CliRunner

    from rdu_sim.cli.main import COMMANDS, STOPS, cli

    assert set(STOPS) == set(COMMANDS) == set(_ARGS)

    def stopped(*_args: object, **_kwargs: object) -> None:
        raise interrupts.Interrupted(signal.SIGINT)

    command = importlib.import_module(COMMANDS[name]).command
    leaf = command
    if isinstance(command, click.Group) and _ARGS[name][1:2]:
        leaf = command.commands.get(_ARGS[name][1], command)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(leaf, "callback", stopped)
        out = CliRunner().invoke(cli, _ARGS[name])
    assert out.exit_code == 130, out.output
    assert out.output.strip().splitlines()[-1] == f"interrupted (SIGINT): {STOPS[name]}"


def test_a_plan_stopped_while_its_spec_loads_says_nothing_was_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    import rdu_sim.plan
    from rdu_sim.cli.main import STOPS, cli

    def stopped(*_args: object, **_kwargs: object) -> None:
        raise interrupts.Interrupted(signal.SIGINT)

    monkeypatch.setattr(rdu_sim.plan, "load_plan", stopped)
    out = CliRunner().invoke(cli, ["plan", str(ROOT / "workloads" / "plans" / "x.yaml")])
    assert out.exit_code == 130, out.output
    assert out.output.strip() == f"interrupted (SIGINT): {STOPS['plan']}"
