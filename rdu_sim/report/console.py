"""The human report of a run: rich tables built from its typed summary (nothing else).

Working from the summary, the same values `rdu-sim run --json` prints, not from simulator
objects, keeps the report honest: what you read is what scripts get. It opens with what
was simulated (machine, model, storage types, KV policy, slots, the offered load and its
lengths) and says in a sentence when the throughput measures the offered load rather than
the machine. Numbers read through ``rdu_sim.human``; utilization has one definition
(:class:`~rdu_sim.report.summary.Utilization`) and one set of labels
(:func:`utilization_rows`), shared with ``rdu-sim step`` and ``run --step``.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from rdu_sim import human
from rdu_sim.config.economics import figure_words
from rdu_sim.config.parallelism import describe_layout, replica_devices
from rdu_sim.config.stack import NONE
from rdu_sim.kv.policies import KeptCounts
from rdu_sim.report.bound import (
    bound_label,
    bubble_words,
    micro_batch_words,
    others_alone,
    resource_words,
)
from rdu_sim.report.console_coe import coe_table, region_words
from rdu_sim.report.console_speculation import speculation_table
from rdu_sim.report.energy import Energy
from rdu_sim.report.percentiles import Percentiles
from rdu_sim.report.speculation import draft_devices
from rdu_sim.report.summary import (
    OCCUPANCY_FULL,
    UTILIZATION_LABELS,
    DecodeStepBound,
    OfferedLoad,
    RunSummary,
    Utilization,
    in_flight,
    queue_grew,
    why_bound,
)
from rdu_sim.report.terminal import wide_console
from rdu_sim.serving.steady import MIN_TURNOVERS


def utilization_rows(utilization: Utilization) -> list[tuple[str, str]]:
    """(label, value) of each utilization figure, in the order every command shows them."""
    return [
        (UTILIZATION_LABELS[name], human.percent(getattr(utilization, name)))
        for name in UTILIZATION_LABELS
    ]


def utilization_line(utilization: Utilization) -> str:
    """The utilization figures on one line: ``HBM bandwidth used (of peak) 94.3%, ...``."""
    return ", ".join(f"{label} {value}" for label, value in utilization_rows(utilization))


def describe_load(load: OfferedLoad) -> str:
    """The offered load in words: arrivals, then (on a second line) prompt and output lengths."""
    if load.arrival == "poisson":
        arrivals = (
            f"Poisson arrivals at {human.rate(load.rate_per_s, 'req/s')}"
            if load.rate_per_s is not None
            else "arrivals replayed from the trace"
        )
    elif load.arrival == "closed_loop":
        users = load.concurrency or 0
        arrivals = f"closed loop: {human.count(users, 'user')}, each sending its next request "
        arrivals += "when the last finishes"
    else:
        arrivals = "every request at once"

    def lengths(mix: str, mean: float | None) -> str:
        return f"{mix} tokens" + (f" (mean {human.number(mean)})" if mean is not None else "")

    return (
        f"{arrivals}\n  prompts {lengths(load.prompt_mix, load.mean_prompt_tokens)}, "
        f"outputs {lengths(load.output_mix, load.mean_output_tokens)}"
    )


def devices_and_layout(
    devices: int, device: str, layout: Mapping[str, int], beside: int = 0
) -> str:
    """``1 socket``, ``16 sockets, tp=16`` or ``64 sockets, tp=1 dp_attention=64 ep=64``:
    the devices and the parallel layout that ran on them (:func:`describe_layout`, left out
    when every degree is 1), for the step and run reports' first lines; with how many the
    replica uses (and ``beside`` it, a separate draft) when they leave some idle (``32
    sockets, 16 in use with tp=16, 16 idle ...``)."""
    counted = human.count(devices, device)
    used = replica_devices(layout) + beside  # beside: a separate draft's devices
    if used < devices:  # a lone run is one replica; the rest of the machine stands idle
        idle = devices - used
        return (
            f"{counted}, {used} in use with {describe_layout(layout)}, {idle} idle (a cluster "
            f"file runs replicas on them)"
        )
    if all(degree == 1 for degree in layout.values()):
        return counted
    return f"{counted}, {describe_layout(layout)}"


def batch_words(batch: int, layout: Mapping[str, int]) -> str:
    """``batch 32``, or ``batch 64 per attention rank (64 ranks)`` when attention is data
    parallel (a step is one rank's, its batch that rank's): how the step report and
    ``inspect graph`` say a step's batch."""
    if layout["dp_attention"] == 1:
        return f"batch {batch}"
    ranks = layout["dp_attention"]
    return f"batch {batch} per attention rank ({human.count(ranks, 'rank')})"


