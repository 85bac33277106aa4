"""`rdu-sim calibrate`: fit hardware and serving-stack parameters to measurements and figures.

Two ways to ask. A calibration spec (a YAML file, or a shipped one by name:
`rdu-sim calibrate joint`; rdu_sim/validate/calibration_spec.py states it) names the
measurement sets, the published figures, the parameters with their bounds and scopes and the
held-out groups. Or on the command line: MEASUREMENTS (CSV files or shipped names, e.g.
argonne-sn40l; rdu_sim/validate/measurement_file.py states the format), each `--fit
[SCOPE:]PATH=LOW:HIGH` (a `hw.` field is one value on a machine, its hardware file and every
file extending it; a `stack.` field one value on a serving stack), `--holdout KEY=VALUE`
groups and `--figures`.

The fit minimizes the trained rows' and figures' log-errors, each over its tolerance, and
prints every target's error (simulated / measured - 1 of its metric: + is slower for a time,
faster for tokens/s; a line above the table says so), labelled fitted, held out, or reached
by no fitted parameter, the errors of each per measurement set and per stack, and the fitted
values with their units (an undetermined one is not written: its file's value stays). It
writes into `-o DIR` one overlay per machine (a hardware file that extends it) and per stack,
and `fit.json`; a group of parameters that stopped at its budget of fit steps
(`--max-evaluations`) before converging is warned of, printed `not converged:` and recorded
`converged: false` in both; pass an overlay back with `--overlay FILE` (here or in `validate --suite
deployment`). Every simulation is kept in
an evaluation cache (`--cache`, default DIR/evaluations.jsonl) the moment it ends: Ctrl-C or
SIGTERM stops the fit with one line saying how many are kept, and the same command resumes.
Nothing is written over an input. Deterministic: the same inputs give the same bytes.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from rdu_sim import human
from rdu_sim.cli.errors import fail
from rdu_sim.cli.options import check_count, overlays_option, overrides_option, workers_option
from rdu_sim.diagnostics import STDERR

if TYPE_CHECKING:
    from rdu_sim.validate.calibrate import Evaluation
    from rdu_sim.validate.calibration_problem import Inputs, Problem
    from rdu_sim.validate.deployment import ErrorSummary
    from rdu_sim.validate.fit_result import FitResult, GroupStop
    from rdu_sim.validate.scope import Scoped

FIT_FILE = "fit.json"
CACHE_FILE = "evaluations.jsonl"
DEFAULT_MAX_EVALUATIONS = 60


def _is_spec(text: str) -> bool:
    """Whether an argument names a calibration spec: a YAML file, or a shipped spec's name
    that no file here shadows (a folder of that name does not)."""
    from rdu_sim.config import shipped

    if text.endswith((".yaml", ".yml")):
        return True
    try:
        a_file = Path(text).is_file()
    except (OSError, ValueError):
        return False
    return not a_file and shipped.find(text, ("calibration",)) is not None


def _measurement_path(text: str) -> Path:
    """A measurement file: a path, or a shipped file's name (``argonne-sn40l``)."""
    from rdu_sim.config import shipped

    return shipped.locate(text, ("measurement",))


def _out_folder(text: str | None, default: str) -> Path:
    """``-o``: a folder (created if missing); refused when empty or when it names a file."""
    if text is None:
        return Path(default)
    if not text.strip() or "\0" in text:
        fail("-o: give the folder to write the overlays into (it is empty)")
    folder = Path(text)
    try:
        if folder.exists() and not folder.is_dir():
            fail(f"-o {text}: exists and is not a folder (calibrate writes a folder of overlays)")
    except (OSError, ValueError) as exc:
        fail(f"-o {text}: {exc}")
    return folder


def _regular_or_absent(path: Path, option: str) -> None:
    """A file calibrate writes: absent, or a regular file (a FIFO or a device would block
    or swallow it)."""
    try:
        if path.exists() and not path.is_file():
            fail(f"{option} {path}: not a regular file")
    except (OSError, ValueError) as exc:
        fail(f"{option} {path}: {exc}")


def _inputs_read(problem: Problem, given: Sequence[Path]) -> list[Path]:
    """Every file the fit reads: the files given, each run's hardware chain and stack."""
    read = list(given)
    for unit in problem.units:
        for deployment in unit.deployments:
            read.extend(deployment.chain)
            if deployment.stack != "none":
                read.append(Path(deployment.stack))
    return read


