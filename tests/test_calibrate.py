"""The serving runtime's host time, measured deployments, `calibrate` and the deployment
suite of `validate`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.config import ConfigError
from rdu_sim.validate.calibrate import Calibration
from rdu_sim.validate.calibration_problem import Inputs, Problem, build_problem
from rdu_sim.validate.deployment import MeasuredPoint, simulate
from rdu_sim.validate.evaluation_cache import EvaluationCache
from rdu_sim.validate.holdout import parse_selector
from rdu_sim.validate.scope import FitParameter, parse_fit, quantity_text

REPO = Path(__file__).resolve().parents[1]
DEFAULT = "sambastack-2025"
"""The serving stack shipped SN40L files run by default (what a row naming none runs)."""
HEADER = "hardware,model,tp,batch,input_tokens,output_tokens,metric,measured"
SMALL = "sn40l,llama-3.2-1b,1,{batch},64,{out},e2e_s,{value}"
TRUTH = ["stack.host.serial_per_step=0.0004"]
SHAPES = [(1, 16), (2, 32), (4, 8), (2, 8)]


def _write(tmp_path: Path, rows: list[str], name: str = "m.csv") -> Path:
    path = tmp_path / name
    path.write_text("# a comment\n" + HEADER + "\n" + "".join(r + "\n" for r in rows))
    return path


def test_runtime_host_time_is_added_to_each_step_exactly() -> None:
    workload = REPO / "workloads" / "llama3.1-8b-1socket.yaml"
    zero = ["stack.host.serial_per_step=0", "stack.host.serial_per_slot=0"]
    bare = api.step(workload, zero, batch=4).detail
    served = api.step(
        workload,
        ["stack.host.serial_per_step=300 us", "stack.host.serial_per_slot=20 us"],
        batch=4,
    ).detail
    assert bare.runtime_s == 0.0  # type: ignore[attr-defined]
    assert served.runtime_s == pytest.approx(300e-6 + 4 * 20e-6, rel=1e-12)  # type: ignore[attr-defined]
    assert served.device_s == pytest.approx(bare.step_s, rel=1e-12)  # type: ignore[attr-defined]
    assert served.step_s == pytest.approx(bare.step_s + 380e-6, rel=1e-12)  # type: ignore[attr-defined]
    shown = served.to_dict()  # type: ignore[attr-defined]
    assert shown["runtime_s"] == served.runtime_s and shown["device_s"] == served.device_s  # type: ignore[attr-defined]


def test_shipped_hardware_runs_a_stack_by_default() -> None:
    """Every shipped machine names its default stack; the stack, not the hardware, holds
    the host time and the KV and prefill layout."""
    workload = REPO / "workloads" / "llama3.1-8b-1socket.yaml"
    for name in ("sn40l-8", "sn40l-16", "dgx-h100"):
        data = yaml.safe_load((REPO / "hw_configs" / f"{name}.yaml").read_text())
        assert "runtime" not in data, name
        stack = api.load(workload, [f"hardware={name}"]).stack
        host = stack.host  # some host time, serial or beside the device
        assert host.serial_per_step + host.overlapped_per_step + host.overlapped_per_slot > 0, name
        paged = stack.kv_page_tokens, stack.prefill_batch_tokens
        # SambaStack's static graphs, one prompt a prefill step; TensorRT-LLM's defaults
        assert paged == ((64, 8192) if name == "dgx-h100" else (None, None)), name


def _measured(
    tmp_path: Path,
    truth: list[str],
    name: str = "m.csv",
    model: str = "llama-3.2-1b",
    stacks: tuple[str, ...] = ("",),
) -> Path:
    """Rows simulated with known parameters (on each of ``stacks``: '' is the hardware's
    default, the one the ``stack.`` ones of ``truth`` are of): measurements the fit must
    explain."""
    rows = []
    for stack in stacks:
        known = [t for t in truth if not (stack and t.startswith("stack."))]
        for batch, out in SHAPES:
            point = MeasuredPoint("sn40l", model, 1, batch, 64, out, "e2e_s", 1.0, stack=stack)
            value = simulate(point, known)
            rows.append(f"sn40l,{stack},{model},1,{batch},64,{out},e2e_s,{value}")
    path = tmp_path / name
    path.write_text(f"hardware,stack,{HEADER.removeprefix('hardware,')}\n" + "\n".join(rows) + "\n")
    return path


def _problem(paths: list[Path], fits: list[str], holdouts: list[str] = ()) -> Problem:  # type: ignore[assignment]
    return build_problem(
        Inputs(
            measurements=tuple(paths),
            parameters=tuple(parse_fit(f) for f in fits),
            held_out=tuple(parse_selector(h) for h in holdouts),
        )
    )


def test_parse_fit_reads_scope_path_and_bounds_in_the_fields_unit() -> None:
    assert parse_fit("stack.host.serial_per_step=0:2ms") == FitParameter(
        "stack.host.serial_per_step", 0.0, 2e-3, "", "stack.host.serial_per_step=0:2ms"
    )
    scoped = parse_fit("sn40l-8:hw.system.intra_node_link.bandwidth=8 GB/s:64 GB/s")
    assert (scoped.scope, scoped.low, scoped.high, scoped.kind) == ("sn40l-8", 8e9, 64e9, "machine")
    assert parse_fit("../x/hw.yaml:hw.socket.hbm.efficiency=0.5:1").scope == "../x/hw.yaml"
    assert parse_fit("tensorrt-llm:stack.host.serial_per_step=0:0.003").kind == "stack"
    for bad, words in [
        ("runtime.step_overhead=0:1", "expected [SCOPE:]hw.FIELD"),
        ("hw.x=1", "expected [SCOPE:]hw.FIELD"),
        ("stack.host.serial_per_step=2ms:1ms", "LOW < HIGH"),
        ("stack.host.serial_per_step=0:64 GB/s", "cannot read"),  # seconds, not a bandwidth
        ("hw.socket.hbm.efficiency=0:1 s", "cannot read"),  # a plain number
        ("hw.x..y=0:1", "not a field path"),
        (":stack.host.serial_per_step=0:1", "empty scope"),
        ("stack.host.serial_per_step=0:inf", "cannot read"),
        ("stack.host.serial_per_step=0:1e999", "finite"),
        ("hw." + "x" * 2000 + "=0:1", "longer than"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(words)):
            parse_fit(bad)


def test_quantity_text_is_what_the_config_reads() -> None:
    assert quantity_text(2.853e-4, "s") == "285.3 us"
    assert quantity_text(17.73e9, "bytes/s") == "17.73 GB/s"
    assert quantity_text(0.87346, "") == "0.8735"
    assert quantity_text(0.0, "s") == "0"


def test_fit_recovers_a_known_parameter_and_replays_its_cache(tmp_path: Path) -> None:
    """Rows simulated with a known step overhead: the fit finds it back from the middle of
    its bounds; the same fit again simulates nothing (its cache answers every evaluation)."""
    path = _measured(tmp_path, TRUTH)
    problem = _problem([path], ["stack.host.serial_per_step=0:1ms"])
    cache = tmp_path / "cache.jsonl"
    result = Calibration(problem, EvaluationCache(cache)).fit(30)
    assert result.values[0] == pytest.approx(4e-4, rel=0.01)
    assert max(abs(r.relative_error) for r in result.results) < 0.005
    assert result.simulated > 0
    replay = Calibration(problem, EvaluationCache(cache))
    for unit in problem.units:
        object.__setattr__(unit, "run", lambda overrides: pytest.fail("simulated a cached unit"))
    again = replay.fit(30)
    assert again.values == result.values and again.simulated == 0
    assert again.to_dict() == result.to_dict()


def test_each_progress_line_names_and_shows_the_objective_the_fit_minimizes(
    tmp_path: Path,
) -> None:
    """The progress line showed only the median |error|, which the fit does not minimize (an
    evaluation at 5.7% while the fit settled at 6.4%): it now shows the objective, the sum
    of the squared residuals least_squares is given, at each evaluation, and names it;
    the lowest objective seen is the fitted point's (up to rounding), whatever the
    medians."""
    from rdu_sim.cli.calibrate_cmd import progress_line
    from rdu_sim.validate.calibrate import Evaluation

    path = _measured(tmp_path, TRUTH)
    problem = _problem([path], ["stack.host.serial_per_step=0:1ms"])
    seen: list[Evaluation] = []
    calibration = Calibration(problem, EvaluationCache(None), progress=seen.append)
    residuals = calibration.residuals((2e-4,))
    (one,) = seen
    assert one.objective == pytest.approx(float((residuals**2).sum()), rel=1e-12)
    assert one.targets == len(problem.train) == len(residuals)
    line = progress_line(one, problem.parameters)
    assert line.startswith(f"evaluation 1: {problem.parameters[0].name}=200 us: fit objective")
    assert f": fit objective {one.objective:.4g} (sum over {one.targets} targets of " in line
    assert "(log error / log(1 + tolerance))^2, what the fit minimizes; median |error| " in line
    seen.clear()
    result = calibration.fit(30)
    best = min(seen, key=lambda e: e.objective)
    assert best.values[0] == pytest.approx(result.values[0], rel=0.01)


def test_a_progress_line_says_a_value_at_a_bound_as_the_fitted_value_is_said(
    tmp_path: Path,
) -> None:
    """The bounded solver tries values a hair above a bound of 0: the progress lines showed
    them as ``6.174e-07 ns``; they say the bound, as the fitted value's line does (closer
    than ``SLOPE_STEP`` of the span the fit cannot tell them apart), and every other value
    in the parameter's unit."""
    from rdu_sim.cli.calibrate_cmd import progress_line
    from rdu_sim.validate.calibrate import Evaluation

    path = _measured(tmp_path, TRUTH)
    problem = _problem([path], ["stack.host.serial_per_step=0:1ms"])
    seen: list[Evaluation] = []
    calibration = Calibration(problem, EvaluationCache(None), progress=seen.append)
    calibration.residuals((6.174e-16,))
    calibration.residuals(((1 - 1e-9) * 1e-3,))
    calibration.residuals((3.5e-6,))
    low, high, inside = (progress_line(one, problem.parameters) for one in seen)
    name = problem.parameters[0].name
    assert f"{name}=0 (at its low bound): fit objective" in low and "e-" not in low
    assert f"{name}=1 ms (at its high bound): fit objective" in high
    assert f"{name}=3.5 us: fit objective" in inside


