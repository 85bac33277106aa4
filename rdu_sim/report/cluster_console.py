"""The human report of a cluster run: rich tables built from its typed summary (nothing else).

Like the workload report (``report.console``), it reads only what the JSON holds
(:class:`~rdu_sim.report.cluster_summary.ClusterSummary`, whose ``to_dict`` is the JSON), so
what a person reads is what scripts get, and a renamed field fails in mypy, not as a "None"
in a table. Requests that were not served as sent (rejected or truncated at the context
limit, trace rows skipped, filtered out or cut) are counted with their reason.
"""

from __future__ import annotations

from rich import box
from rich.console import Console, Group
from rich.table import Table

from rdu_sim import human
from rdu_sim.cluster.traffic import TrafficSummary
from rdu_sim.config.parallelism import describe_layout
from rdu_sim.report.cluster_summary import ClusterSummary, OfferedLoad
from rdu_sim.report.console import (
    LATENCIES,
    energy_rows,
    kept_words,
    latency_table,
    offered_load_words,
    tokens_cut_words,
)
from rdu_sim.report.terminal import wide_console

MAX_REPLICA_ROWS = 32  # more replicas than this: the table shows the first ones and says so


def pools_table(result: ClusterSummary) -> Table:
    """One row per pool: role, replicas, what each replica runs (its parallel layout in
    ``describe_layout``'s words) and the pool's devices (sockets or GPUs)."""
    table = Table(title="Pools", title_justify="left", box=box.SIMPLE_HEAD)
    devices = f"{result.device}s"
    columns = (
        *("pool", "role", "replicas", "workload", "model", "layout", devices),
        *("KV", "batching", "slots"),
    )
    left = ("pool", "role", "workload", "layout", "batching")
    for column in columns:
        table.add_column(column, justify="left" if column in left else "right")
    for name, pool in result.pools.items():
        table.add_row(
            name,
            pool.role,
            str(pool.replicas),
            pool.workload,
            pool.model,
            describe_layout(pool.layout),
            str(pool.sockets),
            pool.kv_policy,
            pool.batching_policy,
            f"{pool.batch_slots} / {pool.batch_capacity}",
        )
    table.caption = (
        "KV: the KV policy; batching: the batching policy (serving.prefill_priority); slots: a "
        "replica's batch slots / the slots its memory has room for"
    )
    if any(pool.ranks > 1 for pool in result.pools.values()):
        table.caption += (
            "; of one attention rank (under dp_attention each of a replica's ranks has its own)"
        )
    table.caption_justify = "left"
    return table


def predicted_lines(result: ClusterSummary) -> list[str]:
    """A line per hardware file the pools run that is predicted, not measured (a single
    run's line, ``report.console``), each hardware once."""
    said = {pool.hardware: pool.predicted for pool in result.pools.values() if pool.predicted}
    return [f"{hardware}: {words}" for hardware, words in said.items()]


def batch_lines(result: ClusterSummary) -> list[str]:
    """Each pool whose batch_slots the serving stack has no program of: that it runs them
    as if it had (a lone run's words, ``PoolSummary.batch_note``), a line a pool."""
    return [
        f"slots of pool {name}: {pool.batch_note}"
        for name, pool in result.pools.items()
        if pool.batch_note is not None
    ]


def kept_lines(result: ClusterSummary) -> list[str]:
    """Each pool's KV slot and what its policy cut of the requests it held, a line a pool
    (the single run's words, ``report.console.kept_words``)."""
    return [
        kept_words(pool.kv_kept, pool.requests, f"KV slot of pool {name}")
        for name, pool in result.pools.items()
        if pool.kv_kept is not None
    ]


def not_served_as_sent(result: ClusterSummary) -> list[tuple[str, str]]:
    """(what, why) of every request the cluster did not serve as the trace sent it: rejected
    or truncated at the context limit, and trace rows left out before routing."""
    limit = f"prompt + output over the {result.max_context:,}-token context"
    rows: list[tuple[str, str]] = []
    if result.requests_rejected:
        reason = f"{limit}; traffic.over_context: reject"
        rows.append(("rejected", f"{result.requests_rejected:,} ({reason})"))
    if result.requests_truncated:
        reason = f"{limit}, cut to fit; traffic.over_context: truncate"
        took = tokens_cut_words(result.prompt_tokens_truncated, result.output_tokens_truncated)
        rows.append(("truncated", f"{result.requests_truncated:,} ({reason}): {took}"))
    return rows + _trace_rows_left_out(result.traffic)


def _trace_rows_left_out(traffic: TrafficSummary) -> list[tuple[str, str]]:
    """Trace rows that never became requests, each count with its reason."""
    reasons = (
        (traffic.skipped, "failed requests in the trace (zero tokens), skipped"),
        (traffic.filtered_out, "left out by traffic.filter"),
        (traffic.outside_window, "outside traffic.start .. traffic.end"),
        (traffic.beyond_limit, "beyond traffic.requests"),
    )
    rows = [("trace rows left out", f"{n:,} ({why})") for n, why in reasons if n]
    if traffic.out_of_order:
        rows.append(
            (
                "trace rows out of time order",
                f"{traffic.out_of_order:,} (arrive before a row above them; requests are "
                "numbered by arrival, requests.csv trace_line is each one's line)",
            )
        )
    return rows