def _errors_line(group: ErrorSummary) -> str:
    median, worst = human.percent(group.median_abs_error), human.percent(group.worst_abs_error)
    where = f"({group.worst_point})"
    targets = human.count(group.points, "target")
    return f"{group.group}: {targets}, median |error| {median}, worst {worst} {where}"


def _summary_lines(result: FitResult, reaching: Collection[int] | None = None) -> list[str]:
    """Errors per measurement set and per stack, fitted, held out and reached by no fitted
    parameter (of the targets a parameter of ``reaching`` reaches, when given)."""
    from rdu_sim.validate.fit_result import ROLES

    lines = []
    for role in ROLES:
        total = result.total(role, reaching)
        if total is None:
            continue
        lines.append(f"{role}: " + _errors_line(total).split(": ", 1)[1])
        for key in ("set", "stack"):
            for group in result.errors(key, role, reaching):
                if group.group:
                    lines.append(f"  {role}, {key} {_errors_line(group)}")
    return lines


def progress_line(evaluation: Evaluation, parameters: Sequence[Scoped]) -> str:
    """One evaluation's line: the values tried (as the fitted values are said:
    ``fit_result.tried_text``), the objective the fit minimizes (named, with its value: the
    sum over the targets read of (log error / log(1 + tolerance))^2), and the median |error|
    of those targets beside it, which the fit does not minimize (an evaluation with a lower
    median may have a higher sum: the fit keeps the lower sum)."""
    from rdu_sim.validate.fit_result import tried_text

    shown = ", ".join(
        f"{one.name}={tried_text(one.parameter, value)}"
        for one, value in zip(parameters, evaluation.values, strict=True)
    )
    targets = human.count(evaluation.targets, "target")
    return (
        f"evaluation {evaluation.number}: {shown}: fit objective {evaluation.objective:.4g} "
        f"(sum over {targets} of (log error / log(1 + tolerance))^2, what the fit "
        f"minimizes; median |error| {human.percent(evaluation.median_abs_error)}; "
        f"{evaluation.simulated} simulated, {evaluation.cached} cached, "
        f"{evaluation.seconds:.1f} s)"
    )


def _progress(evaluation: Evaluation, parameters: Sequence[Scoped]) -> None:
    # (a full or closed stderr loses the line, not the fit)
    print(progress_line(evaluation, parameters), file=STDERR)


def _overlay_paths(problem: Problem, folder: Path) -> dict[tuple[str, str], Path]:
    """Where each fitted machine's and stack's overlay goes: ``STEM-calibrated.yaml`` (the
    kind first when a machine and a stack share a stem)."""
    targets = list(dict.fromkeys((one.parameter.kind, one.target) for one in problem.parameters))
    stems = [Path(target).stem for _, target in targets]
    return {
        (kind, target): folder
        / f"{kind + '-' if stems.count(Path(target).stem) > 1 else ''}{Path(target).stem}"
        "-calibrated.yaml"
        for kind, target in targets
    }