def test_a_value_fitted_at_its_bound_is_that_bound_exactly(tmp_path: Path) -> None:
    """Rows simulated with no step overhead: the bounded solver ends a hair above the low
    bound, and the fit reports (and writes) the bound itself, not a fraction of a picosecond."""
    path = _measured(tmp_path, ["stack.host.serial_per_step=0"])
    problem = _problem([path], ["stack.host.serial_per_step=0:1ms"])
    result = Calibration(problem).fit(30)
    assert result.values[0] == 0.0
    assert result.texts[0] == quantity_text(0.0, "s")


def test_a_held_out_group_never_reaches_the_fit(tmp_path: Path) -> None:
    """Held-out rows are in no residual the fit sees (the objective records what it read),
    and they change nothing: the fit without them is the same fit."""
    own = _measured(tmp_path, TRUTH, "own.csv")
    other = _measured(tmp_path, ["stack.host.serial_per_step=0.0009"], "other.csv", "llama-3.2-3b")
    fits = ["stack.host.serial_per_step=0:1ms"]
    problem = _problem([own, other], fits, ["model=llama-3.2-3b"])
    held = {problem.targets[i].id for i in problem.held_out}
    assert len(held) == 4 and all(
        t.endswith(tuple(f"other.csv:{n}" for n in range(2, 6))) for t in held
    )
    calibration = Calibration(problem)
    result = calibration.fit(20)
    assert calibration.seen and not calibration.seen & held
    assert calibration.seen == {problem.targets[i].id for i in problem.train}
    alone = Calibration(_problem([own], fits)).fit(20)
    assert alone.values == result.values
    # the held-out rows are reported at the fitted values, and miss by their own truth
    assert {r.target.id for r in result.results if r.held_out} == held
    assert all(r.relative_error < -0.05 for r in result.results if r.held_out)
    assert result.total("held out") is not None