def machine(result: RunSummary) -> str:
    """``1 socket`` or ``16 sockets, tp=8 pp=2 micro_batches=2`` (``GPUs`` on a GPU system):
    :func:`devices_and_layout` of the run."""
    return devices_and_layout(
        result.sockets, result.device, result.layout, draft_devices(result.speculation)
    )


def _room(result: RunSummary) -> str:
    """A Composition of Experts' room beside the batch slots (" (room for ...)"): it trades
    slots for cached experts, so its room is the slots that leave the HBM region one expert
    (serving.coe), or all of them (`region_words`); "" for any other run, whose capacity has
    a line of its own (`capacity_line`)."""
    if result.coe is None:
        return ""
    return (
        f" (room for {result.memory_capacity} with one expert cached in HBM; these slots leave "
        f"room for {region_words(result.coe)})"
    )


def capacity_line(result: RunSummary) -> str | None:
    """What memory holds, what the stack runs and which binds, in the words of
    `compiler.capacity_words` (the capacity error's too); None for a Composition of
    Experts (its room is on the batch slots' line, `_room`)."""
    return None if result.coe is not None else f"capacity: {result.capacity}"


def pipeline_line(result: RunSummary) -> str | None:
    """The pipeline in words (None without one): its stages' devices and the micro-batches
    a step is cut into, at most one a sequence (``ParallelismConfig.step_micro_batches``)."""
    layout = result.layout
    if layout["pp"] == 1:
        return None
    stage = human.count(layout["tp"] * layout["dp_attention"], result.device)
    return (
        f"pipeline: {layout['pp']} stages of {stage}; a step's batch is cut into "
        f"{layout['micro_batches']} micro-batches (one per sequence when it has fewer)"
    )


def memory_owner(result: RunSummary) -> str:
    """Whose memory the table shows: ``socket``, or with a pipeline ``socket of pipeline
    stage 0, the fullest of 2`` (the memory plan is the stage whose HBM is fullest; stages
    count from 0, as the step's kernels ``s0/...`` do)."""
    if result.memory_stage is None:
        return result.device
    stages = result.layout["pp"]
    return f"{result.device} of pipeline stage {result.memory_stage}, the fullest of {stages}"


def not_timed(invalid: bool, unsupported: bool) -> str:
    """Why a compare column holds no timing, in words: ``not run`` (its system refuses the
    workload: ``unsupported``), ``invalid combination`` (the workload refuses its varied
    values together: ``invalid``), else ``does not fit`` (the model beyond its memory): the
    one wording of compare's lines and its plot."""
    if unsupported:
        return "not run"
    return "invalid combination" if invalid else "does not fit"


def served_by(stack: str) -> str:
    """A serving stack's name in words: ``served by sambastack-2025``, or the device alone."""
    return "on the device alone (no serving stack)" if stack == NONE else f"served by {stack}"


