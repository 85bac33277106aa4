"""The table a sweep ends with: per point, the values of its swept axes and its headline metrics.

Read from the sweep database's frame (``rdu_sim.sweep.load``, in the spec's grid order), so
what the table shows is what ``--export`` writes and ``rdu-sim plot sweep`` draws. Each axis
is said in words under the tables (``config.field_docs``); a metric's value is shown in the
unit its name carries (``_s`` in seconds, ``bytes`` in bytes). Metrics that do not fit the
console's width beside the axes go to a further table, never cut. Every ``-`` (a point with
no value) has a note under the tables saying why (:data:`MISSING_REASONS`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.table import Table

from rdu_sim import human
from rdu_sim.config.field_docs import axis_label
from rdu_sim.report.sweep_companions import OFFER_MORE, OFFERED_LOAD, companions
from rdu_sim.report.sweep_frame import swept_axes

__all__ = [
    "HEADLINE_METRICS",
    "MAX_ROWS",
    "failure_words",
    "format_metric",
    "short_error",
    "sweep_tables",
    "table_notes",
]

MAX_ROWS = 100
"""Points shown; a larger sweep shows its first ones and says where the rest are."""

HEADLINE_METRICS = (
    "batch_slots",
    "decode_tokens_per_s",
    "steady_decode_tokens_per_s",
    "throughput_bound",
    "decode_step.bound",
    "ttft_s.p50",
    "tpot_s.p50",
    "goodput.fraction",
    "slo_met",
    "sockets",
)
"""What the table shows of a sweep that kept every metric (a spec without ``metrics:``): the
throughputs beside what bound each point (``throughput_bound``: the machine or the offered
load; ``decode_step.bound``: the resource its decode step waited on), so a reader of the
table sees why a point's number is what it is."""

MAX_ERROR_CHARS = 60


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def format_metric(name: str, value: Any) -> str:
    """A metric's value for people, in the unit its name says: ``12.3 ms`` for ``*_s`` (and
    its percentiles), ``1.5 GiB`` for a name with ``bytes`` in it, ``1,374`` for counts and
    rates."""
    if _missing(value):
        return human.MISSING
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    parts = name.split(".")
    unit = next((p for p in reversed(parts) if p.endswith("_s") or "bytes" in p), "")
    if "bytes" in unit:
        return human.size(value)
    if unit.endswith("_s") and not unit.endswith("per_s"):
        return human.duration(value)
    if isinstance(value, int):
        return f"{value:,}"
    return human.number(value)


def _metrics(frame: Any, axes: Sequence[str], named: Sequence[str] | None) -> list[str]:
    """The spec's metrics (all it named, then what bound a throughput among them where the
    rows hold it: ``report.sweep_companions``, its headline columns), else the headline
    ones the rows hold."""
    if named:
        bounds = [c for c in companions(named) if c in HEADLINE_METRICS]
        return [m for m in (*named, *bounds) if m in frame.columns and m not in axes]
    return [m for m in HEADLINE_METRICS if m in frame.columns and m not in axes]


PADDING = 3
"""Characters a column takes beside its widest cell (rich's SIMPLE_HEAD padding)."""

EDGE = 1
"""Characters the table takes beside its columns (its outer edge): a table whose columns
filled the width exactly had its last cell cut with an ellipsis."""


def sweep_tables(
    frame: Any, metrics: Sequence[str] | None = None, title: str = "", width: int = 160
) -> list[Table]:
    """One row per point: each swept axis's value, then each metric (``metrics``: the spec's
    list; None: :data:`HEADLINE_METRICS`), then the status when a point failed. Metrics that
    do not fit ``width`` beside the axes go to a further table that repeats the axes, so
    every value shows whole."""
    axes = swept_axes(frame)
    shown = _metrics(frame, axes, metrics)
    failed = "status" in frame.columns and bool((frame["status"] != "done").any())
    records = frame.to_dict("records")[:MAX_ROWS]
    columns: dict[str, list[str]] = {a: [_axis_value(r[a]) for r in records] for a in axes}
    for metric in shown:
        columns[metric] = [format_metric(metric, r[metric]) for r in records]
    if failed:
        columns["status"] = [_status(r) for r in records]
    widths = {name: max([len(name), *map(len, cells)]) + PADDING for name, cells in columns.items()}
    lead = EDGE + sum(widths[a] for a in axes)
    chunks: list[list[str]] = [[]]
    for name in [*shown, *(["status"] if failed else [])]:
        used = lead + sum(widths[c] for c in chunks[-1])
        if chunks[-1] and used + widths[name] > width:
            chunks.append([])
        chunks[-1].append(name)
    tables = []
    for i, chunk in enumerate(chunks):
        part = f" ({i + 1} of {len(chunks)})" if len(chunks) > 1 else ""
        table = Table(title=f"{title}{part}" or None, title_justify="left", box=box.SIMPLE_HEAD)
        for name in (*axes, *chunk):
            left = name == "status"
            table.add_column(name, justify="left" if left else "right", no_wrap=True)
        for row in range(len(records)):
            table.add_row(*(columns[name][row] for name in (*axes, *chunk)))
        tables.append(table)
    return tables


