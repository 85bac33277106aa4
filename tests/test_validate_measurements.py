"""`rdu-sim validate --suite deployment FILE...`: a user's own measurement file simulated as it
stands (its hardware and stack files, --set and --overlay on top), through the deployment
suite's own evaluation, with the numbers calibrate evaluates at the same values; every bad row
named before anything runs; an overlay that reaches no row refused; a stop says what was kept.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.cli.validate_cmd import UNFINISHED
from rdu_sim.interrupts import Interrupted
from rdu_sim.validate import deployment, deployment_suite

STACK = {
    "name": "labserve",
    "description": "an in-house step loop",
    "runs_on": "gpu",
    "host": {"serial_per_step": "800 us", "serial_per_slot": "20 us"},
    "sampling": "device",
    "kv_page_tokens": 32,
    "mixed_batching": False,
    "prefill_batch_tokens": 8192,
    "max_batch_slots": 256,
    "kv_memory_fraction": 0.9,
}
HEADER = "hardware,stack,model,tp,batch,requests,input_tokens,output_tokens,metric,measured,label"
ROWS = [
    "dgx-h100,mystack.yaml,llama-3.2-1b,1,1,,64,16,e2e_s,0.1,b1",
    "dgx-h100,mystack.yaml,llama-3.2-1b,1,4,,64,16,e2e_s,0.12,b4",
    "dgx-h100,mystack.yaml,llama-3.2-1b,2,4,,128,1,ttft_s,0.01,ttft",
    "dgx-h100,tensorrt-llm,llama-3.2-1b,1,auto,40,64,16,output_tokens_per_s,9000,full load",
]


@pytest.fixture
def mine(tmp_path: Path) -> Path:
    """A tiny measurement file of the user's own, with its own stack file beside it."""
    (tmp_path / "mystack.yaml").write_text(yaml.safe_dump(STACK))
    path = tmp_path / "mine.csv"
    path.write_text("# our own numbers\n" + HEADER + "\n" + "\n".join(ROWS) + "\n")
    return path


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, ["validate", "--suite", "deployment", *args])


def test_a_users_file_is_simulated_as_it_stands_and_not_held_to_limits(mine: Path) -> None:
    out = _invoke(str(mine))
    assert out.exit_code == 0, out.output
    for line in range(3, 7):
        assert f"mine.csv:{line}" in out.output
    assert "simulated / measured - 1" in out.output
    assert "+ is slower than measured for a time (s), faster for a rate" in " ".join(
        out.output.split()
    )
    groups = [line for line in out.output.splitlines() if "median |error|" in line]
    assert [g.split(":")[0] for g in groups] == [
        "dgx-h100 · mystack",
        "dgx-h100 · tensorrt-llm · full-load",
    ]
    assert re.search(r"dgx-h100 · mystack: 3 points, median \|error\| \S+%, worst \S+%", groups[0])
    assert "limit" not in out.output and "pass" not in out.output and "FAIL" not in out.output


