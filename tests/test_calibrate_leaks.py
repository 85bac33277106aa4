"""What a fit is checked on must not be what it was fitted on: the same measurement twice (in
one file, in two, or the same file given twice), an overlay fitted on rows now held out, a
hardware parameter fitted on one stack and its do-nothing copy; and what it writes reproduces
what its header says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rdu_sim.cli.main import cli
from rdu_sim.validate import targets
from rdu_sim.validate.deployment import MeasuredPoint, Simulated

H = "hardware,stack,model,tp,batch,input_tokens,output_tokens,metric,measured"
B1 = "dgx-h100,tensorrt-llm-2024,llama-3.1-8b,1,1,512,256,e2e_s,2.05"
B8 = "dgx-h100,tensorrt-llm-2024,llama-3.1-8b,1,8,512,256,e2e_s,2.6"
FIT = "tensorrt-llm-2024:stack.host.serial_per_slot=0:500us"


def _fake_run(point: MeasuredPoint, overrides: Any = ()) -> Simulated:
    """A stand-in for the simulation: a value that moves with every override, at once."""
    shift = sum(len(o.split()[0]) for o in overrides) % 7
    return Simulated(point.measured * (1.0 + 0.01 * shift), 1)


@pytest.fixture
def fake_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(targets, "simulate_run", _fake_run)


def _cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _errors(result: Result) -> list[str]:
    """Exit 2, no traceback: the error lines."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    return [line for line in result.output.splitlines() if line.startswith("error:")]


def _file(tmp_path: Path, name: str, *rows: str, header: str = H) -> Path:
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_the_same_measurements_in_two_files_cannot_be_fitted_and_held_out(
    fake_runs: None, tmp_path: Path
) -> None:
    """A copy of the fitted file held out gave held-out errors equal to the fitted ones."""
    mine = _file(tmp_path, "mine.csv", B1, B8)
    copy = _file(tmp_path, "copy.csv", B1, B8)
    args = ("calibrate", str(mine), str(copy), "--fit", FIT, "--holdout", "set=copy")
    errors = _errors(_cli(*args, "--max-evaluations", "2", "-o", str(tmp_path / "o")))
    assert errors == [
        f"error: {copy}:{line}: the same measurement as {mine}:{line} (the same hardware, "
        "stack, model, dtypes, tp, batch, requests, lengths, metric and measured value): a "
        "measurement counts once (a held-out copy of a fitted row would test the fit on its "
        "own data); remove one of the two"
        for line in (2, 3)
    ]
    assert not (tmp_path / "o" / "fit.json").exists()


def test_a_repeated_row_is_refused_by_check_validate_and_calibrate(tmp_path: Path) -> None:
    """One row twice pulled the fit twice as hard, silently; the same file twice too. A
    repeat measurement (same run, another value) is data and stays."""
    dup = _file(tmp_path, "dup.csv", B8, B1, B8.replace(",2.6", ",2.60"))
    said = f"{dup}:4: the same measurement as {dup}:2"
    for args in (("check", str(dup)), ("validate", "--suite", "deployment", str(dup))):
        errors = _errors(_cli(*args))
        assert said in errors[0] and len([e for e in errors if "same measurement" in e]) == 1
    errors = _errors(_cli("calibrate", str(dup), "--fit", FIT, "-o", str(tmp_path / "o")))
    assert said in errors[0]
    twice = _file(tmp_path, "ok.csv", B1)
    errors = _errors(_cli("validate", "--suite", "deployment", str(twice), str(twice)))
    assert errors == [f"error: {twice}: given twice (also as {twice}): a file's rows count once"]
    repeat = _file(tmp_path, "repeat.csv", B8, B8.replace(",2.6", ",3.1"))
    done = _cli("check", str(repeat))
    assert done.exit_code == 0 and "2 measured rows" in done.output, done.output


def test_check_reads_a_measurement_file_missing_its_metric_or_not_utf8_as_validate_does(
    tmp_path: Path,
) -> None:
    """A measurement file was told apart by its metric column alone and an unreadable one
    fell to the request-trace reader, whose diagnosis was about traces."""
    no_metric = _file(
        tmp_path, "nometric.csv", B8.replace(",e2e_s", ""), header=H.replace(",metric", "")
    )
    latin = tmp_path / "latin1.csv"
    latin.write_bytes(f"{H},label\n{B8},caf\xe9\n".encode("latin-1"))
    for path, said in (
        (no_metric, f"{no_metric}:1: header lacks column(s) ['metric']"),
        (latin, f"{latin}:2: not valid UTF-8 at byte"),
    ):
        checked = _errors(_cli("check", str(path)))
        validated = _errors(_cli("validate", "--suite", "deployment", str(path)))
        assert checked[0] == validated[0] and checked[0].startswith(f"error: {said}"), checked


