"""`rdu-sim run WORKLOAD`: simulate serving a workload and report its metrics.

Human report (rich tables) on stdout, with a progress bar on stderr while requests finish
(only on a terminal, never with --json); `--json` prints one JSON object (the contract of
docs/serving.md); `--out DIR` also writes result.json, requests.csv and timeseries.csv;
`--step` times one decode step (all batch slots, largest decode bucket) instead. A cluster
file (top-level ``pools``, docs/cluster.md) runs its replicas on its traffic instead, and
reports goodput under its SLO, per class and per replica (``--out``: result.json and
requests.csv; a timeseries.csv an earlier run left there is removed: ``files.OUT_SET``).
Bad input, and a batch that does not fit, exit 2 with a message (rdu_sim/cli/errors.py).
The report is printed before the files are written, so a folder that cannot be written
(read-only, below a file, a full disk) loses nothing already computed: exit 2, saying so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rdu_sim import api, human
from rdu_sim.cli.errors import fail
from rdu_sim.cli.main import STOPS
from rdu_sim.cli.options import FilePath, GivenPath, overrides_option, workload_argument
from rdu_sim.config import shipped
from rdu_sim.config.errors import ConfigError, WriteError
from rdu_sim.config.kinds import file_kind
from rdu_sim.config.loader import read_yaml
from rdu_sim.diagnostics import console_file
from rdu_sim.interrupts import deferred, keeps_on_stop, kept_on_stop
from rdu_sim.provenance import input_files
from rdu_sim.report.console import decode_shape_words, print_report, utilization_line
from rdu_sim.report.files import (
    OUT_SET,
    REQUESTS_FILE,
    RESULT_FILE,
    TIMESERIES_FILE,
    folder_problem,
    refuse_overwrite,
    stale_members,
    write_columns,
    write_json,
    write_outputs,
    write_set,
)
from rdu_sim.report.summary import Utilization
from rdu_sim.scenario import Scenario

if TYPE_CHECKING:
    from rdu_sim.api_cluster import ClusterResult
    from rdu_sim.report.run_result import RunResult


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A `progress(done, total)` callback drawing a bar on stderr, or None when disabled."""
    console = Console(file=console_file())  # (guarded: ``diagnostics``)
    if not enabled or not console.is_terminal:
        yield None
        return
    columns = (
        TextColumn("simulating requests"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("run", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _print_step(scenario: Scenario, as_json: bool) -> None:
    cost = api.step(scenario)
    detail = cost.detail
    data = detail.to_dict() if detail is not None else {"step_s": cost.step_s}
    if as_json:
        click.echo(json.dumps(data, sort_keys=True))
        return
    batch, context = data.get("batch"), data.get("context")
    shape = (
        decode_shape_words(batch, context)
        if isinstance(batch, int) and isinstance(context, int)
        else "the default shape"
    )
    click.echo(
        f"decode step ({shape}): {human.duration(cost.step_s)}; "
        f"{utilization_line(Utilization.of_step(cost))}"
    )


def _is_cluster(path: Path) -> bool:
    """Whether the file is a cluster workload (top-level ``pools``); bad files are left to
    the loader, which reports them."""
    try:
        data, _ = read_yaml(path)
    except ConfigError:
        return False
    return file_kind(data) == "cluster"


def _check_out(out_dir: Path | None) -> None:
    """Refuse an --out that cannot be a folder before anything runs."""
    problem = folder_problem(out_dir) if out_dir is not None else None
    if problem is not None:
        raise WriteError.single(str(out_dir), "", f"cannot write: {problem}")


NOTHING_WRITTEN = STOPS["run"]


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    """What tells a file written now from the copy that was there before (a file is
    written to a temporary file renamed into place: a new inode), or None when none is."""
    try:
        found = path.stat()
    except (OSError, ValueError):
        return None
    return found.st_dev, found.st_ino, found.st_mtime_ns, found.st_size


def _after_report(outputs: Sequence[tuple[str, Path]]) -> Callable[[], str]:
    """What a stop once the report is printed keeps, told at the stop: the report, each of
    ``outputs`` (option, path) written before it (whole: files are written whole or not at
    all), each not written, and an older copy of one left from before (it is not this
    run's)."""
    before = {path: _identity(path) for _, path in outputs}

    def kept() -> str:
        if not outputs:
            return "the report was printed"
        written = [p for p in before if _identity(p) not in (None, before[p])]
        missing = [
            f"{p} (an older copy from before this run is there)"
            if before[p] is not None and _identity(p) == before[p]
            else str(p)
            for p in before
            if p not in written
        ]
        parts = ["the report was printed"]
        if written:
            parts.append(f"written whole: {', '.join(map(str, written))}")
        if missing:
            parts.append(f"not written: {', '.join(missing)}")
        return "; ".join(parts)

    return kept


_CLUSTER_SET = (RESULT_FILE, REQUESTS_FILE)
"""The files of the --out set (``files.OUT_SET``) a cluster's run writes (no occupancy
series: its replicas each have their own)."""


def _replaced(outputs: list[tuple[str, Path]], out_dir: Path) -> list[tuple[str, Path]]:
    """``outputs`` and the files of the --out set in ``out_dir`` they do not write, which the
    run removes (``files.stale_members``): neither may be one of the run's inputs."""
    written = [path.name for _, path in outputs if path.parent == out_dir]
    return [*outputs, *(("--out", path) for path in stale_members(out_dir, written))]


def _set_names(out_dir: Path, names: Sequence[str]) -> str:
    """The `wrote` line's list of a --out set's files, and the earlier run's it removes."""
    stale = [path.name for path in stale_members(out_dir, names)]
    removed = f" (removed an earlier run's {', '.join(stale)})" if stale else ""
    return ", ".join(names) + removed


def _write(out_dir: Path, write: Callable[[], object], names: str, quiet: bool) -> None:
    """Write the --out files after the report was printed (a failed write loses none of it);
    ``quiet``: say nothing (--json, or a standard output that failed)."""
    try:
        write()
    except WriteError as exc:
        raise exc.after_report() from None
    if not quiet:
        click.echo(f"wrote {out_dir}/{names}")


def _report_then_write(report: Callable[[], None], write: Callable[[bool], None]) -> None:
    """Print the report whole, then ``write`` the files (told whether to stay quiet). A
    standard output that fails under the report (a reader that left, `| true`; a full disk,
    `> /dev/full`) does not cost the files: they are written, quietly, and then the failure
    is raised for the error boundary (``cli.errors``) to end the command with."""
    lost: BaseException | None = None
    try:
        with deferred():  # the report is printed whole
            report()
    except OSError as exc:
        lost = exc
    except SystemExit as exc:  # rich's answer to a broken pipe (``cli.errors``)
        if not isinstance(exc.__context__, BrokenPipeError):
            raise
        lost = exc
    write(lost is not None)
    if lost is not None:
        raise lost


def _run_cluster(
    path: Path, overrides: tuple[str, ...], as_json: bool, out_dir: Path | None
) -> None:
    from rdu_sim import api_cluster
    from rdu_sim.report.cluster_console import print_cluster_report

    cluster = api_cluster.load(path, overrides)  # bad input exits 2 before anything runs
    _check_out(out_dir)
    outputs: list[tuple[str, Path]] = []
    if out_dir is not None:
        outputs = [("--out", out_dir / name) for name in _CLUSTER_SET]
        refuse_overwrite(_replaced(outputs, out_dir), input_files(cluster), "the run")
    with _progress_bar(not as_json) as progress:
        result = api_cluster.run_cluster(cluster, progress=progress)
    data = result.to_dict()

    def report() -> None:
        if as_json:
            click.echo(json.dumps(data, sort_keys=True))
        else:
            print_cluster_report(result.summary())

    with kept_on_stop(_after_report(outputs)):
        _report_then_write(
            report, lambda lost: _write_cluster(out_dir, data, result, as_json or lost)
        )


def _write_cluster(
    out_dir: Path | None, data: dict[str, Any], result: ClusterResult, quiet: bool
) -> None:
    """The cluster run's --out files, when asked for (``quiet``: without a `wrote` line)."""
    if out_dir is not None:
        folder = out_dir

        def write() -> None:  # one set, as a run's (``files.write_set``)
            write_set(
                folder,
                [
                    lambda staged: write_json(folder / RESULT_FILE, data, staged),
                    lambda staged: write_columns(folder / REQUESTS_FILE, result.requests(), staged),
                ],
                _CLUSTER_SET,
            )

        _write(folder, write, _set_names(folder, _CLUSTER_SET), quiet)


@click.command("run")
@workload_argument
@overrides_option
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as one JSON object.")
@click.option(
    "--out",
    "out_dir",
    type=GivenPath(),
    default=None,
    help="Write result.json, requests.csv and timeseries.csv here.",
)
@click.option(
    "--step",
    "one_step",
    is_flag=True,
    help="Simulate one decode step instead of the whole serving run.",
)
@click.option(
    "--trace",
    "trace_file",
    type=FilePath(),
    default=None,
    help="Write a Perfetto trace of the serving schedule (requests on slots, queue, flows).",
)
@keeps_on_stop(NOTHING_WRITTEN)  # a stop before the report is printed; _write says the rest
def command(
    workload: Path,
    overrides: tuple[str, ...],
    as_json: bool,
    out_dir: Path | None,
    one_step: bool,
    trace_file: Path | None,
) -> None:
    """Simulate serving WORKLOAD (or a cluster file) and report throughput, latency and
    memory (for a cluster: goodput under its SLO, per class and per replica)."""
    workload = shipped.locate(workload, ("workload", "cluster"))
    cluster = _is_cluster(workload)
    if cluster:
        if one_step or trace_file is not None:
            flag = "--step" if one_step else "--trace"
            fail(
                f"{flag}: {workload} is a cluster; {flag} is for a workload's run (rdu-sim "
                f"{'step' if one_step else 'run --trace'} on one of its pools' workloads)"
            )
        _run_cluster(workload, overrides, as_json, out_dir)
        return
    scenario = api.load(workload, overrides)  # bad input exits 2 before anything else
    _check_out(out_dir)
    if one_step:
        if trace_file is not None:
            fail(
                "--trace writes a serving run's trace, not a step's; "
                "for a step's: rdu-sim step --trace"
            )
        _print_step(scenario, as_json)
        return
    outputs: list[tuple[str, Path]] = []  # in the order they are written
    if out_dir is not None:
        outputs += [
            ("--out", out_dir / name) for name in (RESULT_FILE, REQUESTS_FILE, TIMESERIES_FILE)
        ]
    if trace_file is not None:
        outputs.append(("--trace", trace_file))
    refuse_overwrite(outputs, input_files(scenario), "the run")
    with _progress_bar(not as_json) as progress:
        # the text report prints the run's warnings: said on stderr too, each was said twice
        result = api.run(scenario, progress=progress, warn=as_json)
    data = result.to_dict()

    def report() -> None:
        if as_json:  # printed first: a failed --out write loses none of it
            click.echo(json.dumps(data, sort_keys=True))
        else:
            print_report(result.summary())

    with kept_on_stop(_after_report(outputs)):
        _report_then_write(
            report, lambda lost: _write_run(out_dir, trace_file, data, result, as_json or lost)
        )


def _write_run(
    out_dir: Path | None,
    trace_file: Path | None,
    data: dict[str, Any],
    result: RunResult,
    quiet: bool,
) -> None:
    """The run's --out files and --trace, when asked for (``quiet``: without `wrote` lines);
    the trace is written though --out failed, and then the failure raised."""
    failed: WriteError | None = None
    if out_dir is not None:
        folder = out_dir
        try:
            _write(
                folder,
                lambda: write_outputs(folder, data, result.request_blocks, result.timeseries),
                _set_names(folder, OUT_SET),
                quiet,
            )
        except WriteError as exc:
            failed = exc
    if trace_file is not None:
        from rdu_sim.report.serving_trace import write_serving_trace

        metadata = {
            key: data[key]
            for key in ("workload", "model", "hardware", "requests", "makespan_s", "provenance")
        }
        target = trace_file
        _write(
            target.parent,
            lambda: write_serving_trace(
                target, result.requests(), result.timeseries(), result.batch_slots, metadata
            ),
            target.name,
            quiet,
        )
    if failed is not None:
        raise failed
