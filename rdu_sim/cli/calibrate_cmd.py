"""`rdu-sim calibrate`: fit named hardware parameters to measurements of a deployment.

MEASUREMENTS are CSV files of measured points (rdu_sim/validate/deployment.py states the
format; `rdu-sim examples` lists the shipped ones, e.g. argonne-sn40l). Each `--fit
hw.FIELD=LOW:HIGH` names one parameter and its bounds; the fit minimizes the log-ratios
simulated / measured over the training points, holds out `--holdout` of them (seeded), prints
per-point and median errors of both sets, and writes a hardware file (`-o`): the points'
hardware file with the fitted values, usable as `hardware:` in a workload or with `--set
hardware=FILE`. Each evaluation is cached (`--cache`, default next to the output), so an
interrupted fit run again resumes. Deterministic: the same inputs give the same bytes.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from rdu_sim import human
from rdu_sim.cli.errors import fail
from rdu_sim.cli.options import overrides_option

if TYPE_CHECKING:
    from rdu_sim.validate.deployment import ErrorSummary


def _measurement_path(text: str) -> Path:
    """A measurement file: a path, or a shipped file's name (``argonne-sn40l``)."""
    from rdu_sim.config import shipped

    return shipped.locate(text, ("measurement",))


def _errors(group: ErrorSummary) -> str:
    """One group's errors, for the output file's header."""
    median, worst = human.percent(group.median_abs_error), human.percent(group.worst_abs_error)
    return f"{group.group}: median {median}, worst {worst}"


@click.command("calibrate")
@click.argument("measurements", nargs=-1, required=True)
@click.option(
    "--fit",
    "fits",
    multiple=True,
    required=True,
    metavar="hw.FIELD=LOW:HIGH|stack.FIELD=LOW:HIGH",
    help="A parameter to fit and its bounds, e.g. stack.host.serial_per_step=0:2ms. Repeatable.",
)
@click.option(
    "--hardware",
    "hardware",
    default=None,
    help="Fit only the points on this hardware file (needed when the files name several).",
)
@click.option(
    "--holdout",
    type=float,
    default=0.25,
    show_default=True,
    help="Share of the points held out of the fit and reported apart.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the hold-out draw.")
