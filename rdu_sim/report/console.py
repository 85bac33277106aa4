"""The human report of a run: rich tables built from the result dict (nothing else).

Working from the JSON contract, not from simulator objects, keeps the report honest (what
you read is what scripts get) and lets it render a stored result.json too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table

from rdu_sim.serving.steady import MIN_TURNOVERS


def human_bytes(value: float | None) -> str:
    """Bytes in binary units: ``1.50 GiB``."""
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.3g} {unit}"
        size /= 1024
    return f"{size:.2f} TiB"  # pragma: no cover - loop always returns


def human_seconds(value: float | None) -> str:
    """Seconds with a unit that keeps 3-4 digits: ``12.3 ms``, ``4.56 s``."""
    if value is None:
        return "-"
    if value >= 1:
        return f"{value:.3g} s" if value < 1000 else f"{value:,.0f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} us"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def steady_decode(result: Mapping[str, Any]) -> str:
    """The steady-state decode rate and its window, or why there is none."""
    rate = result.get("steady_decode_tokens_per_s")
    window = result.get("steady_window_s")
    if rate is None or not window:
        return f"n/a (needs a closed loop with >= {MIN_TURNOVERS} requests per slot)"
    return f"{rate:,.1f} tok/s (window {window[0]:.4g}-{window[1]:.4g} s)"


def memory_table(result: Mapping[str, Any]) -> Table:
    """Per-tier memory of one socket: capacity, weights, KV, activations, used, free."""
    table = Table(
        title=f"Memory per socket ({result.get('sockets', '?')} sockets, "
        f"tp={result.get('tp', '?')})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for column in ("tier", "capacity", "weights", "KV", "activ.", "used", "used %", "free"):
        table.add_column(column, justify="left" if column == "tier" else "right")
    for tier, usage in result.get("memory", {}).items():
        capacity = usage.get("capacity_bytes") or 0
        used = usage.get("used_bytes")
        share = f"{100 * used / capacity:.0f}%" if capacity and used is not None else "-"
        table.add_row(
            tier.upper(),
            human_bytes(capacity),
            human_bytes(usage.get("weights_bytes")),
            human_bytes(usage.get("kv_bytes")),
            human_bytes(usage.get("activations_bytes")),
            human_bytes(used),
            share,
            human_bytes(usage.get("free_bytes")),
        )
    return table


def serving_table(result: Mapping[str, Any]) -> Table:
    """Capacity, throughput and utilization figures."""
    table = Table(title="Serving", title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    util = result.get("utilization", {})
    cache = result.get("step_cache", {})
    rows = [
        ("KV policy", str(result.get("kv_policy"))),
        ("batch capacity (fits in memory)", str(result.get("batch_capacity"))),
        ("batch slots (run)", str(result.get("batch_slots"))),
        ("KV cache per slot (per socket)", human_bytes(result.get("kv_bytes_per_slot"))),
        ("requests completed", f"{result.get('requests_completed')} / {result.get('requests')}"),
        ("output tokens", f"{result.get('output_tokens', 0):,}"),
        ("makespan", human_seconds(result.get("makespan_s"))),
        ("decode throughput (all users)", f"{result.get('decode_tokens_per_s', 0):,.1f} tok/s"),
        ("steady-state decode (slots kept full)", steady_decode(result)),
        (
            "per-user rate (p50)",
            f"{(result.get('user_tokens_per_s') or {}).get('p50') or 0:,.2f} tok/s",
        ),
        ("prefill of a typical prompt", human_seconds(result.get("prefill_s"))),
        ("slot occupancy (time mean)", _percent(result.get("occupancy"))),
        ("decode slots doing work", _percent(result.get("decode_slot_fill"))),
        ("HBM bandwidth utilization", _percent(util.get("hbm"))),
        ("PCU utilization", _percent(util.get("pcu"))),
        (
            "step cache",
            f"{cache.get('shapes', 0)} shapes, {cache.get('misses', 0)} misses, "
            f"{_percent(cache.get('hit_rate'))} hits",
        ),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def latency_table(result: Mapping[str, Any]) -> Table:
    """TTFT, TPOT, queueing delay and end-to-end latency percentiles."""
    table = Table(title="Latency", title_justify="left")
    table.add_column("")
    for p in ("p50", "p90", "p99", "mean"):
        table.add_column(p, justify="right")
    for key, name in (
        ("ttft_s", "time to first token"),
        ("tpot_s", "time per output token"),
        ("queue_delay_s", "queueing delay"),
        ("e2e_s", "end to end"),
    ):
        values = result.get(key) or {}
        table.add_row(name, *(human_seconds(values.get(p)) for p in ("p50", "p90", "p99", "mean")))
    return table


def render(result: Mapping[str, Any]) -> Group:
    """All report tables, headed by what was simulated."""
    head = (
        f"[bold]{result.get('workload')}[/bold]: {result.get('model')} on "
        f"{result.get('hardware')}, tp={result.get('tp')}, kv={result.get('kv_policy')}, "
        f"seed={result.get('seed')}"
    )
    return Group(head, memory_table(result), serving_table(result), latency_table(result))


def print_report(result: Mapping[str, Any], console: Console | None = None) -> None:
    """Print the report to ``console`` (stdout by default)."""
    (console or Console()).print(render(result))
