"""`rdu-sim step WORKLOAD`: simulate one static step at kernel level (stub).

Loads and checks the workload (exit 2 on bad input); the kernel-level engine that times the
step and writes its Perfetto trace has not landed yet (exit 1).
"""

from __future__ import annotations

from pathlib import Path

import click

from rdu_sim.cli.errors import not_available
from rdu_sim.cli.options import overrides_option, workload_argument
from rdu_sim.scenario import load_scenario


@click.command("step")
@workload_argument
@overrides_option
@click.option("--phase", type=click.Choice(["decode", "prefill"]), default="decode",
              show_default=True)
@click.option("--batch", type=click.IntRange(1, 1_000_000), default=None,
              help="Batch slots (default: the workload's).")
@click.option("--context", type=click.IntRange(0, 100_000_000), default=None,
              help="Cached tokens (default: the workload's max_context).")
@click.option("--trace", "trace_file", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Write a Perfetto (Chrome JSON) trace of the step.")
@click.option("--json", "as_json", is_flag=True, help="Print the step timing as JSON.")
def command(workload: Path, overrides: tuple[str, ...], phase: str, batch: int | None,
            context: int | None, trace_file: Path | None, as_json: bool) -> None:
    """Time one decode or prefill step of WORKLOAD on the hardware model."""
    scenario = load_scenario(workload, overrides)
    not_available("step", f"The workload {str(workload)!r} is valid ({scenario.model.name} "
                  f"on {scenario.hardware.name}).")