@click.option(
    "--max-evaluations",
    type=click.IntRange(1, 10_000),
    default=60,
    show_default=True,
    help="Most steps of the fit (scipy's max_nfev); each step also evaluates every "
    "training point once per parameter for its slope.",
)
@click.option(
    "-o",
    "--out",
    "out",
    type=click.Path(path_type=Path),
    default=None,
    help="Write the calibrated hardware file here [default: <hardware>-calibrated.yaml].",
)
@click.option(
    "--cache",
    type=click.Path(path_type=Path),
    default=None,
    help="Evaluation cache, for resuming [default: the output's path + .cache.jsonl].",
)
@overrides_option
@click.option("--json", "as_json", is_flag=True, help="Print the fit as JSON.")
def command(
    measurements: tuple[str, ...],
    fits: tuple[str, ...],
    hardware: str | None,
    holdout: float,
    seed: int,
    max_evaluations: int,
    out: Path | None,
    cache: Path | None,
    overrides: tuple[str, ...],
    as_json: bool,
) -> None:
    """Fit hardware and serving-stack parameters (--fit hw.FIELD=LOW:HIGH, --fit
    stack.FIELD=LOW:HIGH) to MEASUREMENTS; write the calibrated hardware file (and the
    calibrated stack beside it, which it runs by default)."""
    from rdu_sim.config.hardware_file import read_hardware
    from rdu_sim.report.files import write_file
    from rdu_sim.validate.calibrate import Calibration, overlay_text, parse_fit, split_holdout
    from rdu_sim.validate.deployment import by_hardware, read_all, summarize

    points = read_all(_measurement_path(m) for m in measurements)
    names = sorted({p.hardware for p in points})
    if hardware is None and len(names) > 1:
        fail(
            f"the measurements name several hardware files ({', '.join(names)}): "
            "pick one with --hardware"
        )
    chosen = hardware or names[0]
    points = [p for p in points if p.hardware == chosen]
    if not points:
        fail(f"--hardware {chosen}: no measured point names it (they name {', '.join(names)})")
    parameters = [parse_fit(text) for text in fits]
    try:
        train, held = split_holdout(len(points), holdout, seed)
    except ValueError as exc:
        fail(str(exc))
    out = out or Path(f"{Path(chosen).stem}-calibrated.yaml")
    cache = cache or out.with_name(out.name + ".cache.jsonl")

    def progress(evaluation: int, values: dict[str, float], median: float) -> None:
        shown = ", ".join(f"{k}={human.number(v, 4)}" for k, v in values.items())
        print(
            f"evaluation {evaluation}: {shown}: median error {human.percent(median)}",
            file=sys.stderr,
        )

    calibration = Calibration(
        points, parameters, overrides=overrides, cache=cache, progress=progress
    )
    result = calibration.fit(train, held, max_evaluations)
    fitted = summarize([result.results[i] for i in train], "fitted")
    groups = [fitted]
    if held:
        groups.append(summarize([result.results[i] for i in held], "held out"))
    words = [
        *measurements,
        *(f"--fit={text}" for text in fits),
        *([f"--hardware={hardware}"] if hardware else []),
        f"--holdout={holdout}",
        f"--seed={seed}",
        f"--max-evaluations={max_evaluations}",
        *(f"--set={text}" for text in overrides),
    ]
    header = [
        f"Calibrated by: rdu-sim calibrate {' '.join(shlex.quote(w) for w in words)}",
        f"Fitted on {len(train)} of {len(points)} points ({', '.join(measurements)}), "
        f"seed {seed}: " + "; ".join(_errors(g) for g in groups),
    ]
    # the whole hardware (a file that extends another, merged), so the output stands alone;
    # fitted stack fields go to a stack file beside it, which it runs by default
    scenario = points[0].scenario(overrides)
    base, _ = read_hardware(Path(scenario.hardware_file))
    if any(path.startswith("stack.") for path in result.values):
        stack_out = out.with_name(f"{out.stem}.stack{out.suffix or '.yaml'}")
        stack_base = {**scenario.stack.model_dump(mode="json"), "name": stack_out.stem}
        stack_text = overlay_text(stack_base, result.values, header, prefix="stack.")
        write_file(stack_out, lambda stream: stream.write(stack_text))
        base = {**base, "default_stack": stack_out.name}
    text = overlay_text(dict(base), result.values, header)
    write_file(out, lambda stream: stream.write(text))
    if as_json:
        click.echo(
            json.dumps(
                {
                    **result.to_dict(),
                    "hardware": chosen,
                    "out": str(out),
                    "errors": [g.to_dict() for g in [*groups, *by_hardware(result.results)]],
                }
            )
        )
        return
    for i, r in enumerate(result.results):
        p = r.point
        role = "held out" if i in held else "fitted"
        click.echo(
            f"{p.source}: {p.model} tp={p.tp} batch={p.batch} {p.input_tokens}/{p.output_tokens} "
            f"{p.metric}: measured {human.duration(p.measured_s, 4)}, simulated "
            f"{human.duration(r.simulated_s, 4)}, "
            f"{human.percent(r.relative_error, signed=True)} ({role})"
        )
    for g in groups:
        click.echo(
            f"{g.group}: {g.points} points, median |error| {human.percent(g.median_abs_error)}, "
            f"worst {human.percent(g.worst_abs_error)} ({g.worst_point})"
        )
    for path, value in result.values.items():
        click.echo(f"fitted {path} = {value!r}")
    click.echo(f"wrote {out} (use it as `hardware: {out}` or --set hardware={out})")