def _overlay_files(
    result: FitResult,
    paths: dict[tuple[str, str], Path],
    recorded: str,
    sets: str,
    problem: Problem,
    overlays: Sequence[Path] = (),
) -> dict[Path, str]:
    """Each fitted machine's and stack's overlay file and its text: its values the targets
    determine (an undetermined one is left out: the file it extends keeps its own), after
    the values in force on it while it was fitted (``carried_fields``: its kind's ``--set``,
    an ``--overlay`` on it), below the command, how many targets its values reach and their
    errors, what it could not carry, and the targets it was fitted on. A machine or stack
    whose every value is undetermined gets no file."""
    from rdu_sim.validate.overlays import (
        FITTED_ROWS,
        FITTED_TARGETS,
        carried_fields,
        fitted_fields,
        overlay_mapping,
        overlay_text,
        read_overlay,
        recorded_id,
        reference,
    )

    kept = [i for i in range(len(result.parameters)) if not result.is_left_out(i)]
    files: dict[Path, str] = {}
    for (kind, target), chosen in fitted_fields(
        [result.parameters[i] for i in kept],
        [result.values[i] for i in kept],
        [result.texts[i] for i in kept],
    ).items():
        path = paths[kind, target]
        base = reference(Path(target), path.parent, "hardware" if kind == "machine" else "stack")
        carried, left = carried_fields(kind, target, problem.overrides, problem.fixed)
        left.extend(
            f"--overlay {given}"
            for given in overlays
            if any((one.kind, one.target) != (kind, target) for one in read_overlay(given))
        )
        data = overlay_mapping(base, f"{Path(target).stem}-calibrated", [*carried, *chosen])
        mine = [
            i
            for i in kept
            if result.parameters[i].parameter.kind == kind and result.parameters[i].target == target
        ]
        trained, held = result.count("fitted", mine), result.count("held out", mine)
        fitted = [r for r in result.results if r.role == "fitted" and set(r.reached_by) & set(mine)]
        fitted_on = [recorded_id(r.target.id, path.parent) for r in fitted]
        fitted_rows = [r.target.key for r in fitted if r.target.key]
        header = [
            f"Calibrated by: {recorded}",
            *(_converged_line(stop) for stop in result.stops_of(mine)),
            f"Fitted on {trained} of the {trained + held} targets its values reach ({sets})"
            + (f"; {held} held out" if held else ""),
            *(line.strip() for line in _summary_lines(result, mine) if not line.startswith("  ")),
            *(
                ["Restates the values in force while fitted (--set, --overlay on it)"]
                * bool(carried)
            ),
            *(
                [f"Fitted with these in force too, not carried here: {'; '.join(left)}"]
                * bool(left)
            ),
        ]
        files[path] = overlay_text(
            data,
            [
                *header,
                *_describe(result, kind, target),
                FITTED_TARGETS + json.dumps(fitted_on),
                *([FITTED_ROWS + json.dumps(fitted_rows)] * bool(fitted_rows)),
            ],
        )
    return files


def _writable(folder: Path) -> None:
    """Create the output folder and write a file into it, before anything is simulated."""
    import tempfile

    from rdu_sim.config.errors import WriteError
    from rdu_sim.report.files import make_folder

    make_folder(folder)
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise WriteError.from_os(folder, exc) from None


def _converged_line(stop: GroupStop) -> str:
    """An overlay's header line on how its values' fit stopped: ``converged: false`` for
    one that ran out of fit steps (its values are where it stopped)."""
    from rdu_sim.validate.fit_result import RAISE_BUDGET

    line = (
        f"converged: {str(stop.converged).lower()} ({stop.reason}; "
        f"{human.count(stop.steps, 'fit step')} of at most {stop.budget})"
    )
    return line if stop.converged else f"{line}: not a fit; {RAISE_BUDGET} and run it again"


def _status(result: FitResult, index: int) -> str:
    """How a parameter's value is told: ``fitted``, ``not written`` (undetermined) or
    ``not converged`` (its group stopped at its budget: where the optimizer stopped)."""
    if result.is_left_out(index):
        return "not written"
    return "fitted" if all(s.converged for s in result.stops_of([index])) else "not converged"


def _describe(result: FitResult, kind: str, target: str) -> list[str]:
    return [
        f"{_status(result, i).capitalize()}: {result.described(i)}"
        for i, one in enumerate(result.parameters)
        if one.parameter.kind == kind and one.target == target
    ]


@dataclass(frozen=True)
class Asked:
    """The command line's options that decide the fit (not where it writes or how fast)."""

    args: tuple[str, ...]
    fits: tuple[str, ...]
    holdouts: tuple[str, ...]
    figures: bool
    tolerance: float | None
    hardware: str | None
    max_evaluations: int | None
    overrides: tuple[str, ...]
    overlays: tuple[Path, ...]

    def recorded(self) -> str:
        """The command that made the outputs (every option that changes them)."""
        words = [
            *self.args,
            *(f"--fit={text}" for text in self.fits),
            *(f"--holdout={text}" for text in self.holdouts),
            *(["--figures"] if self.figures else []),
            *([f"--tolerance={self.tolerance!r}"] if self.tolerance is not None else []),
            *([f"--hardware={self.hardware}"] if self.hardware is not None else []),
            *(
                [f"--max-evaluations={self.max_evaluations}"]
                if self.max_evaluations is not None
                else []
            ),
            *(f"--set={text}" for text in self.overrides),
            *(f"--overlay={path}" for path in self.overlays),
        ]
        return "rdu-sim calibrate " + " ".join(shlex.quote(w) for w in words)


