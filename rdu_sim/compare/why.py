"""A comparison in words: what each variant is and what binds it, and why one wins.

``column_lines``: one line per variant, what it sets and what binds its decode step (the
resource ``report.bound`` names, with that resource's demand and rate); ``stacks_differ``: a
line when the variants run different serving stacks. ``verdicts``: each
variant against the first that fits, the ratio of the system's tokens/s and of a user's,
and why, taken apart the way the numbers compose: tokens/s = batch x instances / step time
(an instance a replica of the layout, its batch every attention rank's),
and a step bound by one resource takes that resource's demand over its rate, so a ratio is
a batch ratio (the batch capacity, a KV slot's tokens) times a step ratio (the binding
resource's bytes or FLOPs against its bandwidth or peak), and apart from both the host time
each serving stack adds to its step, where the stacks differ in it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rdu_sim import human
from rdu_sim.compare.column import Column
from rdu_sim.engine.timing import device_time
from rdu_sim.report.bound import (
    BINDS_SHARE,
    RESOURCES,
    bound_label,
    bubble_words,
    others_alone,
    resource_words,
)
from rdu_sim.report.console import not_timed, served_by

UNEXPLAINED = BINDS_SHARE
"""Below this share of its step (the share from which the reports say a resource binds a
step, ``report.bound.BINDS_SHARE``), the binding resource's time does not explain the step:
the verdict names the largest other resource's time in that step (kernel boundaries, host time,
launches: ``report.bound``), then says the rest is time no one resource explains
(latencies, a pipeline's fill and drain, resources waiting on each other), rather than
crediting the binding resource."""


DIFFERENT_REST = 0.15
"""When the steps' ratio is more than this far from their binding resource's times' ratio,
the rest of the steps (what the resource does not explain) is named as what moved it."""

MATERIAL_BOUNDARIES = 0.1
"""From this share of either step, the kernels' boundaries (launch and sync, between the
kernels: time the binding resource inside them does not take) are named in the verdict as
an item of their own, with their time in each step."""

HOST_DIFFERS = 0.01
"""From this share of the shorter step, a difference between the columns' host time (what
the serving stack's host adds to the device's step, ``runtime_s``: a stack's, never the
hardware's) is named in the verdict as a factor of its own, with the step each device takes
without it: a stack that adds 1.65 ms to one column's 18.5 ms step and nothing to the
other's is part of the ratio the hardware does not explain."""


def _hbm_rate(column: Column) -> float:
    """The HBM bandwidth a device sustains (peak x ``hbm.efficiency``): the rate the bound's
    HBM time is the bytes at, so the verdict's arithmetic closes."""
    return column.peak_hbm_bandwidth * column.hbm_efficiency


def _bound_label(column: Column) -> str:
    """``bound by``, or ``largest part`` when its resource takes under half the step."""
    return bound_label(column.bound_s or 0.0, column.step_s or 0.0)


def _demand(column: Column) -> str:
    """The binding resource's demand and rate in one device's decode step (HBM: the rate
    it sustains, and the share of its peak that is)."""
    if column.bound == "hbm" and column.hbm_bytes is not None:
        rate = human.bandwidth(_hbm_rate(column))
        if column.hbm_efficiency != 1.0:
            peak = human.bandwidth(column.peak_hbm_bandwidth)
            rate += f" ({human.percent(column.hbm_efficiency)} of its {peak} peak)"
        return f"{human.size(column.hbm_bytes)} of HBM traffic per device at {rate}"
    if column.bound == "compute" and column.flops is not None:
        return (
            f"{human.si(column.flops, 'FLOP')} per device at {human.flops(column.peak_flops)} peak"
        )
    if column.bound == "link":
        return "the collectives on its busiest link direction"
    if column.bound == "blocks":
        return "its attention's KV cache read through few thread blocks"
    if column.bound == "boundaries":
        return "the launch and sync at each of its kernels' boundaries"
    return "the serving stack's host work" if column.bound == "host" else "its time"


def _ranks(column: Column, slots: int | None) -> str:
    """`` (64 a rank over 64 attention ranks)`` after an instance's ``slots`` under
    data-parallel attention (a rank's batch is what ``--batch`` and ``serving.batch_slots``
    set); nothing without it."""
    if column.attention_ranks == 1 or slots is None:
        return ""
    return f" ({slots // column.attention_ranks:,} a rank over {column.attention_ranks} ranks)"


