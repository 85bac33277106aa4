"""Calibration specs: the shipped joint spec resolves to what it says (scopes, the two-stack
rule, held-out groups) without simulating; a spec's faults name its file, field and line; the
published figures as targets name the stack their workload runs; the deployment suite's
groups and limits (the suite's own numbers are the docs' quotes)."""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.config import ConfigError, shipped
from rdu_sim.validate import deployment_suite, targets
from rdu_sim.validate.calibration_problem import build_problem, spec_inputs
from rdu_sim.validate.calibration_spec import read_spec
from rdu_sim.validate.deployment import MeasuredPoint, Simulated
from rdu_sim.validate.deployment_suite import run_deployment_suite
from rdu_sim.validate.figures import DEVICE, FIGURES, PRODUCTION_STACK
from rdu_sim.validate.measurement_file import read_all, shipped_files
from rdu_sim.validate.scope import label_of

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(targets, "simulate_run", lambda *a: pytest.fail("simulated"))
    monkeypatch.setattr(targets.FiguresUnit, "run", lambda *a: pytest.fail("simulated"))


def test_the_joint_spec_resolves_without_simulating(no_simulation: None) -> None:
    """Every parameter is scoped to a machine or a stack its rows reach; a machine's spans
    two stacks; the held-out groups are whole (every 70B row); every shipped measurement set
    and the figures are in."""
    spec = read_spec(shipped.locate("joint", ("calibration",)))
    problem = build_problem(spec_inputs(spec))
    assert {p.stem for p in spec.measurement_paths()} == {p.stem for p in shipped_files()}
    assert {t.values_of("set")[0] for t in problem.targets} == {
        *(p.stem for p in spec.measurement_paths()),
        "figures",
    }
    for one in problem.parameters:
        reached = [
            d
            for i in problem.train
            for d in problem.units[problem.targets[i].unit].deployments
            if one.reaches(d)
        ]
        assert reached, one.name
        if one.parameter.kind == "machine":
            assert len({d.stack for d in reached}) >= 2, one.name
        else:
            assert {label_of(d.stack) for d in reached} == {one.label}, one.name
    held = [problem.targets[i] for i in problem.held_out]
    seventy = {"llama-3.1-70b", "llama-3.3-70b"}
    assert held and all(seventy & set(t.values_of("model")) for t in held)
    trained = [problem.targets[i] for i in problem.train]
    assert not any(seventy & set(t.values_of("model")) for t in trained)
    result = CliRunner().invoke(cli, ["check", "joint"])
    assert result.exit_code == 0 and "calibration spec: 'joint'" in result.output, result.output