def _inputs(asked: Asked) -> tuple[Inputs, Path | None, int | None, str]:
    """What was asked: (inputs, the spec file or None, the spec's max evaluations, the
    default output folder)."""
    args, fits, holdouts, figures = asked.args, asked.fits, asked.holdouts, asked.figures
    tolerance, hardware = asked.tolerance, asked.hardware
    overrides, overlays = asked.overrides, asked.overlays
    from rdu_sim.config import shipped
    from rdu_sim.config.yaml_io import checked_file
    from rdu_sim.validate.calibration_problem import Inputs, spec_inputs
    from rdu_sim.validate.calibration_spec import read_spec
    from rdu_sim.validate.holdout import parse_selector
    from rdu_sim.validate.scope import parse_fit

    specs = [a for a in args if _is_spec(a)]
    if specs:
        if len(args) > 1:
            fail(f"{specs[0]}: a calibration spec names its measurement files; give it alone")
        given = [
            ("--fit", fits),
            ("--holdout", holdouts),
            ("--figures", figures),
            ("--tolerance", tolerance is not None),
            ("--hardware", hardware is not None),
        ]
        named = Path(args[0])
        found = named if named.is_file() else shipped.find(args[0], ("calibration",))
        path = found or shipped.locate(args[0], ("calibration",))  # its error: not found
        for option, used in given:
            if used:
                fail(_spec_states(option, args[0], path, found is not named))
        spec = read_spec(path)
        inputs = spec_inputs(spec, overrides, overlays)
        return inputs, path, spec.file.max_evaluations, f"calibration-{path.stem}"
    for arg in args:  # a file that is not there is said first, not the missing --fit
        checked_file(shipped.locate(arg, ("measurement", "calibration")))
    if not fits:
        fail("name a parameter to fit with --fit [SCOPE:]PATH=LOW:HIGH, or give a calibration spec")
    if tolerance is not None and not 0 < tolerance <= 10:
        fail(f"--tolerance must be in (0, 10], got {tolerance}")
    inputs = Inputs(
        measurements=tuple(_measurement_path(a) for a in args),
        parameters=tuple(parse_fit(text) for text in fits),
        held_out=tuple(parse_selector(text) for text in holdouts),
        tolerance=0.10 if tolerance is None else tolerance,
        figures=figures,
        hardware=hardware,
        overrides=overrides,
        overlays=overlays,
        base=Path.cwd(),
    )
    return inputs, None, None, "calibration"


SPEC_FIELDS = {
    "--fit": ("fit", "parameters and bounds"),
    "--holdout": ("held_out", "held-out groups"),
    "--figures": ("figures", "published figures"),
    "--tolerance": ("tolerance", "tolerance"),
    "--hardware": ("measurements", "measured rows, every row of its files"),
}
"""What each option that decides the fit is in a spec: its field and what it holds."""


def _spec_states(option: str, given: str, path: Path, shipped_spec: bool) -> str:
    """Why ``option`` is refused beside a spec, and how to ask for it: the spec alone says
    what was fitted (so its overlays' recorded command reruns the same fit)."""
    field, what = SPEC_FIELDS[option]
    refused = (
        f"{option} is not taken with a calibration spec: the spec {given} fixes its {what} "
        f"in its `{field}` field, so that the spec alone says what its fit fitted and held out"
    )
    if shipped_spec:
        where = (
            f"copy the shipped spec out (`rdu-sim examples copy DIR` writes it to "
            f"DIR/calibrations/{path.name}), edit its `{field}`, and run `rdu-sim calibrate "
            f"DIR/calibrations/{path.name}`"
        )
    else:
        where = f"edit its `{field}` in {path} (or a copy of it)"
    return (
        f"{refused}. To change that, {where}; or name the measurement files on the command "
        f"line with --fit{'' if option == '--fit' else ' and ' + option} instead of a spec"
    )


@dataclass(frozen=True)
class Prepared:
    """A calibration checked and ready to fit: nothing simulated, nothing written yet but
    the output folder and the cache file opened."""

    problem: Problem
    inputs: Inputs
    max_evaluations: int
    folder: Path
    paths: dict[tuple[str, str], Path]  # each fitted machine's and stack's overlay
    cache: Path
    created: tuple[Path, ...]  # the cache file and folders this run made, newest first

    def drop_if_unused(self) -> None:
        """Remove what this run created if it kept nothing in it: a calibration that
        stops before its first simulation leaves no empty cache file or folder behind."""
        for path in self.created:
            try:
                if path.is_dir():
                    path.rmdir()  # only when empty
                elif path.stat().st_size == 0:
                    path.unlink()
            except OSError:
                return


