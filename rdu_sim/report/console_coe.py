"""The Composition of Experts table of a run's human report: how the sockets were shared
between experts and what switching them cost (the run's ``coe`` summary)."""

from __future__ import annotations

from rich.table import Table

from rdu_sim import human
from rdu_sim.report.coe import CoESummary
from rdu_sim.report.percentiles import Percentiles
from rdu_sim.serving.coe import CoEStats


def region_words(coe: CoEStats) -> str:
    """What the HBM region holds: ``8 of the 150 experts``, or ``all 12 experts, each copied
    in once, none evicted`` when it holds every one (the region never counts more experts
    than there are: ``serving.coe.region_experts``)."""
    if coe.region_experts < coe.experts:
        return f"{coe.region_experts:,} of the {human.count(coe.experts, 'expert')}"
    if coe.experts == 1:
        return "its one expert, copied in once"
    return f"all {human.count(coe.experts, 'expert')}, each copied in once, none evicted"


def _policy(coe: CoEStats) -> str:
    if coe.switch_policy == "bounded" and coe.turn_s is not None:
        return f"bounded: a turn admits for {human.duration(coe.turn_s)} while others wait"
    return "drain: a turn admits while its expert has requests"


def _spread(times: Percentiles) -> str:
    """``p50 5.26 ms, p99 6.1 ms`` (``-`` when no request has it)."""
    if times.p50 is None or times.p99 is None:
        return "-"
    return f"p50 {human.duration(times.p50)}, p99 {human.duration(times.p99)}"


def ttft_rows(coe: CoESummary) -> list[tuple[str, str]]:
    """What CoE adds to a request's TTFT, both inside its queueing delay (admission -
    arrival, as for any run: ``report.coe``): the router's prefill, and a miss's wait for
    its expert's copy."""
    misses = human.count(coe.misses, "miss", "misses")
    return [
        (
            "router prefill a request (part of its queueing delay)",
            f"{_spread(coe.router_prefill_s)} a request",
        ),
        (
            "a miss's wait for its expert's copy (part of its queueing delay)",
            f"{_spread(coe.miss_stall_s)} over {misses}; 0 for a hit" if coe.misses else "no miss",
        ),
    ]


def coe_table(coe: CoESummary) -> Table:
    """Turns, mid-turn admissions, switches, bytes copied, copy and stall time, hit rate,
    and what the router and the copies add to TTFT."""
    table = Table(title="Composition of Experts", title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right", no_wrap=True)
    hidden = 1.0 - coe.switch_stall_s / coe.switch_s if coe.switch_s > 0 else None
    rows = [
        (
            "HBM region (experts cached per socket)",
            region_words(coe)
            + (f", {coe.eviction} eviction" if coe.region_experts < coe.experts else ""),
        ),
        ("switch policy", _policy(coe)),
        (
            "expert turns",
            f"{coe.turns:,} ({human.number(coe.requests_per_turn)} "
            f"{'request' if coe.requests_per_turn == 1 else 'requests'} a turn, longest "
            f"{human.duration(coe.longest_turn_s)})",
        ),
        ("requests admitted mid-turn", f"{coe.admitted_mid_turn:,}"),
        ("expert switches (DDR to HBM copies)", f"{coe.model_switches:,}"),
        (
            "bytes copied (all sockets)",
            f"{human.size(coe.bytes_copied, 4)} ({human.size(coe.switch_bytes, 4)} a switch; "
            f"an expert's weights {human.size(coe.expert_weight_bytes, 4)})",
        ),
        ("copy engine busy", human.duration(coe.switch_s)),
        (
            "stall waiting for copies",
            f"{human.duration(coe.switch_stall_s)}"
            + (f" ({human.percent(hidden)} of copy time hidden)" if hidden is not None else ""),
        ),
        ("HBM hit rate (expert in HBM when routed)", human.percent(coe.hbm_hit_rate)),
        ("prefetch", "on" if coe.prefetch else "off"),
        ("router prefill time", human.duration(coe.router_s)),
        *ttft_rows(coe),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table
