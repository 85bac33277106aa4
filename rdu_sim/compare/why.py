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
from rdu_sim.config.stack import NONE_WORDS, serves
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
step, ``report.bound.BINDS_SHARE``), the binding resource's time does not explain the step,
and the verdict says what does rather than crediting the binding resource: on a GPU, whose
kernels run one after another, the parts that add up to its step (``_gpu_parts``: kernel
boundaries, the collectives' kernels, host time beside the binding resource); else the
largest other resource's time in that step (``report.bound``), then that the rest is time
no one resource explains (latencies, a pipeline's fill and drain, resources waiting on each
other)."""


PREFILL_MATTERS = 0.1
"""From this share of either column's served time (``Column.prefill_share``: each request's
prefill beside its output tokens' decode steps at the batch), the verdict leads with the
served tokens/s, prefill included, and names the prefill as a reason of its own: a decode
step's tokens/s alone then misstates what the system serves (2,048-token prompts with 128
output tokens: prefill is most of the time, and the ratio moves from 1.65x to 2.02x)."""


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
without it: a stack that adds 1.73 ms to one column's 18.5 ms step and nothing to the
other's is part of the ratio the hardware does not explain."""


def _hbm_rate(column: Column) -> float:
    """The HBM bandwidth a device sustains (peak x ``hbm.efficiency``): the rate the bound's
    HBM time is the bytes at, so the verdict's arithmetic closes."""
    return column.peak_hbm_bandwidth * column.hbm_efficiency


def _demand_words(column: Column) -> str:
    """The binding resource's demand and rate in parentheses, where :func:`_demand` knows
    them (a tier's bytes at its rate, FLOPs at the peak); nothing for the others."""
    if column.bound in ("hbm", "ddr", "compute"):
        said = _demand(column)
        return "" if said == "its time" else f" ({said})"
    return ""


def _ddr_rate(column: Column) -> float:
    """The DDR bandwidth a device sustains (peak x ``ddr.efficiency``), as :func:`_hbm_rate`."""
    return column.peak_ddr_bandwidth * column.ddr_efficiency


def _rate_words(peak: float, efficiency: float) -> str:
    """A memory tier's sustained rate (peak x efficiency), and the share of its peak that is
    when not all of it: ``1.71 TB/s while streaming (95.0% of its 1.8 TB/s peak)``: the rate
    over the tier's busy time, not the table's share of peak over the whole step (84.6%)."""
    rate = f"{human.bandwidth(peak * efficiency)} while streaming"
    if efficiency != 1.0:
        rate += f" ({human.percent(efficiency)} of its {human.bandwidth(peak)} peak)"
    return rate


def _bound_label(column: Column) -> str:
    """``bound by``, or ``largest part`` when its resource takes under half the step."""
    return bound_label(column.bound_s or 0.0, column.step_s or 0.0)


def _demand(column: Column) -> str:
    """The binding resource's demand and rate in one device's decode step (HBM: the rate
    it sustains, and the share of its peak that is)."""
    if column.bound == "hbm" and column.hbm_bytes is not None:
        rate = _rate_words(column.peak_hbm_bandwidth, column.hbm_efficiency)
        return f"{human.size(column.hbm_bytes)} of HBM traffic per device at {rate}"
    if column.bound == "ddr" and column.ddr_bytes is not None:
        rate = _rate_words(column.peak_ddr_bandwidth, column.ddr_efficiency)
        return f"{human.size(column.ddr_bytes)} of weights read from DDR per device at {rate}"
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
    explain is; the last says once that one batch is in flight (``BUBBLE_CAVEAT``)."""
    piped = [(c.label, c.pipeline_bubble) for c in (a, b) if c.pipeline_bubble is not None]
    return [
        f"{label}: {bubble_words(bubble, caveat=index == len(piped) - 1)}"
        for index, (label, bubble) in enumerate(piped)
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


SERIAL = ("boundaries", "link", "host_link", "host")
"""A GPU step's resources that take time of their own beside its kernels' HBM and compute:
the gaps at the kernels' boundaries, the collectives' own kernels, the logits' trip to the
host and the stack's serial host time. Its kernels run one after another, so these add to
the binding resource's time (:func:`_gpu_parts`)."""


