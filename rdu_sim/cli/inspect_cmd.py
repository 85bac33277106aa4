"""`rdu-sim inspect model|graph`: look at a model's derived figures or a compiled graph.

`inspect model NAME` prints the hand-countable figures of rdu_sim.models (params, KV bytes per
token, weight bytes, decode FLOPs per token) that every later stage must agree with; NAME may
also be a workload file, whose model (preset or custom) and dtypes are used.
`inspect graph WORKLOAD` shows what the compiler makes of one static step.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from rdu_sim.cli.errors import not_available
from rdu_sim.cli.options import overrides_option, workload_argument
from rdu_sim.config.units import format_bytes
from rdu_sim.config.workload import DTYPE_BYTES
from rdu_sim.models import Architecture, ModelFigures, get_model, model_figures, preset_names
from rdu_sim.scenario import Scenario, load_scenario

_DTYPES = click.Choice(sorted(DTYPE_BYTES))


def _is_workload_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or Path(name).is_file()


def resolve_model(name: str, kv_dtype: str | None, weight_dtype: str | None
                  ) -> tuple[Architecture, str, str]:
    """The architecture named by a preset or a workload file, and the dtypes to use.

    Explicit dtypes win; a workload's own dtypes come next; bf16 otherwise.
    """
    if _is_workload_path(name):
        scenario = load_scenario(name)
        dtypes = scenario.workload.dtypes
        return scenario.model, kv_dtype or dtypes.kv, weight_dtype or dtypes.weights
    return get_model(name), kv_dtype or "bf16", weight_dtype or "bf16"


def figures_for(name: str, kv_dtype: str | None = None, weight_dtype: str | None = None,
                context: int = 0) -> ModelFigures:
    """The figures `inspect model` prints, for a preset name or a workload file."""
    arch, kv, weights = resolve_model(name, kv_dtype, weight_dtype)
    return model_figures(arch, kv_dtype=kv, kv_dtype_bytes=DTYPE_BYTES[kv],
                         weight_dtype=weights, weight_dtype_bytes=DTYPE_BYTES[weights],
                         context=context)


def _figures_table(figures: ModelFigures) -> Table:
    table = Table(title=f"{figures.name} ({figures.family})", show_header=False)
    table.add_column("figure", style="bold")
    table.add_column("value", justify="right")
    table.add_column("", style="dim")
    table.add_row("layers", str(figures.layers), "")
    table.add_row("params_total", f"{figures.params_total:,}",
                  f"{figures.params_total / 1e9:.2f} B")
    table.add_row("params_active", f"{figures.params_active:,}",
                  f"{figures.params_active / 1e9:.2f} B per token")
    table.add_row("weight_bytes", f"{figures.weight_bytes:,}",
                  f"{format_bytes(figures.weight_bytes)} in {figures.weight_dtype}")
    table.add_row("kv_bytes_per_token", f"{figures.kv_bytes_per_token:,}",
                  f"{format_bytes(figures.kv_bytes_per_token)} in {figures.kv_dtype}")
    table.add_row("decode_flops_per_token", f"{figures.decode_flops_per_token:,}",
                  f"{figures.decode_flops_per_token / 1e9:.2f} GFLOP at context "
                  f"{figures.context:,}")
    return table


@click.group("inspect")
def command() -> None:
    """Look at a model's derived figures or a workload's compiled graph."""


@command.command("model")
@click.argument("name", required=False)
@click.option("--list", "list_presets", is_flag=True, help="List the preset model names.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.option("--kv-dtype", type=_DTYPES, default=None,
              help="KV-cache dtype (default: the workload's, else bf16).")
@click.option("--weight-dtype", type=_DTYPES, default=None,
              help="Weight dtype (default: the workload's, else bf16).")
@click.option("--context", type=click.IntRange(0, 100_000_000), default=0, show_default=True,
              help="Cached tokens for decode_flops_per_token.")
def model_command(name: str | None, list_presets: bool, as_json: bool, kv_dtype: str | None,
                  weight_dtype: str | None, context: int) -> None:
    """Derived figures of a preset model NAME (or of a workload file's model)."""
    if list_presets:
        names = preset_names()
        click.echo(json.dumps(names) if as_json else "\n".join(names))
        return
    if name is None:
        raise click.UsageError("give a model NAME (see `rdu-sim inspect model --list`) "
                               "or a workload file")
    figures = figures_for(name, kv_dtype, weight_dtype, context)
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(figures), indent=2))
    else:
        Console().print(_figures_table(figures))


def _jsonable(value: Any) -> Any:
    """Whatever the compiler returns, as JSON-ready data."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


@command.command("graph")
@workload_argument
@click.option("--phase", type=click.Choice(["decode", "prefill"]), default="decode",
              show_default=True)
@click.option("--batch", type=click.IntRange(1, 1_000_000), default=None,
              help="Batch slots (default: the workload's, or 1 when it says auto).")
@click.option("--context", type=click.IntRange(0, 100_000_000), default=None,
              help="Cached tokens (default: the workload's max_context).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.option("--dot", "dot_file", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Also write the graph in Graphviz DOT to this file.")
@overrides_option
def graph_command(workload: Path, phase: str, batch: int | None, context: int | None,
                  as_json: bool, dot_file: Path | None, overrides: tuple[str, ...]) -> None:
    """Kernels, stages and tier placement of one static step of WORKLOAD."""
    scenario: Scenario = load_scenario(workload, overrides)
    try:
        compiler = importlib.import_module("rdu_sim.compiler")
    except ImportError:
        compiler = None
    inspect_graph = getattr(compiler, "inspect_graph", None)
    to_dot = getattr(compiler, "to_dot", None)
    if inspect_graph is None:
        not_available("inspect graph", f"The workload {str(workload)!r} is valid; "
                      "rdu_sim.compiler does not expose inspect_graph yet.")
    slots = scenario.workload.serving.batch_slots
    batch = batch or (slots if isinstance(slots, int) else 1)
    context = scenario.workload.serving.max_context if context is None else context
    result = inspect_graph(scenario, phase=phase, batch=batch, context=context)
    if dot_file is not None:
        if to_dot is None:
            not_available("inspect graph --dot", "rdu_sim.compiler does not expose to_dot yet.")
        dot_file.write_text(to_dot(result))
    if as_json:
        click.echo(json.dumps(_jsonable(result), indent=2, default=str))
    else:
        Console().print(result)
