"""`rdu-sim plot RESULTS...`: plots from run or sweep results (stub, exit 1)."""

from __future__ import annotations

from pathlib import Path

import click

from rdu_sim.cli.errors import not_available


@click.command("plot")
@click.argument("results", nargs=-1, required=True,
                type=click.Path(exists=True, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              default=Path("plots"), show_default=True, help="Folder for the PNG files.")
def command(results: tuple[Path, ...], out_dir: Path) -> None:
    """Plot throughput, latency and memory from run JSON files or a sweep database."""
    not_available("plot", "rdu_sim.report has no plots yet.")
