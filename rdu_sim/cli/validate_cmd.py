"""`rdu-sim validate`: compare the simulator with SambaNova's published SN40L figures.

Runs the calibration suite (rdu_sim/validate: the SnapStream and full-attention DeepSeek-R1
workloads through `rdu_sim.api.run`, the code path of `rdu-sim run`, smaller DeepSeek-R1 runs
and Llama 3.1 decode steps through `rdu_sim.api.step`) and prints, for each published figure,
the published value, the simulated value, the relative error, the tolerance (or for an "over
X" figure its lowest passing value) and pass/fail. `--json` prints a list of objects with
`name`, `published`, `simulated`, `relative_error`, `tolerance`, `pass` (plus `unit`, `low`,
`high`, `bound`, `definition`). Exit status: 0 when every figure passes, 1 when one fails, 2
for bad input. docs/calibration.md explains each figure, every assumption and the sensitivity
study.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from rdu_sim import human
from rdu_sim.cli.errors import fail
from rdu_sim.cli.options import overrides_option
from rdu_sim.interrupts import kept_on_stop

EXIT_FIGURE_FAILED = 1
DEPLOYMENT_MEDIAN = 0.10
"""A deployment suite passes when each hardware file's median |error| is at most this..."""
DEPLOYMENT_WORST = 0.25
"""...and no point's |error| exceeds this."""
UNFINISHED = "the suite had not finished: nothing was printed"


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
        table.add_column(col, justify="left" if col == "figure" else "right")
    for row in rows:
        unit = str(row["unit"])
        err = row["relative_error"]
        table.add_row(
            str(row["name"]),
            _fmt(row["published"], unit),  # type: ignore[arg-type]
            _fmt(row["simulated"], unit),  # type: ignore[arg-type]
            "n/a" if err is None else f"{100 * float(err):+.1f}%",  # type: ignore[arg-type]
            _tolerance(row, unit),
            "[green]pass[/green]" if row["pass"] else "[red]FAIL[/red]",
        )
    Console(soft_wrap=True).print(table)


def _deployment(overrides: tuple[str, ...], as_json: bool) -> bool:
    """The deployment suite: every shipped measured point simulated; True when it passes."""
    from rdu_sim.validate.deployment import PointResult, by_hardware, read_all, shipped_files
    from rdu_sim.validate.deployment import simulate as simulate_point

    points = read_all(shipped_files())
    results = [PointResult(p, simulate_point(p, overrides)) for p in points]
    systems = by_hardware(results)
    within = [
        s.median_abs_error <= DEPLOYMENT_MEDIAN and s.worst_abs_error <= DEPLOYMENT_WORST
        for s in systems
    ]
    passed = all(within)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "points": [r.to_dict() for r in results],
                    "systems": [s.to_dict() for s in systems],
                    "median_limit": DEPLOYMENT_MEDIAN,
                    "worst_limit": DEPLOYMENT_WORST,
                    "pass": passed,
                }
            )
        )
        return passed
    table = Table(title="Measured deployments (measurements/)", title_justify="left")
    for col in ("point", "model", "tp", "batch", "in/out", "metric", "measured", "simulated"):
        table.add_column(col, justify="left" if col in ("point", "model") else "right")
    table.add_column("error", justify="right")
    for r in results:
        p = r.point
        err = r.relative_error
        colour = "red" if abs(err) > DEPLOYMENT_WORST else "green"
        table.add_row(
            p.source.rsplit("/", 1)[-1],
            p.model,
            str(p.tp),
            str(p.batch),
            f"{p.input_tokens}/{p.output_tokens}",
            p.metric,
            human.duration(p.measured_s, 4),
            human.duration(r.simulated_s, 4),
            f"[{colour}]{human.percent(err, signed=True)}[/{colour}]",
        )
    console = Console(soft_wrap=True)
    console.print(table)
    for s, ok in zip(systems, within, strict=True):
        console.print(
            f"{s.group}: {s.points} points, median |error| {human.percent(s.median_abs_error)} "
            f"(limit {human.percent(DEPLOYMENT_MEDIAN, 0)}), worst "
            f"{human.percent(s.worst_abs_error)} (limit {human.percent(DEPLOYMENT_WORST, 0)}, "
            f"{s.worst_point.rsplit('/', 1)[-1]}): "
            + ("[green]pass[/green]" if ok else "[red]FAIL[/red]")
        )
    return passed


@click.command("validate")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option(
    "--suite",
    type=click.Choice(["figures", "deployment"]),
    default="figures",
    show_default=True,
    help="figures: SambaNova's twelve published figures; deployment: every shipped measured "
    "point (measurements/: Argonne's SN40L and H100 grids), simulated against measured.",
)
@click.option(
    "--quick",
    is_flag=True,
    help="Same runs with fewer requests (3 per batch slot): about a minute.",
)
@overrides_option
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
    type=click.Path(path_type=Path),
    default=None,
    help="SnapStream workload [default: workloads/deepseek-r1-128k-snapstream.yaml].",
)
@click.option(
    "--full",
    "full",
    type=click.Path(path_type=Path),
    default=None,
    help="Full-attention workload [default: workloads/deepseek-r1-128k-full.yaml].",
)
def command(
    as_json: bool,
    suite: str,
    quick: bool,
    overrides: tuple[str, ...],
    tolerances: tuple[str, ...],
    snapstream: Path | None,
    full: Path | None,
) -> None:
    """Run the calibration suite and compare with SambaNova's published SN40L figures."""
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
                "suite simulates each shipped measured point as it is (it takes --set and --json)"
            )
        with kept_on_stop(UNFINISHED):
            passed = _deployment(overrides, as_json)
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
        ss, fu = result.snapstream, result.full
        header = (
            f"SnapStream: {ss.batch_slots} slots, {ss.requests} requests; full: "
            f"{fu.batch_slots} slots, {fu.requests} requests; compressed prompt "
            f"{ss.prefill_prompt} tokens{' (--quick)' if quick else ''}"
        )
        _print_table(rows, header)
    if not result.passed:
        raise SystemExit(EXIT_FIGURE_FAILED)
