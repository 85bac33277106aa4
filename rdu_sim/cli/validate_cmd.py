"""`rdu-sim validate`: compare the simulator with SambaNova's published SN40L figures.

Runs the calibration suite (rdu_sim/validate: the SnapStream and full-attention DeepSeek-R1
workloads through `rdu_sim.api.run`, the code path of `rdu-sim run`, smaller DeepSeek-R1 runs
and Llama 3.1 decode steps through `rdu_sim.api.step`) and prints, for each published figure,
the published value, the simulated value, the relative error, the tolerance (or for an "over
X" figure its lowest passing value) and pass/fail. `--json` prints a list of objects with
`name`, `published`, `simulated`, `relative_error`, `tolerance`, `pass` (plus `unit`, `low`,
`high`, `bound`, `stated`, the value as published, and `definition`). Exit status: 0 when
every figure passes, 1 when one fails, 2 for bad input. docs/calibration.md explains each
figure, every assumption and the sensitivity study.

`--suite deployment` simulates the shipped measured rows (``measurements/``), each group held
to its limits (exit 1 beyond them); `--suite deployment FILE...` simulates the rows of the
user's own measurement files as they stand (their hardware and stack files, ``--set`` and
``--overlay`` values on top), through the same evaluation (``deployment_suite.evaluate``),
and reports each row's error and each group's median and worst without holding them to the
suite's limits (exit 0: the question is how far, not whether the suite passes).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
from rich.table import Table

from rdu_sim import human
from rdu_sim.cli.errors import fail
from rdu_sim.cli.main import STOPS
from rdu_sim.cli.options import GivenPath, overlays_option, overrides_option
from rdu_sim.interrupts import kept_on_stop
from rdu_sim.report.terminal import wide_console

EXIT_FIGURE_FAILED = 1
UNFINISHED = STOPS["validate"]
FAILURES_EXPLAINED = (
    'Why each figure lands where it does: docs/calibration.md, "Why each figure lands where '
    'it does"; which failures contradict other published figures and which the model owns: '
    '"Which figures pull against which". --json gives each figure\'s definition.'
)


def _fmt(value: float | None, unit: str) -> str:
    return "n/a" if value is None else human.in_unit(value, unit, 4)


def _tolerance(row: dict[str, object], unit: str) -> str:
    """A point figure's relative band, or a bound's ("over X") lowest passing value."""
    if row.get("bound") == "at_least":
        return f"≥ {_fmt(row['low'], unit)}"  # type: ignore[arg-type]
    return f"±{human.percent(float(row['tolerance']))}"  # type: ignore[arg-type]


def _print_table(rows: list[dict[str, object]], header: str) -> None:
    table = Table(title=header, title_justify="left")
    for col in ("figure", "published", "simulated", "rel. error", "tolerance", "result"):
        # a figure's name folds rather than ends in an ellipsis: several share a prefix
        table.add_column(col, justify="left" if col == "figure" else "right", overflow="fold")
    for row in rows:
        unit = str(row["unit"])
        err = row["relative_error"]
        stated = row.get("stated")
        table.add_row(
            str(row["name"]),
            str(stated) if stated else _fmt(row["published"], unit),  # type: ignore[arg-type]
            _fmt(row["simulated"], unit),  # type: ignore[arg-type]
            "n/a" if err is None else f"{100 * float(err):+.1f}%",  # type: ignore[arg-type]
            _tolerance(row, unit),
            "[green]pass[/green]" if row["pass"] else "[red]FAIL[/red]",
        )
    if not all(row["pass"] for row in rows):
        table.caption = FAILURES_EXPLAINED
        table.caption_justify = "left"
    wide_console(soft_wrap=True).print(table)


def _deployment(
    overrides: tuple[str, ...],
    overlays: tuple[Path, ...],
    as_json: bool,
    measurements: tuple[str, ...] = (),
) -> bool:
    """The deployment suite: every shipped measured row (or every row of ``measurements``,
    as it stands: reported, not held to the suite's limits) simulated; True when every
    group is within its limits."""
    from rdu_sim.config import shipped
    from rdu_sim.validate.deployment_suite import check_overlays, evaluate, read_rows
    from rdu_sim.validate.measurement_file import read_each, shipped_files
    from rdu_sim.validate.overlays import read_overlay

    paths = [shipped.locate(text, ("measurement",)) for text in measurements] or shipped_files()
    rows = read_rows(paths, read_each(paths), overrides)  # every bad row of every file named
    given = [(path, read_overlay(path)) for path in overlays]
    check_overlays(given, rows)  # an overlay that reaches no row would change nothing
    fixed = [one for _, read in given for one in read]
    report = evaluate(rows, overrides, fixed, held=not measurements)
    if as_json:
        click.echo(json.dumps(report.to_dict()))
        return report.passed
    title = ", ".join(str(path) for path in paths) if paths else "measurements/"
    table = Table(title=f"Measured deployments ({title})", title_justify="left")
    for col in ("point", "model", "tp", "batch", "in/out", "metric", "measured", "simulated"):
        left = col in ("point", "model")
        table.add_column(col, justify="left" if left else "right", overflow="fold")
    table.add_column("error", justify="right")
    limits = {group.errors.group: group for group in report.groups}
    for r, name in zip(report.results, report.group_of_row, strict=True):
        p = r.point
        err = r.relative_error
        worst = limits[name].worst_limit
        error = human.percent(err, signed=True)
        if worst is not None:
            colour = "red" if abs(err) > worst else "green"
            error = f"[{colour}]{error}[/{colour}]"
        table.add_row(
            p.source.rsplit("/", 1)[-1],
            p.model,
            str(p.tp),
            str(p.batch) if p.batch is not None else f"auto ({r.batch_slots})",
            f"{p.input_tokens}/{p.output_tokens}",
            p.metric,
            _measured(p.measured, p.unit),
            _measured(r.simulated, p.unit),
            error,
        )
    from rdu_sim.validate.fit_result import ERROR_SIGN

    table.caption = ERROR_SIGN
    table.caption_justify = "left"
    console = wide_console(soft_wrap=True)
    console.print(table)
    for group in report.groups:
        s = group.errors
        worst_row = s.worst_point.rsplit("/", 1)[-1]
        if group.median_limit is None or group.worst_limit is None:
            console.print(
                f"{s.group}: {human.count(s.points, 'point')}, median |error| "
                f"{human.percent(s.median_abs_error)}, worst {human.percent(s.worst_abs_error)} "
                f"({worst_row})",
                markup=False,
            )
            continue
        console.print(
            f"{s.group}: {s.points} points, median |error| {human.percent(s.median_abs_error)} "
            f"(limit {human.percent(group.median_limit, 0)}), worst "
            f"{human.percent(s.worst_abs_error)} (limit {human.percent(group.worst_limit, 0)}, "
            f"{worst_row}): " + ("[green]pass[/green]" if group.passed else "[red]FAIL[/red]")
        )
    return report.passed


def _measured(value: float, unit: str) -> str:
    """A measured or simulated value in its unit."""
    return human.duration(value, 4) if unit == "s" else human.in_unit(value, unit, 4)


@click.command("validate")
@click.argument("measurements", nargs=-1, metavar="[MEASUREMENTS]...")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option(
    "--suite",
    type=click.Choice(["figures", "deployment"]),
    default="figures",
    show_default=True,
    help="figures: SambaNova's twelve published figures; deployment: every shipped measured "
    "point (measurements/: Argonne's SN40L and H100 grids, TensorRT-LLM 1.0's full-load "
    "table), simulated against measured, or every row of the MEASUREMENTS files given "
    "(yours, as they stand: each row's error, each group's median and worst, no limits).",
)
@click.option(
    "--quick",
    is_flag=True,
    help="Same runs with fewer requests (3 per batch slot in the deployment runs), the code "
    "path calibrate's figures use; hardly quicker: most of the time is simulating each step "
    "shape once (figures only).",
)
@overrides_option
@overlays_option
@click.option(
    "--tolerance",
    "tolerances",
    multiple=True,
    metavar="FIGURE=VALUE",
    help="Replace a figure's relative tolerance (e.g. max_batch_ratio=0.05). Repeatable.",
)
@click.option(
    "--snapstream",
    "snapstream",
    type=GivenPath(),
    default=None,
    help="SnapStream workload [default: workloads/deepseek-r1-128k-snapstream.yaml].",
)
@click.option(
    "--full",
    "full",
    type=GivenPath(),
    default=None,
    help="Full-attention workload [default: workloads/deepseek-r1-128k-full.yaml].",
)
def command(
    measurements: tuple[str, ...],
    as_json: bool,
    suite: str,
    quick: bool,
    overrides: tuple[str, ...],
    overlays: tuple[Path, ...],
    tolerances: tuple[str, ...],
    snapstream: Path | None,
    full: Path | None,
) -> None:
    """Run the calibration suite and compare with SambaNova's published SN40L figures.

    With --suite deployment, simulate measured deployments instead: the shipped ones, or the
    MEASUREMENTS files given (CSV files of the measurement format, docs/calibration.md)."""
    if measurements and suite != "deployment":
        fail(
            f"{measurements[0]}: measurement files are simulated by the deployment suite: "
            f"rdu-sim validate --suite deployment {' '.join(measurements)}"
        )
    if overlays and suite != "deployment":
        fail("--overlay: only the deployment suite reads calibrated overlays (--suite deployment)")
    if suite == "deployment":
        figures_only = {
            "--quick": quick,
            "--tolerance": tolerances,
            "--snapstream": snapstream,
            "--full": full,
        }
        if given := [option for option, value in figures_only.items() if value]:
            fail(
                f"{', '.join(given)}: the figures suite's (--suite figures); the deployment "
                "suite simulates each measured point as it is (it takes measurement files, --set, "
                "--overlay and --json)"
            )
        with kept_on_stop(UNFINISHED):
            passed = _deployment(overrides, overlays, as_json, measurements)
        if not passed:
            raise SystemExit(EXIT_FIGURE_FAILED)
        return
    from rdu_sim.validate import run_suite, tolerance_overrides, with_tolerances
    from rdu_sim.validate.suite import FULL_WORKLOAD, SNAPSTREAM_WORKLOAD

    try:
        figures = with_tolerances(tolerance_overrides(tolerances))
    except ValueError as exc:
        fail(str(exc))
    with kept_on_stop(UNFINISHED):
        result = run_suite(
            quick=quick,
            overrides=overrides,
            figures=figures,
            snapstream=snapstream or SNAPSTREAM_WORKLOAD,
            full=full or FULL_WORKLOAD,
        )
    rows = [row.to_dict() for row in result.rows]
    if as_json:
        click.echo(json.dumps(rows))
    else:
        ss, fu, m = result.snapstream, result.full, result.measurements
        header = (
            f"SnapStream: {ss.batch_slots} slots, {ss.requests} requests; full: "
            f"{fu.batch_slots} slots, {fu.requests} requests; compressed prompt "
            f"{ss.prefill_prompt} tokens{' (--quick)' if quick else ''}; 256 users: "
            f"{_layout_rate(m.throughput_256_users_tensor_parallel)} under TP16, "
            f"{_layout_rate(m.throughput_256_users_data_parallel)} with attention "
            "data-parallel"
        )
        _print_table(rows, header)
    if not result.passed:
        raise SystemExit(EXIT_FIGURE_FAILED)


def _layout_rate(rate: float) -> str:
    """One layout's 256-user rate, or why there is none (NaN: the hardware cannot run it)."""
    return "not runnable here" if math.isnan(rate) else human.rate(rate, "tokens/s")
