"""Issue 45's calibrate reproducers, one test per root cause, and a property-based test over
the calibrate options: every input ends in a result or one `error:` line with exit 2, nothing
is written over an input, and nothing is simulated before every row is checked."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rdu_sim.cli.main import cli
from rdu_sim.validate import targets
from rdu_sim.validate.deployment import MeasuredPoint, Simulated

H = "hardware,model,tp,batch,input_tokens,output_tokens,metric,measured_s"
F = "stack.host.serial_per_step=0:2ms"
ROW = "sn40l,llama-3.2-1b,1,1,16,4,e2e_s,0.01"


def _fake_run(point: MeasuredPoint, overrides: Any = ()) -> Simulated:
    """A stand-in for the simulation: a value that moves with every override, at once."""
    shift = sum(len(o.split()[0]) for o in overrides) % 7  # the text before a unit
    return Simulated(point.measured * (1.0 + 0.01 * shift), 1)


@pytest.fixture
def fake_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(targets, "simulate_run", _fake_run)


@pytest.fixture
def measured(tmp_path: Path) -> Path:
    path = tmp_path / "m.csv"
    path.write_text(f"{H}\n{ROW}\n{ROW.replace(',1,1,16,', ',1,2,16,')}\n")
    return path


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["calibrate", *args])


def _one_error(result: Result, *words: str) -> str:
    """Exit 2, one `error:` line holding every word, no traceback."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_1_the_output_is_a_folder_and_an_empty_name_is_refused(
    measured: Path, fake_runs: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-o .` raised ValueError (a cache path derived from an empty name); `-o ''` too."""
    monkeypatch.chdir(tmp_path)
    done = _run(str(measured), "--fit", F, "-o", ".", "--max-evaluations", "2")
    assert done.exit_code == 0, done.output
    assert (tmp_path / "sambastack-2025-calibrated.yaml").is_file()
    assert (tmp_path / "fit.json").is_file()
    assert (tmp_path / "evaluations.jsonl").is_file()
    _one_error(_run(str(measured), "--fit", F, "-o", ""), "-o", "empty")
    _one_error(_run(str(measured), "--fit", F, "--cache", ""), "--cache", "empty")
    _one_error(_run(str(measured), "--fit", F, "-o", str(measured)), "not a folder")


def test_1_an_output_folder_that_cannot_be_written_fails_before_simulating(
    measured: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder below a regular file (tests run as root, which ignores permission bits)."""
    monkeypatch.setattr(targets, "simulate_run", lambda *a: pytest.fail("simulated"))
    _one_error(
        _run(str(measured), "--fit", F, "-o", f"{measured}/sub"), "exists and is not a folder"
    )


def test_4_a_cache_line_is_input_and_is_checked(
    measured: Path, fake_runs: None, tmp_path: Path
) -> None:
    """A cache line matching the key but holding a short list, a negative, zero, NaN, inf or
    1e308 raised IndexError or a ValueError from the fit: each is one error naming the line."""
    out = tmp_path / "o"
    args = [str(measured), "--fit", F, "-o", str(out), "--max-evaluations", "1"]
    assert _run(*args).exit_code == 0
    cache = out / "evaluations.jsonl"
    lines = cache.read_text().splitlines()
    first = json.loads(lines[0])
    for values, words in [
        ([], "values is not a list"),
        ([1.0, 2.0], "holds 2 row value(s) where this row unit has 1"),
        ([-1.0], "outside (0, 1e12]"),
        ([0.0], "outside (0, 1e12]"),
        ([float("nan")], "outside (0, 1e12]"),
        ([float("inf")], "outside (0, 1e12]"),
        ([1e308], "outside (0, 1e12]"),
        (["1"], "not a number"),
        ([True], "not a number"),
    ]:
        line = {**first, "values": values, "batch_slots": [1] * len(values)}
        cache.write_text("\n".join([json.dumps(line), *lines[1:]]) + "\n")
        _one_error(_run(*args), f"{cache}:1", words)
    cache.write_text("not json\n")
    _one_error(_run(*args), f"{cache}:1", "not a JSON line")
    # a last line cut short by a stop is dropped, and the fit goes on
    cache.write_text("\n".join(lines) + "\n" + lines[0][:20])
    assert _run(*args).exit_code == 0
    assert all(json.loads(line) for line in cache.read_text().splitlines())


@pytest.mark.timeout(60)
def test_5_a_fifo_as_output_or_cache_is_refused_not_waited_on(
    measured: Path, fake_runs: None, tmp_path: Path
) -> None:
    """`-o` or `--cache` naming a FIFO with no reader blocked forever."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _one_error(_run(str(measured), "--fit", F, "-o", str(fifo)), "not a folder")
    out = tmp_path / "o"
    _one_error(
        _run(str(measured), "--fit", F, "-o", str(out), "--cache", str(fifo)),
        "not a regular file",
    )
    out.mkdir()
    os.mkfifo(out / "fit.json")
    _one_error(_run(str(measured), "--fit", F, "-o", str(out)), "not a regular file")


def test_6_an_empty_hardware_is_refused_and_a_given_one_is_recorded(
    measured: Path, fake_runs: None, tmp_path: Path
) -> None:
    """`--hardware ''` with two hardware files silently fitted the first, and the recorded
    command dropped the option."""
    two = tmp_path / "two.csv"
    two.write_text(f"{H}\n{ROW}\n{ROW.replace('sn40l,', 'sn40l-8,').replace(',1,1,', ',8,1,')}\n")
    _one_error(_run(str(two), "--fit", F, "--hardware", ""), "--hardware", "empty")
    efficiency = "hw.socket.hbm.efficiency=0.5:1"
    _one_error(
        _run(str(two), "--fit", efficiency, "-o", str(tmp_path)), "2 machines (sn40l-8, sn40l)"
    )
    out = tmp_path / "o"
    done = _run(
        str(two), "--fit", F, "--hardware", "sn40l", "-o", str(out), "--max-evaluations", "1"
    )
    assert done.exit_code == 0, done.output
    overlay = out / "sambastack-2025-calibrated.yaml"
    assert "--hardware=sn40l" in overlay.read_text().splitlines()[0]


def _folder(root: Path, name: str, base: str) -> Path:
    """A folder of a hardware file named hw.yaml and rows on it under its default stack and
    under none."""
    folder = root / name
    folder.mkdir()
    (folder / "hw.yaml").write_text(yaml.safe_dump({"extends": base, "name": f"{name}-hw"}))
    rows = [f"hw.yaml,{stack},llama-3.2-1b,1,1,16,4,e2e_s,0.01" for stack in ("", "none")]
    (folder / "m.csv").write_text(
        "\n".join([H.replace("hardware,", "hardware,stack,"), *rows]) + "\n"
    )
    return folder


def test_7_two_files_named_alike_are_two_machines(fake_runs: None, tmp_path: Path) -> None:
    """Two folders' hw.yaml (one extending sn40l, one dgx-h100), named by the same string in
    two CSVs, were fitted as one machine."""
    a, b = _folder(tmp_path, "a", "sn40l"), _folder(tmp_path, "b", "dgx-h100")
    both = [str(a / "m.csv"), str(b / "m.csv")]
    latency = "hw.system.intra_node_link.latency=0:10us"
    message = _one_error(_run(*both, "--fit", latency, "-o", str(tmp_path)), "2 machines")
    assert str(a / "hw.yaml") in message and str(b / "hw.yaml") in message
    out = tmp_path / "o"
    scoped = f"{a / 'hw.yaml'}:{latency}"
    done = _run(*both, "--fit", scoped, "-o", str(out), "--max-evaluations", "1", "--json")
    assert done.exit_code == 0, done.output
    fit = json.loads(done.stdout)
    assert len(fit["targets"]) == 4 and fit["parameters"][0]["scope"] == "hw"
    overlay = yaml.safe_load((out / "hw-calibrated.yaml").read_text())
    assert overlay["extends"] == "../a/hw.yaml"  # a's file, not b's


def test_8_a_field_fitted_twice_on_the_same_rows_is_refused(measured: Path) -> None:
    """--fit naming one path twice silently dropped the earlier bounds."""
    _one_error(
        _run(str(measured), "--fit", F, "--fit", "stack.host.serial_per_step=0:1ms"), "fitted twice"
    )
    _one_error(
        _run(
            str(measured), "--fit", F, "--fit", "sambastack-2025:stack.host.serial_per_step=0:1ms"
        ),
        "fitted twice",
    )


def test_12_a_recorded_word_with_a_line_break_keeps_the_overlay_valid_yaml(
    measured: Path, fake_runs: None, tmp_path: Path
) -> None:
    """`--set "name='a\\nb'"` wrote a hardware file that was not valid YAML (a newline in a
    recorded word ended the comment)."""
    out = tmp_path / "o"
    for value in ("name='a\nb'", "name=a\u2028b", "name=a\x85b", "name=a\rb"):
        done = _run(
            str(measured), "--fit", F, "-o", str(out), "--set", value, "--max-evaluations", "1"
        )
        assert done.exit_code == 0, done.output
        text = (out / "sambastack-2025-calibrated.yaml").read_text()
        data = yaml.safe_load(text)
        assert data["extends"] == "sambastack-2025" and set(data) == {"extends", "name", "host"}
        assert all(line.startswith("#") for line in text.splitlines()[:3])


def test_13_calibrate_never_writes_over_its_inputs(
    measured: Path, fake_runs: None, tmp_path: Path
) -> None:
    """`--cache m.csv` appended JSON lines to the measurement file; `-o m.csv` overwrote it."""
    before = measured.read_text()
    _one_error(_run(str(measured), "--fit", F, "--cache", str(measured)), "calibrate's inputs")
    _one_error(_run(str(measured), "--fit", F, "-o", str(measured)), "not a folder")
    # an overlay passed back is an input: its own folder's fit would write over it
    out = tmp_path / "o"
    assert _run(str(measured), "--fit", F, "-o", str(out), "--max-evaluations", "1").exit_code == 0
    overlay = out / "sambastack-2025-calibrated.yaml"
    kept = overlay.read_text()
    _one_error(
        _run(str(measured), "--fit", F, "--overlay", str(overlay), "-o", str(out)),
        "calibrate's inputs",
    )
    # a measurement file named like an output, in the output folder
    inside = out / "fit.json"
    inside.write_text(f"{H}\n{ROW}\n")
    _one_error(_run(str(inside), "--fit", F, "-o", str(out)), "calibrate's inputs")
    assert measured.read_text() == before and overlay.read_text() == kept


def test_14_every_row_is_checked_before_the_first_simulation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unknown model on row 1,201 errored after 31 s of simulation."""
    monkeypatch.setattr(targets, "simulate_run", lambda *a: pytest.fail("simulated"))
    rows = [ROW.replace(",1,1,16,", f",1,{1 + i % 4},{16 + i},") for i in range(1200)]
    path = tmp_path / "big.csv"
    path.write_text("\n".join([H, *rows, ROW.replace("llama-3.2-1b", "llama-9")]) + "\n")
    _one_error(_run(str(path), "--fit", F), "big.csv:1202: model:")
    for last, column in [
        (ROW.replace("llama-3.2-1b,1,", "llama-3.2-1b,3,"), "tp"),
        (ROW.replace("sn40l,", "nope,"), "hardware"),
    ]:
        path.write_text("\n".join([H, *rows[:3], last]) + "\n")
        _one_error(_run(str(path), "--fit", F), f"big.csv:5: {column}:")
    stacked = f"{H},stack,weights"
    for cells, column in [(",nope,", "stack"), (",,fp7", "weights")]:
        path.write_text(f"{stacked}\n{ROW},,\n{ROW}{cells}\n")
        _one_error(_run(str(path), "--fit", F), f"big.csv:3: {column}:")


def test_a_bound_its_field_refuses_is_named_before_simulating(
    measured: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(targets, "simulate_run", lambda *a: pytest.fail("simulated"))
    _one_error(
        _run(str(measured), "--fit", "stack.host.serial_per_step=0:5s"),
        "--fit: stack.host.serial_per_step=0:5s: at its high bound",
    )
    _one_error(
        _run(str(measured), "--fit", "stack.host.serial_per_step=0:5"),
        "at its high bound (5 s)",
    )


class _Simulated(Exception):
    """Raised where a calibration would start simulating: its bounds were accepted."""


def test_a_fitted_time_is_set_with_its_unit(
    measured: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bound of 0.5 s is a host time its field allows: calibrate sets it as ``0.5 s``. Set
    bare, the config would take it for a forgotten unit (a bare latency or overhead of 0.1 s
    or more) and refuse a bound the user wrote with its unit."""

    def simulated(*args: object) -> None:
        raise _Simulated

    monkeypatch.setattr(targets, "simulate_run", simulated)
    result = _run(str(measured), "--fit", "stack.host.serial_per_step=0:0.5s")
    assert isinstance(result.exception, _Simulated), result.output


FITS = st.sampled_from(
    [F, "stack.host.serial_per_step=0:1", "sn40l:" + F, "hw.x=1", "stack.host.serial_per_step=2:1",
     "dgx-h100:" + F, "stack.host.serial_per_step=0:1", "hw.socket.hbm.efficiency=0.5:1",
     "stack.host.serial_per_slot=0:1e999", ":" + F, "a:b:c=1:2", "", "=", "hw.=0:1"]
)  # fmt: skip
HOLDOUTS = st.sampled_from(
    ["tp=1", "model=llama-3.2-1b", "batch=1", "0.25", "metric=e2e_s,tp=1", "stack=x", "=", ","]
)
OPTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("--fit"), FITS),
        st.tuples(st.just("--holdout"), HOLDOUTS),
        st.tuples(st.just("--tolerance"), st.sampled_from(["0", "-1", "0.1", "nan", "1e9", "x"])),
        st.tuples(st.just("--max-evaluations"), st.sampled_from(["0", "1", "2", "99999", "z"])),
        st.tuples(st.just("--hardware"), st.sampled_from(["", "sn40l", "dgx-h100", "../x"])),
        st.tuples(st.just("--workers"), st.sampled_from(["0", "1", "-3"])),
        st.tuples(st.just("--set"), st.sampled_from(["serving.seed=1", "bad", "hw.x=1", "a=\n"])),
        st.tuples(st.just("--figures"), st.just("")),
    ),
    max_size=5,
)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(options=OPTIONS)
def test_any_options_end_in_a_result_or_one_clean_error(
    options: list[tuple[str, str]], measured: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever options are given, calibrate fits and exits 0, or prints one `error:` line
    (click's one `Error:` line for an option of the wrong type) and exits 2 (the simulation
    is a stand-in: the options are what is tested)."""
    monkeypatch.setattr(targets, "simulate_run", _fake_run)
    monkeypatch.setattr(
        targets.FiguresUnit,
        "run",
        lambda self, overrides: targets.Evaluated(tuple(1.0 for _ in self.names)),
    )
    args = [str(measured), "-o", str(tmp_path / "o")]
    for option, value in options:
        args.extend([option] if option == "--figures" else [option, value])
    if "--max-evaluations" not in args:
        args.extend(["--max-evaluations", "2"])
    result = _run(*args)
    if result.exit_code == 0:
        assert json.loads((tmp_path / "o" / "fit.json").read_text())["parameters"]
        return
    if re.search(r"^Error: ", result.output, re.M):  # click's usage error: an option's type
        assert result.exit_code == 2 and result.output.count("Error:") == 1, result.output
        return
    _one_error(result)


def test_calibrate_names_every_bad_row_as_validate_does(tmp_path: Path) -> None:
    """calibrate resolves its rows by the deployment suite's rule: every bad row named, in
    line order, not only the first, and the same lines ``validate --suite deployment``
    prints."""
    path = tmp_path / "two.csv"
    path.write_text(
        f"{H}\n{ROW}\n{ROW.replace('llama-3.2-1b', 'llama-9')}\n{ROW.replace('sn40l,', 'nope,')}\n"
    )
    result = _run(str(path), "--fit", F, "-o", str(tmp_path / "o"))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert [re.search(r"two.csv:\d+: \w+", line)[0] for line in lines] == [  # type: ignore[index]
        "two.csv:3: model",
        "two.csv:4: hardware",
    ]
    suite = CliRunner().invoke(cli, ["validate", "--suite", "deployment", str(path)])
    assert [line for line in suite.output.splitlines() if line.startswith("error:")] == lines


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ("sn40l,llama-3.2-1b,1,auto,1000000,1048576,1048576,output_tokens_per_s,100", "exceeds"),
        ("sn40l,llama-3.2-1b,1,auto,1000000,16,16,output_tokens_per_s,100", "serving.max_work"),
        ("sn40l,llama-3.2-1b,1,65536,1000000,16,16,output_tokens_per_s,100", "KV cache of 65,536"),
    ],
)
def test_absurd_rows_end_in_one_error_naming_the_row_at_once(
    tmp_path: Path, row: str, words: str
) -> None:
    """The full-load format's bounds: a row asking for a context its model cannot hold, a
    run too large to simulate, or a batch no memory holds, is one error naming its row,
    within seconds."""
    import time

    path = tmp_path / "absurd.csv"
    header = "hardware,model,tp,batch,requests,input_tokens,output_tokens,metric,measured"
    path.write_text(f"{header}\n{row}\n")
    began = time.perf_counter()
    _one_error(_run(str(path), "--fit", F, "-o", str(tmp_path / "o")), "absurd.csv:2:", words)
    assert time.perf_counter() - began < 30


def test_an_error_line_counts_its_targets_in_words() -> None:
    """One target is "1 target" (was "1 targets"), in the printed summary and the overlays."""
    from rdu_sim.cli.calibrate_cmd import _errors_line
    from rdu_sim.validate.deployment import ErrorSummary

    one = _errors_line(ErrorSummary("fitted", 1, 0.05, 0.05, "m.csv:2"))
    many = _errors_line(ErrorSummary("fitted", 1200, 0.05, 0.05, "m.csv:2"))
    assert one.startswith("fitted: 1 target, median |error| 5") and "m.csv:2" in one, one
    assert many.startswith("fitted: 1,200 targets,"), many


@pytest.mark.parametrize(
    "fit",
    [
        "stack.host.serial_per_stepp=0:3ms",
        "stack.host.serial_per_stepp=0:3",
        "stack.host.serial_per_stepp=0 s:3 ms",
        "sn40l:hw.socket.hbm.bandwith=1 TB/s:2 TB/s",
    ],
)
def test_a_misspelt_field_is_named_whatever_form_its_bounds_take(
    measured: Path, monkeypatch: pytest.MonkeyPatch, fit: str
) -> None:
    """A bound with a unit on an unknown field read "cannot read '3ms' as a number (the
    field has no unit)": the field is checked first, with the loader's did-you-mean."""
    monkeypatch.setattr(targets, "simulate_run", lambda *a: pytest.fail("simulated"))
    line = _one_error(_run(str(measured), "--fit", fit), "unknown field", "did you mean")
    assert "cannot read" not in line and "as a number" not in line


STEP = "stack.host.serial_per_step"
NONE_HELD = "held_out: []"
SPEC = """\
name: t
measurements: [m.csv]
fit:
  - "stack.host.serial_per_slot=0:1ms"
  - "{fit}"
{held}
"""


@pytest.mark.parametrize(
    ("fit", "held", "words"),
    [
        # a bare bound is seconds: its error is the spec's entry, not a --set
        (f"{STEP}=0:3000", NONE_HELD, "spec.yaml:5: fit.1: at its high bound (3000 s)"),
        (f"{STEP}p=0:3ms", NONE_HELD, "spec.yaml:5: fit.1: stack.host.serial_per_stepp: unknown"),
        (f"nope:{STEP}=0:3ms", NONE_HELD, "spec.yaml:5: fit.1: no serving stack"),
        (f"{STEP}=3ms:0", NONE_HELD, "spec.yaml:5: fit.1: stack.host.serial_per_step: needs"),
        (f"{STEP}=0:3ms", "held_out:\n  - {tp: 9}", "spec.yaml:7: held_out.0: tp=9: no measured"),
        (
            f"{STEP}=0:3ms",
            "held_out:\n  - {tpp: 1}",
            "spec.yaml:7: held_out.0.tpp: unknown key 'tpp'; did you mean 'tp'?",
        ),
    ],
)
def test_a_spec_entry_error_names_the_spec_its_line_and_entry(
    measured: Path, monkeypatch: pytest.MonkeyPatch, fit: str, held: str, words: str
) -> None:
    monkeypatch.setattr(targets, "simulate_run", lambda *a: pytest.fail("simulated"))
    spec = measured.parent / "spec.yaml"
    spec.write_text(SPEC.format(fit=fit, held=held))
    line = _one_error(_run(str(spec), "-o", str(measured.parent / "o")), words)
    assert "--fit" not in line and "--holdout" not in line and "--set" not in line, line


def test_max_evaluations_out_of_range_is_one_error_line(measured: Path) -> None:
    _one_error(
        _run(str(measured), "--fit", F, "--max-evaluations", "0"),
        "--max-evaluations: must be at least 1 (got 0)",
    )


def test_a_stack_is_named_in_scopes_and_groups_as_calibrate_prints_it(
    fake_runs: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stack file mystack.yaml whose `name:` is labserve was printed as `mystack:...`,
    but --fit took only `mystack.yaml:`: what calibrate prints as a scope is accepted back
    by --fit and --holdout, its `name:` too, and a scope naming nothing lists the names."""
    monkeypatch.chdir(tmp_path)  # a --fit scope written as a path is the current folder's
    (tmp_path / "mystack.yaml").write_text("extends: sambastack-2025\nname: labserve\n")
    rows = tmp_path / "m.csv"
    rows.write_text(f"{H},stack\n{ROW},mystack.yaml\n{ROW.replace(',1,1,16,', ',1,2,16,')},\n")
    out = tmp_path / "o"
    first = _run(str(rows), "--fit", f"mystack.yaml:{F}", "-o", str(out), "--max-evaluations", "1")
    assert first.exit_code == 0, first.output
    scope = json.loads((out / "fit.json").read_text())["parameters"][0]["scope"]
    # one fit step stops at the budget: the value is told as not converged, by the same name
    assert f"not converged: {scope}:stack.host.serial_per_step" in first.output
    for name in (scope, "labserve"):
        again = _run(str(rows), "--fit", f"{name}:{F}", "-o", str(out), "--max-evaluations", "1")
        assert again.exit_code == 0, again.output
    line = _one_error(_run(str(rows), "--fit", f"nope:{F}", "-o", str(out)), "no serving stack")
    assert "mystack (or labserve)" in line and "sambastack-2025" in line
    for name in (scope, "labserve"):
        held = _run(
            str(rows), "--fit", f"sambastack-2025:{F}", "--holdout", f"stack={name}",
            "-o", str(out), "--max-evaluations", "1", "--json",
        )  # fmt: skip
        assert held.exit_code == 0, held.output
        targets = json.loads((out / "fit.json").read_text())["targets"]
        assert [t["held_out"] for t in targets] == [True, False]
        assert targets[0]["groups"]["stack"] == scope  # reports keep printing one name
    line = _one_error(
        _run(str(rows), "--fit", f"sambastack-2025:{F}", "--holdout", "stack=nope"), "stack=nope"
    )
    assert "labserve" in line and "mystack" in line


def test_a_cache_line_cut_short_is_dropped_with_a_note_and_the_rest_reused(
    measured: Path, fake_runs: None, tmp_path: Path
) -> None:
    """A hard kill mid-write (or a crash leaving NUL bytes) tears the last line: it is
    dropped with one warning line and every line before it is reused; a bad line with its
    newline is an error naming it (remove that line, not the whole cache)."""
    out = tmp_path / "o"
    args = [str(measured), "--fit", F, "-o", str(out), "--max-evaluations", "1"]
    assert _run(*args).exit_code == 0
    cache = out / "evaluations.jsonl"
    whole = cache.read_text()
    count = len(whole.splitlines())
    for tail in (whole.splitlines()[0][:30], '{"key": "ab\0\0\0'):
        cache.write_text(whole + tail)
        again = _run(*args)
        assert again.exit_code == 0, again.output
        notes = [
            line
            for line in again.output.splitlines()
            if line.startswith("warning:") and "before converging" not in line
        ]
        assert len(notes) == 1 and f"{cache}:{count + 1}: the last line was cut short" in notes[0]
        assert f"the {count} simulation(s) before it are reused" in notes[0]
        assert "0 simulations" in again.output  # everything came from the cache
        assert cache.read_text() == whole  # the torn bytes are cut off
    cache.write_text(whole + '{"key": "ab\n')
    _one_error(_run(*args), f"{cache}:{count + 1}: not a JSON line", "remove that line")


def _step_only_run(point: MeasuredPoint, overrides: Any = ()) -> Simulated:
    """A stand-in moved by the per-step host time only (1 ms: +10%): a per-slot time moves
    nothing, so the rows cannot fix it."""
    step = next(
        (float(o.split("=")[1].split()[0]) for o in overrides if "serial_per_step=" in o), 0.0
    )
    return Simulated(point.measured * (1.0 + 100.0 * step), 1)


def test_an_undetermined_value_is_left_out_and_its_files_own_value_stays(
    measured: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An undetermined value (the fit's middle of its bounds) replaced the stack's own in
    the overlay: it is not written, not applied to the final simulations, and said so; a
    value held at its bound (the targets push it there) is written."""
    seen: list[list[str]] = []

    def recorded(point: MeasuredPoint, overrides: Any = ()) -> Simulated:
        seen.append(list(overrides))
        return _step_only_run(point, overrides)

    monkeypatch.setattr(targets, "simulate_run", recorded)
    out = tmp_path / "o"
    slot = "sambastack-2025:stack.host.serial_per_slot=0:60us"
    step = "sambastack-2025:stack.host.serial_per_step=1ms:2ms"  # the rows want 0: held at 1 ms
    done = _run(str(measured), "--fit", slot, "--fit", step, "-o", str(out))
    assert done.exit_code == 0, done.output
    fit = json.loads((out / "fit.json").read_text())
    by_path = {p["path"]: p for p in fit["parameters"]}
    left, held = by_path["stack.host.serial_per_slot"], by_path["stack.host.serial_per_step"]
    assert (left["determined"], left["in_overlay"], left["value"]) == (False, False, None)
    assert held["in_overlay"] and held["at_bound"] == "low" and held["text"] == "1 ms"
    overlay = (out / "sambastack-2025-calibrated.yaml").read_text()
    assert yaml.safe_load(overlay)["host"] == {"serial_per_step": "1 ms"}
    assert "# Not written: sambastack-2025:stack.host.serial_per_slot undetermined" in overlay
    assert "not written: sambastack-2025:stack.host.serial_per_slot undetermined" in done.output
    assert "own value stands" in done.output
    final = seen[-2:]  # the last simulations, of every row: the per-slot time not applied
    assert all(not any("serial_per_slot" in o for o in run) for run in final), final


def test_rows_no_parameter_reaches_are_told_apart_and_overlays_count_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows on a stack no fitted parameter reaches were labelled (fitted) and every overlay
    said it was fitted on all targets; the evaluations count says what it counts, and the
    sign of an error is stated under the table."""
    monkeypatch.setattr(targets, "simulate_run", _step_only_run)
    rows = tmp_path / "m.csv"
    one, two = ROW, ROW.replace(",1,1,16,", ",1,2,16,")
    rows.write_text(f"{H},stack\n{one},\n{two},\n{one},none\n")
    out = tmp_path / "o"
    fit = "sambastack-2025:stack.host.serial_per_step=0:2ms"
    done = _run(str(rows), "--fit", fit, "-o", str(out), "--max-evaluations", "3")
    assert done.exit_code == 0, done.output
    table = [line for line in done.output.splitlines() if line.startswith(str(rows))]
    assert [line.rsplit("(", 1)[1] for line in table] == [
        "fitted)", "fitted)", "no fitted parameter reaches it)"
    ]  # fmt: skip
    assert "not reached: 1 target," in done.output
    overlay = (out / "sambastack-2025-calibrated.yaml").read_text()
    assert "# Fitted on 2 of the 2 targets its values reach" in overlay
    assert "# fitted: 2 targets" in overlay
    data = json.loads((out / "fit.json").read_text())
    assert [t["reached"] for t in data["targets"]] == [True, True, False]
    assert data["errors"]["not_reached"]["all"]["points"] == 1
    counts = re.search(r"calibrate: (\d+) evaluations: (\d+) fit steps? \(at most 3 a group "
                       r"of parameters\) and (\d+) for slopes", done.output)  # fmt: skip
    assert counts, done.output
    total, steps, slopes = map(int, counts.groups())
    assert total == steps + slopes and steps <= 3 and data["fit_steps"] == steps
    assert data["evaluations"] == total
    sign = "error = simulated / measured - 1"
    assert done.output.count(sign) == 1 and data["error_sign"].startswith(sign)
    assert "+ is slower than measured for a time" in done.output


def test_a_full_disk_names_the_evaluation_cache_and_what_it_kept(tmp_path: Path) -> None:
    """`ulimit -f 20; rdu-sim calibrate ... -o cf` said only "input/output error: File too
    large": the cache's write failed, and closing it in the fit's `finally` flushed the same
    buffer again, an OSError without a file that replaced the cache's own error. Now the
    error names the file and says what it kept, and closing after it raises nothing."""
    import subprocess
    import sys
    import textwrap

    cache = tmp_path / "cf" / "evaluations.jsonl"
    code = textwrap.dedent(
        f"""
        import resource
        from pathlib import Path
        from rdu_sim.config.errors import WriteError
        from rdu_sim.validate.evaluation_cache import EvaluationCache
        from rdu_sim.validate.targets import Evaluated

        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, resource.RLIM_INFINITY))
        cache = EvaluationCache(Path({str(cache)!r}))
        cache.ready()
        try:
            try:
                for n in range(1000):
                    cache.put(f"{{n:064x}}", "row", "unit", Evaluated((1.5,) * 20, (4,) * 20))
            finally:
                cache.close()
        except WriteError as exc:
            print(exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done.stderr
    message = done.stdout.strip()
    assert message.startswith(f"{cache}: cannot write: File too large"), message
    kept = int(re.search(r"the (\d+) simulation\(s\) stored before it are kept", message)[1])
    assert kept > 0 and "run the same command again" in message, message
    lines = cache.read_text().split("\n")
    assert len(lines) - 1 == kept  # every complete line is one kept, the cut one dropped


def test_a_missing_measurement_file_is_said_before_the_missing_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`calibrate nope` said "name a parameter to fit with --fit ..." and never that nope
    does not exist: each file is checked first."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["calibrate", "nope"])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: nope: file not found, and no shipped measurement or calibration of that name"
    )
    assert "--fit" not in result.stderr
    Path("m.csv").write_text("x\n")  # there: the missing --fit is the problem
    result = CliRunner().invoke(cli, ["calibrate", "m.csv"])
    assert result.stderr == (
        "error: name a parameter to fit with --fit [SCOPE:]PATH=LOW:HIGH, or give a "
        "calibration spec\n"
    )
