"""The human report of a cluster run: rich tables built from its result dict (nothing else).

Like the workload report (``report.console``), it reads the JSON contract only, so what a
person reads is what scripts get, and a stored result.json renders the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table

from rdu_sim import human
from rdu_sim.report.console import LATENCIES, energy_rows, latency_table, wide_console
from rdu_sim.report.energy import Energy
from rdu_sim.report.summary import Percentiles

MAX_REPLICA_ROWS = 32  # more replicas than this: the table shows the first ones and says so


def pools_table(result: Mapping[str, Any]) -> Table:
    """One row per pool: role, replicas, what each replica runs."""
    table = Table(title="Pools", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("pool", "role", "replicas", "workload", "model", "tp", "sockets", "KV", "slots"):
        table.add_column(
            column, justify="left" if column in ("pool", "role", "workload") else "right"
        )
    for name, pool in (result.get("pools") or {}).items():
        table.add_row(
            name,
            str(pool.get("role")),
            str(pool.get("replicas")),
            str(pool.get("workload")),
            str(pool.get("model")),
            str(pool.get("tp")),
            str(pool.get("sockets")),
            str(pool.get("kv_policy")),
            f"{pool.get('batch_slots')} / {pool.get('batch_capacity')}",
        )
    return table


def goodput_table(result: Mapping[str, Any]) -> Table:
    """Requests, SLO, goodput and throughput of the whole cluster."""
    table = Table(title="Cluster", title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    slo = result.get("slo") or {}
    goodput = result.get("goodput") or {}
    traffic = result.get("traffic") or {}
    met = "met" if result.get("slo_met") else "NOT met"
    rows = [
        ("traffic", f"{traffic.get('source')}, {traffic.get('rows')} rows"),
        (
            "requests served / rejected / truncated",
            f"{result.get('requests_served')} / {result.get('requests_rejected')} / "
            f"{result.get('requests_truncated')} of {result.get('requests')}",
        ),
        (
            "SLO",
            f"TTFT <= {human.duration(slo.get('ttft_s'))}, TPOT <= "
            f"{human.duration(slo.get('tpot_s'))}, for {human.percent(slo.get('attainment'))}",
        ),
        (
            "requests meeting the SLO",
            f"{goodput.get('requests')} ({human.percent(goodput.get('fraction'))}): {met}",
        ),
        (
            "goodput",
            f"{human.rate(goodput.get('requests_per_s', 0), 'req/s')}, "
            f"{human.rate(goodput.get('tokens_per_s', 0), 'tok/s')}",
        ),
        ("output throughput (all)", human.rate(result.get("output_tokens_per_s", 0), "tok/s")),
        ("makespan", human.duration(result.get("makespan_s"))),
        ("replicas / sockets", f"{result.get('replicas')} / {result.get('sockets')}"),
        ("step shapes simulated", str(result.get("step_shapes_simulated"))),
    ]
    energy = result.get("energy")
    rows += energy_rows(None if energy is None else Energy(**energy))
    prefix = result.get("prefix_cache")
    if prefix:
        rows.append(
            (
                "prefix cache",
                f"{human.percent(prefix.get('hit_rate'))} of blocks hit, "
                f"{human.percent(prefix.get('token_hit_rate'))} of prompt tokens skipped",
            )
        )
    transfer = result.get("kv_transfer")
    if transfer:
        seconds = transfer.get("seconds") or {}
        rows.append(
            (
                "KV transfers",
                f"{transfer.get('transfers')} ({human.size(transfer.get('bytes'))}), p99 "
                f"{human.duration(seconds.get('p99'))}",
            )
        )
    for name, value in rows:
        table.add_row(name, value)
    return table


def classes_table(result: Mapping[str, Any]) -> Table | None:
    """Per class: requests, goodput and latency percentiles."""
    classes = result.get("classes")
    if not classes:
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
    for name, row in classes.items():
        ttft, tpot = row.get("ttft_s") or {}, row.get("tpot_s") or {}
        table.add_row(
            name,
            str(row.get("requests")),
            str(row.get("rejected")),
            human.percent(row.get("goodput_fraction")),
            human.duration(ttft.get("p50")),
            human.duration(ttft.get("p99")),
            human.duration(tpot.get("p50")),
            human.duration(tpot.get("p99")),
        )
    return table


def replicas_table(result: Mapping[str, Any]) -> Table:
    """Per replica: what it took, its latencies, occupancy and utilization."""
    replicas = result.get("per_replica") or []
    shown = replicas[:MAX_REPLICA_ROWS]
    more = f" (first {len(shown)} of {len(replicas)})" if len(replicas) > len(shown) else ""
    table = Table(title=f"Replicas{more}", title_justify="left", box=box.SIMPLE_HEAD)
    for column in (
        "#",
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
    for row in shown:
        util = row.get("utilization") or {}
        table.add_row(
            str(row.get("replica")),
            str(row.get("pool")),
            str(row.get("role")),
            str(row.get("requests")),
            str(row.get("decoded")),
            human.percent(row.get("goodput_fraction")),
            human.duration((row.get("ttft_s") or {}).get("p99")),
            human.duration((row.get("tpot_s") or {}).get("p99")),
            human.percent(row.get("occupancy")),
            human.percent(util.get("hbm")),
            human.percent(util.get("pcu")),
        )
    return table


def render_cluster(result: Mapping[str, Any]) -> Group:
    """All tables of a cluster report, headed by what was simulated."""
    head = (
        f"[bold]{result.get('cluster')}[/bold]: {result.get('replicas')} replicas, "
        f"{result.get('sockets')} sockets, router {result.get('router')}"
        + (", disaggregated" if result.get("disaggregated") else "")
    )
    latencies = {key: Percentiles(**result[key]) for key, _ in LATENCIES}
    parts: list[Any] = [head, pools_table(result), goodput_table(result), latency_table(latencies)]
    classes = classes_table(result)
    if classes is not None:
        parts.append(classes)
    parts.append(replicas_table(result))
    return Group(*parts)


def print_cluster_report(result: Mapping[str, Any], console: Console | None = None) -> None:
    """Print the cluster report to ``console`` (stdout by default; 160 columns when stdout is
    not a terminal, so piped reports keep their tables whole)."""
    if console is None:
        console = wide_console()
    console.print(render_cluster(result))