def _instances(column: Column) -> str:
    """``4 model instances of 16 sockets`` (a GPU system: GPUs)."""
    device = "GPU" if column.kind == "gpu" else "socket"
    return (
        f"{human.count(column.instances, 'model instance')} of "
        f"{human.count(column.instance_devices, device)}"
    )


def _share(column: Column) -> float:
    """The binding resource's share of the decode step."""
    assert column.bound_s is not None and column.step_s is not None
    return column.bound_s / column.step_s


def _bubble(column: Column) -> str:
    """``; the pipeline's bubble 33.8% of its stages' time`` for a pipelined variant (the
    step's time its binding resource leaves to the bubble); nothing without a pipeline."""
    if column.pipeline_bubble is None:
        return ""
    return f"; {bubble_words(column.pipeline_bubble)}"


def _bubbles(a: Column, b: Column) -> list[str]:
    """Each pipelined variant's bubble by name (``parallelism.pp=2: the pipeline's bubble
    33.8% of its stages' time``): what most of the time its binding resource does not
    explain is."""
    return [
        f"{c.label}: {bubble_words(c.pipeline_bubble)}"
        for c in (a, b)
        if c.pipeline_bubble is not None
    ]


def _rest(a: Column, b: Column) -> str:
    """What the time no one resource explains may hold: a pipelined variant's bubble by
    name (:func:`_bubbles`), and latencies and resources waiting on each other."""
    bubbles = _bubbles(a, b)
    others = "resources waiting on each other"
    return (
        f"{'; '.join(bubbles)}; latencies, {others}"
        if bubbles
        else f"latencies, a pipeline's fill, {others}"
    )


def _next_largest(column: Column) -> str:
    """The largest resource time of ``column``'s step beside its binding resource's, in
    words (``dgx-h100's kernel boundaries (launch and sync), 5.29 ms alone (41.7% of its
    step)``), from the step's bound report (``report.bound``); nothing when no other
    resource takes time."""
    others = {k: t for k, t in column.resource_s.items() if k != column.bound and t > 0}
    if not others or column.step_s is None:
        return ""
    name = max(others, key=lambda k: others[k])  # ties: the first in RESOURCES' order
    time = others[name]
    return (
        f"{column.label}'s {RESOURCES.get(name, name)}, {human.duration(time)} alone "
        f"({human.percent(time / column.step_s)} of its step)"
    )


def column_lines(columns: Sequence[Column]) -> list[str]:
    """One line per variant: what it sets (and the serving stack it runs under), and what
    binds its decode step."""
    lines = []
    for column in columns:
        if not column.fits:
            verdict = not_timed(column.invalid, column.unsupported)
            lines.append(f"{column.label}: {verdict}: {column.reason}")
            continue
        assert column.step_s is not None and column.batch is not None
        slot = "" if column.slot_tokens is None else f", a slot keeping {column.slot_tokens:,}"
        resource = _resource(column, "an unknown resource")
        lines.append(
            f"{column.label} {served_by(column.stack)}: {column.kv_policy} KV{slot} tokens, "
            f"batch {column.batch:,} of "
            f"{column.batch_capacity:,}{_ranks(column, column.batch)}; decode step "
            f"{human.duration(column.step_s)} {_bound_label(column)} "
            f"{resource} ({human.duration(column.bound_s)} of it, {human.percent(_share(column))}"
            f": {_demand(column)}; each resource alone: "
            f"{others_alone(column.resource_s, column.bound or '')}{_bubble(column)})"
        )
    return lines


def stacks_differ(columns: Sequence[Column], varied: Sequence[str]) -> list[str]:
    """A line when the columns that ran did so under different serving stacks, unless the
    stack is what varies: which column runs which, that each verdict's ratio then holds the
    stacks' host time and batch limits beside the hardware, and how to compare alike (one
    stack for all, ``--set stack=none`` the device alone; or each under each, ``--vary
    stack=...``); nothing otherwise."""
    ran = [c for c in columns if c.fits and c.stack]
    stacks = sorted({c.stack for c in ran})
    if len(stacks) < 2 or any(path.split(".", 1)[0] == "stack" for path in varied):
        return []
    each = "; ".join(f"{c.label}: {c.stack}" for c in ran)
    return [
        f"the columns run different serving stacks ({each}), each system as deployed: a "
        "verdict's ratio holds the stacks' host time and batch limits beside the hardware. "
        "To compare the hardware alike, give every column one stack (--set stack=none: the "
        "device alone) or run each under each (--vary stack="
        f"{','.join(stacks)})"
    ]