def _prepare(asked: Asked, out: str | None, cache: str | None) -> Prepared:
    """Read what was asked, build and check the problem, and make sure every output can be
    written and none is an input, before anything is simulated."""
    from rdu_sim.report.files import refuse_overwrite
    from rdu_sim.validate.calibration_problem import build_problem
    from rdu_sim.validate.evaluation_cache import EvaluationCache

    inputs, spec, spec_evaluations, default_out = _inputs(asked)
    folder = _out_folder(out, default_out)
    if cache is not None and (not cache.strip() or "\0" in cache):
        fail("--cache: give the cache file's path (it is empty)")
    cache_path = Path(cache) if cache is not None else folder / CACHE_FILE
    _regular_or_absent(cache_path, "--cache")
    problem = build_problem(inputs)
    read = _inputs_read(
        problem, [*inputs.measurements, *inputs.overlays, *([spec] if spec else [])]
    )
    paths = _overlay_paths(problem, folder)
    outputs = [*paths.values(), folder / FIT_FILE]
    outputs_read = [("--cache", cache_path), *(("-o", path) for path in outputs)]
    refuse_overwrite(outputs_read, read, "calibrate")  # never over one of its inputs
    refuse_overwrite([("-o", path) for path in outputs], [cache_path], "calibrate")
    for path in outputs:
        _regular_or_absent(path, "-o")
    new_folders = [
        missing
        for made in (cache_path.parent, folder)
        for missing in (made, *made.parents)
        if not missing.exists()
    ]
    cache_is_new = not cache_path.exists()
    _writable(folder)
    EvaluationCache(cache_path).ready()  # the cache file can be written (and is checked)
    created = ([cache_path] if cache_is_new else []) + sorted(
        set(new_folders), key=lambda p: -len(p.parts)
    )
    evaluations = asked.max_evaluations or spec_evaluations or DEFAULT_MAX_EVALUATIONS
    return Prepared(problem, inputs, evaluations, folder, paths, cache_path, tuple(created))


def _checked_evaluations(
    _ctx: click.Context, _param: click.Parameter, value: int | None
) -> int | None:
    """``--max-evaluations``: 1 to 10,000, the house's one error line otherwise."""
    check_count("--max-evaluations", value, 1, 10_000)
    return value


