"""The plan's answer as rows: one per configuration, the cheapest first.

A row says how each configuration ended: ``met`` (its fewest replicas meeting the SLO, with
the goodput one unit fewer reached, evidence of the boundary), ``pruned`` (it could not
beat the cheapest), ``not met`` (its requests alone miss the SLO: the stop rule; or not
even with ``max_replicas``), ``infeasible`` (the hardware cannot hold it, or the config
refuses it: the reason says which) or ``error``. Its numbers are one run's: the fewest
replicas that met the SLO, else (pruned or not met, never met) the most it tried.
``binding`` names the SLO half that binds at that run and what would move it
(``report.slo_why``); in a met row only a half whose requests to spare are within the
attainment's sampling noise (``plan.margin``) binds, and a met row with more to spare on
both has no binding half but ``room``, a sentence saying so and that its whole replica
units limit it. ``why`` is the reason (with the binding half for a pruned or not-met row)
or, without one, the binding half in a few words. ``ttft_at_attainment_s`` and
``tpot_at_attainment_s`` are the run's values at the SLO's quantile (the table's columns;
``ttft_p99_s`` and ``tpot_p99_s`` its p99s).
A row with a run also has its ``margin`` in requests (``plan.margin``), its resolved batch
slots, ``excluded_up_to_units`` (the most units its misses ruled out, run or not:
``plan.search``); a met row ``one_fewer`` (that run's margin, conclusive or not, and the
half that failed), ``kv_trade`` for a lossy KV policy and ``run_command`` reproducing it; a
disaggregated row the ``kv_transfer`` link it ran with.
``frontier`` marks the Pareto-optimal rows among those that met the SLO: no other needs no
more sockets for at least as much goodput.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rdu_sim import human
from rdu_sim.cluster.scenario import ClusterScenario
from rdu_sim.config.cluster import KVTransferConfig, SLOConfig
from rdu_sim.config.origins import predicted_words
from rdu_sim.plan.margin import margin
from rdu_sim.plan.search import PlanResult, Search, rank
from rdu_sim.plan.spec import Configuration, LoadedPlan
from rdu_sim.provenance import shown_file, simulator
from rdu_sim.report.percentiles import rounded
from rdu_sim.report.slo_why import HALVES, NAMES, Verdict, binding, short

ORDER = {"met": 0, "pruned": 1, "not met": 2, "infeasible": 3, "error": 4, "searching": 5}


LOSSLESS_KV = frozenset({"full"})
"""KV policies that keep every token: any other trades accuracy for memory."""


def _slots(metrics: Mapping[str, Any]) -> int | dict[str, int] | None:
    """The batch slots a run resolved (``auto`` as a number): one number when every pool
    has the same, else per pool; None for a row stored before they were kept."""
    slots = {
        name.removeprefix("batch_slots."): value
        for name, value in metrics.items()
        if name.startswith("batch_slots.")
    }
    if not slots:
        return None
    values = set(slots.values())
    return int(next(iter(values))) if len(values) == 1 else {k: int(v) for k, v in slots.items()}


def _kv_trade(configuration: Configuration, metrics: Mapping[str, Any]) -> str | None:
    """For a lossy KV policy, that it trades accuracy, and what it cut in the run."""
    if configuration.kv_policy in LOSSLESS_KV:
        return None
    compressed = metrics.get("kv_prompts_compressed")
    wrapped = metrics.get("kv_slots_wrapped")
    cut = (
        ""
        if compressed is None or wrapped is None
        else f": here {human.count(int(compressed), 'prompt')} compressed and "
        f"{human.count(int(wrapped), 'slot')} outgrown of the run's requests"
    )
    return (
        f"kv={configuration.kv_policy} drops KV tokens full attention keeps, trading "
        f"accuracy for memory{cut} (docs/kv.md)"
    )


def _one_fewer(search: Search, units: int) -> dict[str, Any] | None:
    """A met row's run one unit fewer (always evaluated, unless the answer is 1 unit): its
    margin, whether its miss is conclusive, and the SLO half that failed."""
    below = search.results.get(units - 1)
    if below is None:
        return None
    found = margin(below, search.slo)
    verdicts = binding(below, search.slo, advise=False)
    return {
        "units": units - 1,
        "goodput_fraction": below.get("goodput_fraction"),
        "margin": None if found is None else found.to_dict(),
        "binding": [v.to_dict() for v in verdicts],
        "why": short(verdicts),
    }


def _runnable(path: Path) -> str:
    """The cluster file as ``rdu-sim run`` takes it: a shipped one by its name (the same
    on every machine), else its path."""
    shown = shown_file(path)
    return path.stem if shown.startswith("shipped:") else shown


def _row(search: Search, plan: LoadedPlan) -> dict[str, Any]:
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
        "batch_slots_resolved": None,
        "margin": None,
        "one_fewer": None,
        "excluded_up_to_units": search.excluded,
        "kv_trade": None,
        "batch_note": plan.batch_note(configuration),
        "kv_transfer": None,
        "run_command": None,
        "evaluations": len(search.results),
        "reason": search.reason,
        "binding": [],
        "ttft_at_attainment_s": None,
        "tpot_at_attainment_s": None,
        "room": None,
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
        found = margin(metrics, search.slo)
        row["margin"] = None if found is None else found.to_dict()
        row["batch_slots_resolved"] = _slots(metrics)
        if search.passing is not None:
            below = _one_fewer(search, units)
            row["one_fewer"] = below
            row["goodput_one_unit_fewer"] = None if below is None else below["goodput_fraction"]
        if search.status == "met":
            row["kv_trade"] = _kv_trade(configuration, metrics)
            row["run_command"] = " ".join(  # the overrides build() applied: the same cluster
                ["rdu-sim", "run", shlex.quote(_runnable(plan.base_file))]
                + [shlex.quote(f"--set={arg}") for arg in plan.set_args(configuration, units)]
            )
    if configuration.ratio is not None:
        link = plan.kv_transfer or KVTransferConfig()
        row["kv_transfer"] = {
            "bandwidth_bytes_per_s": link.bandwidth,
            "latency_s": link.latency,
            "words": plan.link_words(),
        }
    if search.results and search.status in ("met", "not met", "pruned"):
        seen = search.results[units if units is not None else max(search.results)]
        row["ttft_at_attainment_s"] = seen.get("ttft_at_attainment_s")
        row["tpot_at_attainment_s"] = seen.get("tpot_at_attainment_s")
        verdicts = search.stopped or binding(seen, search.slo)
        if search.status == "met":
            verdicts = _tight(seen, search.slo, verdicts)
            if not verdicts:
                row["room"] = _room(row, seen, search.slo)
        row["binding"] = [v.to_dict() for v in verdicts]
        if not row["why"]:
            row["why"] = short(verdicts) if verdicts else _room_cell(seen, search.slo)
        elif search.status in ("not met", "pruned") and not search.stopped and verdicts:
            row["why"] = f"{search.reason}; {short(verdicts)}"
    return row


def _spare(metrics: Mapping[str, Any], slo: SLOConfig, half: str) -> float | None:
    """The requests a half has to spare over the attainment in a run (those within its
    target less the fewest the SLO needs) in units of the attainment's sampling noise
    (``plan.margin.noise``); None without request counts."""
    found = margin(metrics, slo)
    if found is None:
        return None
    within = round(float(metrics[f"{half}_attainment"]) * found.requests)
    return (within - found.needed) / found.noise


def _tight(metrics: Mapping[str, Any], slo: SLOConfig, verdicts: list[Verdict]) -> list[Verdict]:
    """Of a met run's verdicts, the halves that bind: those whose requests to spare are
    within the attainment's sampling noise (``plan.margin``: another sample of the same
    traffic could miss on them). A half with more to spare does not bind: the run meets it
    with room. A run without request counts keeps every verdict."""
    return [v for v in verdicts if (_spare(metrics, slo, v.half) or 0.0) <= 1.0]


def _room_cell(metrics: Mapping[str, Any], slo: SLOConfig) -> str:
    """A met row with room on both halves, in a table cell."""
    values = ", ".join(
        f"{NAMES[h]} {_duration(metrics.get(f'{h}_at_attainment_s'))} of "
        f"{human.duration(slo.ttft if h == 'ttft' else slo.tpot)}"
        for h in HALVES
    )
    return f"neither binds: p{human.number(slo.attainment * 100)} {values}"


def _room(row: Mapping[str, Any], metrics: Mapping[str, Any], slo: SLOConfig) -> str:
    """Why nothing binds a met row, and what limits it instead: its whole replicas."""
    found = margin(metrics, slo)
    noise = "" if found is None else f", {found.noise:.1f} requests"
    fewer = row["goodput_one_unit_fewer"]
    below = (
        "it is the fewest possible"
        if fewer is None and row["units"] == 1
        else "one unit fewer was not run"
        if fewer is None
        else f"one unit fewer meets the SLO for {human.percent(fewer)} of requests"
    )
    values = _room_cell(metrics, slo).removeprefix("neither binds: ")
    return (
        f"neither SLO half binds at {human.count(row['replicas'], 'replica')} ({values}: "
        f"each has more requests to spare than the attainment's noise{noise}); what limits "
        f"it is its size in whole replica units: {below}"
    )


def _duration(seconds: Any) -> str:
    return "never served" if seconds is None else human.duration(float(seconds))


def frontier_rows(result: PlanResult) -> list[dict[str, Any]]:
    """Every configuration's row, the configurations that met the SLO first, cheapest first."""
    met = sorted(
        (s for s in result.searches if s.status == "met"), key=lambda s: rank(s, result.plan)
    )
    rest = sorted((s for s in result.searches if s.status != "met"), key=lambda s: ORDER[s.status])
    rows = [_row(s, result.plan) for s in met + rest]
    best_goodput = -1.0
    for row in rows[: len(met)]:  # met rows, by sockets ascending: Pareto if goodput improves
        goodput = float(row["goodput_fraction"])
        if goodput > best_goodput:
            row["frontier"] = True
            best_goodput = goodput
    return rows


