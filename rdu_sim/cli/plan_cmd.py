"""`rdu-sim plan SPEC`: the cheapest configuration that serves a traffic under its SLO.

A thin shell over ``rdu_sim.plan.run_plan``: the search runs its points through the sweep
machinery in this process (``--workers 1``, the default), on a local process pool, or on
Dask (``--cluster``), storing every evaluation in SQLite so a rerun resumes. Its rounds and
each configuration's end go to stderr as it searches (with a bar per round unless
``--no-progress``). Prints the cheapest configuration, one row per configuration (how its
search ended, its TTFT and TPOT at the SLO's quantile and the SLO half that binds it) and,
for each that ran, the JSON's sentence: why it binds and what would move it, or that
nothing binds; ``--json`` prints the same as one JSON object. Bad input exits 2
before anything runs; a plan where no configuration met the SLO exits 1 (its JSON's
``slo_met`` false).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.console import Console
from rich.table import Table

from rdu_sim import human
from rdu_sim.cli.options import MAX_WORKERS, FilePath, GivenPath, workers_option
from rdu_sim.interrupts import kept_on_stop

if TYPE_CHECKING:
    from rdu_sim.plan.search import PlanResult

MISSING_NOTE = (
    "-: nothing to show. A met row shows its fewest replicas meeting the SLO, a pruned one "
    "the fewest it met with, else the most it tried, a not-met one the most it tried; "
    "infeasible and error rows ran none. 'one fewer': the share of requests meeting the SLO "
    "one replica unit fewer, shown when a met row ran that count."
)


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _slots_cell(row: dict[str, Any]) -> str:
    """The slots a row's run resolved; ``auto`` with its number (``32 (auto)``); pools that
    differ each by name (``serve 2 / decode 1 (auto)``)."""
    resolved = row.get("batch_slots_resolved")
    if resolved is None:
        return _cell(row["batch_slots"])
    if isinstance(resolved, dict):
        number = " / ".join(f"{name} {value}" for name, value in resolved.items())
    else:
        number = str(resolved)
    return f"{number} (auto)" if row["batch_slots"] == "auto" else number


def _answer_lines(best: dict[str, Any], device: str) -> list[str]:
    """Under the cheapest: its margin in requests, one unit fewer's miss and why, what a
    lossy KV policy trades, the KV link of a disaggregation, and the command reproducing it."""
    lines = []
    found = best.get("margin")
    if found is not None:
        text = f"  {human.count(best['replicas'], 'replica')}: {found['words']}"
        fewer = best.get("one_fewer")
        if fewer is None:
            text += "; the fewest possible"
        else:
            sockets = best["sockets"] // best["units"] * fewer["units"]
            miss = fewer["margin"]["words"] if fewer["margin"] else "missed"
            text += f"; one unit fewer ({human.count(sockets, device)}) {miss}"
            if fewer["why"]:
                text += f": {fewer['why']}"
        if best["excluded_up_to_units"]:
            text += f"; {best['excluded_up_to_units']} unit(s) and fewer ruled out by a miss"
        lines.append(text)
    if best.get("batch_note"):
        lines.append(f"  batch_slots={best['batch_slots']}: {best['batch_note']}")
    if best.get("kv_trade"):
        lines.append(f"  {best['kv_trade']}")
    if best.get("kv_transfer"):
        lines.append(f"  {best['kv_transfer']['words']}")
    if best.get("run_command"):
        lines.append(f"  reproduce: {best['run_command']}")
    return lines


def _batch_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Under the table, each batch the serving stack has no program of, once: that it runs
    as if it had (the rows' ``batch_note``)."""
    notes = {row["batch_slots"]: row.get("batch_note") for row in rows}
    return [f"slots {slots}: {note}" for slots, note in notes.items() if note]


def _quantile(summary: dict[str, Any]) -> str:
    """The SLO's attainment as a percentile's name (``p95``): the quantile the table shows."""
    return f"p{human.number(summary['slo']['attainment'] * 100)}"


def _value(seconds: float | None) -> str:
    return "-" if seconds is None else human.duration(seconds)