NOT_TIMED: dict[str, str] = {
    "speculation": (
        "speculation (a draft's steps, the target's verify step, the tokens it accepts)"
    ),
    "coe": (
        "a Composition of Experts' serving (its turns of one expert at a time, its expert "
        "switches, the router's prefills)"
    ),
}
"""The workload sections compare does not time, each in words: a column times its model's
decode step and prefill alone, so a field of one moves at most the memory plan (a shared
draft's weights and KV cache beside the slots, its rollback positions; the router's weights
and one expert beside a CoE's slots: the batch capacity);
``rdu-sim run`` times them."""


def _labels(columns: Sequence[Column]) -> str:
    """Variants by label, ``;`` between them (a label may hold commas)."""
    return "; ".join(c.label for c in columns)


def not_compared(columns: Sequence[Column], varied: Sequence[str]) -> list[str]:
    """What the columns leave out, in words: for the columns with a draft (each model and
    draft once, naming the columns unless it is every column that fits), that its part is
    not timed; likewise for a Composition of Experts, that one expert is timed and not its
    serving; for each ``varied`` field in a section compare does not time
    (:data:`NOT_TIMED`), that its values move at most the memory plan."""
    fitting = [c for c in columns if c.fits]
    drafts: dict[tuple[str, str], list[Column]] = {}
    for column in fitting:
        if column.draft is not None:
            drafts.setdefault((column.model, column.draft), []).append(column)
    lines = []
    for (model, draft), having in drafts.items():
        every = len(having) == len(fitting)
        where = (
            f": each column times {model}" if every else f" in {_labels(having)}: {model} is timed"
        )
        lines.append(
            f"speculation is not compared{where} alone, its decode step and its prefill, "
            f"without the draft {draft}'s part (rdu-sim run times the draft's part)"
        )
    experts: dict[str, list[Column]] = {}
    for column in fitting:
        if column.coe_experts is not None:
            experts.setdefault(column.model, []).append(column)
    for model, having in experts.items():
        every = len(having) == len(fitting)
        where = (
            f": each column times one expert ({model})"
            if every
            else f" in {_labels(having)}: one expert ({model}) is timed"
        )
        lines.append(
            f"a Composition of Experts is not compared{where} alone, its decode step at the "
            "batch and its prefill, with the batch capacity its HBM leaves beside the router "
            "and one cached expert; not its turns of one expert at a time (a batch holds one "
            "expert's requests), its expert switches or the router's prefills (rdu-sim run "
            "times them)"
        )
    for path in varied:
        section = path.split(".", 1)[0]
        if section in NOT_TIMED:
            lines.append(
                f"--vary {path}: compare does not time {NOT_TIMED[section]}, so its values "
                "move at most each column's memory plan (its batch capacity); rdu-sim run "
                "times them (rdu-sim sweep varies them)"
            )
    return lines


def _step_why(a: Column, b: Column) -> str:
    """Why ``a``'s decode step takes what it takes against ``b``'s: what binds each, and
    the serving stacks' host time apart when it differs (:func:`_host`)."""
    return _device_why(a, b) + _host(a, b)


def _host(a: Column, b: Column) -> str:
    """The host time each serving stack adds to its column's step, as a factor of its own,
    when the two differ by :data:`HOST_DIFFERS` of the shorter step and neither step is
    bound by it (then the bound's words name it): ``; host time, a factor of its own: the
    serving stacks add 0 s vs 1.65 ms to their steps (none vs sambastack-2025; 0.0% vs 8.9%
    of them), and on the device alone its step takes 0.23x as long (3.86 ms vs 16.8 ms)``;
    nothing otherwise."""
    if "host" in (a.bound, b.bound) or a.step_s is None or b.step_s is None:
        return ""
    host_a, host_b = a.runtime_s or 0.0, b.runtime_s or 0.0
    if abs(host_a - host_b) < HOST_DIFFERS * min(a.step_s, b.step_s):
        return ""
    device_a, device_b = device_time(a.step_s, host_a), device_time(b.step_s, host_b)
    alone = ""
    if device_a > 0 and device_b > 0:
        alone = (
            f", and on the device alone its step takes {human.ratio(device_a / device_b)} as "
            f"long ({human.duration(device_a)} vs {human.duration(device_b)})"
        )
    return (
        f"; host time, a factor of its own: the serving stacks add {human.duration(host_a)} "
        f"vs {human.duration(host_b)} to their steps ({a.stack or '?'} vs {b.stack or '?'}; "
        f"{human.percent(host_a / a.step_s)} vs {human.percent(host_b / b.step_s)} of them)"
        f"{alone}"
    )