def _offered(result: PlanResult) -> float | None:
    """The traffic's offered rate (requests a second over its arrivals), which every
    configuration's run shares: None before any run measured it, or when every request
    arrives at once."""
    rates = (
        metrics.get("offered_requests_per_s")
        for search in result.searches
        for metrics in search.results.values()
    )
    return next((rate for rate in rates if rate is not None), None)


def predicted_pools(cluster: ClusterScenario) -> dict[str, str] | None:
    """By hardware name, what a run says of each pool's hardware predicted rather than
    measured (``config.origins.predicted_words``); None when every pool's is measured."""
    said = {
        pool.scenario.hardware.name: words
        for pool in cluster.pools
        if (words := predicted_words(pool.scenario.hardware_file)) is not None
    }
    return said or None


def plan_summary(result: PlanResult) -> dict[str, Any]:
    """The plan's JSON: the cheapest configuration meeting the SLO, the rows, the effort, and
    the provenance (the simulator, the plan spec and its cluster file; each configuration's
    row in the database holds its resolved config)."""
    rows = frontier_rows(result)
    cheapest = rows[0] if rows and rows[0]["status"] == "met" else None
    slo = result.plan.slo
    summary: dict[str, Any] = rounded(
        {
            "plan": result.plan.name,
            "cluster": result.plan.base.config.name,
            "device": result.plan.base.device,  # what `sockets` counts: 'socket' or 'GPU'
            "slo": {"ttft_s": slo.ttft, "tpot_s": slo.tpot, "attainment": slo.attainment},
            "slo_met": cheapest is not None,  # the outcome: also the exit status (0, else 1)
            "predicted": predicted_pools(result.plan.base),
            "offered_requests_per_s": _offered(result),
            "cheapest": cheapest,
            "configurations": rows,
            "evaluations": result.evaluations,
        }
    )
    return {
        **summary,
        "provenance": {
            "simulator": simulator().to_dict(),
            "files": {
                "plan": shown_file(result.plan.file),
                "cluster": shown_file(result.plan.base_file),
            },
        },
    }