@pytest.mark.filterwarnings("ignore::rdu_sim.validate.fit_result.UnconvergedFitWarning")
def test_workers_give_the_same_fit(tmp_path: Path) -> None:
    problem = _problem([_measured(tmp_path, TRUTH)], ["stack.host.serial_per_step=0:1ms"])
    serial = Calibration(problem).fit(4)
    pooled = Calibration(problem, workers=2).fit(4)
    assert pooled.to_dict() == serial.to_dict()


def test_calibrate_command_writes_overlays_to_use_and_pass_back(tmp_path: Path) -> None:
    """A machine's parameter (fitted on two stacks' rows) and a stack's: one overlay each,
    which a workload runs on, and which passed back hold while another parameter is fitted."""
    truth = ["hw.socket.hbm.efficiency=0.8", "stack.host.serial_per_step=0.0003"]
    path = _measured(tmp_path, truth, stacks=("", "none"))
    out = tmp_path / "fitted"
    fits = ["--fit", "hw.socket.hbm.efficiency=0.5:1"]
    fits += ["--fit", f"{DEFAULT}:stack.host.serial_per_step=0:1ms"]
    args = ["calibrate", str(path), *fits, "-o", str(out), "--max-evaluations", "12"]
    result = CliRunner().invoke(cli, [*args, "--holdout", "tp=1,metric=e2e_s", "--json"])
    assert result.exit_code == 2 and "every target is held out" in result.output
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    fit = json.loads(result.stdout)
    efficiency, step = fit["parameters"]
    assert efficiency["value"] == pytest.approx(0.8, rel=0.01) and efficiency["unit"] == ""
    assert (efficiency["scope"], efficiency["kind"]) == ("sn40l", "machine")
    assert step["value"] == pytest.approx(3e-4, rel=0.02) and step["text"].endswith(" us")
    assert (step["scope"], step["kind"], step["unit"]) == (DEFAULT, "stack", "s")
    # both values are fixed by the rows: each to better than its own size
    assert efficiency["determined"] and 0 < efficiency["plus_minus"] < 0.05
    assert step["determined"] and 0 < step["plus_minus"] < step["value"]
    machine, stack = out / "sn40l-calibrated.yaml", out / f"{DEFAULT}-calibrated.yaml"
    text = machine.read_text()
    assert text.startswith("# Calibrated by: rdu-sim calibrate")
    assert "--fit=hw.socket.hbm.efficiency=0.5:1" in text.splitlines()[0]
    assert yaml.safe_load(text) == {
        "extends": "sn40l",
        "name": "sn40l-calibrated",
        "socket": {"hbm": {"efficiency": efficiency["value"]}},
    }
    assert yaml.safe_load(stack.read_text()) == {
        "extends": DEFAULT,
        "name": f"{DEFAULT}-calibrated",
        "host": {"serial_per_step": step["text"]},
    }
    assert (out / "evaluations.jsonl").is_file()
    assert json.loads((out / "fit.json").read_text())["parameters"] == fit["parameters"]
    # the overlays are a hardware file and a stack: a workload runs on them
    workload = yaml.safe_load((REPO / "workloads" / "llama3.1-8b-1socket.yaml").read_text())
    workload.update(hardware=str(machine), stack=str(stack))
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump(workload))
    scenario = api.load(tmp_path / "wl.yaml")
    assert scenario.hardware.socket.hbm.efficiency == efficiency["value"]  # type: ignore[union-attr]
    assert scenario.stack.host.serial_per_step == step["value"]
    # the same command again: the same bytes, nothing simulated
    again = CliRunner().invoke(cli, [*args, "--json"])
    assert json.loads(again.stdout) == fit and machine.read_text() == text
    # passed back, the overlays' values hold while another parameter is fitted: the rows'
    # own per-slot time (the default stack's, not fitted above) is found back
    shipped_slot = api.load(REPO / "workloads" / "llama3.1-8b-1socket.yaml").stack
    back = CliRunner().invoke(
        cli,
        ["calibrate", str(path), "--fit", f"{DEFAULT}:stack.host.serial_per_slot=0:200us",
         "--overlay", str(machine), "--overlay", str(stack), "-o", str(tmp_path / "again"),
         "--max-evaluations", "10", "--json"],
    )  # fmt: skip
    assert back.exit_code == 0, back.output
    (slot,) = json.loads(back.stdout)["parameters"]
    assert slot["value"] == pytest.approx(shipped_slot.host.serial_per_slot, rel=0.02, abs=1e-6)