def test_the_json_has_each_row_and_group_without_limits(mine: Path) -> None:
    out = _invoke(str(mine), "--json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert set(report) == {"points", "systems"}
    assert [p["source"].rsplit(":", 1)[1] for p in report["points"]] == ["3", "4", "5", "6"]
    for point in report["points"]:
        assert point["relative_error"] == pytest.approx(
            point["simulated"] / point["measured"] - 1, rel=1e-12
        )
    assert report["points"][3]["batch_slots"] > 1  # auto: the batch the run ran at
    assert [s["points"] for s in report["systems"]] == [3, 1]
    assert all("pass" not in s and "median_limit" not in s for s in report["systems"])


def test_the_same_numbers_as_calibrates_evaluation_at_the_same_values(
    mine: Path, tmp_path: Path
) -> None:
    """Differential: validate FILE --overlay X and calibrate's evaluator (the same overlay
    passed back, a fitted parameter at the value the stack file states) simulate the same
    numbers, row by row, exactly."""
    from rdu_sim.validate.calibration_problem import Inputs, build_problem
    from rdu_sim.validate.evaluation_cache import EvaluationCache
    from rdu_sim.validate.evaluator import Evaluator
    from rdu_sim.validate.measurement_file import read_points
    from rdu_sim.validate.scope import parse_fit

    overlay = tmp_path / "slot.yaml"
    overlay.write_text(
        yaml.safe_dump({"extends": "mystack.yaml", "host": {"serial_per_slot": "30 us"}})
    )
    out = _invoke(str(mine), "--json", "--overlay", str(overlay))
    assert out.exit_code == 0, out.output
    shown = [p["simulated"] for p in json.loads(out.output)["points"]]

    fit = parse_fit(f"{tmp_path / 'mystack.yaml'}:stack.host.serial_per_step=0:3ms")
    problem = build_problem(
        Inputs(measurements=(mine,), parameters=(fit,), overlays=(overlay,), base=tmp_path)
    )
    as_stated = read_points(mine)[0].scenario().stack.host.serial_per_step
    evaluator = Evaluator(problem, EvaluationCache(None))
    try:
        found = evaluator.evaluate((as_stated,), range(len(problem.units)))
    finally:
        evaluator.close()
    evaluated = [found[t.unit].values[t.index] for t in problem.targets]
    assert shown == evaluated
    without = json.loads(_invoke(str(mine), "--json").output)["points"]
    assert [p["simulated"] for p in without][:3] != shown[:3]  # the overlay reached them
    assert without[3]["simulated"] == shown[3]  # and not the other stack's row


def test_every_bad_row_is_named_before_anything_runs(
    mine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(*_: object, **__: object) -> None:
        raise AssertionError("simulated a file with bad rows")

    monkeypatch.setattr(deployment_suite, "simulate_run", never)
    text = mine.read_text()
    text = text.replace("mystack.yaml,llama-3.2-1b,1,4", "nostack.yaml,llama-3.2-1b,1,4")
    text = text.replace(",2,4,,128", ",3,4,,128").replace("tensorrt-llm,llama-3.2-1b", "x,llama-9")
    mine.write_text(text)
    out = _invoke(str(mine))
    assert out.exit_code == 2, out.output
    assert f"{mine}:4: stack:" in out.output
    assert f"{mine}:5: tp:" in out.output
    assert re.search(rf"{re.escape(str(mine))}:6: (stack|model):", out.output)
    assert "Traceback" not in out.output


def test_an_overlay_that_reaches_no_row_is_refused(
    mine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It would change nothing: refused before anything runs, naming the overlay, what it
    extends and where the rows run (the shipped suite too)."""

    def never(*_: object, **__: object) -> None:
        raise AssertionError("simulated with an overlay that reaches nothing")

    monkeypatch.setattr(deployment_suite, "simulate_run", never)
    overlay = tmp_path / "sglang-calibrated.yaml"
    overlay.write_text(yaml.safe_dump({"extends": "sglang", "host": {"serial_per_step": "1 ms"}}))
    for args in ([str(mine)], []):
        out = _invoke(*args, "--overlay", str(overlay))
        assert out.exit_code == 2, out.output
        assert f"--overlay: {overlay}: extends the serving stack sglang" in out.output
        assert "which no row runs on" in out.output
    assert "dgx-h100 · mystack" in _invoke(str(mine), "--overlay", str(overlay)).output


def test_files_are_the_deployment_suites(mine: Path) -> None:
    out = CliRunner().invoke(cli, ["validate", str(mine)])
    assert out.exit_code == 2
    assert f"rdu-sim validate --suite deployment {mine}" in out.output


def test_a_stop_says_nothing_was_printed(mine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = deployment_suite.simulate_run

    def stopped(*args: Any, **kwargs: Any) -> deployment.Simulated:
        calls.append(args)
        if len(calls) == 2:
            raise Interrupted(signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(deployment_suite, "simulate_run", stopped)
    out = _invoke(str(mine))
    assert out.exit_code == 130
    assert out.stdout == ""
    assert f"interrupted (SIGINT): {UNFINISHED}" in out.stderr