def _resource(column: Column, unknown: str = "?") -> str:
    """What binds ``column``'s decode step in words (``report.bound.resource_words``: the
    links by their class), ``unknown`` when it names none."""
    if column.bound not in RESOURCES:
        return unknown
    return resource_words(column.bound, column.bound_link or "")


def _device_why(a: Column, b: Column) -> str:
    """What binds ``a``'s decode step against ``b``'s, and its demand against its rate."""
    assert a.step_s is not None and b.step_s is not None
    head = (
        f"its decode step takes {human.ratio(a.step_s / b.step_s)} as long "
        f"({human.duration(a.step_s)} vs {human.duration(b.step_s)})"
    )
    if a.bound != b.bound:
        return f"{head}, {_bound_label(a)} {_resource(a)} against {_bound_label(b)} {_resource(b)}"
    resource = _resource(a)
    shares = (_share(a), _share(b))
    if min(shares) < UNEXPLAINED:
        # the resource that takes the most of what the binding one leaves, in each step the
        # binding one does not explain, before the time no resource explains
        named = [
            words
            for c, share in zip((a, b), shares, strict=True)
            if share < UNEXPLAINED and (words := _next_largest(c))
        ]
        largest = f"; the largest other: {'; '.join(named)}" if named else ""
        return (
            f"{head}; {_bound_label(a)} {resource} vs {_bound_label(b)} {resource}: it "
            f"takes {human.percent(shares[0])} vs {human.percent(shares[1])} of their step "
            f"time{largest}; the rest is time no one resource explains ({_rest(a, b)})"
        )
    demands = {
        "hbm": (a.hbm_bytes, b.hbm_bytes, _hbm_rate(a), _hbm_rate(b), "traffic"),
        "compute": (a.flops, b.flops, a.peak_flops, b.peak_flops, "FLOPs"),
    }.get(a.bound or "")
    if demands is None or demands[0] is None or demands[1] is None:
        return f"{head}, bound by {resource} in both"
    demand_a, demand_b, rate_a, rate_b, what = demands
    assert demand_a is not None and demand_b is not None
    demand, rate = demand_a / demand_b, rate_a / rate_b
    decides = (
        f"the {what} a step ({human.ratio(demand)})"
        if abs(math.log(demand)) >= abs(math.log(rate))
        else f"the {resource} ({human.ratio(rate)})"
    )
    assert a.bound_s is not None and b.bound_s is not None
    alone = a.bound_s / b.bound_s
    why = (
        f"{head}, bound by {resource} in both ({human.percent(shares[0])} vs "
        f"{human.percent(shares[1])} of their step time): {_demand(a)} vs {_demand(b)}; "
        f"its time on {resource} is {human.ratio(alone)} as long, {decides} the larger "
        "factor"
    )
    boundaries = _boundaries(a, b)
    if abs(math.log(a.step_s / b.step_s / alone)) > math.log(1 + DIFFERENT_REST):
        bubbles = _bubbles(a, b)
        held = f" ({'; '.join(bubbles)})" if bubbles else ""
        why += (
            f"; the rest of each step ({human.percent(1 - shares[0])} vs "
            f"{human.percent(1 - shares[1])}), which {resource} does not explain{held}, "
            f"brings the steps to {human.ratio(a.step_s / b.step_s)}"
        )
        if boundaries:
            why += f"; of that rest, {boundaries}"
    elif boundaries:
        why += f"; beside it, {boundaries}"
    return why