def _table(summary: dict[str, Any]) -> Table:
    devices = f"{summary['device']}s"
    quantile = _quantile(summary)
    table = Table(
        title=f"Configurations (cheapest first; * = on the {devices}/goodput frontier)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    split = any("parallelism" in row for row in summary["configurations"])
    for column in (
        "",
        "parallelism" if split else "tp",
        "slots",
        "KV",
        "disagg.",
        "status",
        "replicas",
        devices,
        "meet SLO",
        "one fewer",
        f"TTFT {quantile}",
        f"TPOT {quantile}",
        "runs",
        "why",
    ):
        table.add_column(column, justify="left" if column in ("KV", "status", "why") else "right")
    for row in summary["configurations"]:
        share = row["goodput_fraction"]
        fewer = row["goodput_one_unit_fewer"]
        table.add_row(
            "*" if row["frontier"] else "",
            str(row.get("parallelism", f"tp={row['tp']}") if split else row["tp"]),
            _slots_cell(row),
            str(row["kv_policy"]),
            row["disaggregation"],
            row["status"],
            _cell(row["replicas"]),
            _cell(row["sockets"]),
            human.percent(share),
            human.percent(fewer),
            _value(row["ttft_at_attainment_s"]),
            _value(row["tpot_at_attainment_s"]),
            str(row["evaluations"]),
            row["why"],
        )
    return table


def _why_lines(summary: dict[str, Any]) -> list[str]:
    """For each configuration that ran, as its JSON says it: the binding half in a sentence
    with what would move it, or, for a met one with room on both halves, that nothing
    binds (configurations with the same sentence share a line)."""
    by_sentence: dict[str, list[str]] = {}
    for row in summary["configurations"]:
        name = f"{row['label']} ({row['status']})"
        sentences = [verdict["sentence"] for verdict in row["binding"]]
        for sentence in sentences or ([row["room"]] if row.get("room") else []):
            by_sentence.setdefault(sentence, []).append(name)
    return [f"{', '.join(names)}: {sentence}." for sentence, names in by_sentence.items()]


@click.command("plan")
@click.argument("spec", type=GivenPath())
@workers_option(
    most=MAX_WORKERS,
    default=1,
    help=f"Worker processes, 1 to {MAX_WORKERS} (1 runs in this process; at most 4 a core). With "
    "--cluster local, its worker count.",
)
@click.option(
    "--cluster",
    "dask_cluster",
    default=None,
    metavar="ADDR|local",
    help="Run the evaluations on Dask: tcp://HOST:PORT, or 'local' for a LocalCluster.",
)
@click.option(
    "--db",
    "db_file",
    type=FilePath(),
    default=None,
    help="SQLite file of evaluations (default: <spec stem>.sqlite in the current folder for a "
    "shipped spec, beside a spec of your own); "
    "evaluations already in it are reused.",
)
@click.option(
    "--rerun",
    is_flag=True,
    help="Run every evaluation again, replacing what the database holds (its rows are keyed "
    "by the simulator's version, not its commit: after a change to the simulator).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option(
    "--progress/--no-progress",
    default=True,
    show_default=True,
    help="A bar per round of cluster runs on stderr (each round's and each configuration's "
    "line print either way).",
)
def command(
    spec: Path,
    workers: int,
    dask_cluster: str | None,
    db_file: Path | None,
    rerun: bool,
    as_json: bool,
    progress: bool,
) -> None:
    """Find the cheapest configuration (fewest devices) meeting the SLO of SPEC's traffic."""
    from rdu_sim.plan import load_plan, run_plan
    from rdu_sim.sweep.progress import RichReporter

    load_plan(spec)  # bad input exits 2 before anything runs
    result = run_plan(
        spec,
        db=db_file,
        workers=workers,
        cluster=dask_cluster,
        reporter=RichReporter(bar=progress),
        rerun=rerun,
    )
    stored = f"the plan had finished: its cluster runs are saved in {result.db}"
    with kept_on_stop(stored + "; the same command prints it again"):
        _print(result, as_json)
    if not any(search.status == "met" for search in result.searches):
        raise SystemExit(1)  # no configuration met the SLO (2 is bad input)


def _offered_words(summary: dict[str, Any]) -> str:
    """``, traffic offered at 6.15 req/s`` once a run measured its rate, else nothing."""
    rate = summary["offered_requests_per_s"]
    return "" if rate is None else f", traffic offered at {human.rate(rate, 'req/s')}"


def _print(result: PlanResult, as_json: bool) -> None:
    """The plan's summary: one JSON object, or its lines and table."""
    from rdu_sim.plan import plan_summary

    summary = plan_summary(result)
    summary["db"] = str(result.db)
    if as_json:
        click.echo(json.dumps(summary, sort_keys=True))
        return
    terminal = Console(highlight=False)
    out = terminal if terminal.is_terminal else Console(highlight=False, width=200)
    slo = summary["slo"]
    out.print(
        f"[bold]{summary['plan']}[/bold]: cluster {summary['cluster']!r}, SLO TTFT <= "
        f"{human.duration(slo['ttft_s'])} and TPOT <= {human.duration(slo['tpot_s'])} for "
        f"{human.target_percent(slo['attainment'])} of requests{_offered_words(summary)}; "
        f"{summary['evaluations']} cluster runs ({result.db})"
    )
    for hardware, words in (summary["predicted"] or {}).items():  # as a run's header says
        out.print(f"{hardware}: {words}", markup=False, soft_wrap=True)
    rows = summary["configurations"]
    best = summary["cheapest"]
    if best is None:
        out.print("[red]no configuration met the SLO[/red] (exit status 1)")
    else:
        split = best.get("parallelism") or f"tp={best['tp']}"
        out.print(
            f"cheapest: [bold]{human.count(best['sockets'], summary['device'])}[/bold] = "
            f"{human.count(best['replicas'], 'replica')} "
            f"x {split}, batch_slots={best['batch_slots']}, "
            f"kv={best['kv_policy']}, disaggregation={best['disaggregation']} "
            f"({human.percent(best['goodput_fraction'])} of requests meet the SLO)"
        )
        for line in _answer_lines(best, summary["device"]):
            out.print(line, markup=False, soft_wrap=True)
    out.print(_table(summary))
    if any(row["replicas"] is None or row["goodput_one_unit_fewer"] is None for row in rows):
        out.print(MISSING_NOTE, markup=False)
    for line in _batch_lines(rows):
        out.print(line, markup=False)
    lines = _why_lines(summary)
    if lines:
        out.print(f"Why each binds ({_quantile(summary)}, the SLO's), and what would move it:")
    for line in lines:
        out.print(line, markup=False)
