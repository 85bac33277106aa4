"""The search behind `rdu-sim plan`: the fewest sockets meeting the SLO, on the sweep machinery.

For each configuration (tp x slots x KV policy x disaggregation) the number of replica units
``n`` is searched (a unit is one replica, or P + D replicas for a P:D disaggregation; sockets
= n x unit x tp): doubling ``n`` from 1 until the SLO is met, then bisecting below the
fewest ``n`` that met it. More replicas of one configuration serve the same arrivals with
more capacity, so meeting the SLO is *nearly* monotone in ``n``; not exactly, as discrete
batching makes attainment near the target noisy (3 replicas meeting 0.99 of 400 requests,
4 missing it by one, 5 meeting it). So a miss excludes every count below it only when it
is **conclusive**, short by more than two binomial standard errors of the attainment
(``plan.margin``); an *inconclusive* miss at ``m`` leaves the count just below it,
``m - 1``, open and excludes ``m - 2`` and fewer. The answer is the fewest units that met
the SLO among those evaluated; every count below it was evaluated, or is at or below a
conclusive miss, or two or more below an inconclusive miss. Bisection stays bisection: a
run at the middle of the open range leaves at most half of it plus one count open, so a
plateau of inconclusive misses costs a few runs more than bisection, not one per count.
Where every miss is conclusive this is the former doubling and bisection, run for run; a
test checks the answer against brute force.

Pruning (branch and bound): once some configuration meets the SLO on S sockets, no
configuration tries more than S sockets (``n <= S / (unit x tp)``); a configuration whose
smallest cluster already has more than S sockets is not run at all. Equal-socket answers
are still found, and ties go to the higher goodput, then the lower p99 TTFT.

Stop rule (``report.slo_why.stop_rule``): every evaluation also measures what each request would
see served alone (``plan.floors``: its prefill, one decode step), which no replica count
lowers; when those floors already miss the SLO, the configuration's search stops there,
``not met``, naming the half that binds and what would move it, instead of doubling up to
``max_replicas``.

Every round collects the next point of every configuration still searching and evaluates
them together through ``sweep.evaluate_points`` (process pool or Dask, SQLite store): a
rerun of the same spec resumes from the database, and independent configurations run in
parallel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rdu_sim import human, interrupts
from rdu_sim.config import shipped
from rdu_sim.config.cluster import SLOConfig
from rdu_sim.config.errors import ConfigError
from rdu_sim.plan.evaluate import evaluate as default_evaluate
from rdu_sim.plan.evaluate import infeasible_reason
from rdu_sim.plan.margin import conclusive_miss
from rdu_sim.plan.spec import Configuration, LoadedPlan, PlanPoint, load_plan
from rdu_sim.report.slo_why import Verdict, short, stop_rule
from rdu_sim.sweep.executors import check_cluster
from rdu_sim.sweep.progress import Reporter, Silent
from rdu_sim.sweep.run import evaluate_points, stopped_early
from rdu_sim.sweep.store import Store

Evaluate = Callable[[PlanPoint], Mapping[str, Any]]


@dataclass
class Search:
    """One configuration's search state."""

    configuration: Configuration
    tp: int  # sockets per replica (its tp x dp_attention x pp)
    max_units: int
    slo: SLOConfig
    device: str = "socket"  # what one device is called (ClusterScenario.device)
    results: dict[int, dict[str, Any]] = field(default_factory=dict)  # units -> metrics
    failing: int = 0  # most units a conclusive miss excludes (it and every count below)
    excluded: int = 0  # most units any miss excludes (an inconclusive one: two below it)
    passing: int | None = None  # fewest units known to meet the SLO
    status: str = "searching"  # searching | met | not met | infeasible | pruned | error
    reason: str = ""
    stopped: list[Verdict] = field(default_factory=list)  # the stop rule's binding halves

    @property
    def unit_sockets(self) -> int:
        return self.configuration.unit * self.tp

    def next_units(self, best_sockets: int | None) -> int | None:
        """The next unit count to evaluate, or None when the search of this one is over.

        Doubling until a count meets the SLO, then bisecting below it; a count is settled
        when evaluated or at most ``excluded`` (a conclusive miss's count, an inconclusive
        one's less two: ``record``), so an inconclusive miss leaves the count just below it
        open, even when nothing met (the cap's miss may hide a meet one below it). Counts
        above ``best_sockets`` (another configuration's answer) are not tried."""
        if self.status != "searching":
            return None
        cap = self.max_units
        if best_sockets is not None:
            cap = min(cap, best_sockets // self.unit_sockets)
        top = max(self.results, default=0)
        if self.passing is None and top < cap:
            return min(cap, 2 * top if top else 1)
        if self.passing is not None and not self._open(self.passing):
            self.finish("met", "")
            return None
        limit = cap + 1 if self.passing is None else min(self.passing, cap + 1)
        still = self._open(limit)
        if not still:
            if self.passing is not None:  # fewer units than `passing` could not beat the best
                met = human.count(self.passing * self.unit_sockets, self.device)
                self.finish("pruned", f"met on {met}; fewer cannot beat the cheapest")
            elif best_sockets is not None and cap < self.max_units:
                failed = human.count(top * self.unit_sockets, self.device)
                self.finish("pruned", f"not met on {failed}; more cannot beat the cheapest")
            else:
                replicas = human.count(self.max_units * self.configuration.unit, "replica")
                self.finish("not met", f"search.max_replicas reached ({replicas})")
            return None
        middle = (self.excluded + (limit if self.passing is None else self.passing)) // 2
        return min(still, key=lambda n: (abs(n - middle), n))

    def _open(self, limit: int) -> list[int]:
        """The unit counts below ``limit`` neither evaluated nor excluded by a miss
        (``excluded``)."""
        return [n for n in range(self.excluded + 1, limit) if n not in self.results]

    def record(self, units: int, row: Mapping[str, Any]) -> None:
        """Take one evaluated point into account."""
        if row.get("status") != "done":
            self.finish("error", str(row.get("error") or "evaluation failed").splitlines()[0])
            return
        metrics = dict(row.get("metrics") or {})
        self.results[units] = metrics
        if not metrics.get("feasible", False):
            self.finish("infeasible", str(metrics.get("reason", "")))
        elif metrics.get("slo_met"):
            self.passing = units if self.passing is None else min(self.passing, units)
        else:
            if conclusive_miss(metrics, self.slo):
                self.failing = max(self.failing, units)
                self.excluded = max(self.excluded, units)
            else:  # within noise: the count just below may meet (3 met, 4 missed by one)
                self.excluded = max(self.excluded, units - 2)
            self.stopped = stop_rule(metrics, self.slo)
            if self.stopped:
                self.finish("not met", short(self.stopped))

    def finish(self, status: str, reason: str) -> None:
        self.status = status
        self.reason = reason

    @property
    def answer(self) -> dict[str, Any] | None:
        """The metrics at the fewest passing units, with units and sockets, or None."""
        if self.passing is None or self.status != "met":
            return None
        metrics = self.results[self.passing]
        return {**metrics, "units": self.passing, "sockets": self.passing * self.unit_sockets}


@dataclass
class PlanResult:
    """What the search found: every configuration's search, the cheapest, the evaluations."""

    plan: LoadedPlan
    searches: list[Search]
    evaluations: int
    db: Path

    def cheapest(self) -> Search | None:
        """The configuration meeting the SLO on the fewest sockets (ties: :func:`rank`'s)."""
        met = [s for s in self.searches if s.answer is not None]
        if not met:
            return None
        return min(met, key=lambda search: rank(search, self.plan))


def rank(search: Search, plan: LoadedPlan) -> tuple[float, bool, float, float]:
    """A configuration that met the SLO, cheapest first: fewer sockets; on a tie, batch slots
    the serving stack has a program of (``LoadedPlan.batch_note``: an answer it can deploy),
    then the higher goodput, then the lower p99 TTFT (then spec order: a stable sort)."""
    answer = search.answer
    assert answer is not None
    ttft = answer.get("ttft_p99_s")
    unrunnable = plan.batch_note(search.configuration) is not None
    return (
        answer["sockets"],
        unrunnable,
        -float(answer["goodput_fraction"]),
        float(ttft or 0.0),
    )


def _best_sockets(searches: list[Search]) -> int | None:
    """Fewest sockets known to meet the SLO so far (any passing point bounds the optimum)."""
    values = [s.passing * s.unit_sockets for s in searches if s.passing is not None]
    return min(values) if values else None


def default_plan_db(spec_file: Path) -> Path:
    """`<spec stem>.sqlite` beside the spec; a shipped spec's in the current folder (as for
    sweeps: ``config.shipped.beside``)."""
    return shipped.beside(spec_file, ".sqlite")


def run_plan(
    spec: str | Path,
    *,
    db: str | Path | None = None,
    workers: int = 1,
    cluster: str | None = None,
    evaluate: Evaluate | None = None,
    reporter: Reporter | None = None,
    rerun: bool = False,
) -> PlanResult:
    """Search the spec's space for the cheapest configuration meeting the SLO (``rerun``:
    evaluate every point again, replacing what the database holds). A stop (SIGINT,
    SIGTERM) says what the database kept, wherever it lands (a round's runs say how many)."""
    db_path: Path | None = None
    try:
        if cluster is not None:
            check_cluster(cluster)  # no Dask, or a bad address: an error before any work
        loaded = load_plan(spec)
        db_path = Path(db) if db is not None else default_plan_db(loaded.file)
        with Store(db_path):  # opened once first: a database it cannot write is said
            pass  # before the first round's line, not after it
        return _search(loaded, db_path, workers, cluster, evaluate, reporter, rerun)
    except interrupts.Interrupted as stop:  # between two rounds: no count, the database's
        if stop.kept:
            raise
        kept = stopped_early(db_path, rerun, "evaluations")
        raise interrupts.Interrupted(stop.signum, kept) from None


def _search(
    loaded: LoadedPlan,
    db_path: Path,
    workers: int,
    cluster: str | None,
    evaluate: Evaluate | None,
    reporter: Reporter | None,
    rerun: bool,
) -> PlanResult:
    """:func:`run_plan`'s search, round after round, its evaluations in ``db_path``."""
    evaluator = evaluate or default_evaluate
    searches = []
    for configuration in loaded.configurations():
        units = max(1, loaded.spec.search.max_replicas // configuration.unit)
        searches.append(
            Search(configuration, configuration.devices, units, loaded.slo, loaded.base.device)
        )
    searches.sort(key=lambda s: s.unit_sockets)  # cheapest first: an early bound prunes more
    report = reporter or Silent()
    announced: set[int] = set()
    evaluations = rounds = 0
    while True:
        best = _best_sockets(searches)
        batch: dict[str, tuple[Search, int, PlanPoint]] = {}
        for search in searches:
            step = search.next_units(best)
            if step is None:
                continue
            try:
                point = loaded.build(search.configuration, step)
            except ConfigError as exc:
                search.finish("infeasible", infeasible_reason(exc))
                continue
            batch[f"{id(search)}:{step}"] = (search, step, point)
        _announce(searches, announced, report)
        if not batch:
            break
        rounds += 1
        runs = ", ".join(
            f"{search.configuration.label()} x{units}" for search, units, _ in batch.values()
        )
        report.message(f"round {rounds}: {len(batch)} cluster run(s): {runs}")
        points = [point for _, _, point in batch.values()]
        rows = evaluate_points(
            loaded.name,
            points,
            evaluator,
            db_path,
            workers=workers,
            cluster=cluster,
            reporter=reporter,
            rerun=rerun,
        )
        evaluations += len(points)
        for search, units, point in batch.values():
            search.record(units, rows[point.key])
        _announce(searches, announced, report)
    return PlanResult(loaded, searches, evaluations, db_path)


def _announce(searches: list[Search], announced: set[int], report: Reporter) -> None:
    """One line for each configuration whose search has just ended."""
    for search in searches:
        if search.status == "searching" or id(search) in announced:
            continue
        announced.add(id(search))
        label = search.configuration.label()
        if search.status == "met" and search.passing is not None:
            devices = human.count(search.passing * search.unit_sockets, search.device)
            report.message(f"  {label}: met with {search.passing} unit(s), {devices}")
        else:
            report.message(f"  {label}: {search.status}: {search.reason}")