MISSING_REASONS: tuple[tuple[str, str], ...] = (
    (
        "steady_",
        "no steady window: a run has one only in a closed loop with at least 3 requests per "
        "batch slot (serving.requests >= 3 x serving.batch_slots); decode_tokens_per_s counts "
        "the whole run",
    ),
    ("decode_step.pipeline_bubble", "the step runs no pipeline (parallelism.pp 1)"),
    ("prefill_step.pipeline_bubble", "the step runs no pipeline (parallelism.pp 1)"),
    (
        "decode_step.fewer_micro_batches",
        "no fewer micro-batches would decode faster by the step's estimate (or no pipeline)",
    ),
    ("decode_step", "the run ran no decode step"),
    ("prefill_step", "the run ran no prefill step"),
    (
        "throughput_bound",
        "stored by an rdu-sim that kept no bound beside a spec's metrics (--rerun keeps it)",
    ),
    (
        "kv_pool.preemptions",
        "static slots, or a KV pool that reserves each request's pages: none preempted",
    ),
    ("kv_pool", "the stack keeps static slots, not a paged KV pool"),
    ("weight_replicas", "the plan holds no weights whole beyond their slices"),
    ("speculation", "the workload does not speculate"),
    ("coe", "the workload is not a Composition of Experts"),
    ("energy.usd", "the hardware is not priced (hw.cost.usd_per_socket_hour)"),
    ("energy", "the hardware file gives no power (hw.power)"),
    ("goodput", "a lone server's run has no SLO (goodput is a cluster's)"),
    ("slo_met", "a lone server's run has no SLO (goodput is a cluster's)"),
)
"""Why a metric of a finished point can have no value, by the start of its name (the run's
JSON has null there, docs/serving.md)."""


def missing_reason(metric: str) -> str:
    """Why ``metric`` has no value at a finished point."""
    reason = next((why for start, why in MISSING_REASONS if metric.startswith(start)), None)
    return reason or "the run's JSON has no value there (null)"


def table_notes(frame: Any, metrics: Sequence[str] | None = None) -> list[str]:
    """What each swept axis means (its field's words and unit), why a shown metric (as
    :func:`sweep_tables` picks them) has ``-`` at some point, and how many points the tables
    left out."""
    axes = swept_axes(frame)
    notes = [f"{axis}: {axis_label(axis)}" for axis in axes if axis_label(axis) != axis]
    records = frame.to_dict("records")[:MAX_ROWS]
    failed = [r for r in records if r.get("status", "done") != "done"]
    if failed:
        notes.append(f"-: {human.count(len(failed), 'point')} failed (their status says why)")
        if any(_status(r).endswith(CUT) for r in failed):
            notes.append(
                f"{CUT} ends a shortened error: the whole one is in the error column "
                "(--export FILE writes it; rdu_sim.sweep.load reads it)"
            )
    done = [r for r in records if r.get("status", "done") == "done"]
    notes += offered_load_notes(done, _metrics(frame, axes, metrics))
    notes += warned_notes(done, axes)
    for metric in _metrics(frame, axes, metrics):
        if any(_missing(r[metric]) for r in done):
            notes.append(f"- in {metric}: {missing_reason(metric)}")
    if len(frame) > MAX_ROWS:
        notes.append(f"(the tables show the first {MAX_ROWS} of {len(frame)} points)")
    return notes


def offered_load_notes(done: Sequence[dict[str, Any]], shown: Sequence[str]) -> list[str]:
    """A note when the table shows ``throughput_bound`` and some point's is the offered
    load: those points' throughputs measure their arrivals, not the machine, so a row with
    more slots or bandwidth can show less (``rdu-sim run`` of the point says it in a
    sentence)."""
    if "throughput_bound" not in shown:
        return []
    offered = sum(r.get("throughput_bound") == OFFERED_LOAD for r in done)
    if not offered:
        return []
    return [
        f"throughput_bound {OFFERED_LOAD}: at {offered} of {len(done)} points the "
        "throughput is set by the offered load, not the machine (more slots or bandwidth "
        f"cannot raise it); to compare the machines, offer more: {OFFER_MORE}"
    ]


