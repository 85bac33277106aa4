"""`rdu-sim run WORKLOAD`: simulate serving a workload and report its metrics.

Human report (rich tables) on stdout, with a progress bar on stderr while requests finish
(only on a terminal, never with --json); `--json` prints one JSON object (the contract of
docs/serving.md); `--out DIR` also writes result.json, requests.csv and timeseries.csv;
`--step` times one decode step (all batch slots, largest decode bucket) instead.
Bad input, and a batch that does not fit, exit 2 with a message (rdu_sim/cli/errors.py).
The report is printed before the files are written, so a folder that cannot be written
(read-only, below a file, a full disk) loses nothing already computed: exit 2, saying so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rdu_sim import api
from rdu_sim.cli.errors import not_available
from rdu_sim.cli.options import overrides_option, workload_argument
from rdu_sim.config.errors import WriteError
from rdu_sim.report.console import human_seconds, print_report
from rdu_sim.report.files import write_outputs
from rdu_sim.scenario import Scenario


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A `progress(done, total)` callback drawing a bar on stderr, or None when disabled."""
    console = Console(stderr=True)
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
    data = detail.to_dict() if hasattr(detail, "to_dict") else {"step_s": cost.step_s}
    if as_json:
        click.echo(json.dumps(data, sort_keys=True))
        return
    click.echo(
        f"decode step (batch {data.get('batch', '?')}, cache {data.get('context', '?')} "
        f"tokens): {human_seconds(cost.step_s)}; HBM bandwidth "
        f"{100 * cost.hbm_util:.1f}%, PCU busy {100 * cost.pcu_util:.1f}%"
    )


@click.command("run")
@workload_argument
@overrides_option
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as one JSON object.")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Write result.json, requests.csv and timeseries.csv here.",
)
@click.option(
    "--step",
    "one_step",
    is_flag=True,
    help="Simulate one decode step instead of the whole serving run.",
)
def command(
    workload: Path, overrides: tuple[str, ...], as_json: bool, out_dir: Path | None, one_step: bool
) -> None:
    """Simulate serving WORKLOAD and report throughput, latency and memory."""
    scenario = api.load(workload, overrides)  # bad input exits 2 before anything else
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise WriteError.single(str(out_dir), "", "cannot write: exists and is not a folder")
    missing = api.EngineBackend.missing()
    if missing:
        not_available("run", f"The workload is valid; missing: {', '.join(missing)}.")
    if one_step:
        _print_step(scenario, as_json)
        return
    with _progress_bar(not as_json) as progress:
        result = api.run(scenario, progress=progress)
    data = result.to_dict()
    if as_json:  # printed first: a failed --out write loses none of it
        click.echo(json.dumps(data, sort_keys=True))
    else:
        print_report(data)
    if out_dir is not None:
        try:
            write_outputs(out_dir, data, result.requests(), result.timeseries())
        except WriteError as exc:
            raise WriteError(
                [
                    replace(i, message=i.message + " (the report above is complete)")
                    for i in exc.issues
                ]
            ) from None
        if not as_json:
            click.echo(f"wrote {out_dir}/result.json, requests.csv, timeseries.csv")