@click.command("calibrate")
@click.argument("args", nargs=-1, required=True, metavar="SPEC | MEASUREMENTS...")
@click.option(
    "--fit",
    "fits",
    multiple=True,
    metavar="[SCOPE:]PATH=LOW:HIGH",
    help="A parameter, its bounds and where it is one value, e.g. a stack's "
    "'sambastudio-2024:stack.host.serial_per_slot=0:300us', or a machine's "
    "'sn40l:hw.system.intra_node_link.bandwidth=8 GB/s:256 GB/s' (a hardware parameter "
    "needs the rows of two stacks or more: here with --figures, SambaStack's). Repeatable.",
)
@click.option(
    "--holdout",
    "holdouts",
    multiple=True,
    metavar="KEY=VALUE[,KEY=VALUE]",
    help="Hold a group out of the fit and report it apart, by set, machine, hardware, stack, "
    "model, tp, metric or figure (e.g. model=llama-3.1-70b). Repeatable.",
)
@click.option(
    "--figures", is_flag=True, help="Fit the published figures `rdu-sim validate` holds too."
)
@click.option(
    "--tolerance",
    type=float,
    default=None,
    help="The relative error a measured row's residual is scaled by [default: 0.10].",
)
@click.option(
    "--hardware",
    "hardware",
    default=None,
    help="Fit only the rows on this hardware file (a shipped name or a path).",
)
@click.option(
    "--max-evaluations",
    type=int,
    default=None,
    callback=_checked_evaluations,
    help="Most fit steps for each group of parameters no target joins (scipy's max_nfev). "
    "Slopes are evaluated besides, one evaluation per parameter at each new point, so the "
    "report's evaluations (numbered in the progress lines) count both: steps plus slopes "
    f"[default: the spec's, else {DEFAULT_MAX_EVALUATIONS}].",
)
@click.option(
    "-o",
    "--out",
    "out",
    default=None,
    help="Folder for the overlays and fit.json [default: calibration-SPEC, or calibration].",
)
@click.option(
    "--cache",
    default=None,
    help=f"Evaluation cache, for resuming [default: the output folder's {CACHE_FILE}].",
)
@overlays_option
@workers_option(
    most=256,
    default=1,
    help="Processes simulating at once, 1 to 256 (the same results with any number).",
)
@overrides_option
@click.option("--json", "as_json", is_flag=True, help="Print the fit as JSON.")
def command(
    args: tuple[str, ...],
    fits: tuple[str, ...],
    holdouts: tuple[str, ...],
    figures: bool,
    tolerance: float | None,
    hardware: str | None,
    max_evaluations: int | None,
    out: str | None,
    cache: str | None,
    overlays: tuple[Path, ...],
    workers: int,
    overrides: tuple[str, ...],
    as_json: bool,
) -> None:
    """Fit hardware and serving-stack parameters to measurements and published figures
    (a calibration spec, or MEASUREMENTS with --fit); write the calibrated overlays."""
    from rdu_sim.interrupts import Interrupted
    from rdu_sim.validate.calibrate import Calibration
    from rdu_sim.validate.evaluation_cache import EvaluationCache

    asked = Asked(
        args, fits, holdouts, figures, tolerance, hardware, max_evaluations, overrides, overlays
    )
    ready = _prepare(asked, out, cache)
    problem, inputs, cache_path = ready.problem, ready.inputs, ready.cache
    calibration = Calibration(
        problem,
        EvaluationCache(cache_path),
        workers=workers,
        progress=lambda e: _progress(e, problem.parameters),
    )
    try:
        result = calibration.fit(ready.max_evaluations)
    except Interrupted as stop:  # the boundary prints it: say what the cache holds
        kept = calibration.evaluator.simulated
        if not kept:
            ready.drop_if_unused()
            raise
        raise Interrupted(
            stop.signum,
            f"{kept} simulation(s) of this run kept in {cache_path} (the same command "
            "resumes from it)",
        ) from None
    except BaseException:
        ready.drop_if_unused()
        raise
    recorded = asked.recorded()
    sets = ", ".join(
        sorted({p.stem for p in inputs.measurements} | ({"figures"} if inputs.figures else set()))
    )
    if inputs.held_out:
        sets += f"; held out: {'; '.join(str(s) for s in inputs.held_out)}"
    files = _overlay_files(result, ready.paths, recorded, sets, problem, inputs.overlays)
    document = {**result.to_dict(), "command": recorded, "files": sorted(p.name for p in files)}
    files[ready.folder / FIT_FILE] = json.dumps(document, indent=1) + "\n"
    for path, text in files.items():
        _write_text(path, text)
    print(
        f"calibrate: {human.count(result.evaluations, 'evaluation')}: "
        f"{human.count(result.steps, 'fit step')} (at most {ready.max_evaluations} a group "
        f"of parameters) and {result.evaluations - result.steps} for slopes; "
        f"{human.count(result.simulated, 'simulation')} ({result.cached} from the cache) "
        f"in {result.seconds:.1f} s",
        file=STDERR,  # (a full or closed stderr loses the line, not the fit)
    )
    if as_json:
        click.echo(json.dumps(document))
        return
    _print(result, files)


def _write_text(path: Path, text: str) -> None:
    from rdu_sim.report.files import write_file

    write_file(path, lambda stream: stream.write(text))


def _print(result: FitResult, files: dict[Path, str]) -> None:
    def shown(value: float, unit: str) -> str:
        return human.duration(value, 4) if unit == "s" else human.in_unit(value, unit, 4)

    from rdu_sim.validate.fit_result import ERROR_SIGN

    click.echo(ERROR_SIGN)
    for r in result.results:
        t = r.target
        role = {"not reached": "no fitted parameter reaches it"}.get(r.role, r.role)
        name = t.id if t.id.endswith(t.label) else f"{t.id}: {t.label}"
        click.echo(
            f"{name}: measured {shown(t.measured, t.measure_unit)}, "
            f"simulated {shown(r.simulated, t.measure_unit)}, "
            f"{human.percent(r.relative_error, signed=True)} ({role})"
        )
    for line in _summary_lines(result):
        click.echo(line)
    for i in range(len(result.parameters)):
        status = _status(result, i)
        click.echo(f"{status}{':' if status != 'fitted' else ''} {result.described(i)}")
    for line in [*result.trade_off_lines(), *result.bound_lines()]:
        click.echo(line)
    for path in files:
        click.echo(f"wrote {path}")
