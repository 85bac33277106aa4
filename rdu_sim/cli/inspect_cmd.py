"""`rdu-sim inspect model|graph`: look at a model's derived figures or a compiled graph.

`inspect model NAME` prints the hand-countable figures of rdu_sim.models (params, KV bytes per
token, weight bytes, decode FLOPs per token: of one token after `--context` cached tokens,
attending to them and itself as `rdu-sim step`'s decode on that cache does, so its
``model_flops`` is the batch times it) that every later stage must agree with, and the
architecture's dimensions they come from (hidden size, heads, KV heads, head dims, layers,
experts, FFN widths, vocabulary: each integer field the architecture has, described by its
field; JSON `architecture`); NAME may also be a Hugging Face config.json (read locally,
`rdu_sim.models.read_config_json`) or a workload file, whose model (preset, config.json or
custom) and dtypes are used. A preset name registered for an architecture named otherwise is
said so (`deepseek-v3: the deepseek-r1 architecture`; JSON `preset`).
`inspect graph WORKLOAD` shows what the compiler makes of one static step: the step `rdu-sim
step` would time with the same `--phase/--batch/--tokens/--context` (`rdu_sim.api.inspect_graph`,
and rdu_sim.compiler's `to_dot` for `--dot`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import click
from rich import box
from rich.console import Console
from rich.table import Table

from rdu_sim import human
from rdu_sim.cli.options import (
    FilePath,
    TokenCount,
    overrides_option,
    step_shape_errors,
    step_shape_options,
    workload_argument,
)
from rdu_sim.config import shipped
from rdu_sim.config.dtypes import DTYPE_BYTES, ValueDtype, WeightDtype
from rdu_sim.models import (
    Architecture,
    ModelFigures,
    get_model,
    layer_kinds,
    model_figures,
    preset_names,
    read_config_json,
    storage_dtypes,
)
from rdu_sim.scenario import load_scenario

_KV_DTYPES = click.Choice(list(get_args(ValueDtype)))
_WEIGHT_DTYPES = click.Choice(list(get_args(WeightDtype)))


def _model_source(name: str) -> Path | None:
    """The file behind NAME (a config.json, a folder holding one, a workload YAML, or a
    shipped model or workload by name: ``rdu_sim.config.shipped``'s rule), or None for a
    preset name."""
    given = Path(name)
    try:
        exists = bool(name) and given.exists()
    except (OSError, ValueError):  # a NUL byte, a name too long: not a file
        exists = False
    if exists or name.endswith((".json", ".yaml", ".yml")):
        return shipped.locate(given, ("model", "workload"))
    if name in preset_names():
        return None
    return shipped.find(name, ("model", "workload"))


def resolve_model(
    name: str,
    kv_dtype: str | None,
    weight_dtype: str | None,
    expert_dtype: str | None = None,
) -> tuple[Architecture, str, str, str]:
    """The architecture named by a preset, a config.json or a workload file, and the
    (KV, weight, expert) dtypes to use.

    Explicit dtypes win; a workload's own dtypes come next; then the model's released
    dtypes (`storage_dtypes`); bf16 otherwise.
    """
    source = _model_source(name)
    if source is not None and source.suffix == ".json":
        arch = read_config_json(source)
    elif source is not None:
        scenario = load_scenario(source)
        dtypes = scenario.workload.dtypes
        weights, experts = storage_dtypes(
            scenario.model, weight_dtype or dtypes.weights, expert_dtype or dtypes.experts
        )
        return scenario.model, kv_dtype or dtypes.kv, weights, experts
    else:
        arch = get_model(name)
    weights, experts = storage_dtypes(arch, weight_dtype, expert_dtype)
    return arch, kv_dtype or "bf16", weights, experts


def figures_for(
    name: str,
    kv_dtype: str | None = None,
    weight_dtype: str | None = None,
    context: int = 0,
    expert_dtype: str | None = None,
) -> tuple[ModelFigures, Architecture]:
    """The figures `inspect model` prints, for a preset, a config.json or a workload file,
    and the architecture they are of."""
    arch, kv, weights, experts = resolve_model(name, kv_dtype, weight_dtype, expert_dtype)
    moe = any(k.ffn == "moe" for k in layer_kinds(arch))
    figures = model_figures(
        arch,
        kv_dtype=kv,
        kv_dtype_bytes=DTYPE_BYTES[kv],
        weight_dtype=weights,
        weight_dtype_bytes=DTYPE_BYTES[weights],
        context=context,
        expert_dtype=experts if moe else None,
        expert_dtype_bytes=DTYPE_BYTES[experts],
    )
    return figures, arch


_READING_ORDER = (
    "vocab_size",
    "hidden_size",
    "layers",
    "dense_layers",
    "heads",
    "kv_heads",
    "head_dim",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "sliding_window",
    "ffn_intermediate",
    "moe_intermediate",
    "routed_experts",
    "shared_experts",
    "experts_per_token",
    "expert_groups",
    "groups_per_token",
    "max_context",
)
"""The order `inspect model` lists an architecture's dimensions in (a field not named here
follows, in the architecture's own order)."""


def architecture_dimensions(arch: Architecture) -> dict[str, int]:
    """The architecture's own sizes and counts (every integer field it has and sets: hidden
    size, heads, KV heads, head dims, layers, experts, FFN widths, vocabulary, ...), by
    their config field names, so that no one derives them from ``models/presets.py`` by
    hand; a family's fields only (no ``kv_heads`` for MLA), an unset one left out."""
    fields = type(arch).model_fields
    names = [n for n in _READING_ORDER if n in fields]
    names += [n for n in fields if n not in names]
    values = {name: getattr(arch, name) for name in names}
    return {
        name: value
        for name, value in values.items()
        if isinstance(value, int) and not isinstance(value, bool)
    }


def preset_alias(name: str, arch: Architecture) -> str | None:
    """``name`` when it is a preset registered for an architecture named otherwise (the
    ``deepseek-v3`` preset is the ``deepseek-r1`` architecture): what the report says
    instead of silently showing the other name; None otherwise (a file, or the name
    itself)."""
    if _model_source(name) is not None or name.lower() == arch.name.lower():
        return None
    return name


def _figures_table(figures: ModelFigures, arch: Architecture, alias: str | None = None) -> Table:
    """The figures, with the architecture's dimensions each described by its config field,
    as a table; titled ``deepseek-v3: the deepseek-r1 architecture (deepseek)`` for an
    alias (``preset_alias``)."""
    title = f"{figures.name} ({figures.family})"
    if alias is not None:
        title = f"{alias}: the {figures.name} architecture ({figures.family})"
    table = Table(title=title, show_header=False)
    table.add_column("figure", style="bold")
    table.add_column("value", justify="right")
    table.add_column("", style="dim")
    kinds = []
    if figures.moe_layers:
        kinds.append(f"{figures.moe_layers} MoE")
    if figures.sliding_window_layers:
        kinds.append(f"{figures.sliding_window_layers} sliding-window")
    table.add_row("layers", str(figures.layers), ", ".join(kinds))
    fields = type(arch).model_fields
    for field, value in architecture_dimensions(arch).items():
        if field != "layers":  # the row above
            table.add_row(field, f"{value:,}", fields[field].description or "")
    table.add_section()
    table.add_row(
        "params_total", f"{figures.params_total:,}", f"{human.number(figures.params_total / 1e9)} B"
    )
    table.add_row(
        "params_active",
        f"{figures.params_active:,}",
        f"{human.number(figures.params_active / 1e9)} B per token",
    )
    table.add_row(
        "  without embedding",
        f"{figures.params_active_without_embedding:,}",
        f"{human.number(figures.params_active_without_embedding / 1e9)} B "
        + (
            "(tied: the table is also the LM head, so it stays)"
            if arch.tie_embeddings
            else "(the table is gathered)"
        ),
    )
    experts = f", experts {figures.expert_dtype}" if figures.expert_dtype else ""
    table.add_row(
        "weight_bytes",
        f"{figures.weight_bytes:,}",
        f"{human.size(figures.weight_bytes)} in {figures.weight_dtype}{experts}",
    )
    windowed = figures.longest_window is not None
    table.add_row(
        "kv_bytes_per_token",
        f"{figures.kv_bytes_per_token:,}",
        f"{human.size(figures.kv_bytes_per_token)} in {figures.kv_dtype}"
        + (", a token inside every sliding window" if windowed else ""),
    )
    if windowed:
        table.add_row(
            "  past the windows",
            f"{figures.kv_bytes_per_token_past_windows:,}",
            _past_windows(figures),
        )
    table.add_row(
        "kv_bytes_per_sequence",
        f"{figures.kv_bytes_per_sequence:,}",
        f"{human.size(figures.kv_bytes_per_sequence)} at {figures.max_context:,} tokens",
    )
    table.add_row(
        "decode_flops_per_token",
        f"{figures.decode_flops_per_token:,}",
        f"{human.number(figures.decode_flops_per_token / 1e9)} GFLOP decoding a token on "
        f"{figures.context:,} cached tokens (attending to {figures.attended_tokens:,}: them "
        "and itself, as rdu-sim step counts)",
    )
    return table


def _past_windows(figures: ModelFigures) -> str:
    """What a further token costs once a sequence is past every sliding window (a model
    with windows): the full-attention layers' KV only, or none when every layer slides."""
    past, window = figures.kv_bytes_per_token_past_windows, figures.longest_window
    full = figures.layers - figures.sliding_window_layers
    if full == 0:
        return (
            f"0 B a further token past the {window:,}-token window: every layer keeps "
            f"its last {(window or 1) - 1:,} tokens"
        )
    return (
        f"{human.size(past)} a further token past the {window:,}-token window: the "
        f"{human.count(full, 'full-attention layer')} alone"
    )


@click.group("inspect")
def command() -> None:
    """Look at a model's derived figures or a workload's compiled graph."""


@command.command("model")
@click.argument("name", required=False)
@click.option("--list", "list_presets", is_flag=True, help="List the preset model names.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.option(
    "--kv-dtype",
    type=_KV_DTYPES,
    default=None,
    help="KV-cache dtype (default: the workload's, else bf16).",
)
@click.option(
    "--weight-dtype",
    type=_WEIGHT_DTYPES,
    default=None,
    help="Weight dtype (default: the workload's, else the model's released one, else bf16).",
)
@click.option(
    "--expert-dtype",
    type=_WEIGHT_DTYPES,
    default=None,
    help="Routed experts' dtype (default: the workload's, else the model's, else the weights').",
)
@click.option(
    "--context",
    type=TokenCount(0),
    default=0,
    show_default=True,
    help="Cached tokens before the decoded token, for decode_flops_per_token: it attends to "
    "them and itself (context + 1), as `rdu-sim step`'s decode on that many cached tokens.",
)
def model_command(
    name: str | None,
    list_presets: bool,
    as_json: bool,
    kv_dtype: str | None,
    weight_dtype: str | None,
    expert_dtype: str | None,
    context: int,
) -> None:
    """Derived figures of a preset model NAME, a config.json, or a workload file's model."""
    if list_presets:
        names = preset_names()
        click.echo(json.dumps(names) if as_json else "\n".join(names))
        return
    if name is None:
        raise click.UsageError(
            "give a model NAME (see `rdu-sim inspect model --list`), a config.json or a "
            "workload file"
        )
    figures, arch = figures_for(name, kv_dtype, weight_dtype, context, expert_dtype)
    alias = preset_alias(name, arch)
    if as_json:
        data = dataclasses.asdict(figures)
        if alias is not None:
            data["preset"] = alias  # the name asked for; "name" is the architecture's
        data["architecture"] = architecture_dimensions(arch)
        click.echo(json.dumps(data, indent=2))
    else:
        Console().print(_figures_table(figures, arch, alias))


def _intensity(value: float | None) -> str:
    """Operational intensity for a table ('-' for a kernel with no off-chip traffic)."""
    return human.MISSING if value is None else human.number(value)


def _graph_title(result: Mapping[str, Any]) -> str:
    """What the kernels table shows: the step's shape and the layout it runs on, in the
    words every report uses (``describe_layout``; a rank's batch under data-parallel
    attention), and whose kernels they are (one socket; of a pipeline's first stage, one
    micro-batch)."""
    from rdu_sim.config.parallelism import describe_layout
    from rdu_sim.report.console import batch_words

    shape, layout = result["shape"], result["layout"]
    pipeline = result.get("pipeline")
    whose = (
        "one socket"
        if pipeline is None
        else f"one socket of pipeline stage 0 of {pipeline['stages']}, one micro-batch of "
        f"{pipeline['micro_batches']}"
    )
    return (
        f"{result['model']} {shape['phase']} step: {batch_words(shape['batch'], layout)}, "
        f"{shape['tokens']} new token(s), cache {shape['cache_len']:,}, "
        f"{describe_layout(layout)}, kv {result['kv_policy']} ({whose})"
    )


def _stage_words(placement: Mapping[str, Any]) -> str:
    """Which pipeline stage's sockets the memory table shows (the fullest HBM's), "" without
    a pipeline."""
    stage = placement.get("pipeline_stage")
    return "" if stage is None else f" of pipeline stage {stage} (its HBM the fullest)"


def _graph_tables(result: Mapping[str, Any]) -> list[Table]:
    """The human view of an `inspect_graph` result: kernels, layers, per-tier placement."""
    kernels = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        title=_graph_title(result),
    )
    kernels.caption = (
        f"fusion {result['fusion']}; GFLOP and bytes (HBM, DDR, collective) per step; "
        "FLOP/B: operational intensity, matrix FLOPs per off-chip byte; tiles per call and "
        "the PMU SRAM the kernel holds"
    )
    kernels.add_column("kernel", overflow="fold")  # long split-kernel names wrap, numbers never
    for name in (
        "calls",
        "loop",
        "stages",
        "PCUs",
        "tiles",
        "SRAM",
        "GFLOP",
        "HBM",
        "DDR",
        "coll.",
        "FLOP/B",
    ):
        kernels.add_column(name, justify="right", no_wrap=True)
    for kernel in result["kernels"]:
        per_tier = kernel["bytes_per_step"]
        kernels.add_row(
            kernel["name"],
            str(kernel["calls"]),
            "yes" if kernel["looped"] else "no",
            str(len(kernel["stages"])),
            str(kernel["pcus"]),
            str(kernel["tiles"]),
            human.size(kernel["sram_bytes"]),
            human.number(kernel["flops_per_step"] / 1e9),
            human.size(per_tier.get("hbm", 0)),
            human.size(per_tier.get("ddr", 0)),
            human.size(kernel["collective_bytes_per_step"]),
            _intensity(kernel["operational_intensity"]),
        )
    layers = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        title="per layer (all its kernels, one call)",
    )
    for name in ("layer", "kernels", "calls", "GFLOP", "off-chip", "FLOP/B"):
        layers.add_column(name, justify="left" if name == "layer" else "right", no_wrap=True)
    for layer in result["layers"]:
        layers.add_row(
            layer["name"],
            str(layer["kernels"]),
            str(layer["calls"]),
            human.number(layer["flops_per_call"] / 1e9),
            human.size(layer["offchip_bytes_per_call"]),
            _intensity(layer["operational_intensity"]),
        )
    placement = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        title=f"memory per socket{_stage_words(result['placement'])} at "
        f"{result['placement']['batch_slots']} batch slots (capacity {result['batch_capacity']})",
    )
    queries = result.get("mla_queries")
    if queries:
        placement.caption = (
            f"MLA query and value weights (q_b_proj, kv_b_proj) {queries['weights']} on every "
            f"socket; this step's queries: {queries['queries']}"
        )
    for name in ("tier", "capacity", "weights", "KV cache", "activations", "used", "free"):
        placement.add_column(name, justify="left" if name == "tier" else "right")
    for tier, usage in result["placement"]["tiers"].items():
        placement.add_row(
            tier,
            *(
                human.size(usage[key])
                for key in (
                    "capacity_bytes",
                    "weights_bytes",
                    "kv_bytes",
                    "activations_bytes",
                    "used_bytes",
                    "free_bytes",
                )
            ),
        )
    return [kernels, layers, placement]