MAX_WARNED_POINTS = 3
"""Points whose warnings the notes under a sweep's tables quote; the rest are counted."""


def warned_notes(done: Sequence[dict[str, Any]], axes: Sequence[str]) -> list[str]:
    """A note per point that ran with warnings (weights read from DDR, slower speculation,
    ...: the run's report's ``warnings``), naming the point by its axes, so a sweep's reader
    sees what a run of that point would have warned of; the ``warnings`` column has them all."""
    warned = [r for r in done if isinstance(r.get("warnings"), list) and r["warnings"]]
    notes = []
    for record in warned[:MAX_WARNED_POINTS]:
        point = ", ".join(f"{axis}={_axis_value(record.get(axis))}" for axis in axes)
        for text in record["warnings"]:
            notes.append(f"warning at {point or 'the point'}: {text}")
    if len(warned) > MAX_WARNED_POINTS:
        more = human.count(len(warned) - MAX_WARNED_POINTS, "more point")
        notes.append(f"warning: {more} ran with warnings (the warnings column has them)")
    return notes


DOES_NOT_FIT = "does not fit"
"""A point whose memory plan the run refused (a ``CapacityError``): the verdict a dry run
and `check` give it (``sweep.run.check_fits``), and its status in the table."""

_CAPACITY = re.compile(r"\w*CapacityError: ")
"""How a refused memory plan's stored error starts (``sweep.worker``: type, then message)."""

_AT_FILE = re.compile(r"(?:(?!: ).)+?\.(?:ya?ml|json)(?::\d+)?: ")
"""The workload file (and line) a run's refusal starts with (``Scenario.at_field``), the same
at every point; matched at the start only, a path with spaces in it whole (a path holds no
``": "``, which ends a field's name)."""


def _status(record: dict[str, Any]) -> str:
    """``done``, or ``failed: <the start of its error>``, or a memory plan the run refused,
    ``does not fit: <field>: <the start of its sentence>`` (:func:`failure_words`)."""
    status = str(record.get("status"))
    error = record.get("error")
    if status == "done" or not isinstance(error, str):
        return status
    words = failure_words(error)
    return words if words.startswith(DOES_NOT_FIT) else f"{status}: {words}"


_ERROR_TYPE = re.compile(r"\w+: ")
"""The exception type a stored error starts with (``sweep.worker``: type, then message)."""


def failure_words(error: str, limit: int = MAX_ERROR_CHARS) -> str:
    """A failed point's stored error as the sweep table and a sweep plot's note say it: a
    memory plan the run refused as ``does not fit: <field>: <the start of its sentence>``,
    as a dry run and `check` say it; any other error as its type and the start of its
    message (:func:`short_error`, ``limit`` characters of it). The workload's path, the
    same at every point and a machine's own, is left out either way: it would leave no
    room for the sentence."""
    refused = _CAPACITY.match(error)
    kind = _ERROR_TYPE.match(error) if refused is None else refused
    head = "" if kind is None else error[: kind.end()]
    said = error[len(head) :]
    at_file = _AT_FILE.match(said)
    if at_file is not None:
        said = said[at_file.end() :]
    if refused is not None:
        return f"{DOES_NOT_FIT}: {short_error(said, limit)}"
    return short_error(head + said, limit)


CUT = "..."
"""What ends a failed point's status the table shortened (the note under it says where the
whole error is)."""


def short_error(error: str, limit: int = MAX_ERROR_CHARS) -> str:
    """A failed point's error as a table cell shows it: its first clause (up to the first
    ``;`` or line end: a bug's traceback follows its message), cut at a word to fit
    ``limit`` characters, ending in :data:`CUT` when anything was left out, so a cell never
    stops mid-word. The database and exports keep the whole error."""
    whole = " ".join(error.split())
    first = " ".join(error.strip().split("\n", 1)[0].split()).split("; ", 1)[0]
    if first == whole and len(whole) <= limit:
        return whole
    room = limit - len(CUT)
    if len(first) > room:
        cut = first[: room + 1].rsplit(" ", 1)[0] if " " in first[:room] else first[:room]
        first = cut.rstrip(" ,:;(")
    return first + CUT


def _axis_value(value: Any) -> str:
    """An axis value as the spec wrote it (``1.8 TB/s``, ``32768``, ``none``)."""
    if _missing(value):
        return "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_axis_value(v)}" for k, v in value.items())
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