def header(result: RunSummary) -> Text:
    """What was simulated: the machine and model, storage types, policy and slots, load."""
    dtypes = result.dtypes
    experts = (
        f", routed experts {dtypes['experts']}"
        if dtypes.get("experts") not in (None, dtypes.get("weights"))
        else ""
    )
    text = Text()
    text.append(result.workload, style="bold")
    text.append(
        f": {result.model} on {result.hardware} {served_by(result.stack)} ({machine(result)})\n"
        f"  weights {dtypes['weights']}{experts}, KV cache {dtypes['kv']}, activations "
        f"{dtypes['activations']}; KV policy {result.kv_policy}, batching policy "
        f"{result.batching_policy}\n"
        f"  {human.count(result.batch_slots, 'batch slot')}{_room(result)}, "
        f"context up to {result.max_context:,} tokens; seed {result.seed}\n"
        f"  {kept_line(result)}\n"
    )
    if result.predicted is not None:
        text.append(f"  {result.hardware}: {result.predicted}\n")
    capacity = capacity_line(result)
    if capacity is not None:
        text.append(f"  {capacity}\n")
    text.append(f"  load: {human.count(result.requests, 'request')}, {describe_load(result.load)}")
    pipeline = pipeline_line(result)
    if pipeline is not None:
        text.append(f"\n  {pipeline}")
    return text


def kept_line(result: RunSummary) -> str:
    """The KV policy's slot in words and what it cut of the run's requests (``kept_words``)."""
    return kept_words(result.kv_kept, result.requests)


def kept_words(kept: KeptCounts, requests: int, label: str = "KV slot") -> str:
    """A KV policy's slot and what it cut of ``requests``, in a line headed ``label``:
    ``KV slot: snapstream: 4 sinks + 30,716 selected + 2,048 ring = 32,768 tokens a slot;
    of 300 requests 12 had their prompt compressed at prefill, 40 outgrew the slot ...``;
    a wrapped slot's words say what stayed beside the ring (``KeptCounts.stays``)."""
    if not kept.prompts_compressed and not kept.slots_wrapped:
        return f"{label}: {kept.layout}; no prompt compressed, no slot outgrown"
    head = (
        f"{label}: {kept.layout}; of {requests:,} requests {kept.prompts_compressed:,} "
        "had their prompt compressed at prefill"
    )
    if not kept.slots_wrapped:
        return f"{head}, none outgrew the slot"
    dropped = (
        "the policy's decode eviction dropped the tokens it scored lowest"
        if kept.decode_evicts
        else "the ring overwrote its oldest tokens"
        + (f"; the {kept.stays} stayed" if kept.stays else "")
    )
    return f"{head}, {kept.slots_wrapped:,} outgrew the slot in decode ({dropped})"


def steady_note(result: RunSummary) -> str | None:
    """Why the all-slots-busy rate was not measured, in a sentence."""
    if result.steady_decode_tokens_per_s is not None:
        return None
    if result.load.arrival != "closed_loop":
        return (
            "Decode throughput with all slots busy is measured only in a closed loop "
            "(serving.arrival.process: closed_loop), where each finished request is "
            "replaced at once."
        )
    return (
        f"Decode throughput with all slots busy needs a window in which every slot stays "
        f"busy: at least {MIN_TURNOVERS} requests per batch slot (serving.requests >= "
        f"{MIN_TURNOVERS * result.batch_slots:,})."
    )


ALL_USERS = "output tokens/s, all users (prefill stalls included)"
ONE_USER = "tokens/s one user sees while streaming (p50 of 1/TPOT)"


def all_users_rate(result: RunSummary) -> str:
    """The all-users rate with the span it divides by (``decode_span_s``: the run's first
    token to its last), which is not the makespan printed above it (that starts at the first
    arrival): ``478 tok/s over 51.4 s (first token to last)``."""
    rate = human.rate(result.decode_tokens_per_s, "tok/s")
    if result.decode_span_s is None or result.decode_tokens_per_s is None:
        return rate
    return f"{rate} over {human.duration(result.decode_span_s)} (first token to last)"


def rates_note(result: RunSummary) -> str | None:
    """Why one user's rate can exceed the all-users rate (one user, or speculation), said
    where it does."""
    user, everyone = result.user_tokens_per_s.p50, result.decode_tokens_per_s
    if user is None or everyone is None or not user > everyone:
        return None
    return (
        f"One user sees {human.rate(user, 'tokens/s')} while its tokens stream (1/TPOT); the "
        f"all-users rate, {human.rate(everyone, 'tokens/s')}, divides every output token by "
        "the whole span of decoding, so the time each prefill holds the slots (and any slot "
        "standing empty) counts in it."
    )


