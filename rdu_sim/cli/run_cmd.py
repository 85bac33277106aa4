"""`rdu-sim run WORKLOAD`: simulate serving a workload and report its metrics (stub).

Until the serving simulator lands this loads and checks everything the run needs (the
workload, its overrides, its hardware file, the model, the cross-file rules), so bad input
already exits 2 naming the field, then says what is missing and exits 1.
"""

from __future__ import annotations

from pathlib import Path

import click

from rdu_sim.cli.errors import not_available
from rdu_sim.cli.options import overrides_option, workload_argument
from rdu_sim.scenario import load_scenario


@click.command("run")
@workload_argument
@overrides_option
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              default=None, help="Write JSON, CSV and the trace into this folder.")
@click.option("--step", "one_step", is_flag=True,
              help="Simulate one decode step instead of the whole serving run.")
def command(workload: Path, overrides: tuple[str, ...], as_json: bool, out_dir: Path | None,
            one_step: bool) -> None:
    """Simulate serving WORKLOAD and report throughput, latency and memory."""
    scenario = load_scenario(workload, overrides)
    not_available("run", f"The workload {str(workload)!r} is valid ({scenario.model.name} on "
                  f"{scenario.hardware.name}, tp={scenario.tp}).")