def test_validate_names_every_bad_row_of_every_file_as_check_does(tmp_path: Path) -> None:
    """validate named the first bad cell only; check named every bad row."""
    one = _file(tmp_path, "one.csv", B1, B8.replace(",2.6", ",-1"), B8.replace("llama-3.1-8b", "x"))
    two = _file(tmp_path, "two.csv", B1.replace(",1,1,", ",1,zero,"))
    errors = _errors(_cli("validate", "--suite", "deployment", str(one), str(two)))
    assert [e.split(": ")[1] for e in errors] == [f"{one}:3", f"{one}:4", f"{two}:2"], errors
    checked = _errors(_cli("check", str(one)))[:-1]  # (then: 1 of 1 file(s) failed)
    assert checked == errors[:2]


def test_a_field_that_takes_no_fraction_is_refused_as_one_no_fit_can_move(
    tmp_path: Path,
) -> None:
    mine = _file(tmp_path, "mine.csv", B1, B8)
    fit = "tensorrt-llm-2024:stack.kv_page_tokens=16:128"
    errors = _errors(_cli("calibrate", str(mine), "--fit", fit, "-o", str(tmp_path / "o")))
    assert errors == [
        "error: --fit: stack.kv_page_tokens: only a continuous field can be fitted (its value "
        "moved by any fraction): its type is int | None"
    ]


def test_a_stack_that_only_renames_another_is_the_same_stack_for_a_hardware_fit(
    fake_runs: None, tmp_path: Path
) -> None:
    """A do-nothing copy of a stack (extends it, a new name) let a hardware parameter be
    fitted on one stack's rows; a copy that changes a setting is another stack."""
    (tmp_path / "clone.yaml").write_text("extends: tensorrt-llm-2024\nname: trt-clone\n")
    (tmp_path / "other.yaml").write_text(
        "extends: tensorrt-llm-2024\nname: trt-other\nhost:\n  serial_per_step: 1 ms\n"
    )
    mine = _file(tmp_path, "mine.csv", B1)
    fit = "dgx-h100:hw.system.intra_node_link.bandwidth=8 GB/s:900 GB/s"
    for stack, refused in (("clone.yaml", True), ("other.yaml", False)):
        rows = _file(tmp_path, f"{stack}.csv", B8.replace("tensorrt-llm-2024", stack))
        args = ("calibrate", str(mine), str(rows), "--fit", fit, "--max-evaluations", "1")
        done = _cli(*args, "-o", str(tmp_path / f"out-{stack}"))
        if refused:
            assert _errors(done) == [
                f"error: --fit: {fit}: a hardware parameter is fitted on the rows of one "
                "serving stack only (clone, tensorrt-llm-2024, which run identically): a "
                "machine's value must hold under every stack it runs, so fit it on at least "
                "two stacks' measurements (or fit a stack's own parameter instead)"
            ]
        else:
            assert done.exit_code == 0, done.output


def test_a_row_on_a_renamed_copy_of_the_stack_is_the_same_measurement(tmp_path: Path) -> None:
    (tmp_path / "clone.yaml").write_text("extends: tensorrt-llm-2024\nname: trt-clone\n")
    mine = _file(tmp_path, "mine.csv", B8)
    rows = _file(tmp_path, "rows.csv", B8.replace("tensorrt-llm-2024", "clone.yaml"))
    errors = _errors(_cli("validate", "--suite", "deployment", str(mine), str(rows)))
    assert errors[0].startswith(f"error: {rows}:2: the same measurement as {mine}:2"), errors


def _host_run(point: MeasuredPoint, overrides: Any = ()) -> Simulated:
    """A stand-in that reads the resolved stack: each host time moves the value its own way
    (so a value in force through any route, --set, --overlay or the file, counts alike)."""
    host = point.scenario(list(overrides)).stack.host
    b = point.batch or 1
    value = 1.5 + 1000 * host.serial_per_slot * b + 300 * host.serial_per_step
    return Simulated(value, b)