def binding_caption(result: ClusterSummary) -> str:
    """The SLO half that binds, in words (why the SLO is missed, or which half is tightest);
    for a time to first token, how much of it is queueing at the median, which tells
    waiting for a replica from a slow prefill, and when disaggregated what the queue waited
    for (prefills, or prefilled requests the decode pool had no slot for)."""
    lines = []
    for verdict in result.slo_binding:
        text = verdict.sentence()
        queued, first = result.queue_delay_s.p50, result.ttft_s.p50
        if verdict.half == "ttft" and queued is not None and first:
            text += f"; at the median, {human.duration(queued)} of its {human.duration(first)} "
            split = result.prefill_queueing
            if split is None:
                text += "is queueing (waiting for a slot or for other prefills)"
            else:
                text += f"is queueing for a prefill slot: {split.words()}"
        lines.append(f"{'tightest half' if result.slo_met else 'why not met'}: {text}")
    return "\n".join(lines)


def offered_words(offered: OfferedLoad) -> str:
    """The traffic's rates in words: ``6.1 req/s, 1,230 tok/s asked, over 65.3 s of
    arrivals``, or that every request arrived at once."""
    if offered.requests_per_s is None or offered.output_tokens_per_s is None:
        return "every request at once"
    return (
        f"{human.rate(offered.requests_per_s, 'req/s')}, "
        f"{human.rate(offered.output_tokens_per_s, 'tok/s')} asked, over "
        f"{human.duration(offered.window_s)} of arrivals"
    )


