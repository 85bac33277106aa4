"""`rdu-sim sweep SPEC`: run (or resume) a design-space sweep and export its rows.

A thin shell over `rdu_sim.sweep.run_sweep`: the points run through the in-process API on a
local process pool, in this process (`--workers 1`) or on Dask (`--cluster`). It ends with
a table of the swept axes and headline metrics per point (``report.sweep_table``) and the
database's path. Bad input
(the spec, an axis, a metric) exits 2 before anything runs; a sweep that finishes with
failed points exits 1 (their errors are in the database); Ctrl-C (SIGINT) exits 130, SIGTERM
143, saying how many points the database holds, and a rerun resumes.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click
from rich.console import Console

from rdu_sim.cli.errors import print_warning
from rdu_sim.cli.options import MAX_WORKERS, FilePath, GivenPath, workers_option
from rdu_sim.config.errors import WriteError
from rdu_sim.interrupts import kept_on_stop


def _dry_run_table(summary: object) -> None:
    """One line per point: key prefix, what it would do (``run``, ``skip``: the database has
    it, or ``does not fit``: its memory plan says the run would fail, with the run's words
    after the axis values), the axis values."""
    from rdu_sim.sweep import SweepSummary

    assert isinstance(summary, SweepSummary) and summary.plan is not None
    plan = summary.plan
    to_run = {p.key for p in plan.to_run}
    failing = summary.fits.failing if summary.fits is not None else {}
    width = max([4, *(len(verdict) for verdict, _ in failing.values())])
    out = Console(soft_wrap=True, highlight=False)
    for point in plan.expansion.points:
        state, reason = "run" if point.key in to_run else "skip", ""
        if point.key in failing:
            state, why = failing[point.key]
            reason = f": {why}"
        line = f"{point.key[:12]}  {state:{width}}  {point.describe()}{reason}"
        out.print(line, markup=False)


def _results_table(frame: object, summary: object) -> None:
    """The swept axes and headline metrics per point, then where the database is."""
    from rdu_sim.report.sweep_table import sweep_tables, table_notes
    from rdu_sim.report.terminal import wide_console
    from rdu_sim.sweep import SweepSummary

    assert isinstance(summary, SweepSummary)
    metrics = summary.plan.expansion.spec.spec.metrics if summary.plan is not None else None
    console = wide_console(highlight=False)
    title = f"{summary.name}: results"
    for table in sweep_tables(frame, metrics, title=title, width=console.width):
        console.print(table)
    for note in table_notes(frame, metrics):
        console.print(note, markup=False, soft_wrap=True)
    console.print(
        f"database: {summary.db} (rdu-sim plot sweep {summary.db}; --export FILE for CSV)",
        markup=False,
        soft_wrap=True,
    )


@click.command("sweep")
@click.argument("spec", type=GivenPath())
@workers_option(
    most=MAX_WORKERS,
    default=None,
    help=f"Worker processes, 1 to {MAX_WORKERS} (default: the CPU count; 1 runs in this "
    "process; at most 4 a core are started). With --cluster local, the LocalCluster's "
    "worker count.",
)
@click.option(
    "--cluster",
    default=None,
    metavar="ADDR|local",
    help="Run the points on Dask: a scheduler address tcp://HOST:PORT, or 'local' "
    "to start a LocalCluster on 127.0.0.1.",
)
@click.option(
    "--db",
    "db_file",
    type=FilePath(),
    default=None,
    help="SQLite file of results (default: <spec stem>.sqlite in the current folder for a "
    "shipped spec, beside a spec of your own). "
    "Points already done in it are skipped.",
)
@click.option("--retry-failed", is_flag=True, help="Rerun points that failed before.")
@click.option(
    "--rerun",
    is_flag=True,
    help="Run every point again, replacing the rows the database holds (rows of another "
    "simulator version are never reused anyway: the version is part of each key; rows of "
    "another build of this version are reused, and the sweep says how many).",
)
@click.option(
    "--export",
    "export_file",
    type=FilePath(),
    default=None,
    help="Write the spec's rows to FILE (.csv, or .parquet when "
    "pyarrow is installed) after running.",
)
@click.option(
    "--provenance",
    is_flag=True,
    help="Also export each point's run provenance (wall_s, started, finished, attempts, "
    "worker), which differs from run to run; without it the same rows export to the same "
    "bytes.",
)
@click.option(
    "--dry-run", is_flag=True, help="Resolve every point and list what would run; run nothing."
)
@click.option(
    "--progress/--no-progress",
    default=True,
    show_default=True,
    help="Progress bar on stderr (the plan and summary lines print either way).",
)
def command(
    spec: Path,
    workers: int | None,
    cluster: str | None,
    db_file: Path | None,
    retry_failed: bool,
    rerun: bool,
    export_file: Path | None,
    provenance: bool,
    dry_run: bool,
    progress: bool,
) -> None:
    """Expand the sweep SPEC into points, simulate those not yet done, store one row each.

    Example: rdu-sim sweep workloads/sweeps/llama8b-batch.yaml --workers 2 --export out.csv
    """
    from rdu_sim.sweep import export, load, run_sweep
    from rdu_sim.sweep.load import check_export
    from rdu_sim.sweep.progress import RichReporter

    if export_file is not None:
        check_export(export_file)  # refused before anything runs, not after the sweep
    summary = run_sweep(
        spec,
        db=db_file,
        workers=workers,
        cluster=cluster,
        retry_failed=retry_failed,
        rerun=rerun,
        dry_run=dry_run,
        progress=RichReporter(bar=progress),
        writes=[("--export", export_file)] if export_file is not None else (),
    )
    if dry_run:
        _dry_run_table(summary)
        return
    stored = f"the sweep had finished: its rows are saved in {summary.db}"
    with kept_on_stop(stored + "; the same command prints them again (and exports them)"):
        # the spec's grid order, each point as this sweep's (another spec may have run it),
        # with the spec's metrics only (not those another spec's rows hold besides)
        metrics = summary.plan.expansion.spec.spec.metrics if summary.plan is not None else None
        frame = load(summary.db, keys=summary.keys, sweep=summary.name, metrics=metrics)
        if export_file is not None:  # written before the table: a reader of stdout leaving
            try:  # (`| head`) ends the command, and the export is then already done
                export(frame, export_file, provenance=provenance)
            except WriteError as exc:  # the rows are safe in the database: say so
                note = f" (the rows are kept in {summary.db}; export again with the same command)"
                raise WriteError(
                    [replace(i, message=i.message + note) for i in exc.issues]
                ) from None
        click.echo(summary.describe())
        _results_table(frame, summary)
        if export_file is not None:
            click.echo(f"wrote {len(frame)} rows to {export_file}")
    failed = summary.failed + summary.failed_before + summary.failed_elsewhere
    if summary.unrun and not failed:  # said in the summary's line; not a success
        raise SystemExit(1)
    if failed:
        print_warning(
            f"{failed} point(s) failed; their errors are in {summary.db} "
            "(rerun them with --retry-failed)"
        )
        raise SystemExit(1)