@pytest.fixture
def host_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from rdu_sim.validate import deployment_suite

    monkeypatch.setattr(targets, "simulate_run", _host_run)
    monkeypatch.setattr(deployment_suite, "simulate_run", _host_run)


B32 = "dgx-h100,tensorrt-llm-2024,llama-3.1-8b,1,32,512,256,e2e_s,3.9"
TPOT = "dgx-h100,tensorrt-llm-2024,llama-3.1-8b,1,8,512,256,tpot_s,0.01"
STEP = "tensorrt-llm-2024:stack.host.serial_per_step=0:2ms"


def test_an_overlay_fitted_on_rows_now_held_out_is_refused_naming_them(
    host_runs: None, tmp_path: Path
) -> None:
    mine = _file(tmp_path, "mine.csv", B1, B8, B32)
    first = tmp_path / "first"
    done = _cli("calibrate", str(mine), "--fit", FIT, "--max-evaluations", "3", "-o", str(first))
    assert done.exit_code == 0, done.output
    overlay = first / "tensorrt-llm-2024-calibrated.yaml"
    assert '# Fitted targets: ["../mine.csv:2", "../mine.csv:3", "../mine.csv:4"]' in (
        overlay.read_text()
    )
    other = _file(tmp_path, "other.csv", TPOT)
    args = ("calibrate", str(mine), str(other), "--fit", STEP, "--overlay", str(overlay))
    held = _errors(_cli(*args, "--holdout", "set=mine", "-o", str(tmp_path / "second")))
    assert held == [
        f"error: --overlay: {overlay}: was fitted on 3 target(s) held out here ({mine}:2, "
        f"{mine}:3, {mine}:4): its values carry them, so they would test the fit on its own "
        "data; hold out other rows, or fit without this overlay"
    ]
    done = _cli(*args, "--holdout", "set=other", "-o", str(tmp_path / "third"))
    assert done.exit_code == 0, done.output


def test_an_overlay_written_after_a_passed_back_one_alone_gives_its_own_errors(
    host_runs: None, tmp_path: Path
) -> None:
    """It extended the base stack with the newly fitted field only, so used alone it lost
    the passed-back value and the --set, and gave other errors than its header's."""
    import json

    mine = _file(tmp_path, "mine.csv", B1, B8, B32)
    first = tmp_path / "first"
    done = _cli("calibrate", str(mine), "--fit", FIT, "--max-evaluations", "3", "-o", str(first))
    assert done.exit_code == 0, done.output
    passed = first / "tensorrt-llm-2024-calibrated.yaml"
    second = tmp_path / "second"
    setting = "stack.host.serial_per_prompt=1ms"
    args = ("calibrate", str(mine), "--fit", STEP, "--overlay", str(passed), "--set", setting)
    done = _cli(*args, "--max-evaluations", "3", "-o", str(second))
    assert done.exit_code == 0, done.output
    written = second / "tensorrt-llm-2024-calibrated.yaml"
    text = written.read_text()
    assert "serial_per_slot" in text and "serial_per_prompt: 1ms" in text, text
    fitted = json.loads((second / "fit.json").read_text())
    alone = _cli(
        "validate", "--suite", "deployment", str(mine), "--overlay", str(written), "--json"
    )
    assert alone.exit_code == 0, alone.output
    report = json.loads(alone.output.splitlines()[-1])
    assert [r["simulated"] for r in report["points"]] == [t["simulated"] for t in fitted["targets"]]


def test_a_row_on_a_renamed_copy_of_the_hardware_is_the_same_measurement(tmp_path: Path) -> None:
    """Keyed on the hardware file's extends chain, a renamed copy was another machine."""
    (tmp_path / "hwclone.yaml").write_text("extends: dgx-h100\nname: h100-clone\n")
    mine = _file(tmp_path, "mine.csv", B8, B8.replace("dgx-h100", "hwclone.yaml", 1))
    errors = _errors(_cli("check", str(mine)))
    assert errors[0].startswith(f"error: {mine}:3: the same measurement as {mine}:2 "), errors


