"""`rdu-sim sweep SPEC`: run a design-space sweep (stub).

Checks the spec with `rdu_sim.sweep.check_spec` when the sweep package provides it (exit 2
on bad input); running the points has not landed yet (exit 1).
"""

from __future__ import annotations

from pathlib import Path

import click

from rdu_sim.cli.check_cmd import check_file
from rdu_sim.cli.errors import not_available


@click.command("sweep")
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("--workers", type=click.IntRange(1, 4096), default=None,
              help="Local worker processes (default: the CPU count).")
@click.option("--db", "db_file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="SQLite file to store rows in (resumes a sweep already started).")
@click.option("--dask", "dask_address", default=None, metavar="ADDRESS",
              help="Run the points on a Dask scheduler instead of local processes.")
def command(spec: Path, workers: int | None, db_file: Path | None,
            dask_address: str | None) -> None:
    """Expand the sweep SPEC into points and simulate each one."""
    check_file(spec)
    not_available("sweep", "rdu_sim.sweep cannot run sweeps yet.")
