"""The plan's answer as rows: one per configuration, the cheapest first.

A row says how each configuration ended: ``met`` (its fewest replicas meeting the SLO, with
the goodput one unit fewer reached, evidence of the boundary), ``pruned`` (it could not
beat the cheapest), ``not met`` (its requests alone miss the SLO: the stop rule; or not
even with ``max_replicas``), ``infeasible`` (the hardware cannot hold it, or the config
refuses it: the reason says which) or ``error``. Its numbers are one run's: the fewest
replicas that met the SLO, else (pruned or not met, never met) the most it tried.
``binding`` names the SLO half that binds at that run and what would move it
(``report.slo_why``); ``why`` is the reason or, without one, the binding half in a few
words.
``frontier`` marks the Pareto-optimal rows among those that met the SLO: no other needs no
more sockets for at least as much goodput.
"""

from __future__ import annotations

from typing import Any

from rdu_sim.plan.search import PlanResult, Search, _rank
from rdu_sim.provenance import shown_file, simulator
from rdu_sim.report.slo_why import binding, short

ORDER = {"met": 0, "pruned": 1, "not met": 2, "infeasible": 3, "error": 4, "searching": 5}


def _row(search: Search) -> dict[str, Any]:
    configuration = search.configuration
    row: dict[str, Any] = {
        **configuration.describe(),
        "label": configuration.label(),
        "tp": configuration.tp,
        "status": search.status,
        "units": None,
        "replicas": None,
        "sockets": None,
        "goodput_fraction": None,
        "ttft_p99_s": None,
        "tpot_p99_s": None,
        "goodput_one_unit_fewer": None,
        "evaluations": len(search.results),
        "reason": search.reason,
        "binding": [],
        "why": search.reason,
        "frontier": False,
    }
    units = search.passing
    if units is None and search.results and search.status in ("not met", "pruned"):
        units = max(search.results)  # never met: the most tried, how far it got
    if units is not None and units in search.results:
        metrics = search.results[units]
        row.update(
            units=units,
            replicas=units * configuration.unit,
            sockets=units * search.unit_sockets,
            goodput_fraction=metrics.get("goodput_fraction"),
            ttft_p99_s=metrics.get("ttft_p99_s"),
            tpot_p99_s=metrics.get("tpot_p99_s"),
        )
        below = search.results.get(units - 1)
        if below is not None and search.passing is not None:
            row["goodput_one_unit_fewer"] = below.get("goodput_fraction")
    if search.results and search.status in ("met", "not met", "pruned"):
        seen = search.results[units if units is not None else max(search.results)]
        verdicts = search.stopped or binding(seen, search.slo)
        row["binding"] = [v.to_dict() for v in verdicts]
        if not row["why"]:
            row["why"] = short(verdicts)
        elif search.status == "not met" and not search.stopped and verdicts:
            row["why"] = f"{search.reason}; {short(verdicts)}"
    return row


def frontier_rows(result: PlanResult) -> list[dict[str, Any]]:
    """Every configuration's row, the configurations that met the SLO first, cheapest first."""
    met = sorted((s for s in result.searches if s.status == "met"), key=_rank)
    rest = sorted((s for s in result.searches if s.status != "met"), key=lambda s: ORDER[s.status])
    rows = [_row(s) for s in met + rest]
    best_goodput = -1.0
    for row in rows[: len(met)]:  # met rows, by sockets ascending: Pareto if goodput improves
        goodput = float(row["goodput_fraction"])
        if goodput > best_goodput:
            row["frontier"] = True
            best_goodput = goodput
    return rows


def plan_summary(result: PlanResult) -> dict[str, Any]:
    """The plan's JSON: the cheapest configuration meeting the SLO, the rows, the effort, and
    the provenance (the simulator, the plan spec and its cluster file; each configuration's
    row in the database holds its resolved config)."""
    rows = frontier_rows(result)
    cheapest = rows[0] if rows and rows[0]["status"] == "met" else None
    slo = result.plan.spec.slo or result.plan.base.config.slo
    return {
        "plan": result.plan.name,
        "cluster": result.plan.base.config.name,
        "device": result.plan.base.device,  # what `sockets` counts: 'socket' or 'GPU'
        "slo": {"ttft_s": slo.ttft, "tpot_s": slo.tpot, "attainment": slo.attainment},
        "cheapest": cheapest,
        "configurations": rows,
        "evaluations": result.evaluations,
        "provenance": {
            "simulator": simulator().to_dict(),
            "files": {
                "plan": shown_file(result.plan.file),
                "cluster": shown_file(result.plan.base_file),
            },
        },
    }
