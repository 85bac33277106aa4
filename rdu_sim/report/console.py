"""The human report of a run: rich tables built from its typed summary (nothing else).

Working from the summary, the same values `rdu-sim run --json` prints, not from simulator
objects, keeps the report honest: what you read is what scripts get.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich import box
from rich.console import Console, Group
from rich.table import Table

from rdu_sim.report.console_speculation import speculation_table
from rdu_sim.report.summary import Percentiles, RunSummary
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


def steady_decode(result: RunSummary) -> str:
    """The steady-state decode rate and its window, or why there is none."""
    rate, window = result.steady_decode_tokens_per_s, result.steady_window_s
    if rate is None or window is None or None in window:
        return f"n/a (needs a closed loop with >= {MIN_TURNOVERS} requests per slot)"
    return f"{rate:,.1f} tok/s (window {window[0]:.4g}-{window[1]:.4g} s)"


def memory_table(result: RunSummary) -> Table:
    """Per-tier memory of one socket: capacity, weights, KV, activations, used, free."""
    table = Table(
        title=f"Memory per socket ({result.sockets} sockets, tp={result.tp}; "
        f"weights: {result.weights_placement})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for column in ("tier", "capacity", "weights", "KV", "activ.", "used", "used %", "free"):
        table.add_column(column, justify="left" if column == "tier" else "right")
    for tier, usage in result.memory.items():
        capacity = usage.capacity_bytes
        share = f"{100 * usage.used_bytes / capacity:.0f}%" if capacity else "-"
        table.add_row(
            tier.upper(),
            human_bytes(capacity),
            human_bytes(usage.weights_bytes),
            human_bytes(usage.kv_bytes),
            human_bytes(usage.activations_bytes),
            human_bytes(usage.used_bytes),
            share,
            human_bytes(usage.free_bytes),
        )
    return table


def _bound(result: RunSummary) -> str:
    step = result.decode_step
    if step is None:
        return "-"
    limit = {"hbm": step.hbm_s, "ddr": step.ddr_s, "compute": step.compute_s}[step.bound]
    return f"{step.bound.upper()} ({human_seconds(limit)} of {human_seconds(step.step_s)})"


def serving_table(result: RunSummary) -> Table:
    """Capacity, throughput and utilization figures."""
    table = Table(title="Serving", title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    cache = result.step_cache
    rows = [
        ("KV policy", result.kv_policy),
        ("batch capacity (fits in memory)", str(result.batch_capacity)),
        ("batch slots (run)", str(result.batch_slots)),
        ("KV cache per slot (per socket)", human_bytes(result.kv_bytes_per_slot)),
        ("requests completed", f"{result.requests_completed} / {result.requests}"),
        ("output tokens", f"{result.output_tokens:,}"),
        ("makespan", human_seconds(result.makespan_s)),
        ("decode throughput (all users)", f"{result.decode_tokens_per_s or 0:,.1f} tok/s"),
        ("steady-state decode (slots kept full)", steady_decode(result)),
        ("per-user rate (p50)", f"{result.user_tokens_per_s.p50 or 0:,.2f} tok/s"),
        ("prefill of a typical prompt", human_seconds(result.prefill_s)),
        ("decode step bound by", _bound(result)),
        ("slot occupancy (time mean)", _percent(result.occupancy)),
        ("decode slots doing work", _percent(result.decode_slot_fill)),
        ("HBM bandwidth utilization", _percent(result.utilization.hbm)),
        ("compute utilization (PCUs or SMs)", _percent(result.utilization.pcu)),
        (
            "step cache",
            f"{cache.shapes} shapes, {cache.misses} misses, {_percent(cache.hit_rate)} hits",
        ),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


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
            name, *(human_seconds(v) for v in (values.p50, values.p90, values.p99, values.mean))
        )
    return table


def render(result: RunSummary) -> Group:
    """All report tables, headed by what was simulated."""
    head = (
        f"[bold]{result.workload}[/bold]: {result.model} on {result.hardware}, "
        f"tp={result.tp}, kv={result.kv_policy}, seed={result.seed}"
    )
    latencies = {key: getattr(result, key) for key, _ in LATENCIES}
    warnings = [f"[bold yellow]warning:[/] {text}" for text in result.warnings]
    tables = [memory_table(result), serving_table(result), latency_table(latencies)]
    if result.speculation is not None:
        tables.append(speculation_table(result.speculation))
    return Group(head, *warnings, *tables)


def print_report(result: RunSummary, console: Console | None = None) -> None:
    """Print the report to ``console`` (stdout by default)."""
    (console or Console()).print(render(result))