def goodput_table(result: ClusterSummary) -> Table:
    """Requests, SLO, goodput and throughput of the whole cluster."""
    table = Table(title="Cluster", title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    slo, goodput, traffic = result.slo, result.goodput, result.traffic
    met = "met" if result.slo_met else "NOT met"
    rows = [
        ("traffic", f"{traffic.source}, {traffic.rows} rows"),
        ("offered", offered_words(result.offered)),
        (
            "requests served / rejected / truncated",
            f"{result.requests_served} / {result.requests_rejected} / "
            f"{result.requests_truncated} of {result.requests}",
        ),
        *not_served_as_sent(result),
        (
            "SLO",
            f"TTFT <= {human.duration(slo.ttft_s)}, TPOT <= "
            f"{human.duration(slo.tpot_s)}, for {human.target_percent(slo.attainment)}",
        ),
        (
            "requests meeting the SLO",
            f"{goodput.requests} ({human.percent(goodput.fraction)}): {met}",
        ),
        (
            "goodput",
            f"{human.rate(goodput.requests_per_s, 'req/s')}, "
            f"{human.rate(goodput.tokens_per_s, 'tok/s')}",
        ),
        ("output throughput (all)", human.rate(result.output_tokens_per_s, "tok/s")),
        ("makespan", human.duration(result.makespan_s)),
        (f"replicas / {result.device}s", f"{result.replicas} / {result.sockets}"),
        ("step shapes simulated", str(result.step_shapes_simulated)),
    ]
    rows += energy_rows(result.energy)
    prefix = result.prefix_cache
    if prefix is not None:
        rows.append(
            (
                "prefix cache",
                f"{human.percent(prefix.hit_rate)} of blocks hit, "
                f"{human.percent(prefix.token_hit_rate)} of prompt tokens skipped"
                + (
                    ""
                    if prefix.evicted_for_room is None
                    else f", {prefix.evicted_for_room:,} blocks evicted for admissions' pages"
                ),
            )
        )
    transfer = result.kv_transfer
    if transfer is not None:
        rows.append(
            (
                "KV transfers",
                f"{transfer.transfers} ({human.size(transfer.bytes)}), p99 "
                f"{human.duration(transfer.seconds.p99)}",
            )
        )
    for pool, cost in (result.lockstep or {}).items():
        rows.append(
            (
                f"{pool}: {cost.ranks} attention ranks in lockstep",
                f"busy ranks {human.percent(cost.wait_share)} of their time waiting for a "
                f"slower rank; {human.percent(cost.prefill_held_share)} of decoding time held "
                f"by another rank's prefill; ranks idle {human.percent(cost.idle_share)}",
            )
        )
    for name, value in rows:
        table.add_row(name, value)
    table.caption = binding_caption(result) or None
    table.caption_justify = "left"
    return table


def classes_table(result: ClusterSummary) -> Table | None:
    """Per class: requests, goodput and latency percentiles."""
    if not result.classes:
        return None
    table = Table(title="Classes", title_justify="left", box=box.SIMPLE_HEAD)
    for column in (
        "class",
        "requests",
        "rejected",
        "meet SLO",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
    ):
        table.add_column(column, justify="left" if column == "class" else "right")
    for name, row in result.classes.items():
        table.add_row(
            name,
            str(row.requests),
            str(row.rejected),
            human.percent(row.goodput_fraction),
            human.duration(row.ttft_s.p50),
            human.duration(row.ttft_s.p99),
            human.duration(row.tpot_s.p50),
            human.duration(row.tpot_s.p99),
        )
    return table


def replicas_table(result: ClusterSummary) -> Table:
    """Per server (a replica, or an attention rank of one: ``ReplicaSummary``): what it took,
    its latencies, occupancy and utilization; with ranks, which replica each is a rank of."""
    replicas = result.per_replica
    shown = replicas[:MAX_REPLICA_ROWS]
    ranked = sum(row.rank is not None for row in replicas)
    title = "Replicas"
    if ranked:
        title = "Attention ranks" if ranked == len(replicas) else "Replicas and attention ranks"
    more = f" (first {len(shown)} of {len(replicas)})" if len(replicas) > len(shown) else ""
    table = Table(title=f"{title}{more}", title_justify="left", box=box.SIMPLE_HEAD)
    for column in (
        "#",
        *(("replica", "rank") if ranked else ()),
        "pool",
        "role",
        "took",
        "decoded",
        "meet SLO",
        "TTFT p99",
        "TPOT p99",
        "occupancy",
        "HBM",
        "PCU",
    ):
        table.add_column(column, justify="left" if column in ("pool", "role") else "right")
    table.caption = (
        "took: requests routed to it (prefilled here); decoded: requests whose output it "
        "decoded (of more than one token); meet SLO: share of those it took"
    )
    if ranked:
        table.caption += (
            "; #: the server (JSON per_replica's replica); rank: its attention rank in "
            "replica (each rank a server of its own"
            + ("; -: a replica of one server)" if ranked < len(replicas) else ")")
        )
    table.caption_justify = "left"
    for row in shown:
        table.add_row(
            str(row.replica),
            *(
                ()
                if not ranked
                else ("-", "-")
                if row.rank is None
                else (str(row.of_replica), str(row.rank))
            ),
            row.pool,
            row.role,
            str(row.requests),
            str(row.decoded),
            human.percent(row.goodput_fraction),
            human.duration(row.ttft_s.p99),
            human.duration(row.tpot_s.p99),
            human.percent(row.occupancy),
            human.percent(row.utilization.hbm),
            human.percent(row.utilization.pcu),
        )
    return table


def render_cluster(result: ClusterSummary) -> Group:
    """All tables of a cluster report, headed by what was simulated."""
    ranked = sum(row.rank is not None for row in result.per_replica)
    ranks = f" ({human.count(ranked, 'attention rank')})" if ranked else ""
    head = (
        f"[bold]{result.cluster}[/bold]: {human.count(result.replicas, 'replica')}{ranks}, "
        f"{human.count(result.sockets, result.device)}, router {result.router}"
        + (", disaggregated" if result.disaggregated else "")
    )
    latencies = {key: getattr(result, key) for key, _ in LATENCIES}
    parts: list[str | Table] = [
        head,
        pools_table(result),
        *predicted_lines(result),
        *batch_lines(result),
        *kept_lines(result),
        goodput_table(result),
        latency_table(latencies),
    ]
    classes = classes_table(result)
    if classes is not None:
        parts.append(classes)
    parts.append(replicas_table(result))
    load = load_words(result)
    if load is not None:
        parts.append(load)
    return Group(*parts)


def load_words(result: ClusterSummary) -> str | None:
    """Why the cluster's throughput is what it is, when its offered load set it (the single
    run's rule and words, ``report.console.offered_load_words``)."""
    if result.throughput_bound != "offered_load":
        return None
    synthetic = result.traffic.source == "synthetic"
    asked = "the traffic's Poisson arrivals" if synthetic else "the trace's arrivals"
    faster = (
        "raise traffic.rate" if synthetic else "replay the trace faster (traffic.time_scale < 1)"
    )
    if len(result.pools) > 1:
        name, pool = max(result.pools.items(), key=lambda item: item[1].occupancy)
        occupied = (
            f"even the busiest pool's ({name}) batch slots were occupied "
            f"{human.percent(pool.occupancy)} of the time (each replica's in the table above)"
        )
    else:
        occupied = (
            f"the replicas' batch slots were occupied {human.percent(result.occupancy)} of "
            "the time (each replica's in the table above)"
        )
    return offered_load_words(
        asked,
        occupied,
        f"{faster}, or serve it on fewer replicas",
    )


def print_cluster_report(result: ClusterSummary, console: Console | None = None) -> None:
    """Print the cluster report to ``console`` (stdout by default; 160 columns when stdout is
    not a terminal, so piped reports keep their tables whole)."""
    if console is None:
        console = wide_console()
    console.print(render_cluster(result))