def test_a_machine_parameter_needs_two_stacks(tmp_path: Path) -> None:
    """A hardware parameter fitted on one stack's rows alone would be that stack's: refused."""
    path = _measured(tmp_path, TRUTH)
    result = CliRunner().invoke(
        cli,
        ["calibrate", str(path), "--fit", "hw.socket.hbm.efficiency=0.5:1", "-o", str(tmp_path)],
    )
    assert result.exit_code == 2 and f"one serving stack only ({DEFAULT})" in result.output


def test_calibrate_errors(tmp_path: Path) -> None:
    path = _write(tmp_path, [SMALL.format(batch=1, out=8, value=0.5)])
    runner = CliRunner()
    fit = "stack.host.serial_per_step=0:1ms"
    for args, message in [
        (["--fit", "hw.x=1"], "expected [SCOPE:]hw.FIELD"),
        (["--fit", fit, "--holdout", "0.25"], "chosen by group"),
        (["--fit", fit, "--holdout", "batch=1"], "never by row or batch"),
        (["--fit", fit, "--holdout", "tp=1,modle=x"], "modle: unknown key 'modle'; did you mean"),
        (["--fit", fit, "--holdout", "model=llama-3.1-8b"], "no measured row or figure"),
        (["--fit", fit, "--hardware", "dgx-h100"], "no measured row runs on it"),
        (["--fit", "tensorrt-llm:" + fit], "no fitted row runs on tensorrt-llm"),
        (["--fit", "dgx-h100:" + fit], "no serving stack of that name"),
        (["--fit", "stack.host.serial_per_stp=1:2"], "unknown field 'serial_per_stp'"),
        (["--fit", "stack.host.serial_per_step=0:2s"], "at its high bound"),
        (["--fit", fit, "--tolerance", "0"], "--tolerance"),
    ]:
        result = runner.invoke(cli, ["calibrate", str(path), *args, "-o", str(tmp_path / "o")])
        assert result.exit_code == 2 and message in result.output, (args, result.output)
        assert result.output.count("error:") == 1, result.output
    result = runner.invoke(cli, ["calibrate", "no-such-file", "--fit", fit])
    assert result.exit_code == 2 and "no-such-file" in result.output, result.output
    assert "argonne-sn40l" in result.output  # the shipped names that would have worked