def _asked(result: RunSummary) -> str:
    """The output tokens a Poisson load asked for a second, as a clause ('' otherwise)."""
    load, asked = result.load, result.load.asked_tokens_per_s
    if load.rate_per_s is None or load.mean_output_tokens is None or asked is None:
        return ""
    return (
        f"{human.rate(load.rate_per_s, 'req/s')} x "
        f"{human.number(load.mean_output_tokens)} output tokens = "
        f"{human.rate(asked, 'tokens/s')} asked"
    )


def bound_why(result: RunSummary) -> str:
    """:func:`why_bound` of a run's summary; ``saturated`` read back from its
    ``throughput_bound`` (a machine bound that neither the occupancy nor the queue explains:
    the summary keeps no time series to measure it again)."""
    users = in_flight(result.load, result.requests)
    grew = queue_grew(result.queue_delay_s, result.e2e_s)
    why = why_bound(users is not None, result.occupancy or 0.0, grew, users, result.batch_slots)
    return "saturated" if why == "slots_idle" and result.throughput_bound == "machine" else why


def load_note(result: RunSummary) -> str | None:
    """A plain sentence when the throughput measures the offered load, not the machine; or
    when an open loop is bound by the machine though its slots stood mostly idle
    (``queue_grew``, ``saturated``)."""
    asked = _asked(result)
    if result.throughput_bound != "offered_load":
        return queue_note(result, asked)
    users = in_flight(result.load, result.requests)
    if result.load.arrival == "closed_loop" and users is not None:
        return (
            f"The throughput above is set by the closed loop's {human.count(users, 'user')} "
            f"(its requests, or serving.arrival.concurrency), not by the machine: "
            f"{users:,} cannot fill its {human.count(result.batch_slots, 'batch slot')} "
            f"(occupied {human.percent(result.occupancy)} of the time). To measure what the "
            f"machine can do, keep {result.batch_slots:,} requests in flight "
            "(serving.requests, serving.arrival.concurrency)."
        )
    if users is not None:  # all_at_once: no rate to raise
        return (
            f"The throughput above is set by the {human.count(users, 'request')} offered all "
            f"at once, not by the machine: {users:,} cannot fill its "
            f"{human.count(result.batch_slots, 'batch slot')} (occupied "
            f"{human.percent(result.occupancy)} of the time). To measure what the machine can "
            f"do, offer at least {result.batch_slots:,} (serving.requests)."
        )
    return offered_load_words(
        asked,
        f"the batch slots were occupied {human.percent(result.occupancy)} of the time",
        "raise serving.arrival.rate, or keep every slot busy with serving.arrival.process: "
        "closed_loop",
    )


def offered_load_words(asked: str, occupied: str, more: str) -> str:
    """The sentence of a run (a server's or a cluster's) whose throughput the offered load
    set (``throughput_bound`` ``offered_load``): what was asked, how occupied the slots
    were, and how to offer more."""
    return (
        f"The throughput above is set by the offered load{f' ({asked})' if asked else ''}, "
        f"not by the machine: {occupied}. To measure what the machine can do, offer more: "
        f"{more}."
    )