def _spec(tmp_path: Path, **fields: object) -> Path:
    data = {
        "name": "t",
        "measurements": ["argonne-sn40l"],
        "fit": ["stack.host.serial_per_step=0:1ms"],
        **fields,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"fit": ["hw.x=1"]}, "fit.0: expected [SCOPE:]hw.FIELD"),
        ({"fit": []}, "fit"),
        (
            {"held_out": [{"batch": 1}]},
            "held_out.0.batch: unknown key 'batch': held-out groups are chosen by one of set, "
            "machine, hardware, stack, model, tp, metric, method, figure (never by row",
        ),
        (
            {"held_out": [{"modle": "llama-3.1-8b"}]},
            "spec.yaml:7: held_out.0.modle: unknown key 'modle'; did you mean 'model'? Held-out "
            "groups are chosen by one of set, machine, hardware, stack, model, tp, metric, "
            "method, figure",
        ),
        ({"held_out": ["model"]}, "held_out.0"),
        ({"measurements": ["nope"]}, "measurements.0: 'nope': no measurement file"),
        ({"measurements": [], "figures": None}, "measurements: name a measurement file"),
        ({"tolerance": 0}, "tolerance"),
        ({"max_evaluations": 10**9}, "max_evaluations"),
        ({"colour": "red"}, "colour"),
        ({"figures": {"names": ["max_batch_rato"]}}, "unknown figure(s) ['max_batch_rato']"),
    ],
)
def test_a_spec_fault_names_its_field(
    tmp_path: Path, fields: dict[str, object], words: str, no_simulation: None
) -> None:
    path = _spec(tmp_path, **fields)
    result = CliRunner().invoke(cli, ["calibrate", str(path), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert words in line, line
    with pytest.raises(ConfigError):
        build_problem(spec_inputs(read_spec(path)))


def test_a_spec_states_what_the_command_line_would(tmp_path: Path, no_simulation: None) -> None:
    path = _spec(tmp_path)
    for option in (["--fit", "stack.host.serial_per_slot=0:1ms"], ["--holdout", "tp=8"],
                   ["--figures"], ["--tolerance", "0.2"], ["--hardware", "sn40l-8"]):  # fmt: skip
        result = CliRunner().invoke(cli, ["calibrate", str(path), *option])
        assert result.exit_code == 2 and "the spec" in result.output, result.output
        # what is refused and why, and how to ask for it: the spec's field, in this file
        field = {"--fit": "fit", "--holdout": "held_out", "--figures": "figures"}.get(
            option[0], "tolerance" if option[0] == "--tolerance" else "measurements"
        )
        assert (
            f"error: {option[0]} is not taken with a calibration spec: the spec {path} fixes "
            in result.output
        )
        assert f"in its `{field}` field" in result.output
        assert f"edit its `{field}` in {path} (or a copy of it)" in result.output
    # a shipped spec is copied out first: the command that does it, and where the copy is
    result = CliRunner().invoke(cli, ["calibrate", "joint", "--holdout", "figure=x"])
    assert result.exit_code == 2 and result.output.count("error:") == 1, result.output
    assert "the spec joint fixes its held-out groups in its `held_out` field" in result.output
    assert "`rdu-sim examples copy DIR` writes it to DIR/calibrations/joint.yaml" in result.output
    assert "edit its `held_out`" in result.output
    result = CliRunner().invoke(cli, ["calibrate", str(path), "argonne-h100"])
    assert result.exit_code == 2 and "give it alone" in result.output


def test_each_figure_names_the_stack_its_workload_runs(no_simulation: None) -> None:
    """A figure measured on a served deployment names the production stack, and its
    workload runs it; a figure of the device alone names none; the figures' targets carry
    their stack as their group."""
    unit, figures = targets.figure_targets(None, True, 0.1)
    assert [t.label for t in figures] == [f.name for f in FIGURES]
    for figure, target in zip(FIGURES, figures, strict=True):
        assert target.values_of("stack") == [figure.stack]
    assert {f.stack for f in FIGURES} == {PRODUCTION_STACK, DEVICE}
    assert shipped.find(PRODUCTION_STACK, ("stack",)) is not None
    assert label_of(unit.deployments[0].stack) == PRODUCTION_STACK


@pytest.mark.slow
def _stand_in(point: MeasuredPoint, overrides: Sequence[str] = ()) -> Simulated:
    """A run's result without the run: off the measured value by 0 to 39%, by the row."""
    off = zlib.crc32(point.source.encode()) % 40 / 100
    return Simulated(point.measured * (1 + off), point.batch or 7)


def test_the_deployment_suite_reports_each_group_against_its_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every shipped row is simulated once and belongs to one group of hardware, stack and
    method; TensorRT-LLM's full-load table is its own group, held to 10% median and 20%
    worst, Argonne's grids to 8% median and 20% (H100) or 25% (SN40L) worst; each group's
    verdict is its errors against its limits. The runs are stood in for (the real suite's
    numbers are the docs' quotes, tests/test_docs_quotes.py): the errors are the stand-in's."""
    monkeypatch.setattr(deployment_suite, "simulate_run", _stand_in)
    result = CliRunner().invoke(cli, ["validate", "--suite", "deployment", "--json"])
    assert result.exit_code in (0, 1), result.output
    suite = json.loads(result.stdout)
    groups = {g["group"]: g for g in suite["systems"]}
    counts = {name: g["points"] for name, g in groups.items()}
    full = [name for name in groups if name.endswith("full-load")]
    assert len(full) == 1 and counts[full[0]] == 20
    assert sum(counts.values()) == len(suite["points"]) == 193
    assert (groups[full[0]]["median_limit"], groups[full[0]]["worst_limit"]) == (0.10, 0.20)
    limits = {name: (g["median_limit"], g["worst_limit"]) for name, g in groups.items()}
    assert limits["sn40l-8 · sambastudio-2024"] == (0.08, 0.25)
    assert limits["dgx-h100 · tensorrt-llm-2024"] == limits["dgx-h100 · vllm-2024"] == (0.08, 0.20)
    for group in groups.values():
        ok = group["median_abs_error"] <= group["median_limit"] and (
            group["worst_abs_error"] <= group["worst_limit"]
        )
        assert group["pass"] == ok
        assert 0 <= group["median_abs_error"] <= group["worst_abs_error"] < 0.4
    assert not suite["pass"] and result.exit_code == 1  # the stand-in misses by up to 39%
    for point in suite["points"]:
        off = zlib.crc32(point["source"].encode()) % 40 / 100
        assert point["simulated"] == pytest.approx(point["measured"] * (1 + off))


def test_the_deployment_suite_runs_each_row_at_its_batch() -> None:
    """The real runs of the cheapest row of each shipped file that gives a batch: each at
    that batch."""

    def cost(point: MeasuredPoint) -> int:
        return (point.batch or 0) * (point.input_tokens + point.output_tokens)

    rows: dict[str, MeasuredPoint] = {}
    for point in read_all(shipped_files()):
        kept = rows.get(point.file)
        if point.batch is not None and (kept is None or cost(point) < cost(kept)):
            rows[point.file] = point
    assert len(rows) >= 3
    report = run_deployment_suite(list(rows.values()))
    for result in report.results:
        assert result.batch_slots == result.point.batch
        assert result.simulated > 0


def test_an_overlay_passed_back_reaches_the_rows_of_its_stack_only(tmp_path: Path) -> None:
    """validate --suite deployment --overlay: a stack overlay's values on the rows that run
    that stack, and on no other."""
    from rdu_sim.validate.deployment import MeasuredPoint
    from rdu_sim.validate.deployment_suite import run_deployment_suite
    from rdu_sim.validate.overlays import read_overlay

    overlay = tmp_path / "slow.yaml"
    overlay.write_text(
        yaml.safe_dump({"extends": "sambastudio-2024", "host": {"serial_per_step": "5 ms"}})
    )
    rows = [
        MeasuredPoint("sn40l", "llama-3.2-1b", 1, 2, 64, 8, "e2e_s", 1.0, stack=stack, source=s)
        for s, stack in (("m.csv:2", "sambastudio-2024"), ("m.csv:3", "none"))
    ]
    before = run_deployment_suite(rows)
    after = run_deployment_suite(rows, fixed=read_overlay(overlay))
    served, bare = (
        a.simulated - b.simulated for a, b in zip(after.results, before.results, strict=True)
    )
    assert bare == 0.0 and served > 8 * 5e-3 * 0.9  # 8 decode steps at least
    assert [g.errors.group for g in after.groups] == ["sn40l · sambastudio-2024", "sn40l · none"]