def test_a_targets_machines_are_listed_whole_in_its_json() -> None:
    """A run on sn40l-8 is on sn40l-8 and on sn40l, which it extends: fit.json names both
    machines, each whole; a key with several values (a figure's hardware files) keeps them
    all."""
    from rdu_sim.validate.fit_result import TargetResult
    from rdu_sim.validate.targets import Target

    groups = (("set", "argonne-sn40l"), ("machine", "sn40l-8"), ("machine", "sn40l"))
    target = Target("a.csv:9", 0, 0, 1.0, 0.1, 0.1, groups=groups)
    row = TargetResult(target, 1.05, 1, held_out=False).to_dict()
    assert row["groups"] == {"set": "argonne-sn40l", "machine": ["sn40l-8", "sn40l"]}
    figure = (("figure", "max_batch_ratio"), ("hardware", "sn40l-16"), ("hardware", "sn40l-8"))
    told = TargetResult(Target("figures:x", 0, 0, 1.0, 0.1, 0.1, groups=figure), 1.0, 1, False)
    assert told.to_dict()["groups"] == {
        "figure": "max_batch_ratio",
        "hardware": ["sn40l-16", "sn40l-8"],  # a figure's runs: every hardware file, in order
    }
    one = Target("b.csv:9", 0, 0, 1.0, 0.1, 0.1, groups=(("machine", "dgx-h100"),))
    assert TargetResult(one, 1.0, 1, held_out=False).to_dict()["groups"] == {
        "machine": ["dgx-h100"]
    }