def queue_note(result: RunSummary, asked: str) -> str | None:
    """Why an open loop whose slots stood mostly idle is still bound by the machine: its
    queue grew (under CoE, behind the other experts' turns), or a request waited whenever a
    slot stood empty (``saturated``: the machine was prefilling the ones before it)."""
    occupancy = result.occupancy or 0.0
    why = bound_why(result)
    if why not in ("queue_grew", "saturated"):
        return None
    waited, e2e = result.queue_delay_s.mean, result.e2e_s.mean
    assert waited is not None and e2e is not None
    served = ""
    if asked:
        served = (
            f", and the machine served {human.rate(result.decode_tokens_per_s, 'tokens/s')} "
            f"of the {asked}"
        )
    if why == "saturated":
        return (
            f"Requests waited {human.duration(waited)} on average to be admitted{served}: "
            f"for at least {human.percent(OCCUPANCY_FULL)} of the time until the last was "
            "admitted, a request was waiting or every batch slot was held (the machine was "
            "prefilling the ones before it), so the throughput above is set by the machine, "
            "not by the offered load, though its batch slots were "
            f"occupied only {human.percent(occupancy)} of the time (the drain after the last "
            "admission included)."
        )
    turns = ""
    if result.coe is not None:
        coe = result.coe
        turns = (
            f", in its expert turns ({human.count(coe.turns, 'turn')} of "
            f"{human.number(coe.requests_per_turn)} requests each while the other experts' "
            "requests waited)"
        )
    return (
        f"Requests waited {human.duration(waited)} on average to be admitted, longer than "
        f"serving them took ({human.duration(e2e - waited)}){served}: it fell behind the "
        f"arrivals, so the throughput above is set by the machine{turns}, not by the offered "
        f"load, though its batch slots were occupied only {human.percent(occupancy)} of the "
        "time."
    )


def steady_decode(result: RunSummary) -> str:
    """The decode rate with every slot kept busy and when it was measured, or why not."""
    rate, window = result.steady_decode_tokens_per_s, result.steady_window_s
    if rate is not None and window is not None and None not in window:
        start, end = window
        return f"{human.rate(rate, 'tok/s')} ({human.duration(start)} to {human.duration(end)})"
    if result.load.arrival != "closed_loop":
        return "not measured (open loop)"
    return f"not measured (needs {MIN_TURNOVERS * result.batch_slots:,} requests)"


def energy_rows(energy: Energy | None) -> list[tuple[str, str]]:
    """Energy, tokens per joule and cost, when the hardware file gives its power."""
    if energy is None:
        return [("energy", "not reported (no power in the hardware file)")]
    per_million = energy.usd_per_million_output_tokens
    return [
        (
            # the file's draw over the makespan, whatever the load: not the run's average
            "energy (at the hardware file's power)",
            f"{human.si(energy.joules, 'J')} at {human.si(energy.average_power_w, 'W')}, "
            f"{figure_words(energy.power_figure)}",
        ),
        ("output tokens per joule", human.number(energy.output_tokens_per_joule)),
        (
            "cost per million output tokens",
            "not priced (hw.cost.usd_per_socket_hour)"
            if per_million is None
            else f"${human.number(per_million)}",
        ),
    ]