@command.command("graph")
@workload_argument
@step_shape_options
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.option(
    "--dot",
    "dot_file",
    type=FilePath(),
    default=None,
    help="Also write the decoder layer's graph in Graphviz DOT.",
)
@overrides_option
def graph_command(
    workload: Path,
    phase: str,
    batch: int | None,
    tokens: int | None,
    context: int | None,
    as_json: bool,
    dot_file: Path | None,
    overrides: tuple[str, ...],
) -> None:
    """Kernels, stages and tier placement of one static step of WORKLOAD: the step
    `rdu-sim step` times with the same options."""
    from rdu_sim import api  # networkx and the compiler: only when asked for
    from rdu_sim.compiler import to_dot
    from rdu_sim.provenance import input_files
    from rdu_sim.report.files import refuse_overwrite, write_file
    from rdu_sim.serving.step_shape import context_note

    scenario = load_scenario(workload, overrides)
    if dot_file is not None:
        refuse_overwrite([("--dot", dot_file)], input_files(scenario), "the graph")
    with step_shape_errors(workload, batch, context):
        result = api.inspect_graph(
            scenario, phase=phase, batch=batch, tokens=tokens, context=context
        )
    if dot_file is not None:
        dot = to_dot(result)
        write_file(dot_file, lambda handle: handle.write(dot))  # WriteError: exit 2
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        from rdu_sim.report.terminal import wide_console

        console = wide_console()
        for table in _graph_tables(result):
            console.print(table)
        note = context_note(scenario, context) if phase == "decode" else None
        if note is not None:
            console.print(note, markup=False)