def test_groups_no_target_joins_are_fitted_apart(tmp_path: Path) -> None:
    """Two stacks' own parameters, each reaching its own rows only: two groups, each fitted
    as if alone (so a change on one stack's rows never moves the other's value); a machine's
    parameter reaching both joins them into one."""
    studio = _measured(tmp_path, [], "studio.csv", stacks=("sambastudio-2024",))
    stack = _measured(tmp_path, [], "stack.csv", stacks=("sambastack-2025",))
    fits = [
        "sambastudio-2024:stack.host.serial_per_step=0:1ms",
        "sambastack-2025:stack.host.serial_per_step=0:2ms",
    ]
    problem = _problem([studio, stack], fits)
    assert [group for group, _ in problem.blocks()] == [(0,), (1,)]
    assert sorted(i for _, targets in problem.blocks() for i in targets) == list(problem.train)
    shared = EvaluationCache(None)  # the fits apart reuse what the joint fit simulated
    both = Calibration(problem, shared).fit(8)
    alone = [Calibration(_problem([studio], fits[:1]), shared)]
    alone.append(Calibration(_problem([stack], fits[1:]), shared))
    apart = tuple(calibration.fit(8) for calibration in alone)
    assert both.values == (apart[0].values[0], apart[1].values[0])
    # ... and asked for no row at a value the joint fit did not: each group's search is the
    # one it made inside the joint fit
    assert [calibration.evaluator.simulated for calibration in alone] == [0, 0]
    # rows simulated with the shipped stacks: the fit finds their values back
    shipped = tuple(
        api.load("llama3.1-8b-1socket", {"stack": name}).stack.host.serial_per_step
        for name in ("sambastudio-2024", "sambastack-2025")
    )
    assert both.values == pytest.approx(shipped, rel=0.02)
    joined = _problem([studio, stack], [*fits, "sn40l:hw.system.intra_node_link.latency=0.5us:2us"])
    assert [group for group, _ in joined.blocks()] == [(0, 1, 2)]