def _boundaries(a: Column, b: Column) -> str:
    """The kernels' boundaries in words when they take a material share of either step
    (:data:`MATERIAL_BOUNDARIES`) and neither is bound by them: ``kernel boundaries (launch
    and sync) take 5.29 ms in both (805 kernel calls each; 31.7% vs 38.3% of their step)``,
    from the steps' own resource times (``report.bound``); nothing otherwise."""
    if "boundaries" in (a.bound, b.bound) or a.step_s is None or b.step_s is None:
        return ""
    times = (a.resource_s.get("boundaries", 0.0), b.resource_s.get("boundaries", 0.0))
    shares = (times[0] / a.step_s, times[1] / b.step_s)
    if max(shares) < MATERIAL_BOUNDARIES:
        return ""
    spans = [human.duration(t) for t in times]
    took = f"{spans[0]} in both" if spans[0] == spans[1] else f"{spans[0]} vs {spans[1]}"
    calls = ""
    if a.kernel_calls is not None and b.kernel_calls is not None:
        calls = (
            f"{a.kernel_calls:,} kernel calls each; "
            if a.kernel_calls == b.kernel_calls
            else f"{a.kernel_calls:,} vs {b.kernel_calls:,} kernel calls; "
        )
    return (
        f"{RESOURCES['boundaries']} take {took} ({calls}{human.percent(shares[0])} vs "
        f"{human.percent(shares[1])} of their step)"
    )


def verdict(a: Column, b: Column) -> str:
    """``a`` against ``b`` (both fit): the ratios, and why."""
    assert a.system_tokens_per_s is not None and b.system_tokens_per_s is not None
    assert a.tokens_per_s_per_user is not None and b.tokens_per_s_per_user is not None
    assert a.batch is not None and b.batch is not None
    head = (
        f"{a.label} serves {human.ratio(a.system_tokens_per_s / b.system_tokens_per_s)} the "
        f"tokens/s of {b.label} on the whole system "
        f"({human.number(a.system_tokens_per_s)} vs {human.number(b.system_tokens_per_s)}) "
        f"at {human.ratio(a.tokens_per_s_per_user / b.tokens_per_s_per_user)} its tokens/s "
        "per user "
        f"({human.number(a.tokens_per_s_per_user)} vs {human.number(b.tokens_per_s_per_user)})"
    )
    reasons = []
    if a.batch != b.batch:
        batch = f"it runs {human.ratio(a.batch / b.batch)} the batch ({a.batch} vs {b.batch} slots"
        if (a.batch, b.batch) == (a.batch_capacity, b.batch_capacity):
            batch += ": each its batch capacity"
            if a.slot_tokens != b.slot_tokens and a.slot_tokens and b.slot_tokens:
                batch += f", a KV slot keeping {a.slot_tokens:,} tokens vs {b.slot_tokens:,}"
        reasons.append(batch + ")")
    else:
        reasons.append(f"the same batch ({human.count(a.batch, 'slot')})")
    if a.instances != b.instances:
        reasons.append(f"the system holds {_instances(a)} vs {_instances(b)}")
    reasons.append(_step_why(a, b))
    return f"{head}. Why: {'; '.join(reasons)}."


def scope(columns: Sequence[Column]) -> str:
    """What every verdict compares, in one line, when two variants or more fit: one decode
    step each with every slot at one context (its bucket), tokens/s of decode alone (prefill
    left out), which a serving run need not match: there the batch fills and drains,
    prefills take their time, and a stack with a paged KV cache (a GPU's)
    reads each sequence's own context; ``rdu-sim run`` times that."""
    fitting = [c for c in columns if c.fits and c.context is not None]
    if len(fitting) < 2:
        return ""
    contexts = list(dict.fromkeys(f"{c.context:,}" for c in fitting))
    held = (
        f"one context ({contexts[0]} cached tokens)"
        if len(contexts) == 1
        else f"one context per variant ({' vs '.join(contexts)} cached tokens)"
    )
    paged = [c for c in fitting if c.paged_kv]
    whose = (
        "each variant's paged KV cache"
        if len(paged) == len(fitting)
        else f"the paged KV cache of {_labels(paged)}"
    )
    reads = f", and {whose} reads each sequence's own context" if paged else ""
    return (
        f"Each verdict compares one decode step with every slot at {held}, its tokens/s "
        "decode's alone (prefill left out: its own row): a serving run can differ, where the "
        f"batch fills and drains, prefills take time from decoding and each context "
        f"grows{reads} (rdu-sim run times one)."
    )


def verdicts(columns: Sequence[Column]) -> list[str]:
    """Each variant that fits against the first that fits."""
    fitting = [c for c in columns if c.fits]
    if len(fitting) < 2:
        return []
    base = fitting[0]
    return [verdict(other, base) for other in fitting[1:]]