def test_a_set_that_makes_two_stacks_alike_makes_their_rows_the_same_measurement(
    tmp_path: Path,
) -> None:
    """The stacks are compared as the rows run them (``--set`` applied), not as their files
    read."""
    from rdu_sim.config.errors import ConfigError
    from rdu_sim.validate.deployment_suite import resolve_rows
    from rdu_sim.validate.measurement_file import read_points

    (tmp_path / "slow.yaml").write_text(
        "extends: tensorrt-llm-2024\nname: slow\nhost:\n  serial_per_slot: 1ms\n"
    )
    mine = _file(tmp_path, "mine.csv", B8, B8.replace("tensorrt-llm-2024", "slow.yaml", 1))
    points = read_points(mine)
    assert len(resolve_rows(points)) == 2  # different stacks: two measurements
    with pytest.raises(ConfigError) as caught:
        resolve_rows(points, ["stack.host.serial_per_slot=2ms"])
    assert str(caught.value.issues[0]).startswith(f"{mine}:3: the same measurement as {mine}:2")


def test_check_refuses_a_row_repeated_in_another_file_as_validate_does(tmp_path: Path) -> None:
    a = _file(tmp_path, "a.csv", B8)
    b = _file(tmp_path, "b.csv", B1, B8)
    result = _cli("check", str(a), str(b))
    assert _errors(result) == [
        f"error: {b}:3: the same measurement as {a}:2 (the same hardware, stack, model, "
        "dtypes, tp, batch, requests, lengths, metric and measured value): a measurement "
        "counts once (a held-out copy of a fitted row would test the fit on its own data); "
        "remove one of the two",
        "error: 1 of 2 file(s) failed the check",
    ]
    assert f"OK  {a}" in result.output
    assert _cli("check", str(a), str(a)).exit_code == 0  # one file named twice: one row


def test_rows_differing_only_in_their_label_are_one_measurement_and_the_error_says_so(
    tmp_path: Path,
) -> None:
    rows = _file(
        tmp_path,
        "c.csv",
        f"{B8},Llama-3-8B",
        f"{B8},Llama-3.1-8B",
        header=f"{H},label",
    )
    assert _errors(_cli("check", str(rows)))[0] == (
        f"error: {rows}:3: the same measurement as {rows}:2 (the same hardware, stack, model, "
        "dtypes, tp, batch, requests, lengths, metric and measured value; the labels differ, "
        "'Llama-3-8B' and 'Llama-3.1-8B', but a label is a name for people, not part of a "
        "measurement): a measurement counts once (a held-out copy of a fitted row would test "
        "the fit on its own data); remove one of the two"
    )


def test_an_overlay_moved_or_its_rows_moved_down_still_refuses_them_held_out(
    host_runs: None, tmp_path: Path
) -> None:
    """Recorded by file and line only, moving the overlay or adding a line above the rows
    silently let its fitted rows be held out."""
    mine = _file(tmp_path, "mine.csv", B1, B8, B32)
    first = tmp_path / "first"
    done = _cli("calibrate", str(mine), "--fit", FIT, "--max-evaluations", "3", "-o", str(first))
    assert done.exit_code == 0, done.output
    moved = tmp_path / "elsewhere" / "deeper" / "overlay.yaml"
    moved.parent.mkdir(parents=True)
    moved.write_text((first / "tensorrt-llm-2024-calibrated.yaml").read_text())
    _file(tmp_path, "mine.csv", TPOT, B1, B8, B32)  # every row a line further down
    other = _file(tmp_path, "other.csv", B8.replace(",8,", ",4,").replace("2.6", "2.3"))
    args = ("calibrate", str(mine), str(other), "--fit", STEP, "--overlay", str(moved))
    held = _errors(_cli(*args, "--holdout", "set=mine", "-o", str(tmp_path / "second")))
    assert held == [
        f"error: --overlay: {moved}: was fitted on 3 target(s) held out here ({mine}:3, "
        f"{mine}:4, {mine}:5): its values carry them, so they would test the fit on its own "
        "data; hold out other rows, or fit without this overlay"
    ]


def test_an_overlay_recording_rows_by_file_only_warns_when_the_file_is_gone(
    tmp_path: Path,
) -> None:
    from rdu_sim.validate.overlays import held_out_in

    overlay = tmp_path / "o" / "x.yaml"
    overlay.parent.mkdir()
    overlay.write_text(
        '# Fitted targets: ["../gone.csv:2"]\nextends: tensorrt-llm-2024\n'
        "host:\n  serial_per_slot: 1ms\n"
    )
    with pytest.warns(UserWarning, match=r"names .*gone\.csv, not found"):
        held_out_in(overlay, [("figures:x", "")])
    (tmp_path / "gone.csv").write_text(f"{H}\n{B8}\n")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        held_out_in(overlay, [("figures:x", "")])
