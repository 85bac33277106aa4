"""`rdu-sim step WORKLOAD`: simulate one static step at kernel level and print its timing.

The step is one decode step of the batch or one prefill, its shape given by ``--batch``,
``--tokens`` and ``--context`` with the defaults of ``rdu_sim.serving.step_shape`` (decode:
every batch slot at the decode bucket of the longest cache the KV policy keeps; prefill: the
workload's typical prompt as a server runs it, padded to its bucket, the prompt run's
``prefill_s`` and compare's prefill row time; with ``serving.prefill_chunk_tokens``, its
first chunk only, where those sum all its chunks. A line under the header names which, with
a compressing policy's longer prompts and the shape that times them as compare's long-prompt
row does). A ``--context``
the policy does not keep in full (a SnapStream slot holds its budget) or that is rounded up
to a decode bucket is said under the tables. It runs through ``api.step``: the shape is
compiled by ``rdu_sim.compiler`` and simulated by ``rdu_sim.engine`` with the workload's
``engine:`` settings; ``--trace FILE`` also records it (``api.step(..., record=True)``) and
writes a Chrome/Perfetto trace (open it in ui.perfetto.dev).

Output: rich tables (the kernels, each collective with the algorithm chosen for it, bytes
per tier, busy units), or with ``--json`` one JSON object: ``StepTiming.to_dict()`` (step_s,
phase, batch, tokens, context, flops (one socket's matrix FLOPs, work repeated on several
sockets included: the MoE router, MLA's q_a_proj and kv_a_proj, K/V heads fewer than the
sockets; ``flops_fraction`` is of them), bytes_by_tier {hbm, ddr, sram, p2p},
hbm_bandwidth_fraction, events, kernels (each with its tiles per call and ``sram_bytes``,
the PMU SRAM it holds), sram_bytes (the peak), ...) plus ``model_flops`` (the model's own
matrix FLOPs of the step, each product once, over its tp sockets) and
``model_flops_fraction`` (model FLOP/s utilisation: model_flops / tp over the step's time
and a socket's peak; ``compiler.step_work``), for a MoE model ``experts`` (what a MoE layer
streams: ``routed_experts``, ``experts_per_token``, ``loading``, ``whole_over_devices`` and
per routing its ``tokens``, ``expected_distinct`` experts of uniform routing and experts or
slots ``streamed``; absent for whole experts paced by their busiest device, whose
``expert_balance`` says theirs; the console's ``routed experts`` line), the workload, model
and hardware names, ``predicted`` (None, or for hardware predicted rather than measured what
a run's header says, ``config.origins.predicted_words``), ``layout`` (the parallel degrees
by their ``parallelism.*`` names: tp, dp_attention, ep, pp, micro_batches) and ``batch_of``
(``attention_rank`` under data-parallel attention, where the step is one rank's and
``batch`` that rank's; else ``replica``), ``memory`` (the memory plan the step runs on:
``plan_slots``, the workload's batch slots or the step's batch when larger, as a served step
of that batch runs; ``weights_hbm_bytes`` and ``weights_ddr_bytes`` where its weights live,
which the console says on a ``weights`` line when any are in DDR), ``bound``
(``report.bound``: each resource's time alone as ``NAME_s``, the largest as ``resource``,
``host_hidden_s`` the overlapped host time the device hid, ``unaccounted_s`` the step's time
no resource explains, ``unaccounted_in`` the part of ``parts`` it lies in, ``idle`` or
``execution``: ``report.bound.unaccounted_part``; null when there is none, or when it is
spread over the parts beside the binding resource's), ``parts``
(``report.bound.step_parts``: the step's time in parts that add up to ``step_s``, the
binding resource's time, ``idle`` the kernels' execution it did not take, and the serial
parts beside it: ``boundaries``, ``runtime`` the host's,
``host_link`` the logits' trip to it, ``launch``, ``pipeline``; the console's ``the step's
parts`` line), for a default decode step of fewer sequences than the batch slots
``batch_note`` (why: its paged KV pool holds no more of that context; the line under the
console's header), and with pipeline stages ``pipeline`` (stages, micro_batches, stage_s,
stage_layers (each stage's decoder layers), binding_stage (the slowest, whose devices the
step's totals, ``bound`` and ``parts`` are), bubble (the stages' idle share) as fill_drain
(the pipeline filling and draining at the binding stage's pace) plus imbalance (the other
stages waiting for it), hand_offs: each boundary's send, ``engine.pipeline.HandOff``; the
console says them on a ``pipeline`` and a ``hand-offs`` line), and for a MoE step under
static expert loading ``expert_schedule`` (``gather`` or ``all``, the compiler's choice:
``compiler.expert_schedule``; the console's ``routed experts`` line). A step over the event
budget exits 2 naming ``engine.tiles_per_stage`` and ``engine.max_events``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rdu_sim import api, human
from rdu_sim.cli.errors import fail
from rdu_sim.cli.main import STOPS
from rdu_sim.cli.options import (
    FilePath,
    overrides_option,
    step_shape_errors,
    step_shape_options,
    workload_argument,
)
from rdu_sim.interrupts import keeps_on_stop
from rdu_sim.models.layers import Architecture, window_layer_counts, window_tokens
from rdu_sim.models.presets import model_words
from rdu_sim.report.bound import micro_batch_words

if TYPE_CHECKING:
    from rich.table import Table

    from rdu_sim.report.summary import Utilization
    from rdu_sim.scenario import Scenario


def _pipeline_line(data: dict[str, Any]) -> str:
    """The pipeline's stages, micro-batches and bubble: which stage binds (the slowest, whose
    devices the bound line and the parts measure), what the step's time holds beyond it (the
    bubble: the pipeline filling and draining at the binding stage's pace, and the lighter
    stages waiting for it, ``engine.pipeline.bubble_shares``), each stage's layers, and, when
    the batch had fewer sequences than ``micro_batches``, that the step ran one micro-batch
    a sequence (``ParallelismConfig.step_micro_batches``)."""
    pipeline = data["pipeline"]
    parts, asked = pipeline["micro_batches"], data["layout"]["micro_batches"]
    binding = pipeline["binding_stage"]
    stages = ", ".join(human.duration(t) for t in pipeline["stage_s"])
    fewer = (
        f" (parallelism.micro_batches={asked} asks more than the batch's {data['batch']:,} "
        "sequences: a micro-batch holds one at least)"
        if parts < asked
        else ""
    )
    layers = pipeline.get("stage_layers")
    held = f" holding {', '.join(map(str, layers))} layers" if layers else ""
    return (
        f"pipeline: {human.count(pipeline['stages'], 'stage')}{held}, "
        f"{human.count(parts, 'micro-batch', 'micro-batches')} of up to "
        f"{human.count(math.ceil(data['batch'] / parts), 'sequence')}{fewer}; a micro-batch "
        f"takes {stages} on the stages; stage {binding} binds (the slowest: the figures "
        "above are its devices over every micro-batch); the bubble, stages idle: "
        f"{human.percent(pipeline['bubble'])} of their time, "
        f"{human.percent(pipeline['fill_drain'])} the pipeline filling and draining at stage "
        f"{binding}'s pace and {human.percent(pipeline['imbalance'])} the other stages "
        f"waiting for it (stage imbalance; parallelism.stage_layers sets the split)"
        f"{_rereads(pipeline, binding)}"
    )


def _rereads(pipeline: dict[str, Any], binding: int) -> str:
    """A decode pipeline's two costs of its micro-batches side by side: the binding stage's
    weight reads, which every micro-batch repeats, and its fill and drain; and, when the
    step's estimate says fewer micro-batches would be faster, how many and by how much
    (``engine.pipeline.fewer_micro_batches``). Nothing for a prefill or one micro-batch."""
    weights = pipeline.get("weights_read_s")
    if not weights:
        return ""
    parts = pipeline["micro_batches"]
    stage_s = pipeline["stage_s"][binding]
    end_s = parts * stage_s / (1 - pipeline["fill_drain"]) if pipeline["fill_drain"] < 1 else 0
    words = (
        f"; each micro-batch re-reads its stage's weights: {human.duration(weights[binding])} "
        f"of stage {binding}'s {human.duration(stage_s)}, "
        f"{human.duration((parts - 1) * weights[binding])} a step beyond one read, against "
        f"the fill and drain's {human.duration(end_s - parts * stage_s)}"
    )
    fewer = pipeline.get("fewer_micro_batches")
    return f"{words}; {micro_batch_words(fewer)}" if fewer else words


def _hand_offs_line(pipeline: dict[str, Any]) -> str | None:
    """Each stage boundary's hand-off (``pipeline.hand_offs``, ``engine.pipeline.HandOff``):
    its bytes, link, one send's time and the sends a step; boundaries alike share a clause.
    None when the hand-offs are free (nothing to send)."""
    hand_offs: list[dict[str, Any]] = pipeline.get("hand_offs", [])
    if not hand_offs:
        return None
    groups: dict[tuple[str, ...], list[str]] = {}
    for h in hand_offs:
        words = h["link"].removesuffix("_link").replace("_", "-")
        key = (
            human.size(h["bytes"]),
            f"the {words} link (hw.system.{h['link']})",
            human.duration(h["estimate_s"]),
            human.duration(h["simulated_mean_s"]),
            human.count(h["sends"], "send"),
        )
        groups.setdefault(key, []).append(f"{h['stage']}->{h['stage'] + 1}")
    clauses = [
        f"stages {', '.join(boundaries)}: {size} on {link}, {alone} a send on an idle link "
        f"({simulated} simulated), {sends} a step"
        for (size, link, alone, simulated, sends), boundaries in groups.items()
    ]
    return (
        f"hand-offs, a micro-batch's activations to the next stage's first device: "
        f"{'; '.join(clauses)} (their time is inside the step and the bubble; the binding "
        "stage's first device's sends are counted in p2p below)"
    )


def window_words(arch: Architecture, context: int) -> str:
    """What a sliding-window layer reads of a step's ``context`` cached tokens: at most its
    ring of window - 1 (`models.layers.window_tokens`), said per window beside the count
    ("" when no layer's window is below the context: every layer reads it all)."""
    counts = window_layer_counts(arch)
    every = sum(counts.values())
    clauses = [
        f"{'every layer' if layers == every else human.count(layers, 'layer')}"
        f" {'slides' if layers in (1, every) else 'slide'} over a {window:,}-token window, "
        f"reading at most "
        f"{window_tokens(context, window):,} of them"
        for window, layers in counts.items()
        if window is not None and window_tokens(context, window) < context
    ]
    return f" ({'; '.join(clauses)})" if clauses else ""


def attends_words(phase: str, tokens: int) -> str:
    """What a decode step's new tokens attend to, beside the cached count (``rdu_sim.shapes``'
    convention: the cached tokens and itself, so 8,193 on 8,192 cached; ``inspect model
    --context`` counts the same); "" for a prefill, whose header says its prompt."""
    if phase != "decode":
        return ""
    if tokens == 1:
        return ", the new token attending to them and itself"
    return ", each new token attending to them, the new ones before it and itself"


def _weights_line(data: dict[str, Any], workload_slots: int) -> str | None:
    """Where the weights live, when any are in DDR (spilled, or placed there by
    ``memory.weights``), and the slots of the plan that put them there; None when all are in
    HBM."""
    memory = data["memory"]
    hbm, ddr = memory["weights_hbm_bytes"], memory["weights_ddr_bytes"]
    if ddr <= 0:
        return None
    slots = memory["plan_slots"]
    whose = (
        f"the workload's {human.count(slots, 'slot')}, serving.batch_slots, which a step of "
        f"batch {data['batch']:,} runs on, as a served step does"
        if slots == workload_slots and data["batch"] < slots
        else human.count(slots, "slot")
    )
    return (
        f"weights: {human.size(hbm + ddr)} a device, {human.size(hbm)} in HBM and "
        f"{human.size(ddr)} in DDR: the memory plan for {whose}; their KV cache and "
        "activations take the rest of HBM"
    )


def balance_words(balance: dict[str, float]) -> str:
    """What whole experts paced by their busiest device stream (``expert_balance``,
    ``compiler.expert_load``): that device's experts read and token-expert pairs."""
    return (
        f"routed experts (whole, paced by the busiest device): it reads "
        f"{human.number(balance['busiest_experts_read'])} experts a MoE layer, "
        f"{human.number(balance['busiest_pairs'])} token-expert pairs against a mean of "
        f"{human.number(balance['mean_pairs'])} ({human.ratio(balance['imbalance'])}; "
        "expert_balance)"
    )


def repeated_parts(scenario: Scenario, tp: int) -> str:
    """What TP does not split in this model, in words (the parts a device repeats): the MoE
    router, MLA's q_a_proj and kv_a_proj, GQA's K/V heads when fewer than the devices."""
    from rdu_sim.config.architecture import DeepSeekArchitecture, LlamaArchitecture
    from rdu_sim.config.hardware_file import device_noun

    arch, parts = scenario.model, []
    if not isinstance(arch, LlamaArchitecture) and arch.moe_layers > 0:
        parts.append("the MoE router")
    if isinstance(arch, DeepSeekArchitecture):
        parts.append("MLA's q_a_proj and kv_a_proj")
    else:
        kv_heads = arch.kv_heads
        if kv_heads < tp:
            parts.append(f"its {kv_heads} K/V heads over {tp} {device_noun(scenario.hardware)}s")
    return ", ".join(parts) or "its unsplit operators"


def flops_words(data: dict[str, Any], repeated: str = "", device: str = "socket") -> str:
    """The step's matrix FLOPs a ``device`` beside the model's own share of them (``flops``
    and ``model_flops`` / tp): the difference is work repeated on several devices, operators
    TP does not split (``repeated``, :func:`repeated_parts`; docs/architecture.md); and the
    model FLOP/s utilisation."""
    flops, own = data["flops"], data["model_flops"] / data["tp"]  # tp: the program's
    mfu = f"model FLOP/s {human.percent(data['model_flops_fraction'])} of peak"
    if own >= flops * (1 - 1e-9):
        return (
            f"matrix FLOPs {human.si(flops, 'FLOP')} a {device}, all its share of the model's "
            f"(no work repeated on every {device}); {mfu}"
        )
    reasons = []
    if data["tp"] > 1:
        reasons.append(
            f"work repeated on several {device}s (what TP does not split: "
            f"{repeated or 'its unsplit operators'}; docs/architecture.md)"
        )
    if data["layout"]["ep"] > 1:
        reasons.append("the busiest device's extra share of whole experts")
    reasons = reasons or ["work beyond its share"]
    return (
        f"matrix FLOPs {human.si(flops, 'FLOP')} a {device}, {' and '.join(reasons)} included; "
        f"its share of the model's own {human.si(own, 'FLOP')} ({human.percent(own / flops)}); "
        f"{mfu}"
    )


KERNEL_LEGEND = (
    "loop: a looped kernel, one call running its layers in an on-chip loop; time: all its "
    "calls; launch: the launch and sync part of that time; period: a looped kernel's steady "
    "time a layer, where the engine fast-forwarded it; sim: the calls or layer iterations "
    "the engine simulated (the rest advanced at that period)"
)
"""The kernel table's columns, in a line under it."""

SN40L_KERNEL_LEGEND = "; tiles: a call's; SRAM: the PMU SRAM it holds"
"""The kernel table's SN40L-only columns (a GPU step's table leaves them out; its JSON keeps
``tiles`` and ``sram_bytes``, 0), after :data:`KERNEL_LEGEND`."""

SN40L_KERNEL_COLUMNS = ("tiles", "SRAM")
"""The kernel table's columns only SN40L fills: tiles a call streams, the PMU SRAM held."""


def _print_tables(
    data: dict[str, Any],
    utilization: Utilization,
    machine: str,
    weights: str | None,
    windows: str = "",
    experts: str | None = None,
    prompt: str | None = None,
    repeated: str = "",
    device: str = "socket",
    model: str = "",
    compute: str | None = None,
    gpu: bool = False,
) -> None:
    # here, not at import: `--json` needs neither rich's tables nor the run report's module
    from rich import box
    from rich.table import Table

    from rdu_sim.report.console import batch_words, served_by, utilization_line
    from rdu_sim.report.terminal import wide_console

    console = wide_console(soft_wrap=True, highlight=False)
    from rdu_sim.report.bound import (
        RESOURCES,
        bound_label,
        link_note,
        others_alone,
        parts_words,
        resource_words,
        unaccounted_words,
    )

    console.print(
        f"[bold]{data['workload']}[/]: {model or data['model']} on {data['hardware']} "
        f"{served_by(data['stack'])} ({machine}): {data['phase']} step, "
        f"{batch_words(data['batch'], data['layout'])}, "
        f"{human.count(data['tokens'], 'new token')}, {data['context']:,} cached tokens"
        f"{windows}{attends_words(data['phase'], data['tokens'])}"
    )
    if data["predicted"] is not None:  # as a run's header says it
        console.print(f"{data['hardware']}: {data['predicted']}", markup=False)
    if prompt is not None:
        console.print(prompt, markup=False)
    console.print(
        f"step time [bold]{human.duration(data['step_s'])}[/]; {utilization_line(utilization)}; "
        f"{human.count(data['events'], 'SimPy event')}"
    )
    bound = data["bound"]
    resource = bound["resource"]
    notes = {} if compute is None else {"compute": compute}  # compute is not the busy pcu
    link = link_note(bound["link_s"], data["busy_s"].get("link", 0.0))
    if link is not None:  # nor the link the busy link
        notes["link"] = link
    others = others_alone({name: bound[f"{name}_s"] for name in RESOURCES}, resource, notes)
    hidden = ", hidden under it" if bound["host_hidden_s"] > 0 else ""
    rest = unaccounted_words(bound["unaccounted_s"], bound["unaccounted_in"], data["parts"])
    unaccounted = f"; {rest}" if rest else ""
    limit = bound[f"{resource}_s"]
    label = bound_label(limit, data["step_s"])
    of = "the step" if label == "bound by" else human.duration(data["step_s"])
    if resource in notes:
        of = f"{of}, {notes[resource]}"
    words = resource_words(resource, bound["link"] or "", bound.get("link_term") or "")
    console.print(
        f"{label} [bold]{words}[/] "
        f"({human.duration(limit)} of "
        f"{of}; each resource alone: {others}); the device "
        f"{human.duration(data['device_s'])}, the host adds {human.duration(data['runtime_s'])} "
        f"({human.duration(data['host_serial_s'])} serial, "
        f"{human.duration(data['host_overlapped_s'])} beside the device{hidden}){unaccounted}"
    )
    parts = parts_words(data["parts"], bound["link"] or "", bound.get("link_term") or "")
    console.print(f"the step's parts: {parts}", markup=False)
    if weights is not None:
        console.print(weights)
    console.print(flops_words(data, repeated, device))
    if experts is not None:
        console.print(experts)
    elif data.get("expert_balance"):
        console.print(balance_words(data["expert_balance"]))
    if data.get("pipeline"):
        console.print(_pipeline_line(data))
        hand_offs = _hand_offs_line(data["pipeline"])
        if hand_offs is not None:
            console.print(hand_offs)
    kernels = Table(
        title="kernels",
        box=box.SIMPLE_HEAD,
        caption=KERNEL_LEGEND + ("" if gpu else SN40L_KERNEL_LEGEND),
        caption_justify="left",
    )
    for col in (
        "kernel",
        "calls",
        "loop",
        "time",
        "share",
        "launch",
        "period",
        "sim",
        *(() if gpu else SN40L_KERNEL_COLUMNS),
    ):
        kernels.add_column(col, justify="left" if col == "kernel" else "right", no_wrap=True)
    for k in data["kernels"]:
        period = k["period_s"]
        kernels.add_row(
            k["name"],
            str(k["calls"]),
            "yes" if k["looped"] else "no",
            human.duration(k["time_s"]),
            human.percent(k["time_s"] / data["step_s"]),
            human.duration(k["overhead_s"]),
            human.duration(period) if period else "-",
            str(k["simulated_iterations"]),
            *(() if gpu else (str(k["tiles"]), human.size(k["sram_bytes"]))),
        )
    console.print(kernels)
    if data["collectives"]:
        console.print(_collectives_table(data["collectives"], device))
    units = Table(title=f"bytes and busy units (per {device})", box=box.SIMPLE_HEAD)
    if data["busy_s"].get("link", 0.0) > 0:
        units.caption = (
            "link: the busiest link direction's serialisation time (its bytes on the wire); "
            "the bound's link time adds each transfer's latency in flight"
        )
        units.caption_justify = "left"
    for col in ("tier", "bytes", "unit", "busy", "busy (share of step)"):
        units.add_column(col, justify="left" if col in ("tier", "unit") else "right", no_wrap=True)
    tiers = list(data["bytes_by_tier"].items())
    kinds = list(data["busy_s"].items())
    for i in range(max(len(tiers), len(kinds))):
        tier, nbytes = tiers[i] if i < len(tiers) else ("", None)
        kind, busy = kinds[i] if i < len(kinds) else ("", None)
        units.add_row(
            tier,
            human.size(nbytes) if nbytes is not None else "",
            kind,
            human.duration(busy) if busy is not None else "",
            human.percent(data["utilization"][kind]) if kind else "",
        )
    console.print(units)
    if data.get("trace"):
        console.print(f"trace written to {data['trace']} (open it in ui.perfetto.dev)")


def _collectives_table(collectives: list[dict[str, Any]], device: str = "socket") -> Table:
    """Each collective stage with the algorithm the hardware's policy chose and its cost."""
    from rich import box
    from rich.table import Table

    exchange = any("sent_bytes" in c for c in collectives)
    caption = (
        "estimate: one call on idle links, all its pieces at once (the policy's choice); "
        "simulated: a call's mean in the step, from its first piece's start to its last's "
        "end, so it includes waiting for the producer's tiles and for busy links"
    )
    if exchange:
        caption += (
            "; bytes: a call's tensor, for an all-to-all the tokens a socket holds (one copy "
            "each); sent: what an all-to-all's socket sends per call, every copy and hop"
        )
    table = Table(
        title=f"collectives (per {device})",
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
    )
    numbers = ("group", "hops", "bytes", "sent")
    for col in ("kernel", "stage", "kind", "algorithm", "policy", "group", "hops", "bytes"):
        table.add_column(col, justify="right" if col in numbers else "left")
    if exchange:
        table.add_column("sent", justify="right")
    for col in ("calls", "estimate", "simulated"):
        table.add_column(col, justify="right", no_wrap=True)
    for c in collectives:
        table.add_row(
            c["kernel"],
            c["stage"],
            c["kind"],
            c["algorithm"],
            c["policy"],
            str(c["group"]),
            str(c["hops"]),
            human.size(c["bytes"]),
            *((human.size(c["sent_bytes"]) if "sent_bytes" in c else "-",) if exchange else ()),
            str(c["calls_per_step"]),
            human.duration(c["estimate_s"]),
            human.duration(c["simulated_mean_s"]),
        )
    return table


STOPPED = STOPS["step"]
"""What a stop of the command says was kept."""


@click.command("step")
@workload_argument
@overrides_option
@step_shape_options
@click.option(
    "--trace",
    "trace_file",
    type=FilePath(),
    default=None,
    help="Write a Perfetto (Chrome JSON) trace of the step (every socket: see --trace-sockets).",
)
@click.option(
    "--trace-sockets",
    type=click.Choice(["all", "one"]),
    default="all",
    show_default=True,
    help="With --trace: simulate every socket of the TP group (engine.all_sockets), or only "
    "socket 0 and its links (the symmetric shortcut; same step time). A GPU system's GPUs run "
    "in lockstep: its trace draws GPU 0 either way.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the step timing as JSON.")
@keeps_on_stop(STOPPED)
def command(
    workload: Path,
    overrides: tuple[str, ...],
    phase: str,
    batch: int | None,
    tokens: int | None,
    context: int | None,
    trace_file: Path | None,
    trace_sockets: str,
    as_json: bool,
) -> None:
    """Time one decode or prefill step of WORKLOAD on the hardware model."""
    from rdu_sim.config.errors import WriteError
    from rdu_sim.config.overrides import GivenOverrides
    from rdu_sim.engine import EventBudgetError
    from rdu_sim.provenance import input_files
    from rdu_sim.report.files import refuse_overwrite
    from rdu_sim.report.step_report import step_report
    from rdu_sim.serving.step_shape import context_note

    scenario = api.load(workload, overrides)
    if trace_file is not None:
        refuse_overwrite([("--trace", trace_file)], input_files(scenario), "the step")
    if trace_file is not None and trace_sockets == "all" and scenario.tp > 1:
        per_socket = GivenOverrides({"engine.all_sockets": True}, "--trace-sockets")
        scenario = api.load(scenario, per_socket)  # a track per socket
    backend = api.EngineBackend(record=trace_file is not None)
    with step_shape_errors(workload, batch, context):
        try:
            cost = api.step(
                scenario,
                phase=phase,
                batch=batch,
                tokens=tokens,
                context=context,
                backend=backend,
                record=trace_file is not None,
            )
        except EventBudgetError as exc:
            fail(f"{scenario.workload_file}: {exc}")
    report = step_report(
        scenario, cost, backend, phase, batch=batch, tokens=tokens, context=context
    )
    timing, experts, prompt = report.timing, report.experts, report.prompt
    data = report.to_dict()  # the JSON, built in the library (api.step_report's too)
    layout = data["layout"]
    trace_error: WriteError | None = None
    if trace_file is not None:
        from rdu_sim.report.trace import write_chrome_trace  # (numpy: only when asked)

        try:
            written = write_chrome_trace(timing, trace_file, {"provenance": data["provenance"]})
            data["trace"] = str(written)
        except WriteError as exc:  # print the step anyway: nothing computed is lost
            trace_error = exc
    if as_json:
        click.echo(json.dumps(data, sort_keys=True))
    else:
        from rdu_sim.config.gpu import GpuHardwareConfig
        from rdu_sim.config.hardware_file import device_noun
        from rdu_sim.report.bound import compute_note
        from rdu_sim.report.console import devices_and_layout
        from rdu_sim.report.summary import Utilization

        spec, draft_scenario = scenario.workload.speculation, scenario.draft
        separate = spec is not None and spec.placement == "separate"
        draft = draft_scenario.tp if separate and draft_scenario is not None else 0
        machine = devices_and_layout(
            scenario.hardware.system.sockets, device_noun(scenario.hardware), layout, draft
        )
        windows = window_words(scenario.model, int(data["context"]))
        weights = None
        if data["memory"]["weights_ddr_bytes"] > 0:
            weights = _weights_line(data, api.resolve_batch_slots(scenario, backend)[1])
        streams = experts.words() if experts is not None else None
        if report.batch_note is not None:  # under the header, as a default prefill's prompt
            prompt = report.batch_note
        device = device_noun(scenario.hardware)
        repeated = repeated_parts(scenario, int(data["tp"]))
        _print_tables(
            data,
            Utilization.of_step(cost),
            machine,
            weights,
            windows,
            streams,
            prompt,
            repeated,
            device,
            model_words(scenario.workload.model, scenario.model.name),
            compute_note(data["busy_s"].get("pcu", 0.0), scenario.hardware),
            isinstance(scenario.hardware, GpuHardwareConfig),
        )
        click.echo(f"KV slot: {data['kv_layout']}")
        note = context_note(scenario, context) if phase == "decode" else None
        if note is not None:
            click.echo(note)
    if trace_error is not None:
        raise trace_error.after_report()