def _gpu_parts(column: Column) -> str:
    """A GPU step the binding resource does not explain, as the parts that add up to it: its
    kernels run one after another, so its step is the sum of their times, each kernel's
    bound by its own resource (``dgx-h200 runs its kernels one after another, its step the
    sum of their times, each bound by its own resource: HBM bandwidth 8.99 ms, kernel
    boundaries (launch and sync) 5.29 ms and the links (its collectives' kernels) 3.33 ms
    make 17.6 ms of its 19.3 ms; the rest, 1.7 ms, is kernels another resource binds
    (compute 4.22 ms alone, ...)``): the binding resource's time and each of :data:`SERIAL`
    while their sum stays within the step. Nothing when none of :data:`SERIAL` takes time."""
    assert column.step_s is not None and column.bound is not None
    step, times = column.step_s, column.resource_s
    added = [(column.bound, times.get(column.bound, 0.0))]
    for name in SERIAL:
        time = times.get(name, 0.0)
        if name != column.bound and time > 0 and sum(t for _, t in added) + time <= step:
            added.append((name, time))
    if len(added) < 2:
        return ""
    total = sum(t for _, t in added)
    words = [f"{_part_words(column, name)} {human.duration(t)}" for name, t in added]
    listed = f"{', '.join(words[:-1])} and {words[-1]}"
    sentence = (
        f"{column.label} runs its kernels one after another, its step the sum of their "
        f"times, each bound by its own resource: {listed} make {human.duration(total)} of its "
        f"{human.duration(step)}"
    )
    left = step - total
    if left < 0.01 * step:
        return sentence
    kept = {name for name, _ in added}
    others = {n: times[n] for n in RESOURCES if n not in kept and times.get(n, 0.0) > 0}
    listed_others = ", ".join(f"{RESOURCES[n]} {human.duration(t)}" for n, t in others.items())
    unexplained = "no one resource explains (latencies, resources waiting on each other)"
    if not others:
        return f"{sentence}; the rest, {human.duration(left)}, {unexplained}"
    if sum(others.values()) >= left:
        return (
            f"{sentence}; the rest, {human.duration(left)}, is kernels another resource "
            f"binds (alone: {listed_others})"
        )
    most = sum(others.values())
    return (
        f"{sentence}; of the rest, {human.duration(left)}, the other resources take at most "
        f"{human.duration(most)} (alone: {listed_others}), and {human.duration(left - most)} "
        f"{unexplained}"
    )


def _part_words(column: Column, name: str) -> str:
    """A resource as a part of a GPU step: the links as its collectives' kernels on them
    (their class's field, ``hw.system.intra_node_link``)."""
    if name == "link":
        where = f" (hw.system.{column.bound_link})" if column.bound_link else ""
        return f"its collectives' kernels on the links{where}"
    return RESOURCES[name]


def column_lines(columns: Sequence[Column]) -> list[str]:
    """One line per variant: what it sets (and the serving stack it runs under), and what
    binds its decode step."""
    lines = []
    for column in columns:
        if not column.fits:
            verdict = not_timed(column.invalid, column.unsupported)
            lines.append(f"{column.label}: {verdict}: {column.reason}")
            continue
        capacity = column.batch_capacity
        assert column.step_s is not None and column.batch is not None and capacity is not None
        slot = "" if column.slot_tokens is None else f", a slot keeping {column.slot_tokens:,}"
        resource = _resource(column, "an unknown resource")
        # a --batch past the capacity (memory's, or the largest batch the stack runs) is
        # timed as asked; weights it pushes to DDR are a warning below
        of = "of" if column.batch <= capacity else "over its capacity of"
        lines.append(
            f"{column.label} {served_by(column.stack)}: {column.kv_policy} KV{slot} tokens, "
            f"batch {column.batch:,} {of} "
            f"{capacity:,}{_ranks(column, column.batch)}; decode step "
            f"{human.duration(column.step_s)} {_bound_label(column)} "
            f"{resource} ({human.duration(column.bound_s)} of it, {human.percent(_share(column))}"
            f": {_demand(column)}; each resource alone: "
            f"{others_alone(column.resource_s, column.bound or '')}{_bubble(column)})"
        )
        lines += [f"{column.label}: warning: {said}" for said in column.warnings]
        if column.predicted is not None:
            lines.append(f"{column.label}: {column.predicted}")
    return lines