def memory_table(result: RunSummary) -> Table:
    """Per-tier memory of one device: capacity, weights, KV, activations, used, free (a tier
    the device does not have, a GPU's SRAM and DDR, is left out)."""
    table = Table(
        title=f"Memory per {memory_owner(result)} ({machine(result)}; weights: "
        f"{result.weights_placement})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for column in ("tier", "capacity", "weights", "KV", "activ.", "used", "used %", "free"):
        table.add_column(column, justify="left" if column == "tier" else "right", no_wrap=True)
    for tier, usage in result.memory.items():
        capacity = usage.capacity_bytes
        if not capacity and not usage.used_bytes:
            continue
        table.add_row(
            tier.upper(),
            human.size(capacity),
            human.size(usage.weights_bytes),
            human.size(usage.kv_bytes),
            human.size(usage.activations_bytes),
            human.size(usage.used_bytes),
            human.percent(usage.used_bytes / capacity, 0) if capacity else human.MISSING,
            human.size(usage.free_bytes),
        )
    captions = []
    replicas = result.weight_replicas
    if replicas is not None:
        captions.append(
            f"Of the HBM weights, {human.size(replicas.bytes)} are replicas: "
            f"{' and '.join(replicas.names)} held whole on every {result.device}, not sliced "
            f"{result.tp} ways, so that decode steps make every head's queries (the capacity "
            "line says what more slots cost)."
        )
    sram = result.memory.get("sram")
    if sram is not None and sram.capacity_bytes and not sram.used_bytes:
        captions.append(
            "The serving plan keeps no weights or KV cache in SRAM: kernels use it for their "
            "stage buffers while they run (`rdu-sim inspect graph` shows a step's)."
        )
    if captions:
        table.caption = " ".join(captions)
        table.caption_justify = "left"
    return table


def _bound_label(step: DecodeStepBound | None) -> str:
    """``bound by``, or ``largest part`` when no resource takes half the step."""
    if step is None:
        return "bound by"
    return bound_label(step.times()[step.bound], step.step_s)


def decode_shape_words(batch: int, context: int) -> str:
    """A decode step's shape, ``batch 32, 4,096 cached tokens``: the words of a run's decode
    step row and of ``rdu-sim run --step``'s line."""
    return f"batch {batch:,}, {context:,} cached tokens"


def _decode_step_words(result: RunSummary) -> str:
    """What the run's decode step is, the one it ran most often, with its shape
    (:func:`decode_shape_words`, as the prefill row names its step's tokens): under
    speculative decoding the target's verify step, k + 1 tokens a slot (the draft's steps
    are not among the target's steps)."""
    step = result.decode_step
    shape = "" if step is None else decode_shape_words(step.batch, step.context)
    spec = result.speculation
    if spec is None or spec.decoding is None:
        return f"decode step ({shape})" if shape else "decode step"
    tokens = f"{spec.decoding.draft_tokens + 1} tokens a slot"
    return f"verify step ({tokens}; {shape})" if shape else f"verify step ({tokens})"


def _prefill_bound(result: RunSummary) -> str:
    """The bound of the prefill step the run spent most time in (as the decode step's) and
    which step that is (the share of the run's step time in prefill is the next row)."""
    step = result.prefill_step
    if step is None:
        return "-"
    prompts = f"{step.batch} prompts of " if step.batch > 1 else ""
    return _bound(step, f"the {prompts}{step.tokens:,}-token step")


def _bound(step: DecodeStepBound | None, which: str = "") -> str:
    """What binds ``step`` in words: the resource, its time of the step's (and ``which``
    step, after them)."""
    if step is None:
        return "-"
    times = step.times()
    limit = times[step.bound]
    bubble = "" if step.pipeline_bubble is None else f"; {bubble_words(step.pipeline_bubble)}"
    if bound_label(limit, step.step_s) != "bound by":  # the step is its parts: name them
        bubble = f"; {others_alone(times, step.bound)}{bubble}"
    return (
        f"{resource_words(step.bound, step.link or '', step.link_term or '')} "
        f"({human.duration(limit)} of "
        f"{human.duration(step.step_s)}{f', {which}' if which else ''}{bubble})"
    )


def _per_slot_label(result: RunSummary) -> str:
    """What ``kv_bytes_per_slot`` is: a static slot's own KV cache, or on a paged stack the
    pool shared out over the slots (no slot holds memory of its own; a sequence takes the
    pages its tokens need)."""
    return "KV cache per slot" if result.kv_pool is None else "KV pool per slot"


def serving_table(result: RunSummary) -> Table:
    """Capacity, throughput and utilization figures."""
    table = Table(title="Serving", title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right", no_wrap=True)
    cache = result.step_cache
    rows = [
        (f"{_per_slot_label(result)} (per {result.device})", human.size(result.kv_bytes_per_slot)),
        (
            "requests completed",
            f"{result.requests_completed:,} of {human.count(result.requests, 'request')}",
        ),
        *truncated_rows(result),
        *out_of_order_rows(result),
        ("output tokens", f"{result.output_tokens:,}"),
        ("makespan (first arrival to last token)", human.duration(result.makespan_s)),
        (ALL_USERS, all_users_rate(result)),
        ("output tokens/s, all slots busy (steady window)", steady_decode(result)),
        (ONE_USER, human.rate(result.user_tokens_per_s.p50, "tok/s")),
        ("prefill of a typical prompt", human.duration(result.prefill_s)),
        (
            f"{_decode_step_words(result)} {_bound_label(result.decode_step)}",
            _bound(result.decode_step),
        ),
        (f"prefill step {_bound_label(result.prefill_step)}", _prefill_bound(result)),
        (
            "prefill steps' share of the run's step time",
            "-" if result.prefill_step is None else human.percent(result.prefill_step.busy_share),
        ),
        ("batch slots occupied (time mean)", human.percent(result.occupancy)),
        ("decode slots doing work (not padding)", human.percent(result.decode_slot_fill)),
        *utilization_rows(result.utilization),
        *energy_rows(result.energy),
        (
            "step shapes simulated"
            if result.speculation is None
            else "target step shapes simulated",
            _shapes_row(cache.shapes, cache.hits + cache.misses),
        ),
    ]
    for name, value in rows:
        table.add_row(name, value)
    fewer = None if result.decode_step is None else result.decode_step.fewer_micro_batches
    if fewer is not None:  # a long clause: the caption wraps where the value column cuts
        table.caption = f"Decode step: {micro_batch_words(fewer)}."
        table.caption_justify = "left"
    return table


def truncated_rows(result: RunSummary) -> list[tuple[str, str]]:
    """The requests cut to fit the context, with the reason and what the cut took (none: no
    row)."""
    if not result.requests_truncated:
        return []
    reason = f"prompt + output over serving.max_context, {result.max_context:,} tokens"
    took = tokens_cut_words(result.prompt_tokens_truncated, result.output_tokens_truncated)
    return [("requests truncated", f"{result.requests_truncated:,} ({reason}), cut to fit: {took}")]


def out_of_order_rows(result: RunSummary) -> list[tuple[str, str]]:
    """The replayed trace's rows out of time order, as a cluster's report says them (none:
    no row)."""
    if not result.out_of_order_rows:
        return []
    return [
        (
            "trace rows out of time order",
            f"{result.out_of_order_rows:,} (arrive before a row above them; the run replays "
            "them by arrival)",
        )
    ]


def tokens_cut_words(prompt_tokens: int, output_tokens: int) -> str:
    """What cutting requests to the context took, in words: tokens asked for and not
    served (the served output and its rates leave them out)."""
    return f"{prompt_tokens:,} prompt and {output_tokens:,} output tokens not served"


def _shapes_row(shapes: int, steps: int) -> str:
    """How many static step shapes the engine simulated, for how many steps run (each
    shape is simulated once and its time reused for every other step of that shape)."""
    return f"{shapes:,} for {human.count(steps, 'step')} (each simulated once)"


LATENCIES = (
    ("ttft_s", "time to first token"),
    ("tpot_s", "time per output token"),
    ("queue_delay_s", "queueing delay"),
    ("e2e_s", "end to end"),
)
"""The latency percentiles a report shows, by their JSON names."""


def latency_table(latencies: Mapping[str, Percentiles]) -> Table:
    """TTFT, TPOT, queueing delay and end-to-end latency percentiles (by JSON name, as
    :data:`LATENCIES` lists them)."""
    table = Table(title="Latency", title_justify="left")
    table.add_column("")
    for p in ("p50", "p90", "p99", "mean"):
        table.add_column(p, justify="right")
    for key, name in LATENCIES:
        values = latencies[key]
        table.add_row(
            name, *(human.duration(v) for v in (values.p50, values.p90, values.p99, values.mean))
        )
    return table


def render(result: RunSummary) -> Group:
    """All report tables, headed by what was simulated and followed by the notes on its
    rates and load."""
    latencies = {key: getattr(result, key) for key, _ in LATENCIES}
    parts: list[Text | Table | str] = [
        header(result),
        *(f"[bold yellow]warning:[/] {text}" for text in result.warnings),
        memory_table(result),
        serving_table(result),
        latency_table(latencies),
    ]
    if result.coe is not None:
        parts.append(coe_table(result.coe))
    if result.speculation is not None:
        parts.append(speculation_table(result.speculation))
    for note in (rates_note(result), load_note(result) or steady_note(result)):
        if note is not None:
            parts.append(Text(note, style="yellow"))
    return Group(*parts)


def print_report(result: RunSummary, console: Console | None = None) -> None:
    """Print the report to ``console`` (by default :func:`wide_console`)."""
    (console or wide_console()).print(render(result))