def test_a_fit_that_stops_at_its_budget_says_it_did_not_converge(tmp_path: Path) -> None:
    """One fit step is the start (the middle of the bounds): nothing was fitted, so the
    command warns once per group, naming the budget and the flag that raises it; the JSON
    and the overlay's header say ``converged: false``, the printed value is not "fitted".
    The same fit with steps enough converges and says so."""
    path = _measured(tmp_path, TRUTH)
    fit = f"{DEFAULT}:stack.host.serial_per_step=0:1ms"
    args = ["calibrate", str(path), "--fit", fit, "--max-evaluations", "1"]
    result = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "short")])
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warned == [
        f"warning: the fit of {DEFAULT}:stack.host.serial_per_step stopped at its budget of 1 "
        "fit step before converging: its values are where it stopped, not fitted ones; raise "
        "--max-evaluations (a spec's max_evaluations)"
    ]
    assert f"not converged: {DEFAULT}:stack.host.serial_per_step = 500 us" in result.stdout
    assert "\nfitted " not in result.stdout
    fit_json = json.loads((tmp_path / "short" / "fit.json").read_text())
    assert fit_json["converged"] is False
    assert fit_json["groups"] == [
        {
            "parameters": [f"{DEFAULT}:stack.host.serial_per_step"],
            "converged": False,
            "stop": "stopped at its budget of fit steps before converging",
            "status": 0,
            "fit_steps": 1,
            "max_fit_steps": 1,
        }
    ]
    header = (tmp_path / "short" / f"{DEFAULT}-calibrated.yaml").read_text().splitlines()
    assert header[1].startswith("# converged: false (stopped at its budget")
    assert any(line.startswith("# Not converged: ") for line in header)
    enough = CliRunner().invoke(cli, [*args[:-1], "30", "-o", str(tmp_path / "long"), "--json"])
    assert enough.exit_code == 0 and "warning:" not in enough.stderr
    long = json.loads(enough.stdout)
    assert long["converged"] is True and long["groups"][0]["stop"].startswith("converged: ")
    text = (tmp_path / "long" / f"{DEFAULT}-calibrated.yaml").read_text()
    assert "# converged: true (converged: " in text and "# Fitted: " in text


@pytest.mark.parametrize("nested", [False, True])
def test_a_calibration_that_fails_before_its_first_simulation_leaves_no_empty_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nested: bool
) -> None:
    """The output folder and its cache file are made before anything is simulated (so an
    unwritable one fails first); a run that then fails keeping nothing removes them again:
    the suite's runs without -o left an empty calibration/evaluations.jsonl in the checkout.
    A folder that was there before, and a cache with results in it, stay."""
    path = _measured(tmp_path, TRUTH)
    fit = f"{DEFAULT}:stack.host.serial_per_step=0:1ms"

    def broken(self: Calibration, max_evaluations: int) -> None:
        raise ConfigError(["a simulation failed"])

    monkeypatch.setattr(Calibration, "fit", broken)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "made" / "deeper" if nested else tmp_path / "made"
    result = CliRunner().invoke(cli, ["calibrate", str(path), "--fit", fit, "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert "a simulation failed" in result.output
    assert not (tmp_path / "made").exists()
    before = sorted(p.name for p in tmp_path.iterdir())
    result = CliRunner().invoke(cli, ["calibrate", str(path), "--fit", fit])  # default folder
    assert result.exit_code == 2, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "evaluations.jsonl").write_text("")
    result = CliRunner().invoke(cli, ["calibrate", str(path), "--fit", fit, "-o", str(kept)])
    assert result.exit_code == 2, result.output
    assert (kept / "evaluations.jsonl").is_file()  # not this run's to remove


def test_targets_far_off_beside_a_value_held_at_its_bound_are_said(tmp_path: Path) -> None:
    """Rows measured with 10 ms of host time a step, fitted within 0..1 ms: the value is
    held at its high bound and the rows miss by far more than noise; the report says that
    the bound may be what holds the fit back (``FitResult.bound_lines``). Within its bounds
    the same fit says nothing of the kind."""
    from rdu_sim.validate.fit_result import FAR_OFF

    path = _measured(tmp_path, ["stack.host.serial_per_step=0.01"])
    held = Calibration(_problem([path], ["stack.host.serial_per_step=0:1ms"])).fit(30)
    name = held.parameters[0].name
    far = [r for r in held.results if abs(r.relative_error) >= FAR_OFF]
    assert held.values[0] == 1e-3 and len(far) == len(held.results) == 4
    worst = max(far, key=lambda r: abs(r.relative_error))
    (line,) = held.bound_lines()
    assert line.startswith(f"at its high bound: {name} = 1 ms, and 4 fitted targets it ")
    assert f"are 50.0% off or more (worst {worst.target.id}, -" in line
    assert "the bound may be what holds the fit back (widen it to see)" in line
    free = Calibration(_problem([path], ["stack.host.serial_per_step=0:20ms"])).fit(30)
    assert free.bound_lines() == []