def stacks_differ(columns: Sequence[Column], varied: Sequence[str]) -> list[str]:
    """A line when the columns that ran did so under different serving stacks, unless the
    stack is what varies: which column runs which, that each verdict's ratio then holds the
    stacks' host time and batch limits beside the hardware, and how to compare alike: one
    stack for all (``--set stack=none``, the device alone, with what else it changes:
    ``config.stack.NONE_WORDS``), and each under each (``--vary stack=...``) only where every
    stack named serves every column's hardware (``config.stack.serves``: no shipped stack
    runs on both an RDU and a GPU), else to read each verdict's host time apart; nothing
    otherwise."""
    ran = [c for c in columns if c.fits and c.stack]
    stacks = sorted({c.stack for c in ran})
    if len(stacks) < 2 or any(path.split(".", 1)[0] == "stack" for path in varied):
        return []
    each = "; ".join(f"{c.label}: {c.stack}" for c in ran)
    runs_on = {c.stack: c.stack_runs_on for c in ran}
    alike = f"give every column one stack (--set stack=none: {NONE_WORDS})"
    if all(serves(runs_on[stack], c.kind) for stack in stacks for c in ran):
        advice = f"To compare the hardware alike, {alike} or run each under each (--vary stack="
        advice += f"{','.join(stacks)})"
    else:
        where = "; ".join(f"{stack} on {runs_on[stack]}" for stack in stacks)
        advice = (
            f"No stack named runs on every column's hardware ({where}), so --vary stack "
            f"cannot run each under each. To compare the hardware alike, {alike}; or keep "
            "each system's stack and read the host time a verdict names apart (its step on "
            "the device alone)"
        )
    return [
        f"the columns run different serving stacks ({each}), each system as deployed: a "
        f"verdict's ratio holds the stacks' host time and batch limits beside the hardware. "
        f"{advice}"
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
    assert a.step_s is not None and b.step_s is not None
    return _device_why(a, b) + _host(a, b) + _experts(a, b, "decode", (a.step_s, b.step_s))


def _host(a: Column, b: Column) -> str:
    """The host time each serving stack adds to its column's step, as a factor of its own,
    when the two differ by :data:`HOST_DIFFERS` of the shorter step and neither step is
    bound by it (then the bound's words name it): ``; host time, a factor of its own: the
    serving stacks add 0 s vs 1.73 ms to their steps (none vs sambastack-2025; 0.0% vs 8.9%
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


EXPERTS_DIFFER = 0.1
"""From this relative difference between the columns' expert imbalance (the busiest device's
token-expert pairs over the mean), and as much between the times they explain, the verdict
names the experts' load as a factor of its own (:func:`_experts`)."""


