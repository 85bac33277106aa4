"""`rdu-sim validate`: compare the simulator with published SN40L figures (stub, exit 1)."""

from __future__ import annotations

import click

from rdu_sim.cli.errors import not_available


@click.command("validate")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def command(as_json: bool) -> None:
    """Run the calibration cases of docs/calibration.md and compare with the paper."""
    not_available("validate", "the calibration cases need the serving simulator.")