def _experts(a: Column, b: Column, phase: str, times: tuple[float, float]) -> str:
    """The experts' load as a factor of its own when the columns' busiest devices differ by
    :data:`EXPERTS_DIFFER` or more in ``phase`` (``decode`` or ``prefill``), so do its
    ``times`` (a step that streams every expert whatever the routing is not moved by it) and
    the column with the busier device is the slower:
    ``; expert load, a factor of its own: the busiest device takes 4.48x the mean
    token-expert pairs vs 1.00x (experts.load, experts.placement, experts.redundant)``;
    nothing otherwise."""
    if phase == "decode":
        mine, theirs = a.expert_imbalance, b.expert_imbalance
    else:
        mine, theirs = a.prefill_expert_imbalance, b.prefill_expert_imbalance
    if mine is None or theirs is None:
        return ""
    if max(mine, theirs) < (1 + EXPERTS_DIFFER) * min(mine, theirs):
        return ""
    if max(times) < (1 + EXPERTS_DIFFER) * min(times):
        return ""
    if (mine - theirs) * (times[0] - times[1]) <= 0:
        return ""  # the more loaded busiest device is in the faster column: not the cause
    return (
        f"; expert load, a factor of its own: the busiest device takes {human.ratio(mine)} "
        f"the mean token-expert pairs vs {human.ratio(theirs)} (experts.load, "
        "experts.placement, experts.redundant)"
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
        return (
            f"{head}, {_bound_label(a)} {_resource(a)}{_demand_words(a)} against "
            f"{_bound_label(b)} {_resource(b)}{_demand_words(b)}"
        )
    resource = _resource(a)
    shares = (_share(a), _share(b))
    if min(shares) < UNEXPLAINED:
        # in each step the binding resource does not explain: a GPU's parts, which add up
        # (its kernels run one after another); else the resource that takes the most of
        # what the binding one leaves, before the time no resource explains
        unexplained = [c for c, share in zip((a, b), shares, strict=True) if share < UNEXPLAINED]
        parts = [words for c in unexplained if c.kind == "gpu" and (words := _gpu_parts(c))]
        others = [c for c in unexplained if c.kind != "gpu" or not _gpu_parts(c)]
        named = [words for c in others if (words := _next_largest(c))]
        largest = f"; the largest other: {'; '.join(named)}" if named else ""
        rest = f"; the rest is time no one resource explains ({_rest(a, b)})" if others else ""
        added = f"; {'; '.join(parts)}" if parts else ""
        return (
            f"{head}; {_bound_label(a)} {resource} vs {_bound_label(b)} {resource}: it "
            f"takes {human.percent(shares[0])} vs {human.percent(shares[1])} of their step "
            f"time{added}{largest}{rest}"
        )
    demands = {
        "hbm": (a.hbm_bytes, b.hbm_bytes, _hbm_rate(a), _hbm_rate(b), "traffic"),
        "ddr": (a.ddr_bytes, b.ddr_bytes, _ddr_rate(a), _ddr_rate(b), "traffic"),
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


def prefill_matters(a: Column, b: Column) -> bool:
    """Whether prefill takes :data:`PREFILL_MATTERS` of either column's served time (its
    prompts long beside its outputs at the batch): the verdict then leads with the served
    tokens/s, prefill included."""
    shares = (a.prefill_share, b.prefill_share)
    return all(s is not None for s in shares) and max(s or 0.0 for s in shares) >= PREFILL_MATTERS


def _per_request(column: Column) -> float:
    """A request's prefill time: its share of the prefill step that runs it
    (``Column.prefill_packed``: the prompts the stack packs into one step)."""
    assert column.prefill_packed_s is not None and column.prefill_packed
    return column.prefill_packed_s / column.prefill_packed


def _packing(column: Column) -> str:
    """``4 to a 270 ms step`` when the stack packs prompts into a prefill step; ``alone``."""
    if not column.prefill_packed or column.prefill_packed == 1:
        return "alone"
    return f"{column.prefill_packed} to a {human.duration(column.prefill_packed_s)} step"


def _prefill_why(a: Column, b: Column) -> str:
    """Each request's prefill against its output tokens, the served tokens/s' other part:
    ``each request's share of a prefill step (its 2,048-token typical prompt, 4 to a 270 ms
    step vs alone) takes 1.11x as long (67.4 ms vs 60.8 ms) beside its 128 output tokens'
    decode steps`` (its share where a stack packs prompts, not the prompt alone in a step,
    compare's "prefill, typical prompt alone in a step" row)."""
    outputs = (
        f"{a.output_tokens:,}"
        if a.output_tokens == b.output_tokens
        else f"{a.output_tokens or 0:,} vs {b.output_tokens or 0:,}"
    )
    tokens = (a.prefill_tokens or 0, b.prefill_tokens or 0)
    prompt = (
        f"its {tokens[0]:,}-token typical prompt"
        if tokens[0] == tokens[1]
        else f"its typical prompt, {tokens[0]:,} vs {tokens[1]:,} tokens"
    )
    packing = (_packing(a), _packing(b))
    alone = packing == ("alone", "alone")
    packed = "" if alone else f", {packing[0]} vs {packing[1]}"
    # packed, a request's time is its share of the step, not its prompt's alone (that row)
    subject = "each request's prefill" if alone else "each request's share of a prefill step"
    mine, theirs = _per_request(a), _per_request(b)
    experts = _experts(a, b, "prefill", (mine, theirs))
    return (
        f"{subject} ({prompt}{packed}) takes "
        f"{human.ratio(mine / theirs)} as long ({human.duration(mine)} vs "
        f"{human.duration(theirs)}; {_prefill_bounds(a, b)}{experts}) beside its {outputs} "
        "output tokens' decode steps"
    )


def prefill_bound_words(column: Column) -> str:
    """What binds ``column``'s typical prefill step, with that resource's time of the step
    (``bound by intra_node_link, the links within a node, 420 ms of 423 ms``; the decode
    step's rule, ``report.bound``)."""
    if column.prefill_bound is None or column.prefill_step_s is None:
        return "?"
    limit = column.prefill_bound_s or 0.0
    return (
        f"{bound_label(limit, column.prefill_step_s)} "
        f"{resource_words(column.prefill_bound, column.prefill_bound_link or '')}, "
        f"{human.duration(limit)} of {human.duration(column.prefill_step_s)}"
    )


def _prefill_bounds(a: Column, b: Column) -> str:
    """What binds each column's prefill step: ``its step bound by HBM bandwidth, 20 ms of
    22 ms, vs bound by ...``."""
    return f"its step {prefill_bound_words(a)}, vs {prefill_bound_words(b)}"


def _head(a: Column, b: Column, served: bool) -> str:
    """The verdict's ratios: the whole system's served tokens/s, prefill included, when
    ``served`` (:func:`prefill_matters`), then its decode-step tokens/s, and a user's."""
    assert a.system_tokens_per_s is not None and b.system_tokens_per_s is not None
    assert a.tokens_per_s_per_user is not None and b.tokens_per_s_per_user is not None
    decode = (
        f"{human.ratio(a.system_tokens_per_s / b.system_tokens_per_s)} the decode-step tokens/s"
    )
    decode_numbers = (
        f"({human.number(a.system_tokens_per_s)} vs {human.number(b.system_tokens_per_s)})"
    )
    user = (
        f"at {human.ratio(a.tokens_per_s_per_user / b.tokens_per_s_per_user)} its decode-step "
        f"tokens/s per user ({human.number(a.tokens_per_s_per_user)} vs "
        f"{human.number(b.tokens_per_s_per_user)})"
    )
    if not served:
        return f"{a.label} serves {decode} of {b.label} on the whole system {decode_numbers} {user}"
    assert a.system_served_tokens_per_s is not None and b.system_served_tokens_per_s is not None
    ratio = a.system_served_tokens_per_s / b.system_served_tokens_per_s
    return (
        f"{a.label} serves {human.ratio(ratio)} the output tokens/s of {b.label} on the whole "
        f"system with prefill included ({human.number(a.system_served_tokens_per_s)} vs "
        f"{human.number(b.system_served_tokens_per_s)}; prefill "
        f"{human.percent(a.prefill_share)} vs {human.percent(b.prefill_share)} of the time), "
        f"{decode} {decode_numbers} {user}"
    )


def verdict(a: Column, b: Column) -> str:
    """``a`` against ``b`` (both fit): the ratios, and why."""
    assert a.batch is not None and b.batch is not None
    served = prefill_matters(a, b)
    head = _head(a, b, served)
    reasons = [_prefill_why(a, b)] if served else []
    if a.batch != b.batch:
        batch = f"it runs {human.ratio(a.batch / b.batch)} the batch ({a.batch} vs {b.batch} slots"
        if (a.batch, b.batch) == (a.batch_capacity, b.batch_capacity):
            batch += ": each its batch capacity"
            if a.slot_tokens != b.slot_tokens and a.slot_tokens and b.slot_tokens:
                batch += f", a KV slot keeping {a.slot_tokens:,} tokens vs {b.slot_tokens:,}"
            batch += _hbm_holds(a, b)
        reasons.append(batch + ")")
    else:
        reasons.append(f"the same batch ({human.count(a.batch, 'slot')})")
    if a.instances != b.instances:
        reasons.append(f"the system holds {_instances(a)} vs {_instances(b)}")
    reasons.append(_step_why(a, b))
    if served:  # the decode step's reasons after the prefill's
        reasons[1] = f"in decode, {reasons[1]}"
    return f"{head}. Why: {'; '.join(reasons)}."


def _hbm_holds(a: Column, b: Column) -> str:
    """``, the slots 141 GiB vs 80 GiB of HBM a device hold`` when both capacities are what
    memory holds (``Column.capacity_limit``, not a stack's cap) and the devices' HBM differs:
    what a batch ratio of capacities comes from; nothing otherwise."""
    if (a.capacity_limit, b.capacity_limit) != ("memory", "memory"):
        return ""
    if a.hbm_capacity == b.hbm_capacity or not a.hbm_capacity or not b.hbm_capacity:
        return ""
    return (
        f", the slots {human.size(a.hbm_capacity)} vs {human.size(b.hbm_capacity)} of HBM a "
        "device hold"
    )


def scope(columns: Sequence[Column], context_given: bool = False) -> str:
    """What every verdict compares, in one line, when two variants or more fit: one decode
    step each with every slot at one context (its bucket) and the typical prefill, tokens/s
    of the decode step alone and served with prefill included (``compare.served_rate``),
    which a serving run need not match: there the batch fills and drains, lengths vary,
    and a stack with a paged KV cache (a GPU's) reads each sequence's own context;
    ``rdu-sim run`` times that. At the default context (not ``context_given``), a typical
    request ending under half of it is said, with the ``--context`` that times it
    (:func:`_typical_end`)."""
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
    if len(paged) == len(fitting):
        whose = "each variant's paged KV cache reads"
    elif len(paged) == 1:
        whose = f"the paged KV cache of {paged[0].label} reads"
    else:
        whose = f"the paged KV caches of {_in_words([c.label for c in paged])} read"
    reads = f" There {whose} each sequence's own context." if paged else ""
    typical = "" if context_given else _typical_end(fitting)
    return (
        f"Each verdict compares one decode step with every slot at {held}, and the typical "
        "request's prefill: decode-step tokens/s are that step's alone, served tokens/s "
        "(prefill included) add each request's prefill beside its output tokens' decode "
        "steps, taking the device in turn with every slot busy. A serving run can differ, "
        "where the batch fills and drains, prompts and outputs vary and each context "
        f"grows (rdu-sim run times one).{reads}{typical}"
    )


def _typical_end(fitting: Sequence[Column]) -> str:
    """`` The typical request ends at N tokens ...`` when it ends under half the smallest
    context compared (the default: the longest cache the KV policy keeps, which a workload
    whose ``serving.max_context`` is far above its requests never reaches), with the
    ``--context`` that times its decode step; nothing otherwise."""
    ends = [
        (c.prefill_tokens + c.output_tokens, c.prefill_tokens, c.output_tokens)
        for c in fitting
        if c.prefill_tokens is not None and c.output_tokens is not None
    ]
    contexts = [c.context for c in fitting if c.context is not None]
    if not ends or not contexts:
        return ""
    end, prompt, output = max(ends)
    if 2 * end > min(contexts):
        return ""
    return (
        f" The workload's typical request ends at {end:,} tokens ({prompt:,} prompt, "
        f"{output:,} output), under half that context: --context {end} compares the "
        "decode step at its length."
    )


def _in_words(labels: Sequence[str]) -> str:
    """``a and b``, ``a, b and c`` (``;`` between them where a label holds a comma)."""
    if len(labels) < 3:
        return " and ".join(labels)
    between = "; " if any("," in label for label in labels) else ", "
    return f"{between.join(labels[:-1])} and {labels[-1]}"


def verdicts(columns: Sequence[Column]) -> list[str]:
    """Each variant that fits against the first that fits."""
    fitting = [c for c in columns if c.fits]
    if len(fitting) < 2:
        return []
    base = fitting[0]
    return [verdict(other, base) for other in fitting[1:]]
